"""LayerNorm / RMSNorm with an optional fused residual add and dropout, with upstream's import path and
argument names (``mamba_ssm.ops.triton.layer_norm``). PyTorch implementation; no Triton needed.

Math: LayerNorm (Ba et al., arXiv:1607.06450) ``y = (x - mean) / sqrt(var + eps) * weight + bias``;
RMSNorm (Zhang & Sennrich, arXiv:1910.07467) ``y = x / sqrt(mean(x^2) + eps) * weight (+ bias)``, both
over the last dimension and computed in float32 (float64 for float64 inputs).

The fused pre-norm residual used by Mamba's blocks: ``x' = dropout(x * rowscale) (+ dropout(x1))
+ residual``; the norm is applied to x'; with ``prenorm=True`` x' is also returned (in float32 when
``residual_in_fp32``), to be the next block's residual.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mamba_ssm.ops.triton import _route

__all__ = ["LayerNorm", "RMSNorm", "layer_norm_fn", "layer_norm_ref", "rms_norm_fn", "rms_norm_ref"]


def _norm(x, weight, bias, eps, is_rms_norm):
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


def _dropout(x, p, training_mask):
    if p == 0.0:
        return x, None
    mask = training_mask if training_mask is not None else (torch.rand_like(x, dtype=torch.float32) >= p)
    return x * mask.to(x.dtype) / (1.0 - p), mask


def layer_norm_fn(
    x,
    weight,
    bias,
    residual=None,
    x1=None,
    weight1=None,
    bias1=None,
    eps=1e-6,
    dropout_p=0.0,
    rowscale=None,
    prenorm=False,
    residual_in_fp32=False,
    is_rms_norm=False,
    return_dropout_mask=False,
    out_dtype=None,
):
    """Norm over the last dim with a fused residual add (differentiable through autograd).

    Args:
        x: (..., hidden). weight, bias: (hidden,) or None.
        residual: (..., hidden) added to x before the norm, or None.
        x1: a second input added (after its own dropout) before the norm, or None.
        weight1, bias1: a second (parallel) output ``norm(x') * weight1 + bias1``, or None.
        eps: the epsilon in the square root. dropout_p: dropout on x (and x1); 0 in eval.
        rowscale: (...,) per-row scale of x before dropout, or None.
        prenorm: also return x' (the residual stream). residual_in_fp32: x' returned in float32.
        is_rms_norm: RMSNorm instead of LayerNorm.
        return_dropout_mask: also return the dropout mask(s) (bool; None when dropout_p == 0).
        out_dtype: dtype of the normalised output(s) (default x's dtype).

    Returns:
        y; or the tuple (y[, y1][, x'][, mask][, mask1]) in that order for the options given.

    On CUDA/ROCm devices with triton >= 3.0 a Triton kernel runs (``mamba_ssm.ops.triton._kernels.norms``)
    unless dropout, x1, weight1 or rowscale are used or the dtype is float64 (then the PyTorch code here).

    Raises:
        ValueError: weight's size differs from x's last dimension, dropout_p outside [0, 1).
    """
    hidden = x.shape[-1]
    if weight is not None and tuple(weight.shape) != (hidden,):
        raise ValueError(
            f"layer_norm_fn: weight must have shape ({hidden},) (x's last dim), got {tuple(weight.shape)}"
        )
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"layer_norm_fn: dropout_p must be in [0, 1), got {dropout_p}")
    if residual is not None and residual.shape != x.shape:
        raise ValueError(
            f"layer_norm_fn: residual must have x's shape {tuple(x.shape)}, got {tuple(residual.shape)}"
        )
    op = "rms_norm" if is_rms_norm else "layer_norm"
    if _route.use_triton(
        op,
        x,
        lambda: _route.kernels().norms.unsupported_layer_norm(
            x, weight, bias, residual, x1, weight1, bias1, dropout_p, rowscale, return_dropout_mask, out_dtype
        ),
    ):
        return _route.kernels().norms.layer_norm(
            x, weight, bias, residual, eps, prenorm, residual_in_fp32, is_rms_norm, out_dtype
        )
    in_dtype = x.dtype
    out_dtype = out_dtype or in_dtype
    xs = x
    if rowscale is not None:
        xs = xs * rowscale.to(xs.dtype).unsqueeze(-1)
    xs, mask = _dropout(xs, dropout_p, None)
    mask1 = None
    res_dtype = torch.float32 if residual_in_fp32 else (residual.dtype if residual is not None else in_dtype)
    acc = torch.float64 if torch.float64 in (in_dtype, res_dtype) else torch.float32
    resid = xs.to(acc)
    if x1 is not None:
        x1d, mask1 = _dropout(x1, dropout_p, None)
        resid = resid + x1d.to(acc)
    if residual is not None:
        resid = resid + residual.to(acc)
    resid = resid.to(res_dtype)
    y = _norm(resid, weight, bias, eps, is_rms_norm).to(out_dtype)
    outs = [y]
    if weight1 is not None:
        outs.append(_norm(resid, weight1, bias1, eps, is_rms_norm).to(out_dtype))
    if prenorm:
        outs.append(resid)
    if return_dropout_mask:
        outs.append(mask)
        if x1 is not None:
            outs.append(mask1)
    return outs[0] if len(outs) == 1 else tuple(outs)


def rms_norm_fn(
    x,
    weight,
    bias,
    residual=None,
    x1=None,
    weight1=None,
    bias1=None,
    eps=1e-6,
    dropout_p=0.0,
    rowscale=None,
    prenorm=False,
    residual_in_fp32=False,
    return_dropout_mask=False,
    out_dtype=None,
):
    """:func:`layer_norm_fn` with ``is_rms_norm=True`` (same arguments and results)."""
    return layer_norm_fn(
        x,
        weight,
        bias,
        residual,
        x1,
        weight1,
        bias1,
        eps,
        dropout_p,
        rowscale,
        prenorm,
        residual_in_fp32,
        True,
        return_dropout_mask,
        out_dtype,
    )


def _ref_input(x, residual, upcast):
    """The references' normalised input: x (+ residual), both in fp32 first when upcast."""
    if upcast:
        x = x.float()
        residual = residual.float() if residual is not None else None
    if residual is not None:
        x = (x + residual).to(x.dtype)
    return x


def layer_norm_ref(x, weight, bias, residual=None, eps=1e-6, prenorm=False, upcast=False):
    """Plain LayerNorm with an optional residual (no dropout): y, or (y, x + residual) with prenorm."""
    dtype = x.dtype
    x = _ref_input(x, residual, upcast)
    out = F.layer_norm(x.to(weight.dtype), x.shape[-1:], weight, bias, eps).to(dtype)
    return (out, x) if prenorm else out


def rms_norm_ref(x, weight, bias, residual=None, eps=1e-6, prenorm=False, upcast=False):
    """Plain RMSNorm with an optional residual (no dropout): y, or (y, x + residual) with prenorm."""
    dtype = x.dtype
    x = _ref_input(x, residual, upcast)
    xf = x.float()
    out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    if bias is not None:
        out = out + bias.float()
    out = out.to(dtype)
    return (out, x) if prenorm else out


class RMSNorm(nn.Module):
    """RMSNorm over the last dimension with a learned ``weight`` (hidden_size,), initialised to ones.

    ``forward(x, residual=None, prenorm=False, residual_in_fp32=False)`` calls :func:`rms_norm_fn`
    (dropout ``dropout_p`` only in training).
    """

    def __init__(self, hidden_size, eps=1e-5, dropout_p=0.0, device=None, dtype=None):
        super().__init__()
        self.eps = eps
        self.drop = nn.Dropout(dropout_p) if dropout_p > 0.0 else None
        self.weight = nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))
        self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        nn.init.ones_(self.weight)

    def forward(self, x, residual=None, prenorm=False, residual_in_fp32=False):
        return rms_norm_fn(
            x,
            self.weight,
            self.bias,
            residual=residual,
            eps=self.eps,
            dropout_p=self.drop.p if self.drop is not None and self.training else 0.0,
            prenorm=prenorm,
            residual_in_fp32=residual_in_fp32,
        )


class LayerNorm(nn.LayerNorm):
    """LayerNorm whose ``forward(x, residual=None, prenorm=False, residual_in_fp32=False)`` calls
    :func:`layer_norm_fn`."""

    def forward(self, x, residual=None, prenorm=False, residual_in_fp32=False):
        return layer_norm_fn(
            x,
            self.weight,
            self.bias,
            residual=residual,
            eps=self.eps,
            prenorm=prenorm,
            residual_in_fp32=residual_in_fp32,
        )
