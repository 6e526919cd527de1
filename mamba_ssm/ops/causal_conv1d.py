"""Causal depthwise conv1d (the short convolution in front of Mamba's selective scan).

``out[b, d, t] = act(bias[d] + sum_k weight[d, k] * x[b, d, t - (width - 1) + k])`` with x = 0 (or
``initial_states``) before the start: the convolution of Mamba (arXiv:2312.00752, Figure 3, "Conv").

Which implementation runs (:func:`implementation` says, and ``python -m mamba_ssm doctor`` reports it):

* ``compiled``: the kernels of ``mamba_ssm._C`` (CPU, CUDA, ROCm)
  when the backend asked for (``MAMBA_SSM_BACKEND`` / ``mamba_ssm.set_backend``) is ``auto`` or
  ``compiled`` and they can run there. Preferred over the ``causal_conv1d`` package.
* ``causal-conv1d``: the ``causal_conv1d`` package's CUDA kernels, for CUDA tensors when that package
  imports and either ``MAMBA_SSM_CONV1D=causal_conv1d`` asks for it or (``auto``) the compiled kernels
  cannot run there.
* ``torch``: the PyTorch implementation (:mod:`mamba_ssm._families.causal_conv1d.torch_impl`; also what
  ``torch`` / ``ref`` ask for, and float64).

Packed sequences (``seq_idx``): no position sees another sequence's inputs, and a negative ``seq_idx``
marks a padding token, whose output is 0 and which no other position and no state reads (the rule of
``csrc/conv1d_params.h``, the same in every implementation here; the ``causal_conv1d`` package
outputs 0 there too). ``final_states`` are the inputs the row's last sequence continues from: inputs of
an earlier sequence read 0, and a row ending in padding has zero final states.

This module never shadows the top-level ``causal_conv1d`` package: code importing that package
(transformers does) gets the package, not these functions.
Computation is in float32 (float64 for float64 inputs); outputs have x's dtype.
"""

from __future__ import annotations

from typing import Any, Callable, Literal, overload

import torch
from torch import Tensor

from mamba_ssm import _dispatch
from mamba_ssm._families.causal_conv1d.checks import (
    check_activation,
    check_conv_extras,
    check_update_args,
    check_x_weight,
)
from mamba_ssm._families.causal_conv1d.torch_impl import causal_conv1d_ref
from mamba_ssm._families.packing import check_cu_seqlens

__all__ = [
    "causal_conv1d_fn",
    "causal_conv1d_ref",
    "causal_conv1d_update",
    "causal_conv1d_varlen_states",
    "conv1d_preference",
    "explain",
    "external_package",
    "implementation",
]

#: Set to ``causal_conv1d`` to prefer the causal-conv1d package's kernels on CUDA over mamba_ssm._C's.
ENV_CONV1D = _dispatch.ENV_CONV1D


def external_package() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """``(causal_conv1d_fn, causal_conv1d_update)`` of the ``causal_conv1d`` package, or None."""
    return _dispatch.causal_conv1d_package()


def conv1d_preference() -> str:
    """``MAMBA_SSM_CONV1D``: ``"auto"`` (default: mamba_ssm._C's kernels first) or ``"causal_conv1d"``.

    Raises:
        ValueError: the variable holds another value (the message names it and the choices).
    """
    from mamba_ssm._dispatch.config import conv1d_preference as preference

    return str(preference())


def implementation(device: torch.device | str) -> str:
    """Which implementation the causal conv1d ops run for inputs on ``device`` (a torch.device or a
    device string): ``"compiled"``, ``"causal-conv1d"`` or ``"torch"`` (see the module docstring).
    A call the compiled kernels cannot take (float64, width > 4) still runs on PyTorch.

    Raises:
        ValueError: ``MAMBA_SSM_BACKEND`` or ``MAMBA_SSM_CONV1D`` holds a value that is not a choice.
    """
    return explain(device)[0]


def explain(device: torch.device | str) -> tuple[str, str]:
    """``(implementation, reason)``: :func:`implementation`'s answer and why, in one sentence (the
    dispatch's choice for ``causal_conv1d``; a forced backend that cannot run reports ``torch``, and its
    calls raise)."""
    choice = _dispatch.plan("causal_conv1d", device)
    return str(
        choice.backend or _dispatch.Backend.TORCH
    ), choice.reason or f"the {choice.requested} backend was asked for"


@overload
def causal_conv1d_fn(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    seq_idx: Tensor | None = None,
    initial_states: Tensor | None = None,
    return_final_states: Literal[False] = False,
    final_states_out: Tensor | None = None,
    activation: str | None = None,
) -> Tensor: ...
@overload
def causal_conv1d_fn(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    seq_idx: Tensor | None = None,
    initial_states: Tensor | None = None,
    *,
    return_final_states: Literal[True],
    final_states_out: Tensor | None = None,
    activation: str | None = None,
) -> tuple[Tensor, Tensor]: ...
@overload
def causal_conv1d_fn(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    seq_idx: Tensor | None = None,
    initial_states: Tensor | None = None,
    return_final_states: bool = False,
    final_states_out: Tensor | None = None,
    activation: str | None = None,
) -> Tensor | tuple[Tensor, Tensor]: ...


