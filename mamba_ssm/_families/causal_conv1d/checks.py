"""The causal conv1d ops' argument checks, in front of every backend (TypeError / ValueError naming the
argument, what was received and what was expected)."""

from __future__ import annotations

from typing import Any

import torch

from mamba_ssm._families.checks import require_float, require_tensor
from mamba_ssm._families.packing import check_rows

__all__ = [
    "check_activation",
    "check_conv_extras",
    "check_float",
    "check_int",
    "check_update_args",
    "check_x_weight",
]

_ACTIVATIONS = (None, "silu", "swish")


def check_activation(activation: Any) -> None:
    """ValueError unless ``activation`` is None, ``"silu"`` or ``"swish"``."""
    if activation not in _ACTIVATIONS:
        raise ValueError(
            f"causal_conv1d: activation={activation!r} is not supported; expected None, 'silu' or 'swish'"
        )


def check_float(name: str, arg: str, t: Any, optional: bool = False) -> None:
    """TypeError naming ``arg`` unless ``t`` is a real float tensor (or None when ``optional``)."""
    require_tensor(name, arg, t, optional, say_none=False)
    require_float(name, arg, t, fix=f"cast it with {arg}.float()")


def check_int(name: str, arg: str, t: Any) -> None:
    """TypeError naming ``arg`` unless ``t`` is an integer tensor (or None)."""
    if t is not None and (
        not isinstance(t, torch.Tensor) or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool
    ):
        got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
        raise TypeError(f"{name}: {arg} must be an integer tensor (e.g. torch.int32), got {got}")


def check_x_weight(name: str, x: Any, weight: Any, bias: Any, x_dims: tuple[int, ...] = (3,)) -> None:
    """The checks of x, weight and bias shared by every backend (TypeError / ValueError naming the
    argument): real float tensors, x of rank ``x_dims`` with dim = weight's channels, weight (dim, width),
    bias (dim,)."""
    check_float(name, "x", x)
    check_float(name, "weight", weight)
    check_float(name, "bias", bias, optional=True)
    if x.dim() not in x_dims:
        shapes = " or ".join({2: "(batch, dim)", 3: "(batch, dim, seqlen)"}[d] for d in x_dims)
        raise ValueError(f"{name}: x must have shape {shapes}, got {tuple(x.shape)}")
    if weight.dim() != 2:
        raise ValueError(f"{name}: weight must have shape (dim, width), got {tuple(weight.shape)}")
    if x.shape[1] != weight.shape[0]:
        raise ValueError(
            f"{name}: x has dim {x.shape[1]} (shape {tuple(x.shape)}) but weight has "
            f"{weight.shape[0]} channels (shape {tuple(weight.shape)}); expected equal"
        )
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"{name}: bias must have shape ({weight.shape[0]},), got {tuple(bias.shape)}")


def check_conv_extras(
    x: torch.Tensor,
    weight: torch.Tensor,
    seq_idx: Any,
    initial_states: Any,
    final_states_out: Any = None,
) -> None:
    """The checks of seq_idx / initial_states / final_states_out (TypeError / ValueError naming the
    argument), in front of every backend."""
    fn = "causal_conv1d_fn"
    check_int(fn, "seq_idx", seq_idx)
    check_float(fn, "initial_states", initial_states, optional=True)
    check_float(fn, "final_states_out", final_states_out, optional=True)
    batch, dim, seqlen = x.shape
    width = weight.shape[1]
    for arg, t in (("initial_states", initial_states), ("final_states_out", final_states_out)):
        if t is not None and tuple(t.shape) != (batch, dim, width - 1):
            raise ValueError(
                f"{fn}: {arg} must have shape ({batch}, {dim}, {width - 1}), got {tuple(t.shape)}"
            )
    if seq_idx is not None and tuple(seq_idx.shape) != (batch, seqlen):
        raise ValueError(f"{fn}: seq_idx must have shape ({batch}, {seqlen}), got {tuple(seq_idx.shape)}")


def check_update_args(
    x: torch.Tensor,
    conv_state: Any,
    weight: torch.Tensor,
    cache_seqlens: Any,
    conv_state_indices: Any,
) -> None:
    """causal_conv1d_update's checks (TypeError / ValueError naming the argument), before any backend
    runs."""
    fn = "causal_conv1d_update"
    check_float(fn, "conv_state", conv_state)
    check_int(fn, "cache_seqlens", cache_seqlens)
    check_int(fn, "conv_state_indices", conv_state_indices)
    batch, dim = x.shape[0], x.shape[1]
    width = weight.shape[1]
    if conv_state.dim() != 3 or conv_state.shape[1] != dim or conv_state.shape[2] < width - 1:
        raise ValueError(
            f"causal_conv1d_update: conv_state must have shape (batch, {dim}, >= {width - 1}), "
            f"got {tuple(conv_state.shape)}"
        )
    if conv_state_indices is None:
        if conv_state.shape[0] != batch:
            raise ValueError(
                f"causal_conv1d_update: conv_state has {conv_state.shape[0]} rows for x's batch "
                f"{batch}; pass conv_state_indices to pick rows"
            )
    else:
        if tuple(conv_state_indices.shape) != (batch,):
            raise ValueError(
                f"causal_conv1d_update: conv_state_indices must be ({batch},) integers, got "
                f"{tuple(conv_state_indices.shape)} {conv_state_indices.dtype}"
            )
        if conv_state_indices.device.type == "cpu":
            check_rows(fn, "conv_state_indices", conv_state_indices, conv_state.shape[0])
    if cache_seqlens is not None and tuple(cache_seqlens.shape) != (batch,):
        raise ValueError(
            f"causal_conv1d_update: cache_seqlens must be ({batch},) integers, got "
            f"{tuple(cache_seqlens.shape)} {cache_seqlens.dtype}"
        )
