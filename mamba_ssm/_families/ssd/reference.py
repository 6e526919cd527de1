"""Plain PyTorch references of the SSD (no kernels, no dispatch): the stages composed one at a time as
upstream's stage references do (:func:`ssd_chunk_scan_combined_ref`), the causal conv1d then the SSD
(:func:`mamba_conv1d_scan_ref`), and the SSD's layout mapped onto Mamba's selective scan
(:func:`as_selective_scan`, for the references that run the selective scan)."""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from mamba_ssm._families.causal_conv1d.torch_impl import causal_conv1d_ref
from mamba_ssm._families.ssd import torch_combined as T
from mamba_ssm._families.ssd import torch_impl as S
from mamba_ssm._families.ssd.checks import validate

__all__ = ["SelectiveScanArgs", "as_selective_scan", "mamba_conv1d_scan_ref", "ssd_chunk_scan_combined_ref"]

#: (u, delta, A, B, C, D, z) as ``selective_scan_fn`` takes them.
SelectiveScanArgs = tuple[
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    Optional[torch.Tensor],
    Optional[torch.Tensor],
]


def ssd_chunk_scan_combined_ref(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
) -> torch.Tensor:
    """The SSD from the plain PyTorch stages, each rounded to its reference's dtype as upstream's stage
    references (``chunk_state_ref``, ``state_passing_ref``, ``chunk_scan_ref``) return it: out (batch,
    seqlen, nheads, headdim) in x's dtype. Arguments as ``mamba_chunk_scan_combined``.

    Raises:
        TypeError / ValueError: bad shapes, dtypes or arguments, naming the argument."""
    validate("ssd_chunk_scan_combined_ref", x, dt, A, B, C, chunk_size, D, z, dt_bias, None, None)
    cs, dtp = S.chunk_cumsum(dt, A, chunk_size, dt_bias, dt_softplus)
    states = S.chunk_state(B, x, dtp, cs).to(x.dtype)  # chunk_state_ref: x's dtype
    flat = states.flatten(3)
    cd = S.compute_dtype(flat, cs)
    hin, _ = S.state_passing(flat.to(cd), cs[..., -1])
    hin = hin.to(flat.dtype)  # state_passing_ref: the states' dtype
    y, _ = S.chunk_scan(S.bmm_chunk(C, B, dtp.shape[3]), x, dtp, cs, C, hin.view(states.shape), D, z)
    return y.to(x.dtype)


def mamba_conv1d_scan_ref(
    xBC: torch.Tensor,
    conv1d_weight: torch.Tensor,
    conv1d_bias: Optional[torch.Tensor],
    dt: torch.Tensor,
    A: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    activation: Optional[str] = "silu",
    headdim: Optional[int] = None,
    ngroups: int = 1,
) -> torch.Tensor:
    """Causal conv1d over (x, B, C) then the SSD, from the PyTorch references.

    Args:
        xBC: (batch, seqlen, dim + 2 * ngroups * dstate), dim = nheads * headdim.
        conv1d_weight: (dim + 2 * ngroups * dstate, width) (or with a middle 1). conv1d_bias or None.
        dt: (batch, seqlen, nheads). A: (nheads,). D, dt_bias, dt_softplus, dt_limit: as
        ``mamba_chunk_scan_combined``. z: (batch, seqlen, dim) or (batch, seqlen, nheads, headdim).
        activation: the conv's ("silu" or None). headdim: needed unless D is (nheads, headdim).

    Returns:
        (batch, seqlen, dim) in xBC's dtype.

    Raises:
        ValueError: no headdim to infer, or xBC's channels not dim + 2 * ngroups * dstate.
    """
    b, l, _ = xBC.shape
    nheads = A.shape[0]
    if headdim is None:
        if D is None or D.dim() != 2:
            raise ValueError("mamba_conv1d_scan_ref: pass headdim (or a D of shape (nheads, headdim))")
        headdim = D.shape[1]
    dim = nheads * headdim
    dstate = (xBC.shape[-1] - dim) // (2 * ngroups)
    if dstate < 1 or dim + 2 * ngroups * dstate != xBC.shape[-1]:
        raise ValueError(
            f"mamba_conv1d_scan_ref: xBC's last dim {xBC.shape[-1]} is not dim + 2 * ngroups * dstate with "
            f"dim = {dim}, ngroups = {ngroups}"
        )
    conv = causal_conv1d_ref(
        xBC.transpose(1, 2), conv1d_weight.reshape(conv1d_weight.shape[0], -1), conv1d_bias,
        activation=activation,
    )  # fmt: skip
    x, Bm, Cm = torch.split(conv.transpose(1, 2), [dim, ngroups * dstate, ngroups * dstate], dim=-1)
    r = T.forward(
        x.reshape(b, l, nheads, headdim), dt, A, Bm.reshape(b, l, ngroups, dstate),
        Cm.reshape(b, l, ngroups, dstate), chunk_size, D,
        z.reshape(b, l, nheads, headdim) if z is not None else None, dt_bias, None, None, None, dt_softplus,
        dt_limit,
    )  # fmt: skip
    return r["out"].reshape(b, l, dim).to(xBC.dtype)


def as_selective_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    dt_bias: Optional[torch.Tensor],
    dt_softplus: bool,
    dt_limit: Sequence[float],
) -> SelectiveScanArgs:
    """The SSD layout mapped onto Mamba's selective scan: (u, delta, A, B, C, D, z) of
    ``selective_scan_fn`` (channels = heads x headdim).

    Args:
        x: (batch, seqlen, nheads, headdim). dt: (batch, seqlen, nheads) or x's shape. A: (nheads,) or
        (nheads * headdim, dstate). B, C: (batch, seqlen, ngroups, dstate). D: (nheads, headdim),
        (nheads,) or None. z: x's shape or None. dt_bias: (nheads,), (nheads, headdim) or None.
    """
    b, l, h, p = x.shape
    n = B.shape[-1]
    step = dt if dt.dim() == 4 else dt.unsqueeze(-1).expand(b, l, h, p)
    if dt_bias is not None:
        step = step + (dt_bias if dt_bias.dim() == 2 else dt_bias.unsqueeze(-1))
    if dt_softplus:
        step = F.softplus(step)
    if tuple(dt_limit) != S.NO_LIMIT:
        step = step.clamp(dt_limit[0], dt_limit[1])
    u = x.reshape(b, l, h * p).transpose(1, 2)
    delta = step.reshape(b, l, h * p).transpose(1, 2).to(u.dtype)
    Af = A.float() if A.dtype != torch.float64 else A
    A2 = Af if A.dim() == 2 else Af.view(h, 1, 1).expand(h, p, n).reshape(h * p, n)
    Bs, Cs = (t.permute(0, 2, 3, 1) for t in (B, C))  # (batch, ngroups, dstate, seqlen)
    Dv = None
    if D is not None:
        Dv = (D if D.dim() == 2 else D.unsqueeze(-1).expand(h, p)).reshape(h * p)
        Dv = Dv.float() if Dv.dtype != torch.float64 else Dv
    zs = z.reshape(b, l, h * p).transpose(1, 2) if z is not None else None
    return u, delta, A2, Bs, Cs, Dv, zs
