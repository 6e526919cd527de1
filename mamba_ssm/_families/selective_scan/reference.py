"""The sequential reference of the selective scan (Mamba, arXiv:2312.00752, Algorithm 2): one step per
timestep, for checking the other backends (``MAMBA_SSM_BACKEND=ref`` runs it)."""

from __future__ import annotations

from typing import Literal, overload

import torch
import torch.nn.functional as F
from torch import Tensor

from mamba_ssm._families.selective_scan.checks import validate_selective_scan

__all__ = ["selective_scan_ref"]


@overload
def selective_scan_ref(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    z: Tensor | None = None,
    delta_bias: Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: Literal[False] = False,
) -> Tensor: ...
@overload
def selective_scan_ref(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    z: Tensor | None = None,
    delta_bias: Tensor | None = None,
    delta_softplus: bool = False,
    *,
    return_last_state: Literal[True],
) -> tuple[Tensor, Tensor]: ...
@overload
def selective_scan_ref(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    z: Tensor | None = None,
    delta_bias: Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]: ...


def selective_scan_ref(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    z: Tensor | None = None,
    delta_bias: Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """The sequential reference of :func:`selective_scan_fn` (same arguments and results): one step per
    timestep, computed in float32 (float64 for float64 inputs; complex64 / complex128 with a complex A).
    Slow; for tests and debugging."""
    validate_selective_scan(u, delta, A, B, C, D, z, delta_bias, fn="selective_scan_ref")
    if A.is_complex():
        from mamba_ssm._families.selective_scan.complex import selective_scan_complex_ref

        result: Tensor | tuple[Tensor, Tensor] = selective_scan_complex_ref(
            u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state
        )
        return result
    dtypes = {u.dtype, delta.dtype, A.dtype, B.dtype, C.dtype}
    cdtype = torch.float64 if torch.float64 in dtypes else torch.float32
    batch, dim, seqlen = u.shape
    uf, dt = u.to(cdtype), delta.to(cdtype)
    if delta_bias is not None:
        dt = dt + delta_bias.to(cdtype)[:, None]
    if delta_softplus:
        dt = F.softplus(dt)
    Af = A.to(cdtype)

    def per_channel(X: Tensor) -> Tensor:  # -> (dim, d_state) or (batch, dim, d_state, seqlen)
        X = X.to(cdtype)
        if X.dim() == 2:
            return X
        if X.dim() == 3:
            return X.unsqueeze(1).expand(batch, dim, *X.shape[1:])
        return X.repeat_interleave(dim // X.shape[1], dim=1)

    Bf, Cf = per_channel(B), per_channel(C)
    h = uf.new_zeros(batch, dim, A.shape[1])
    ys = []
    for t in range(seqlen):
        Bt = Bf if Bf.dim() == 2 else Bf[..., t]
        Ct = Cf if Cf.dim() == 2 else Cf[..., t]
        h = torch.exp(dt[:, :, t, None] * Af) * h + (dt[:, :, t] * uf[:, :, t])[..., None] * Bt
        ys.append((h * Ct).sum(-1))
    y = torch.stack(ys, dim=-1) if ys else uf.new_zeros(batch, dim, 0)
    if D is not None:
        y = y + uf * D.to(cdtype)[:, None]
    if z is not None:
        y = y * F.silu(z.to(cdtype))
    out = y.to(u.dtype)
    return (out, h) if return_last_state else out
