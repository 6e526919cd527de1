"""Complex A in the selective scan: what ``selective_scan_fn`` accepts with a complex A, the one form
of B and C every backend takes, and the sequential reference.

Math (Mamba, Gu & Dao, arXiv:2312.00752, section 3.2 and Algorithm 2, with a complex diagonal A as in
S4D, Gu, Gupta, Goel & Re, arXiv:2206.11893): for each batch b, channel d and time t, with the real
step ``dt = softplus(delta + delta_bias)`` (softplus with delta_softplus only),

    h_t = exp(dt_t * A[d]) * h_{t-1} + dt_t * u_t * B_t        (complex A, B, h; h_{-1} = 0)
    y_t = 2 * Re(sum_n C_t[n] * h_t[n]) + D * u_t               (complex C; u, y, D real)
    out = y * silu(z)

The d_state complex states stand for 2 * d_state real states in conjugate pairs (S4D): the two states
of a pair give conjugate outputs, whose sum is twice the real part of one, which is what upstream
mamba-ssm's complex kernels compute as well.

Forms of B and C with a complex A (each independently):

* constant (dim, d_state): complex (A's complex dtype), or real (float32; float64 with float64 u),
  which is a complex B/C with zero imaginary part;
* variable (batch, d_state, n) or (batch, groups, d_state, n), either
  - real with n = 2 * seqlen: (re, im) interleaved along time, element t at 2t and 2t + 1 (upstream
    mamba-ssm's layout; what ``mamba_inner_fn`` builds from x_proj's 2 * d_state columns per input),
  - real with n = seqlen: a real B/C (zero imaginary part), or
  - complex (complex64; complex128 with float64 u) with n = seqlen;
  real ones in u's dtype or float32 (the real-A rule).

:func:`kernel_bc` turns every form into the kernels' (complex constant, interleaved real variable) with
differentiable torch ops, so each gets its gradient in its own form (PyTorch's convention for complex
tensors: dL/d(re) + i dL/d(im)).
"""

from __future__ import annotations

from typing import Optional, Union

import torch
import torch.nn.functional as F

from mamba_ssm._families.checks import dtype_name as _dtype_name
from mamba_ssm._families.checks import shape_text as _shape

__all__ = ["kernel_bc", "selective_scan_complex_ref", "validate_complex"]