def causal_conv1d_fn(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    seq_idx: Tensor | None = None,
    initial_states: Tensor | None = None,
    return_final_states: bool = False,
    final_states_out: Tensor | None = None,
    activation: str | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Causal depthwise conv1d over the sequence.

    Args:
        x: (batch, dim, seqlen), float dtype.
        weight: (dim, width). bias: (dim,) or None.
        seq_idx: (batch, seqlen) integer sequence ids of packed sequences; no position sees another
            sequence's inputs, and a negative id marks padding (output 0, read by nothing). None: one
            sequence per row.
        initial_states: (batch, dim, width - 1), the inputs before position 0 (default zeros).
        return_final_states: also return the last width - 1 inputs (batch, dim, width - 1), the
            state :func:`causal_conv1d_update` continues from (with seq_idx: those of the row's last
            sequence, zero elsewhere and for a row ending in padding).
        final_states_out: optional tensor to write the final states into (returned).
        activation: None, "silu" or "swish" (the same).

    Returns:
        out (batch, dim, seqlen) in x's dtype (a tensor of its own, not a view: in-place updates work),
        or (out, final_states).

    Raises:
        TypeError: a non-float x, weight, bias, initial_states or final_states_out, a non-integer seq_idx
            (the message names the argument; the same on every backend).
        ValueError: bad shapes or activation, naming the argument.
    """
    check_activation(activation)
    check_x_weight("causal_conv1d_fn", x, weight, bias)
    check_conv_extras(x, weight, seq_idx, initial_states, final_states_out)
    result: Tensor | tuple[Tensor, Tensor] = _dispatch.call(
        "causal_conv1d",
        x,
        weight,
        bias,
        seq_idx,
        initial_states,
        return_final_states,
        final_states_out,
        activation,
    )
    return result


def causal_conv1d_update(
    x: Tensor,
    conv_state: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    activation: str | None = None,
    cache_seqlens: Tensor | None = None,
    conv_state_indices: Tensor | None = None,
) -> Tensor:
    """Decode step(s) of the causal conv1d from a rolling state, updating ``conv_state`` in place.

    Args:
        x: (batch, dim) or (batch, dim, seqlen) new inputs.
        conv_state: (state_batch, dim, state_len) with state_len >= width - 1: the last inputs, oldest
            first (Mamba keeps state_len = width). Shifted left and appended to, in place.
        weight: (dim, width). bias: (dim,) or None. activation: None, "silu" or "swish".
        cache_seqlens: (batch,) int, or None. When given, ``conv_state`` is a circular buffer: row b
            holds its inputs at positions ``(cache_seqlens[b] + j) % state_len``, oldest (j = 0) first;
            the new inputs are written from index ``cache_seqlens[b] % state_len`` on (the caller
            advances cache_seqlens afterwards).
        conv_state_indices: (batch,) int, the rows of ``conv_state`` to use (continuous batching). A
            negative index marks a padded request: its output is 0 and no row of conv_state is read or
            written.

    Returns:
        out with x's shape and dtype.

    Raises:
        TypeError / ValueError: bad types, shapes or activation, naming the argument; an index of
            ``conv_state_indices`` that is not a row of ``conv_state`` (checked in front of every backend
            for CPU tensors, on the PyTorch path for the others: a GPU kernel's path is not synchronised
            for it).
    """
    check_activation(activation)
    check_x_weight("causal_conv1d_update", x, weight, bias, x_dims=(2, 3))
    check_update_args(x, conv_state, weight, cache_seqlens, conv_state_indices)
    out: Tensor = _dispatch.call(
        "causal_conv1d_update", x, conv_state, weight, bias, activation, cache_seqlens, conv_state_indices
    )
    return out


def causal_conv1d_varlen_states(x: Tensor, cu_seqlens: Tensor, state_len: int) -> Tensor:
    """The conv states at the end of each of several packed sequences: what :func:`causal_conv1d_update`
    continues from after a ``cu_seqlens`` prefill.

    Args:
        x: (total_tokens, dim), the conv inputs of the sequences, one after another.
        cu_seqlens: (num_seqs + 1,) int cumulative lengths: 0 first, non-decreasing, at most
            total_tokens last (the rows after it are padding, read by no state; the rule of
            :mod:`mamba_ssm._families.packing`).
        state_len: inputs per state (Mamba-2 keeps d_conv).

    Returns:
        (num_seqs, dim, state_len) in x's dtype: each sequence's last ``state_len`` inputs, oldest
        first, zero on the left where the sequence is shorter (all zero for an empty sequence).

    Raises:
        ValueError: x not 2-D, cu_seqlens breaking that rule, state_len < 1.
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(
            f"causal_conv1d_varlen_states: x must be (total_tokens, dim), got "
            f"{tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__}"
        )
    if not isinstance(state_len, int) or state_len < 1:
        raise ValueError(f"causal_conv1d_varlen_states: state_len must be a positive int, got {state_len!r}")
    check_cu_seqlens("causal_conv1d_varlen_states", cu_seqlens, x.shape[0])
    out: Tensor = _dispatch.call("causal_conv1d_varlen_states", x, cu_seqlens, state_len)
    return out
