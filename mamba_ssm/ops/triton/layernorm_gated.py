"""Gated RMSNorm / LayerNorm of Mamba-2 (arXiv:2405.21060, section 7: the norm before out_proj, gated by
``silu(z)``), with upstream's import path ``mamba_ssm.ops.triton.layernorm_gated``. PyTorch.

    norm_before_gate=True:  y = norm(x) * weight (+ bias), then * silu(z)
    norm_before_gate=False: y = norm(x * silu(z)) * weight (+ bias)

The norm runs over groups of ``group_size`` channels of the last dimension (default: all of it).
On CUDA/ROCm devices with triton >= 3.0 a Triton kernel runs (``mamba_ssm._families.norms.triton_kernels``).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import nn
from torch.types import Device

from mamba_ssm import _dispatch
from mamba_ssm._families import recompute as _recompute
from mamba_ssm._families.norms.gated import gated_norm_torch

__all__ = ["LayerNorm", "LayerNormFn", "RMSNorm", "layernorm_fn", "rms_norm_ref", "rmsnorm_fn"]


def _gated_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    eps: float,
    group_size: Optional[int],
    norm_before_gate: bool,
    is_rms_norm: bool,
    upcast: bool = True,
) -> torch.Tensor:
    hidden = x.shape[-1]
    group_size = hidden if group_size is None else group_size
    if hidden % group_size:
        raise ValueError(f"gated norm: group_size={group_size} does not divide x's last dim {hidden}")
    if tuple(weight.shape) != (hidden,):
        raise ValueError(f"gated norm: weight must have shape ({hidden},), got {tuple(weight.shape)}")
    if z is not None and z.shape != x.shape:
        raise ValueError(f"gated norm: z must have x's shape {tuple(x.shape)}, got {tuple(z.shape)}")
    if not upcast:  # computed in x's dtype: the PyTorch code only
        return gated_norm_torch(
            x, weight, bias, z, eps, group_size, norm_before_gate, is_rms_norm, upcast=False
        )
    # The Triton kernel where the norms' decision (``rms_norm`` / ``layer_norm``) picks Triton and it takes
    # this call, else the PyTorch code.
    y: torch.Tensor = _dispatch.call(
        "gated_rms_norm" if is_rms_norm else "gated_layer_norm",
        x,
        weight,
        bias,
        z,
        eps,
        group_size,
        norm_before_gate,
        is_rms_norm,
    )
    return y


def rmsnorm_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    z: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    group_size: Optional[int] = None,
    norm_before_gate: bool = True,
) -> torch.Tensor:
    """Gated RMSNorm (Zhang & Sennrich 2019; the gate of arXiv:2405.21060, section 7).

    x, z: (..., hidden) float (z None: no gate); weight, bias: (hidden,) (bias may be None); group_size:
    channels per normalised group (None: all of hidden; must divide it). Computed in float32 (float64
    for float64 x). Returns x's shape and dtype.

    Raises:
        ValueError: group_size not dividing hidden, weight or z of the wrong shape.
    """
    return _gated_norm(x, weight, bias, z, eps, group_size, norm_before_gate, True)


def layernorm_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    z: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    group_size: Optional[int] = None,
    norm_before_gate: bool = True,
    is_rms_norm: bool = False,
) -> torch.Tensor:
    """Gated LayerNorm (mean removed, then as :func:`rmsnorm_fn`), or the gated RMSNorm with
    ``is_rms_norm=True`` (upstream's one entry point for both): arguments, result and errors as
    :func:`rmsnorm_fn`'s."""
    return _gated_norm(x, weight, bias, z, eps, group_size, norm_before_gate, is_rms_norm)


def rms_norm_ref(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    z: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    group_size: Optional[int] = None,
    norm_before_gate: bool = True,
    upcast: bool = True,
) -> torch.Tensor:
    """The gated RMSNorm as a plain reference: computed in float32 (float64 for float64 x) when
    ``upcast``, else in x's dtype; otherwise as :func:`rmsnorm_fn`. Returns x's shape and dtype."""
    return _gated_norm(x, weight, bias, z, eps, group_size, norm_before_gate, True, upcast=upcast)


class LayerNormFn(torch.autograd.Function):
    """:func:`layernorm_fn` as a ``torch.autograd.Function`` (upstream's class): same arguments, result and
    gradients (the backward recomputes the norm: :mod:`mamba_ssm._families.recompute`)."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: Optional[torch.Tensor],
        z: Optional[torch.Tensor] = None,
        eps: float = 1e-6,
        group_size: Optional[int] = None,
        norm_before_gate: bool = True,
        is_rms_norm: bool = False,
    ) -> torch.Tensor:
        args = (x, weight, bias, z, eps, group_size, norm_before_gate, is_rms_norm)
        out: torch.Tensor = _recompute.forward(ctx, layernorm_fn, args)
        return out

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:
        return _recompute.backward(ctx, dy)


class RMSNorm(nn.Module):
    """Gated RMSNorm module: ``forward(x, z=None)``; ``weight`` (hidden_size,) initialised to ones."""

    bias: Optional[torch.Tensor]  # (registered as None here; a parameter in LayerNorm)

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-5,
        group_size: Optional[int] = None,
        norm_before_gate: bool = True,
        device: Device = None,
        dtype: Optional[torch.dtype] = None,
    ) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.register_parameter("bias", None)
        self.group_size = group_size
        self.norm_before_gate = norm_before_gate

    def reset_parameters(self) -> None:
        """weight to ones (and bias, where there is one, to zeros)."""
        nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor, z: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x, z: (..., hidden_size) -> x's shape and dtype (see :func:`rmsnorm_fn`)."""
        return rmsnorm_fn(
            x,
            self.weight,
            self.bias,
            z=z,
            eps=self.eps,
            group_size=self.group_size,
            norm_before_gate=self.norm_before_gate,
        )


class LayerNorm(RMSNorm):
    """Gated LayerNorm module (with a bias, initialised to zeros)."""

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-5,
        group_size: Optional[int] = None,
        norm_before_gate: bool = True,
        device: Device = None,
        dtype: Optional[torch.dtype] = None,
    ) -> None:
        super().__init__(hidden_size, eps, group_size, norm_before_gate, device, dtype)
        self.bias = nn.Parameter(torch.zeros(hidden_size, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor, z: Optional[torch.Tensor] = None) -> torch.Tensor:
        """x, z: (..., hidden_size) -> x's shape and dtype (see :func:`layernorm_fn`)."""
        return layernorm_fn(
            x,
            self.weight,
            self.bias,
            z=z,
            eps=self.eps,
            group_size=self.group_size,
            norm_before_gate=self.norm_before_gate,
        )