def validate_complex(fn: str, u: torch.Tensor, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> None:
    """The dtype and shape checks of A, B and C when A is complex (``validate_selective_scan`` checks
    the other arguments and A's shape). Raises TypeError / ValueError naming the argument, what was
    received and the fix."""
    f64 = u.dtype == torch.float64
    complex_ok = (torch.complex64, torch.complex128) if f64 else (torch.complex64,)
    real_weight_ok = (torch.float32, torch.float64) if f64 else (torch.float32,)
    allowed = " or ".join(_dtype_name(d) for d in complex_ok)
    if A.dtype not in complex_ok:
        raise TypeError(
            f"{fn}: complex A has dtype {_dtype_name(A.dtype)}; expected {allowed} (u is "
            f"{_dtype_name(u.dtype)}): cast it with A.to(torch.complex64)"
        )
    batch, dim, seqlen = u.shape
    d_state = A.shape[1]
    groups: dict[str, int] = {}
    for name, X in (("B", B), ("C", C)):
        if X.dim() == 2:
            if X.dtype not in complex_ok + real_weight_ok:
                raise TypeError(
                    f"{fn}: constant {name} has dtype {_dtype_name(X.dtype)} with complex A; expected "
                    f"{allowed} (or a real {' or '.join(_dtype_name(d) for d in real_weight_ok)}): cast "
                    f"it with {name}.to(A.dtype)"
                )
            if tuple(X.shape) != (dim, d_state):
                raise ValueError(
                    f"{fn}: constant {name} must have shape (dim, d_state) = ({dim}, {d_state}), got "
                    f"{_shape(X)}"
                )
            continue
        if X.dim() not in (3, 4):
            raise ValueError(
                f"{fn}: {name} must have rank 2 (dim, d_state), 3 (batch, d_state, n) or 4 (batch, "
                f"groups, d_state, n), got shape {_shape(X)}"
            )
        if X.is_complex():
            if X.dtype not in complex_ok:
                raise TypeError(
                    f"{fn}: variable {name} has dtype {_dtype_name(X.dtype)}; expected {allowed}, or "
                    f"real (re, im) pairs: cast it with {name}.to(torch.complex64)"
                )
            lengths: tuple[int, ...] = (seqlen,)
        else:
            if X.dtype not in (u.dtype, torch.float32):
                raise TypeError(
                    f"{fn}: {name} has dtype {_dtype_name(X.dtype)} but u has {_dtype_name(u.dtype)}; "
                    f"expected {name} in u's dtype or float32: cast {name} to u.dtype "
                    f"({name}.to(u.dtype))"
                )
            lengths = (2 * seqlen, seqlen)
        g = 1 if X.dim() == 3 else X.shape[1]
        if X.shape[0] != batch or X.shape[-2] != d_state or X.shape[-1] not in lengths or g < 1 or dim % g:
            what = "complex" if X.is_complex() else "real with n = 2 * seqlen (re, im interleaved) or seqlen"
            raise ValueError(
                f"{fn}: variable {name} with complex A must have shape (batch, d_state, n) or (batch, "
                f"groups, d_state, n) = ({batch}, [groups,] {d_state}, n), groups dividing dim = {dim}, "
                f"{what} (seqlen = {seqlen}); got {_shape(X)}"
            )
        groups[name] = g
    if len(groups) == 2 and groups["B"] != groups["C"]:
        raise ValueError(
            f"{fn}: variable B has {groups['B']} group(s) (shape {_shape(B)}) and variable C has "
            f"{groups['C']} (shape {_shape(C)}); expected the same number of groups"
        )


def kernel_bc(X: torch.Tensor, seqlen: int) -> torch.Tensor:
    """B or C (any form of the module docstring, already validated) in the form the backends take:
    constant -> complex (dim, d_state) (complex64, or complex128 from a float64 / complex128 one);
    variable -> real (batch, [groups,] d_state, 2 * seqlen) with (re, im) interleaved along time.
    Differentiable; returns X itself when it is in that form already."""
    if X.dim() == 2:
        if X.is_complex():
            return X
        return X.to(torch.complex128 if X.dtype == torch.float64 else torch.complex64)
    if X.is_complex():
        return torch.view_as_real(X.resolve_conj()).flatten(-2)
    if X.shape[-1] == 2 * seqlen:
        return X
    return torch.stack((X, torch.zeros_like(X)), dim=-1).flatten(-2)


def _complex_of(X: torch.Tensor, cdtype: torch.dtype, seqlen: int) -> torch.Tensor:
    """A kernel-form B or C as a complex tensor: constant (dim, N); variable (batch, [groups,] N, seqlen)."""
    if X.dim() == 2:
        return X.to(cdtype)
    rdtype = torch.float64 if cdtype == torch.complex128 else torch.float32
    # (torch leaves Tensor.unflatten unannotated)
    return torch.view_as_complex(X.to(rdtype).contiguous().unflatten(-1, (seqlen, 2)))  # type: ignore[no-untyped-call]


def selective_scan_complex_ref(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    delta_bias: Optional[torch.Tensor] = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
) -> Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """The sequential reference of the complex-A selective scan (the ``ref`` backend): one step per
    timestep in complex64 (complex128 when any input is float64 / complex128), differentiable by
    autograd. Inputs validated; B and C in any accepted form. Returns out in u's dtype and, with
    ``return_last_state``, the last state (batch, dim, d_state) in the complex compute dtype."""
    batch, dim, seqlen = u.shape
    wide = any(x.dtype in (torch.float64, torch.complex128) for x in (u, delta, A, B, C))
    cdtype = torch.complex128 if wide else torch.complex64
    rdtype = torch.float64 if wide else torch.float32
    uf, dt = u.to(rdtype), delta.to(rdtype)
    if delta_bias is not None:
        dt = dt + delta_bias.to(rdtype)[:, None]
    if delta_softplus:
        dt = F.softplus(dt)
    Ac = A.to(cdtype)

    def per_channel(X: torch.Tensor) -> torch.Tensor:  # -> (dim, N) or (batch, dim, N, seqlen)
        Xc = _complex_of(kernel_bc(X, seqlen), cdtype, seqlen)
        if Xc.dim() == 2:
            return Xc
        if Xc.dim() == 3:
            return Xc.unsqueeze(1).expand(batch, dim, *Xc.shape[1:])
        return Xc.repeat_interleave(dim // Xc.shape[1], dim=1)

    Bc, Cc = per_channel(B), per_channel(C)
    h = torch.zeros(batch, dim, A.shape[1], dtype=cdtype, device=u.device)
    ys: list[torch.Tensor] = []
    for t in range(seqlen):
        Bt = Bc if Bc.dim() == 2 else Bc[..., t]
        Ct = Cc if Cc.dim() == 2 else Cc[..., t]
        h = torch.exp(dt[:, :, t, None] * Ac) * h + (dt[:, :, t] * uf[:, :, t])[..., None] * Bt
        ys.append(2 * (h * Ct).sum(-1).real)
    y = torch.stack(ys, dim=-1) if ys else uf.new_zeros(batch, dim, 0)
    if D is not None:
        y = y + uf * D.to(rdtype)[:, None]
    if z is not None:
        y = y * F.silu(z.to(rdtype))
    out = y.to(u.dtype)
    return (out, h) if return_last_state else out
