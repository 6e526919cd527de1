"""The norms' PyTorch implementation: LayerNorm / RMSNorm with the fused residual add, dropout and
row scale of :func:`mamba_ssm.ops.triton.layer_norm.layer_norm_fn` (every device; float32, float64 for
float64 inputs), and its call form on the Triton kernels."""

from __future__ import annotations

from typing import Any, Optional, Union

import torch

__all__ = ["NormOut", "layer_norm_torch", "norm", "triton_layer_norm", "triton_layer_norm_unsupported"]

#: What the norm ops return: y alone, or the tuple (y[, y1][, x'][, mask][, mask1]) (a mask is None when
#: dropout_p == 0).
NormOut = Union[torch.Tensor, tuple[Optional[torch.Tensor], ...]]


def norm(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    eps: float,
    is_rms_norm: bool,
) -> torch.Tensor:
    """LayerNorm (or RMSNorm with ``is_rms_norm``) of x (..., hidden) over its last dim, times weight,
    plus bias ((hidden,) or None each): float32 (float64 for float64 x)."""
    cdtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    xf = x.to(cdtype)
    if is_rms_norm:
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    else:
        mean = xf.mean(-1, keepdim=True)
        xc = xf - mean
        out = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        out = out * weight.to(cdtype)
    if bias is not None:
        out = out + bias.to(cdtype)
    return out


def _dropout(
    x: torch.Tensor, p: float, training_mask: Optional[torch.Tensor]
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    if p == 0.0:
        return x, None
    mask = training_mask if training_mask is not None else (torch.rand_like(x, dtype=torch.float32) >= p)
    return x * mask.to(x.dtype) / (1.0 - p), mask


def layer_norm_torch(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor],
    x1: Optional[torch.Tensor],
    weight1: Optional[torch.Tensor],
    bias1: Optional[torch.Tensor],
    eps: float,
    dropout_p: float,
    rowscale: Optional[torch.Tensor],
    prenorm: bool,
    residual_in_fp32: bool,
    is_rms_norm: bool,
    return_dropout_mask: bool,
    out_dtype: Optional[torch.dtype],
    dropout_mask: Optional[torch.Tensor] = None,
    dropout_mask1: Optional[torch.Tensor] = None,
) -> NormOut:
    """:func:`layer_norm_fn` in PyTorch (same arguments, shapes and results); ``dropout_mask`` /
    ``dropout_mask1`` (bool, x's shape): the masks to use instead of drawing new ones."""
    in_dtype = x.dtype
    out_dtype = out_dtype or in_dtype
    xs = x
    if rowscale is not None:
        xs = xs * rowscale.to(xs.dtype).unsqueeze(-1)
    xs, mask = _dropout(xs, dropout_p, dropout_mask)
    mask1: Optional[torch.Tensor] = None
    res_dtype = torch.float32 if residual_in_fp32 else (residual.dtype if residual is not None else in_dtype)
    acc = torch.float64 if torch.float64 in (in_dtype, res_dtype) else torch.float32
    resid = xs.to(acc)
    if x1 is not None:
        x1d, mask1 = _dropout(x1, dropout_p, dropout_mask1)
        resid = resid + x1d.to(acc)
    if residual is not None:
        resid = resid + residual.to(acc)
    resid = resid.to(res_dtype)
    y = norm(resid, weight, bias, eps, is_rms_norm).to(out_dtype)
    outs: list[Optional[torch.Tensor]] = [y]
    if weight1 is not None:
        outs.append(norm(resid, weight1, bias1, eps, is_rms_norm).to(out_dtype))
    if prenorm:
        outs.append(resid)
    if return_dropout_mask:
        outs.append(mask)
        if x1 is not None:
            outs.append(mask1)
    return y if len(outs) == 1 else tuple(outs)


_ARGS = "x weight bias residual x1 weight1 bias1 eps dropout_p rowscale prenorm residual_in_fp32 is_rms_norm return_dropout_mask out_dtype"


def triton_layer_norm_unsupported(*args: Any) -> str | None:
    """None when the Triton norm kernel takes this call (the arguments of :func:`layer_norm_torch`),
    else why not."""
    a = dict(zip(_ARGS.split(), args))
    from mamba_ssm._families.norms import triton_kernels as norms

    reason: str | None = norms.unsupported_layer_norm(
        a["x"], a["weight"], a["bias"], a["residual"], a["x1"], a["weight1"], a["bias1"], a["dropout_p"],
        a["rowscale"], a["return_dropout_mask"], a["out_dtype"],
    )  # fmt: skip
    return reason


def triton_layer_norm(*args: Any) -> Any:
    """The norm on the Triton kernel (the arguments of :func:`layer_norm_torch`; the kernel takes no
    second input, dropout or row scale: :func:`triton_layer_norm_unsupported` said so)."""
    a = dict(zip(_ARGS.split(), args))
    from mamba_ssm._families.norms import triton_kernels as norms

    return norms.layer_norm(
        a["x"], a["weight"], a["bias"], a["residual"], a["eps"], a["prenorm"], a["residual_in_fp32"],
        a["is_rms_norm"], a["out_dtype"],
    )  # fmt: skip
