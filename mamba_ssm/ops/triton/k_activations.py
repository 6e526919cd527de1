"""Upstream's ``mamba_ssm.ops.triton.k_activations``: SwiGLU (Shazeer, "GLU Variants Improve Transformer",
arXiv:2002.05202), the gated activation of ``GatedMLP``: for xy (..., 2 * d) split in halves x, y,

    swiglu(xy) = silu(x) * y,   silu(x) = x * sigmoid(x)

computed in float32 (float64 for float64 input), returned in xy's dtype. PyTorch; differentiable.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
import torch.nn.functional as F

from mamba_ssm._families import recompute as _recompute

__all__ = ["SwiGLU", "swiglu"]


def _swiglu(xy: torch.Tensor) -> torch.Tensor:
    if xy.shape[-1] % 2:
        raise ValueError(
            f"swiglu: the last dimension of xy must be even (x and y halves), got {tuple(xy.shape)}"
        )
    x, y = xy.chunk(2, dim=-1)
    cd = torch.float64 if xy.dtype == torch.float64 else torch.float32
    return (F.silu(x.to(cd)) * y.to(cd)).to(xy.dtype)


class SwiGLU(torch.autograd.Function):
    """``SwiGLU.apply(xy)``: silu(x) * y for xy (..., 2 * d) -> (..., d), differentiable."""

    @staticmethod
    def forward(ctx: Any, xy: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = _recompute.forward(ctx, _swiglu, (xy,))
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:
        return _recompute.backward(ctx, dout)


#: ``swiglu(xy)``: :class:`SwiGLU` applied (upstream's name).
swiglu: Callable[[torch.Tensor], torch.Tensor] = SwiGLU.apply
