"""The PyTorch fallback of the complex-A selective scan: the chunked scan of
:mod:`mamba_ssm._families.selective_scan.torch_impl` run on complex tensors.

Math: :mod:`mamba_ssm._families.selective_scan.complex` (Mamba, arXiv:2312.00752, with S4D's complex diagonal
A, arXiv:2206.11893): ``h_t = exp(dt A) h_{t-1} + dt u_t B_t``, ``y_t = 2 Re(sum_n C_t h_t) + D u_t``.

The real scan's core (``torch_scan._scan_forward`` / ``_scan_backward``: segments, chunks, memory
budget) is pure arithmetic (products, sums and exp), so it computes the complex recurrence unchanged when
A, B and C are complex. Its backward is written as the transposed Jacobian J^T v of those holomorphic
expressions; PyTorch's convention for complex gradients (dL/d(re) + i dL/d(im)) is the conjugate
transpose, J^H v = conj(J^T conj(v)), so :class:`_ComplexCore` conjugates the incoming and outgoing
gradients around it (and keeps the real part for the real inputs u and dt).
"""

from __future__ import annotations

from typing import Any, Optional, Union, overload

import torch
import torch.nn.functional as F

from mamba_ssm._families.selective_scan import torch_impl as _ts

__all__ = ["selective_scan"]


@overload
def _conj(x: torch.Tensor) -> torch.Tensor: ...
@overload
def _conj(x: None) -> None: ...
def _conj(x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if x is None else torch.conj_physical(x)


def _real(x: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    return None if x is None else x.real.contiguous()


class _ComplexCore(torch.autograd.Function):
    """(u, dt real (Bt, G, H, L); A complex (G, H, N); B, C complex in torch_scan's core layout) ->
    (y = sum_n C h complex (Bt, G, H, L), last state complex (Bt, G, H, N))."""

    @staticmethod
    def forward(
        ctx: Any,
        u: torch.Tensor,
        dt: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        segment: int,
        chunk: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        segs = _ts._segments(u.shape[-1], segment, chunk)
        y, last, starts = _ts._scan_forward(u, dt, A, B, C, None, segs)
        ctx.save_for_backward(u, dt, A, B, C, *starts)
        ctx.segs = segs
        return y, last

    @staticmethod
    def backward(
        ctx: Any, dy: Optional[torch.Tensor], dlast: Optional[torch.Tensor]
    ) -> tuple[
        Optional[torch.Tensor],
        Optional[torch.Tensor],
        Optional[torch.Tensor],
        Optional[torch.Tensor],
        Optional[torch.Tensor],
        None,
        None,
    ]:
        u, dt, A, B, C, *starts = ctx.saved_tensors
        need = tuple(ctx.needs_input_grad[:5]) + (False,)
        du, ddt, dA, dB, dC, _ = _ts._scan_backward(
            u, dt, A, B, C, starts, False, _conj(dy), _conj(dlast), ctx.segs, need
        )
        return _real(du), _real(ddt), _conj(dA), _conj(dB), _conj(dC), None, None


def selective_scan(
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
    """Complex-A selective scan in PyTorch (CPU and CUDA, any d_state), differentiable in every tensor.

    Args (validated by ``selective_scan_fn``; B and C in the kernel form of
    :func:`mamba_ssm._families.selective_scan.complex.kernel_bc`): u, delta (batch, dim, seqlen) real;
    A (dim, d_state) complex; B, C complex (dim, d_state) or real (batch, [groups,] d_state,
    2 * seqlen) with (re, im) interleaved along time; D, delta_bias (dim,); z (batch, dim, seqlen).

    Returns:
        out (batch, dim, seqlen) in u's dtype; with ``return_last_state`` also the last state
        (batch, dim, d_state) in complex64 (complex128 when an input is float64 / complex128).
    """
    batch, dim, seqlen = u.shape
    n = A.shape[-1]
    wide = any(x.dtype in (torch.float64, torch.complex128) for x in (u, delta, A, B, C))
    cdtype = torch.complex128 if wide else torch.complex64
    rdtype = torch.float64 if wide else torch.float32
    device_type = u.device.type
    with (
        torch.autocast(device_type=device_type, enabled=False)
        if _ts._autocast_known(device_type)
        else _ts._nullcontext()
    ):
        dt = delta.to(rdtype)
        if delta_bias is not None:
            dt = dt + delta_bias.to(rdtype).unsqueeze(-1)
        if delta_softplus:
            dt = F.softplus(dt)
        groups = 1
        for X in (B, C):
            if X.dim() == 4:
                groups = _ts._lcm(groups, X.shape[1])
        hh = dim // groups

        def core_bc(X: torch.Tensor) -> torch.Tensor:
            if X.dim() == 2:
                return _ts._canonical_bc(X.to(cdtype), batch, dim, groups)
            # (torch leaves Tensor.unflatten unannotated)
            Xc = torch.view_as_complex(X.to(rdtype).contiguous().unflatten(-1, (seqlen, 2)))  # type: ignore[no-untyped-call]
            return _ts._canonical_bc(Xc, batch, dim, groups)

        segment, chunk = _ts.plan_chunks(
            batch, dim, n, seqlen, torch.empty((), dtype=cdtype).element_size(), device_type=device_type
        )
        y, last = _ComplexCore.apply(
            u.reshape(batch, groups, hh, seqlen),
            dt.reshape(batch, groups, hh, seqlen),
            A.to(cdtype).reshape(groups, hh, n),
            core_bc(B),
            core_bc(C),
            segment,
            chunk,
        )
        out = 2 * y.real.reshape(batch, dim, seqlen)
        if D is not None:
            out = out + u.to(rdtype) * D.to(rdtype).unsqueeze(-1)
        if z is not None:
            out = out * F.silu(z.to(rdtype))
        out = out.to(u.dtype)
    last = last.reshape(batch, dim, n)
    return (out, last) if return_last_state else out
