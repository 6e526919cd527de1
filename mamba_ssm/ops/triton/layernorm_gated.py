"""Gated RMSNorm / LayerNorm of Mamba-2 (arXiv:2405.21060, section 7: the norm before out_proj, gated by
``silu(z)``), with upstream's import path ``mamba_ssm.ops.triton.layernorm_gated``. PyTorch.

    norm_before_gate=True:  y = norm(x) * weight (+ bias), then * silu(z)
    norm_before_gate=False: y = norm(x * silu(z)) * weight (+ bias)

The norm runs over groups of ``group_size`` channels of the last dimension (default: all of it).
On CUDA/ROCm devices with triton >= 3.0 a Triton kernel runs (``mamba_ssm.ops.triton._kernels.norms``).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from mamba_ssm.ops.triton import _route

__all__ = ["rmsnorm_fn", "layernorm_fn", "RMSNorm", "LayerNorm"]


def _gated_norm(x, weight, bias, z, eps, group_size, norm_before_gate, is_rms_norm):
    hidden = x.shape[-1]
    group_size = hidden if group_size is None else group_size
    if hidden % group_size:
        raise ValueError(f"gated norm: group_size={group_size} does not divide x's last dim {hidden}")
    if tuple(weight.shape) != (hidden,):
        raise ValueError(f"gated norm: weight must have shape ({hidden},), got {tuple(weight.shape)}")
    if z is not None and z.shape != x.shape:
        raise ValueError(f"gated norm: z must have x's shape {tuple(x.shape)}, got {tuple(z.shape)}")
    if _route.use_triton("rms_norm" if is_rms_norm else "layer_norm", x,
                         lambda: _route.kernels().norms.unsupported_gated_norm(x, weight, bias, z, group_size)):
        return _route.kernels().norms.gated_norm(x, weight, bias, z, eps, group_size, norm_before_gate,
                                                 is_rms_norm)
    cdtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(cdtype)
    if z is not None and not norm_before_gate:
        xf = xf * F.silu(z.to(cdtype))
    xg = xf.reshape(*x.shape[:-1], hidden // group_size, group_size)
    if is_rms_norm:
        xg = xg * torch.rsqrt(xg.pow(2).mean(-1, keepdim=True) + eps)
    else:
        xg = xg - xg.mean(-1, keepdim=True)
        xg = xg * torch.rsqrt(xg.pow(2).mean(-1, keepdim=True) + eps)
    out = xg.reshape(x.shape) * weight.to(cdtype)
    if bias is not None:
        out = out + bias.to(cdtype)
    if z is not None and norm_before_gate:
        out = out * F.silu(z.to(cdtype))
    return out.to(x.dtype)


def rmsnorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
    """Gated RMSNorm. x, z: (..., hidden); weight, bias: (hidden,). Returns x's shape and dtype."""
    return _gated_norm(x, weight, bias, z, eps, group_size, norm_before_gate, True)


def layernorm_fn(x, weight, bias, z=None, eps=1e-6, group_size=None, norm_before_gate=True):
    """Gated LayerNorm; see :func:`rmsnorm_fn`."""
    return _gated_norm(x, weight, bias, z, eps, group_size, norm_before_gate, False)


class RMSNorm(nn.Module):
    """Gated RMSNorm module: ``forward(x, z=None)``; ``weight`` (hidden_size,) initialised to ones."""

    def __init__(self, hidden_size, eps=1e-5, group_size=None, norm_before_gate=True, device=None,
                 dtype=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))
        self.register_parameter("bias", None)
        self.group_size = group_size
        self.norm_before_gate = norm_before_gate

    def forward(self, x, z=None):
        return rmsnorm_fn(x, self.weight, self.bias, z=z, eps=self.eps, group_size=self.group_size,
                          norm_before_gate=self.norm_before_gate)


class LayerNorm(RMSNorm):
    """Gated LayerNorm module (with a bias, initialised to zeros)."""

    def __init__(self, hidden_size, eps=1e-5, group_size=None, norm_before_gate=True, device=None,
                 dtype=None):
        super().__init__(hidden_size, eps, group_size, norm_before_gate, device, dtype)
        self.bias = nn.Parameter(torch.zeros(hidden_size, device=device, dtype=dtype))

    def forward(self, x, z=None):
        return layernorm_fn(x, self.weight, self.bias, z=z, eps=self.eps, group_size=self.group_size,
                            norm_before_gate=self.norm_before_gate)
