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

import functools
from typing import Any, Callable, Literal, Optional, Sequence, Union, overload

import torch
import torch.nn.functional as F
from torch import nn
from torch.types import Device

from mamba_ssm import _dispatch
from mamba_ssm._families import recompute as _recompute
from mamba_ssm._families.norms.torch_impl import NormOut
from mamba_ssm._families.norms.torch_impl import layer_norm_torch as _layer_norm_torch

__all__ = [
    "LayerNorm",
    "LayerNormFn",
    "LayerNormLinearFn",
    "RMSNorm",
    "config_prune",
    "layer_norm_fn",
    "layer_norm_linear_fn",
    "layer_norm_ref",
    "rms_norm_fn",
    "rms_norm_ref",
]

#: :func:`layer_norm_linear_fn`'s result: out, or (out, residual stream) with ``prenorm``.
_LinearOut = Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]


@overload
def layer_norm_fn(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor] = None,
    x1: Optional[torch.Tensor] = None,
    weight1: None = None,
    bias1: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    dropout_p: float = 0.0,
    rowscale: Optional[torch.Tensor] = None,
    prenorm: Literal[False] = False,
    residual_in_fp32: bool = False,
    is_rms_norm: bool = False,
    return_dropout_mask: Literal[False] = False,
    out_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor: ...
@overload
def layer_norm_fn(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor] = None,
    x1: Optional[torch.Tensor] = None,
    weight1: None = None,
    bias1: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    dropout_p: float = 0.0,
    rowscale: Optional[torch.Tensor] = None,
    *,
    prenorm: Literal[True],
    residual_in_fp32: bool = False,
    is_rms_norm: bool = False,
    return_dropout_mask: Literal[False] = False,
    out_dtype: Optional[torch.dtype] = None,
) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def layer_norm_fn(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor] = None,
    x1: Optional[torch.Tensor] = None,
    weight1: Optional[torch.Tensor] = None,
    bias1: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    dropout_p: float = 0.0,
    rowscale: Optional[torch.Tensor] = None,
    prenorm: bool = False,
    residual_in_fp32: bool = False,
    is_rms_norm: bool = False,
    return_dropout_mask: bool = False,
    out_dtype: Optional[torch.dtype] = None,
) -> NormOut: ...


