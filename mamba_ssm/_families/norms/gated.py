"""Mamba-2's gated RMSNorm / LayerNorm (arXiv:2405.21060, section 7) as each backend runs it: the calls
``gated_rms_norm`` and ``gated_layer_norm`` (the decisions of ``rms_norm`` and ``layer_norm``), with the
arguments ``(x, weight, bias, z, eps, group_size, norm_before_gate, is_rms_norm)`` checked by
``mamba_ssm.ops.triton.layernorm_gated`` (group_size resolved: it divides x's last dimension).

    norm_before_gate=True:  y = norm(x) * weight (+ bias), then * silu(z)
    norm_before_gate=False: y = norm(x * silu(z)) * weight (+ bias)

over groups of ``group_size`` channels of the last dimension.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

__all__ = ["gated_norm_torch", "triton_gated_norm", "triton_gated_norm_unsupported"]


def gated_norm_torch(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    eps: float,
    group_size: int,
    norm_before_gate: bool,
    is_rms_norm: bool,
    upcast: bool = True,
) -> torch.Tensor:
    """The gated norm in PyTorch: computed in float32 (float64 for float64 x) when ``upcast``, else in
    x's dtype; x's shape and dtype."""
    hidden = x.shape[-1]
    if upcast:  # noqa: SIM108 - the nested conditional reads worse
        cdtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    else:
        cdtype = x.dtype
    xf = x.to(cdtype)
    if z is not None and not norm_before_gate:
        xf = xf * F.silu(z.to(cdtype))
    xg = xf.reshape(*x.shape[:-1], hidden // group_size, group_size)
    if not is_rms_norm:
        xg = xg - xg.mean(-1, keepdim=True)
    xg = xg * torch.rsqrt(xg.pow(2).mean(-1, keepdim=True) + eps)
    out = xg.reshape(x.shape) * weight.to(cdtype)
    if bias is not None:
        out = out + bias.to(cdtype)
    if z is not None and norm_before_gate:
        out = out * F.silu(z.to(cdtype))
    return out.to(x.dtype)


def triton_gated_norm_unsupported(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    eps: float,
    group_size: int,
    norm_before_gate: bool,
    is_rms_norm: bool,
) -> Optional[str]:
    """None when the Triton kernel takes this gated-norm call, else why not."""
    del eps, norm_before_gate, is_rms_norm
    from mamba_ssm._families.norms import triton_kernels as norms

    return norms.unsupported_gated_norm(x, weight, bias, z, group_size)


def triton_gated_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    eps: float,
    group_size: int,
    norm_before_gate: bool,
    is_rms_norm: bool,
) -> torch.Tensor:
    """The gated norm on the Triton kernel (differentiable), computed in float32: x's shape and dtype."""
    from mamba_ssm._families.norms import triton_kernels as norms

    return norms.gated_norm(x, weight, bias, z, eps, group_size, norm_before_gate, is_rms_norm)
