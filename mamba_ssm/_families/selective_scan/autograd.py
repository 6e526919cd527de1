"""The fake implementations and the autograd formula shared by the compiled selective-scan ops, real A
(:mod:`.compiled`) and complex A (:mod:`.compiled_complex`): same arguments, gradients shaped like
their inputs; only the last state's dtype follows A (float32, or complex64 for a complex A).

The op pair is ``fwd(u, delta, A, B, C, D, z, delta_bias, delta_softplus) -> (out, last_state)`` and
``bwd(..., dout, dlast_state) -> (du, ddelta, dA, dB, dC, dD, dz, ddelta_bias)`` (empty tensors for
absent inputs); shapes as :func:`mamba_ssm.ops.selective_scan_interface.selective_scan_fn`.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

__all__ = ["bwd_fake", "fwd_fake", "scan_backward", "setup_context"]

#: A scan op's gradients: (du, ddelta, dA, dB, dC, dD, dz, ddelta_bias, d(delta_softplus) = None).
ScanGrads = tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
    Optional[torch.Tensor], Optional[torch.Tensor], Optional[torch.Tensor], None,
]  # fmt: skip
#: The backward op's outputs: (du, ddelta, dA, dB, dC, dD, dz, ddelta_bias), empty for absent inputs.
OpGrads = tuple[
    torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor
]  # fmt: skip
#: The backward op: (u, delta, A, B, C, D, z, delta_bias, delta_softplus, dout, dlast_state) -> OpGrads.
BwdOp = Callable[..., OpGrads]


def _contiguous_empty(x: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    return torch.empty(x.shape, dtype=dtype or x.dtype, device=x.device)


def fwd_fake(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    delta_bias: Optional[torch.Tensor],
    delta_softplus: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The forward op's outputs' shapes and dtypes (torch.compile / meta tensors)."""
    out = _contiguous_empty(u)
    dtype = torch.complex64 if A.is_complex() else torch.float32
    last_state = torch.empty((u.shape[0], u.shape[1], A.shape[1]), dtype=dtype, device=u.device)
    return out, last_state


def bwd_fake(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    delta_bias: Optional[torch.Tensor],
    delta_softplus: bool,
    dout: torch.Tensor,
    dlast_state: Optional[torch.Tensor],
) -> OpGrads:
    """The backward op's gradients' shapes and dtypes (torch.compile / meta tensors)."""

    def opt(x: Optional[torch.Tensor]) -> torch.Tensor:
        if x is None:
            return torch.empty((0,), dtype=torch.float32, device=u.device)
        return _contiguous_empty(x)

    dz = _contiguous_empty(z) if z is not None else torch.empty((0,), dtype=u.dtype, device=u.device)
    return (
        _contiguous_empty(u),
        _contiguous_empty(delta),
        _contiguous_empty(A),
        _contiguous_empty(B),
        _contiguous_empty(C),
        opt(D),
        dz,
        opt(delta_bias),
    )


def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
    """Saves what :func:`scan_backward`'s formula reads."""
    u, delta, A, B, C, D, z, delta_bias, delta_softplus = inputs
    ctx.save_for_backward(u, delta, A, B, C, D, z, delta_bias)
    ctx.delta_softplus = delta_softplus
    ctx.has = (D is not None, z is not None, delta_bias is not None)


def scan_backward(
    bwd_op: BwdOp,
) -> Callable[[Any, Optional[torch.Tensor], Optional[torch.Tensor]], ScanGrads]:
    """The autograd formula of a scan forward op whose backward op is ``bwd_op`` (the forward's arguments
    plus dout and dlast_state -> the eight gradients, empty for absent inputs)."""

    def backward(ctx: Any, dout: Optional[torch.Tensor], dlast_state: Optional[torch.Tensor]) -> ScanGrads:
        u, delta, A, B, C, D, z, delta_bias = ctx.saved_tensors
        if dout is None:
            dout = torch.zeros_like(u)
        du, ddelta, dA, dB, dC, dD, dz, ddelta_bias = bwd_op(
            u, delta, A, B, C, D, z, delta_bias, ctx.delta_softplus, dout, dlast_state
        )
        has_D, has_z, has_bias = ctx.has
        return (
            du,
            ddelta,
            dA,
            dB,
            dC,
            dD if has_D else None,
            dz if has_z else None,
            ddelta_bias if has_bias else None,
            None,
        )

    return backward