def layer_norm_fn(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor] = None,
    x1: Optional[torch.Tensor] = None,
    weight1: Optional[torch.Tensor] = None,
    bias1: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    dropout_p: float = 0.0,
    rowscale: Optional[torch.Tensor] = None,
    prenorm: bool = False,
    residual_in_fp32: bool = False,
    is_rms_norm: bool = False,
    return_dropout_mask: bool = False,
    out_dtype: Optional[torch.dtype] = None,
) -> NormOut:
    """Norm over the last dim with a fused residual add (differentiable through autograd).

    Args:
        x: (..., hidden) float16 / bfloat16 / float32 / float64. weight, bias: (hidden,) or None.
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
        y (x's shape, ``out_dtype``); or the tuple (y[, y1][, x'][, mask][, mask1]) in that order for the
        options given (x' in residual's dtype, float32 with ``residual_in_fp32``; masks bool, x's shape).

    On CUDA/ROCm devices with triton >= 3.0 a Triton kernel runs (``mamba_ssm._families.norms.triton_kernels``)
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
    out: NormOut = _dispatch.call(
        op, x, weight, bias, residual, x1, weight1, bias1, eps, dropout_p, rowscale, prenorm, residual_in_fp32,
        is_rms_norm, return_dropout_mask, out_dtype,
    )  # fmt: skip
    return out


@overload
def rms_norm_fn(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor] = None,
    x1: Optional[torch.Tensor] = None,
    weight1: None = None,
    bias1: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    dropout_p: float = 0.0,
    rowscale: Optional[torch.Tensor] = None,
    prenorm: Literal[False] = False,
    residual_in_fp32: bool = False,
    return_dropout_mask: Literal[False] = False,
    out_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor: ...
@overload
def rms_norm_fn(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor] = None,
    x1: Optional[torch.Tensor] = None,
    weight1: None = None,
    bias1: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    dropout_p: float = 0.0,
    rowscale: Optional[torch.Tensor] = None,
    *,
    prenorm: Literal[True],
    residual_in_fp32: bool = False,
    return_dropout_mask: Literal[False] = False,
    out_dtype: Optional[torch.dtype] = None,
) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def rms_norm_fn(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor] = None,
    x1: Optional[torch.Tensor] = None,
    weight1: Optional[torch.Tensor] = None,
    bias1: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    dropout_p: float = 0.0,
    rowscale: Optional[torch.Tensor] = None,
    prenorm: bool = False,
    residual_in_fp32: bool = False,
    return_dropout_mask: bool = False,
    out_dtype: Optional[torch.dtype] = None,
) -> NormOut: ...
def rms_norm_fn(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor] = None,
    x1: Optional[torch.Tensor] = None,
    weight1: Optional[torch.Tensor] = None,
    bias1: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    dropout_p: float = 0.0,
    rowscale: Optional[torch.Tensor] = None,
    prenorm: bool = False,
    residual_in_fp32: bool = False,
    return_dropout_mask: bool = False,
    out_dtype: Optional[torch.dtype] = None,
) -> NormOut:
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


def _norm_ref(
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
    dropout_mask: Optional[torch.Tensor],
    dropout_mask1: Optional[torch.Tensor],
    upcast: bool,
    is_rms_norm: bool,
) -> Optional[NormOut]:
    """The references: x' = dropout(x * rowscale) (+ dropout(x1)) (+ residual), in float32 first when
    ``upcast``; out = norm(x') * weight + bias (and out1 with weight1 / bias1), in x's dtype (None for
    an output whose weight is None)."""
    dtype = x.dtype
    if upcast:
        x = x.float()
        x1, residual = (t.float() if t is not None else None for t in (x1, residual))
        weight, bias, weight1, bias1 = (
            t.float() if t is not None else None for t in (weight, bias, weight1, bias1)
        )
    if rowscale is not None:
        x = x * rowscale.to(x.dtype).unsqueeze(-1)

    def drop(t: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
        if mask is not None:
            return t * mask.to(t.dtype) / (1.0 - dropout_p)
        return F.dropout(t, dropout_p) if dropout_p > 0.0 else t

    x = drop(x, dropout_mask)
    if x1 is not None:
        x = x + drop(x1, dropout_mask1).to(x.dtype)
    if residual is not None:
        x = (x + residual).to(x.dtype)

    def norm(w: Optional[torch.Tensor], b: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
        if w is None:
            return None
        if not is_rms_norm:
            return F.layer_norm(x.to(w.dtype), x.shape[-1:], w, b, eps).to(dtype)
        cd = torch.float64 if x.dtype == torch.float64 else torch.float32
        xf = x.to(cd)
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.to(cd)
        return (out + b.to(cd) if b is not None else out).to(dtype)

    outs: list[Optional[torch.Tensor]] = [norm(weight, bias)]
    outs += [norm(weight1, bias1)] if weight1 is not None else []
    if prenorm:
        outs.append(x)
    return outs[0] if len(outs) == 1 else tuple(outs)


def layer_norm_ref(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor] = None,
    x1: Optional[torch.Tensor] = None,
    weight1: Optional[torch.Tensor] = None,
    bias1: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    dropout_p: float = 0.0,
    rowscale: Optional[torch.Tensor] = None,
    prenorm: bool = False,
    dropout_mask: Optional[torch.Tensor] = None,
    dropout_mask1: Optional[torch.Tensor] = None,
    upcast: bool = False,
) -> Optional[NormOut]:
    """Plain LayerNorm with upstream's reference arguments: x' = dropout(x * rowscale) (+ dropout(x1))
    (+ residual); out = LayerNorm(x') * weight + bias in x's dtype (computed in weight's dtype, float32
    inputs first with ``upcast``); ``dropout_mask`` / ``dropout_mask1`` (bool, x's shape) are the masks
    (scaled by 1 / (1 - dropout_p)), else F.dropout draws them.

    Args:
        x: (..., hidden) float. weight, bias, weight1, bias1: (hidden,) or None. residual, x1: x's
        shape or None. rowscale: (...,) or None.

    Returns:
        out; (out, out1) with weight1 (out1 = LayerNorm(x') * weight1 + bias1); with ``prenorm`` also x'
        last (None in the place of an output whose weight is None)."""
    return _norm_ref(
        x, weight, bias, residual, x1, weight1, bias1, eps, dropout_p, rowscale, prenorm, dropout_mask,
        dropout_mask1, upcast, is_rms_norm=False,
    )  # fmt: skip


def rms_norm_ref(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor] = None,
    x1: Optional[torch.Tensor] = None,
    weight1: Optional[torch.Tensor] = None,
    bias1: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    dropout_p: float = 0.0,
    rowscale: Optional[torch.Tensor] = None,
    prenorm: bool = False,
    dropout_mask: Optional[torch.Tensor] = None,
    dropout_mask1: Optional[torch.Tensor] = None,
    upcast: bool = False,
) -> Optional[NormOut]:
    """:func:`layer_norm_ref` with RMSNorm (``x' / sqrt(mean(x'^2) + eps) * weight (+ bias)``, computed in
    float32, float64 for float64 x)."""
    return _norm_ref(
        x, weight, bias, residual, x1, weight1, bias1, eps, dropout_p, rowscale, prenorm, dropout_mask,
        dropout_mask1, upcast, is_rms_norm=True,
    )  # fmt: skip


class LayerNormFn(torch.autograd.Function):
    """:func:`layer_norm_fn` as a ``torch.autograd.Function`` (upstream's class): same arguments and
    results. The dropout masks are drawn in the forward and reused by the backward, which recomputes the
    norm and differentiates it (:mod:`mamba_ssm._families.recompute`)."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: Optional[torch.Tensor],
        bias: Optional[torch.Tensor],
        residual: Optional[torch.Tensor] = None,
        x1: Optional[torch.Tensor] = None,
        weight1: Optional[torch.Tensor] = None,
        bias1: Optional[torch.Tensor] = None,
        eps: float = 1e-6,
        dropout_p: float = 0.0,
        rowscale: Optional[torch.Tensor] = None,
        prenorm: bool = False,
        residual_in_fp32: bool = False,
        is_rms_norm: bool = False,
        return_dropout_mask: bool = False,
    ) -> NormOut:
        if not 0.0 <= dropout_p < 1.0:
            raise ValueError(f"LayerNormFn: dropout_p must be in [0, 1), got {dropout_p}")
        masks: dict[str, torch.Tensor] = {}
        if dropout_p > 0.0:
            masks["dropout_mask"] = torch.rand(x.shape, device=x.device) >= dropout_p
            if x1 is not None:
                masks["dropout_mask1"] = torch.rand(x1.shape, device=x1.device) >= dropout_p

        impl: Callable[..., NormOut] = functools.partial(
            _layer_norm_torch,
            out_dtype=None,
            dropout_mask=masks.get("dropout_mask"),
            dropout_mask1=masks.get("dropout_mask1"),
        )

        args = (
            x, weight, bias, residual, x1, weight1, bias1, eps, dropout_p, rowscale, prenorm, residual_in_fp32,
            is_rms_norm, return_dropout_mask,
        )  # fmt: skip
        if dropout_p == 0.0 and x1 is None and weight1 is None and rowscale is None:
            impl = layer_norm_fn  # (the Triton kernel where it runs)
        out: NormOut = _recompute.forward(ctx, impl, args)
        return out

    @staticmethod
    def backward(ctx: Any, *grads: Optional[torch.Tensor]) -> tuple[Optional[torch.Tensor], ...]:
        return _recompute.backward(ctx, *grads)


class LayerNormLinearFn(torch.autograd.Function):
    """:func:`layer_norm_linear_fn` as a ``torch.autograd.Function`` (upstream's class)."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        norm_weight: Optional[torch.Tensor],
        norm_bias: Optional[torch.Tensor],
        linear_weight: torch.Tensor,
        linear_bias: Optional[torch.Tensor],
        residual: Optional[torch.Tensor] = None,
        eps: float = 1e-6,
        prenorm: bool = False,
        residual_in_fp32: bool = False,
        is_rms_norm: bool = False,
    ) -> _LinearOut:
        args = (
            x, norm_weight, norm_bias, linear_weight, linear_bias, residual, eps, prenorm, residual_in_fp32,
            is_rms_norm,
        )  # fmt: skip
        out: _LinearOut = _recompute.forward(ctx, _layer_norm_linear, args)
        return out

    @staticmethod
    def backward(ctx: Any, *grads: Optional[torch.Tensor]) -> tuple[Optional[torch.Tensor], ...]:
        return _recompute.backward(ctx, *grads)


def _layer_norm_linear(
    x: torch.Tensor,
    norm_weight: Optional[torch.Tensor],
    norm_bias: Optional[torch.Tensor],
    linear_weight: torch.Tensor,
    linear_bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor],
    eps: float,
    prenorm: bool,
    residual_in_fp32: bool,
    is_rms_norm: bool,
) -> _LinearOut:
    resid: Optional[torch.Tensor] = None
    if prenorm:
        y, resid = layer_norm_fn(
            x, norm_weight, norm_bias, residual=residual, eps=eps, prenorm=True,
            residual_in_fp32=residual_in_fp32, is_rms_norm=is_rms_norm,
        )  # fmt: skip
    else:
        y = layer_norm_fn(
            x, norm_weight, norm_bias, residual=residual, eps=eps, prenorm=False,
            residual_in_fp32=residual_in_fp32, is_rms_norm=is_rms_norm,
        )  # fmt: skip
    dtype = torch.get_autocast_dtype(x.device.type) if torch.is_autocast_enabled(x.device.type) else y.dtype
    out = F.linear(
        y.to(dtype), linear_weight.to(dtype), linear_bias.to(dtype) if linear_bias is not None else None
    )
    return (out, resid) if resid is not None else out


@overload
def layer_norm_linear_fn(
    x: torch.Tensor,
    norm_weight: Optional[torch.Tensor],
    norm_bias: Optional[torch.Tensor],
    linear_weight: torch.Tensor,
    linear_bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    prenorm: Literal[False] = False,
    residual_in_fp32: bool = False,
    is_rms_norm: bool = False,
) -> torch.Tensor: ...
@overload
def layer_norm_linear_fn(
    x: torch.Tensor,
    norm_weight: Optional[torch.Tensor],
    norm_bias: Optional[torch.Tensor],
    linear_weight: torch.Tensor,
    linear_bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    *,
    prenorm: Literal[True],
    residual_in_fp32: bool = False,
    is_rms_norm: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def layer_norm_linear_fn(
    x: torch.Tensor,
    norm_weight: Optional[torch.Tensor],
    norm_bias: Optional[torch.Tensor],
    linear_weight: torch.Tensor,
    linear_bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    prenorm: bool = False,
    residual_in_fp32: bool = False,
    is_rms_norm: bool = False,
) -> _LinearOut: ...
def layer_norm_linear_fn(
    x: torch.Tensor,
    norm_weight: Optional[torch.Tensor],
    norm_bias: Optional[torch.Tensor],
    linear_weight: torch.Tensor,
    linear_bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    prenorm: bool = False,
    residual_in_fp32: bool = False,
    is_rms_norm: bool = False,
) -> _LinearOut:
    """A norm (as :func:`layer_norm_fn`, with the residual add) followed by a linear layer:
    ``out = linear(norm(x + residual))`` (in the autocast dtype under autocast, else the norm's output
    dtype), plus the residual stream x + residual with ``prenorm``.

    Args:
        x: (..., hidden). norm_weight, norm_bias: (hidden,) (bias may be None). linear_weight:
        (out_features, hidden); linear_bias: (out_features,) or None. residual, eps, prenorm,
        residual_in_fp32, is_rms_norm: as :func:`layer_norm_fn`.

    Returns:
        out (..., out_features), or (out, residual stream) with ``prenorm``.
    """
    out: _LinearOut = LayerNormLinearFn.apply(
        x, norm_weight, norm_bias, linear_weight, linear_bias, residual, eps, prenorm, residual_in_fp32,
        is_rms_norm,
    )  # fmt: skip
    return out


def config_prune(configs: Sequence[Any]) -> list[Any]:
    """The Triton autotune configs that fit this GPU: those whose ``num_warps`` times the warp size (64 on
    AMD Instinct, 32 on NVIDIA and RDNA) stays within 1024 threads per block (upstream's helper).

    Args:
        configs: ``triton.Config`` objects (anything with ``num_warps``)."""
    warp = 32
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        warp = getattr(props, "warp_size", None) or (64 if getattr(torch.version, "hip", None) else 32)
    return [c for c in configs if c.num_warps * warp <= 1024]


def __getattr__(name: str) -> Any:
    # configs_autotune / pruned_configs_autotune are triton.Config lists: built (importing triton) on
    # first use, so importing this module never imports triton.
    if name in ("configs_autotune", "pruned_configs_autotune"):
        import triton

        configs = [triton.Config({}, num_warps=w) for w in (1, 2, 4, 8, 16, 32)]
        globals()["configs_autotune"] = configs
        globals()["pruned_configs_autotune"] = config_prune(configs)
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class RMSNorm(nn.Module):
    """RMSNorm over the last dimension with a learned ``weight`` (hidden_size,), initialised to ones.

    ``forward(x, residual=None, prenorm=False, residual_in_fp32=False)`` calls :func:`rms_norm_fn`
    (dropout ``dropout_p`` only in training).
    """

    bias: Optional[torch.Tensor]  # (registered as None)

    def __init__(
        self,
        hidden_size: int,
        eps: float = 1e-5,
        dropout_p: float = 0.0,
        device: Device = None,
        dtype: Optional[torch.dtype] = None,
    ) -> None:
        super().__init__()
        self.eps = eps
        self.drop = nn.Dropout(dropout_p) if dropout_p > 0.0 else None
        self.weight = nn.Parameter(torch.empty(hidden_size, device=device, dtype=dtype))
        self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """weight to ones."""
        nn.init.ones_(self.weight)

    @overload
    def forward(
        self,
        x: torch.Tensor,
        residual: Optional[torch.Tensor] = None,
        prenorm: Literal[False] = False,
        residual_in_fp32: bool = False,
    ) -> torch.Tensor: ...
    @overload
    def forward(
        self, x: torch.Tensor, residual: Optional[torch.Tensor], prenorm: bool, residual_in_fp32: bool = False
    ) -> NormOut: ...
    def forward(
        self,
        x: torch.Tensor,
        residual: Optional[torch.Tensor] = None,
        prenorm: bool = False,
        residual_in_fp32: bool = False,
    ) -> NormOut:
        """x, residual: (..., hidden_size) -> y (x's shape and dtype), or (y, x + residual) with
        ``prenorm`` (float32 with ``residual_in_fp32``): see :func:`rms_norm_fn`."""
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

    @overload
    def forward(
        self,
        x: torch.Tensor,
        residual: Optional[torch.Tensor] = None,
        prenorm: Literal[False] = False,
        residual_in_fp32: bool = False,
    ) -> torch.Tensor: ...
    @overload
    def forward(
        self, x: torch.Tensor, residual: Optional[torch.Tensor], prenorm: bool, residual_in_fp32: bool = False
    ) -> NormOut: ...
    def forward(
        self,
        x: torch.Tensor,
        residual: Optional[torch.Tensor] = None,
        prenorm: bool = False,
        residual_in_fp32: bool = False,
    ) -> NormOut:
        """x, residual: (..., hidden) -> y (x's shape and dtype), or (y, x + residual) with ``prenorm``
        (float32 with ``residual_in_fp32``): see :func:`layer_norm_fn`."""
        return layer_norm_fn(
            x,
            self.weight,
            self.bias,
            residual=residual,
            eps=self.eps,
            prenorm=prenorm,
            residual_in_fp32=residual_in_fp32,
        )
