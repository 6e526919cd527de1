"""Causal depthwise conv1d (the short convolution in front of Mamba's selective scan).

``out[b, d, t] = act(bias[d] + sum_k weight[d, k] * x[b, d, t - (width - 1) + k])`` with x = 0 (or
``initial_states``) before the start: the convolution of Mamba (arXiv:2312.00752, Figure 3, "Conv").

Which implementation runs (:func:`implementation` says, and ``python -m mamba_ssm doctor`` reports it):

* ``compiled``: the kernels of ``mamba_ssm._C`` (CPU, CUDA, ROCm; :mod:`mamba_ssm.ops.backends.compiled_conv1d`)
  when the backend asked for (``MAMBA_SSM_BACKEND`` / ``mamba_ssm.set_backend``) is ``auto`` or
  ``compiled`` and they can run there. Preferred over the ``causal_conv1d`` package.
* ``causal-conv1d``: the ``causal_conv1d`` package's CUDA kernels, for CUDA tensors when that package
  imports and either ``MAMBA_SSM_CONV1D=causal_conv1d`` asks for it or (``auto``) the compiled kernels
  cannot run there.
* ``torch``: the PyTorch implementation below (also what ``torch`` / ``ref`` ask for, and float64).

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

import torch
import torch.nn.functional as F

from mamba_ssm.ops.backends._packing import check_cu_seqlens, check_rows

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

_ACTIVATIONS = (None, "silu", "swish")


def external_package():
    """``(causal_conv1d_fn, causal_conv1d_update)`` of the ``causal_conv1d`` package, or None."""
    if _dispatch is None:
        return None
    return _dispatch.causal_conv1d_package()


#: What :func:`implementation` answers (the dispatch's backend names).
COMPILED, PACKAGE, TORCH = "compiled", "causal-conv1d", "torch"
#: Set to ``causal_conv1d`` to prefer the causal-conv1d package's kernels on CUDA over mamba_ssm._C's.
ENV_CONV1D = "MAMBA_SSM_CONV1D"


def conv1d_preference() -> str:
    """``MAMBA_SSM_CONV1D``: ``"auto"`` (default: mamba_ssm._C's kernels first) or ``"causal_conv1d"``.

    Raises:
        ValueError: the variable holds another value (the message names it and the choices).
    """
    from mamba_ssm._dispatch.config import conv1d_preference as preference

    return str(preference())


def implementation(device) -> str:
    """Which implementation the causal conv1d ops run for inputs on ``device`` (a torch.device or a
    device string): ``"compiled"``, ``"causal-conv1d"`` or ``"torch"`` (see the module docstring).
    A call the compiled kernels cannot take (float64, width > 4) still runs on PyTorch.

    Raises:
        ValueError: ``MAMBA_SSM_BACKEND`` or ``MAMBA_SSM_CONV1D`` holds a value that is not a choice.
    """
    return explain(device)[0]


def explain(device):
    """``(implementation, reason)``: :func:`implementation`'s answer and why, in one sentence (the
    dispatch's choice for ``causal_conv1d``; a forced backend that cannot run reports ``torch``, and its
    calls raise)."""
    if _dispatch is None:
        return TORCH, "mamba_ssm's dispatcher is missing (a partial install)"
    choice = _dispatch.plan("causal_conv1d", device)
    return str(choice.backend or TORCH), choice.reason or f"the {choice.requested} backend was asked for"


try:
    from mamba_ssm import _dispatch
except ImportError:  # a partial install without the dispatcher: the PyTorch implementation only
    _dispatch = None


def _route(op, x, weight, *others):
    """``(kernels, package)``: the compiled_conv1d module when this call runs on mamba_ssm._C's kernels,
    or the causal-conv1d package's functions when it runs on them, else ``(None, None)``: the PyTorch
    code (after the dispatch's warning, or its error when the compiled backend was forced and cannot
    run). ``weight`` and ``others`` go to ``compiled_conv1d.supports`` (``weight=None``: the varlen
    copy, ``supports_varlen(x, *others)``)."""
    if _dispatch is None:
        return None, None
    backend = _dispatch.backend_for(op, x.device)
    if backend == PACKAGE:
        return None, _dispatch.causal_conv1d_package()
    if backend != COMPILED:
        return None, None
    from mamba_ssm.ops.backends import compiled_conv1d  # imported by the dispatch

    why = (
        compiled_conv1d.supports(x, weight, *others)
        if weight is not None
        else compiled_conv1d.supports_varlen(x, *others)
    )
    if why is None:
        return compiled_conv1d, None
    _dispatch.fallback_for_call(op, x.device, why)
    return None, None


def _check_activation(activation):
    if activation not in _ACTIVATIONS:
        raise ValueError(
            f"causal_conv1d: activation={activation!r} is not supported; expected None, 'silu' or 'swish'"
        )


def _cdtype(*xs):
    return torch.float64 if any(x is not None and x.dtype == torch.float64 for x in xs) else torch.float32


_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_float(name, arg, t, optional=False):
    """TypeError naming ``arg`` unless ``t`` is a real float tensor (or None when ``optional``)."""
    if t is None and optional:
        return
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: {arg} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in _FLOATS:
        raise TypeError(
            f"{name}: {arg} has dtype {t.dtype}; expected float16, bfloat16, float32 or float64 "
            f"(cast it with {arg}.float())"
        )


def _check_int(name, arg, t):
    """TypeError naming ``arg`` unless ``t`` is an integer tensor (or None)."""
    if t is not None and (
        not isinstance(t, torch.Tensor) or t.is_floating_point() or t.is_complex() or t.dtype == torch.bool
    ):
        got = t.dtype if isinstance(t, torch.Tensor) else type(t).__name__
        raise TypeError(f"{name}: {arg} must be an integer tensor (e.g. torch.int32), got {got}")


def _check_x_weight(name, x, weight, bias, x_dims=(3,)):
    """The checks of x, weight and bias shared by every backend (TypeError / ValueError naming the
    argument): real float tensors, x of rank ``x_dims`` with dim = weight's channels, weight (dim, width),
    bias (dim,)."""
    _check_float(name, "x", x)
    _check_float(name, "weight", weight)
    _check_float(name, "bias", bias, optional=True)
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


def _check_conv_extras(x, weight, seq_idx, initial_states, final_states_out=None):
    """The checks of seq_idx / initial_states / final_states_out (TypeError / ValueError naming the
    argument), in front of every backend."""
    fn = "causal_conv1d_fn"
    _check_int(fn, "seq_idx", seq_idx)
    _check_float(fn, "initial_states", initial_states, optional=True)
    _check_float(fn, "final_states_out", final_states_out, optional=True)
    batch, dim, seqlen = x.shape
    width = weight.shape[1]
    for arg, t in (("initial_states", initial_states), ("final_states_out", final_states_out)):
        if t is not None and tuple(t.shape) != (batch, dim, width - 1):
            raise ValueError(
                f"{fn}: {arg} must have shape ({batch}, {dim}, {width - 1}), got {tuple(t.shape)}"
            )
    if seq_idx is not None and tuple(seq_idx.shape) != (batch, seqlen):
        raise ValueError(f"{fn}: seq_idx must have shape ({batch}, {seqlen}), got {tuple(seq_idx.shape)}")


def causal_conv1d_fn(
    x,
    weight,
    bias=None,
    seq_idx=None,
    initial_states=None,
    return_final_states=False,
    final_states_out=None,
    activation=None,
):
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
    _check_activation(activation)
    _check_x_weight("causal_conv1d_fn", x, weight, bias)
    _check_conv_extras(x, weight, seq_idx, initial_states, final_states_out)
    kernels, ext = _route("causal_conv1d", x, weight, bias, seq_idx, initial_states)
    if kernels is not None:
        out, final = kernels.conv1d(x, weight, bias, seq_idx, initial_states, activation is not None)
        if not return_final_states:
            return out
        if final_states_out is not None:
            final_states_out.copy_(final)
            final = final_states_out
        return out, final
    # (the package refuses seq_idx together with initial or final states: those calls run here)
    if seq_idx is not None and (initial_states is not None or return_final_states):
        ext = None
    if ext is not None:
        kwargs = {}
        if seq_idx is not None:
            kwargs["seq_idx"] = seq_idx
        if initial_states is not None or return_final_states:
            kwargs.update(
                initial_states=initial_states,
                return_final_states=return_final_states,
                final_states_out=final_states_out,
            )
        return ext[0](x, weight, bias, activation=activation, **kwargs)
    return causal_conv1d_ref(
        x, weight, bias, seq_idx, initial_states, return_final_states, final_states_out, activation
    )


def causal_conv1d_ref(
    x,
    weight,
    bias=None,
    seq_idx=None,
    initial_states=None,
    return_final_states=False,
    final_states_out=None,
    activation=None,
):
    """The PyTorch implementation of :func:`causal_conv1d_fn` (same arguments and results)."""
    _check_activation(activation)
    batch, dim, seqlen = x.shape
    width = weight.shape[1]
    cdtype = _cdtype(x, weight)
    xf = x.to(cdtype)
    if initial_states is not None:
        if tuple(initial_states.shape) != (batch, dim, width - 1):
            raise ValueError(
                f"causal_conv1d_fn: initial_states must have shape ({batch}, {dim}, "
                f"{width - 1}), got {tuple(initial_states.shape)}"
            )
        xpad = torch.cat([initial_states.to(cdtype), xf], dim=-1)
    else:
        xpad = F.pad(xf, (width - 1, 0))
    w = weight.to(cdtype)
    if seq_idx is not None and tuple(seq_idx.shape) != (batch, seqlen):
        raise ValueError(
            f"causal_conv1d_fn: seq_idx must have shape ({batch}, {seqlen}), got {tuple(seq_idx.shape)}"
        )
    sid = None
    if seqlen == 0:  # no output positions (F.conv1d refuses an input shorter than the kernel)
        out = xpad.new_zeros(batch, dim, 0)
    elif seq_idx is None:
        out = F.conv1d(xpad, w.unsqueeze(1), None, groups=dim)
    else:
        sid = torch.cat([seq_idx[:, :1].expand(batch, width - 1), seq_idx], dim=-1)  # q(s), s >= -(W-1)
        windows = xpad.unfold(-1, width, 1)  # (b, d, l, w)
        same = sid.unfold(-1, width, 1) == seq_idx.unsqueeze(-1)  # (b, l, w)
        out = torch.einsum("bdlw,dw->bdl", windows * same.unsqueeze(1).to(cdtype), w)
    if bias is not None:
        out = out + bias.to(cdtype).unsqueeze(-1)
    if activation is not None:
        out = F.silu(out)
    if sid is not None:  # padding outputs 0
        out = torch.where((seq_idx >= 0).unsqueeze(1), out, out.new_zeros(()))
    out = out.to(x.dtype)
    if not return_final_states:
        return out
    final = xpad[..., xpad.shape[-1] - (width - 1) :]
    if sid is not None:  # the inputs of the row's last sequence (none when it ends in padding)
        last = seq_idx[:, -1:]
        keep = (sid[:, sid.shape[-1] - (width - 1) :] == last) & (last >= 0)
        final = final * keep.unsqueeze(1).to(cdtype)
    final = final.to(x.dtype)
    if final_states_out is not None:
        final_states_out.copy_(final)
        final = final_states_out
    return out, final


def _check_update_args(x, conv_state, weight, cache_seqlens, conv_state_indices):
    """causal_conv1d_update's checks (TypeError / ValueError naming the argument), before any backend
    runs."""
    fn = "causal_conv1d_update"
    _check_float(fn, "conv_state", conv_state)
    _check_int(fn, "cache_seqlens", cache_seqlens)
    _check_int(fn, "conv_state_indices", conv_state_indices)
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


def causal_conv1d_update(
    x, conv_state, weight, bias=None, activation=None, cache_seqlens=None, conv_state_indices=None
):
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
    _check_activation(activation)
    _check_x_weight("causal_conv1d_update", x, weight, bias, x_dims=(2, 3))
    _check_update_args(x, conv_state, weight, cache_seqlens, conv_state_indices)
    kernels, package = _route(
        "causal_conv1d_update", x, weight, conv_state, bias, cache_seqlens, conv_state_indices
    )
    if kernels is not None:  # (the kernels take x of (batch, dim) as one step)
        return kernels.update(
            x, conv_state, weight, bias, activation is not None, cache_seqlens, conv_state_indices
        )
    squeeze = x.dim() == 2
    xs = x.unsqueeze(-1) if squeeze else x
    padded = conv_state_indices is not None and bool((conv_state_indices < 0).any())
    ext = None if padded else package
    if ext is not None:
        kwargs = {}
        if cache_seqlens is not None:
            kwargs["cache_seqlens"] = cache_seqlens
        if conv_state_indices is not None:
            kwargs["conv_state_indices"] = conv_state_indices
        return ext[1](x, conv_state, weight, bias, activation, **kwargs)
    batch, dim, seqlen = xs.shape
    width = weight.shape[1]
    state_len = conv_state.shape[2]
    valid = None
    if conv_state_indices is None:
        state = conv_state
    else:
        if conv_state_indices.device.type != "cpu":  # (checked in front for CPU tensors)
            check_rows("causal_conv1d_update", "conv_state_indices", conv_state_indices, conv_state.shape[0])
        valid = conv_state_indices >= 0
        state = conv_state[conv_state_indices.clamp(min=0).long()]
    cdtype = _cdtype(x, weight)
    if cache_seqlens is None:
        ordered = state.to(cdtype)
    else:
        start = cache_seqlens.long().remainder(state_len)
        order = (start[:, None] + torch.arange(state_len, device=x.device)).remainder(state_len)
        ordered = state.to(cdtype).gather(-1, order[:, None, :].expand(batch, dim, state_len))
    full = torch.cat([ordered, xs.to(cdtype)], dim=-1)
    window = full[..., full.shape[-1] - (seqlen + width - 1) :]
    # A few positions: multiply-add over the window (F.conv1d's setup costs far more at this size).
    out = torch.einsum("bdlw,dw->bdl", window.unfold(-1, width, 1), weight.to(cdtype))
    if bias is not None:
        out = out + bias.to(cdtype).unsqueeze(-1)
    if activation is not None:
        out = F.silu(out)
    if cache_seqlens is None:
        new_state = full[..., full.shape[-1] - state_len :].to(conv_state.dtype)
    else:  # write the new inputs at their circular positions, in order (later ones win)
        new_state = state.clone()
        for t in range(seqlen):
            pos = (start + t).remainder(state_len)[:, None, None].expand(batch, dim, 1)
            new_state.scatter_(-1, pos, xs[..., t : t + 1].to(conv_state.dtype))
    if conv_state_indices is None:
        conv_state.copy_(new_state)
    else:
        conv_state[conv_state_indices[valid].long()] = new_state[valid]
        out = torch.where(valid.view(batch, 1, 1), out, out.new_zeros(()))
    out = out.to(x.dtype)
    return out.squeeze(-1) if squeeze else out


def causal_conv1d_varlen_states(x, cu_seqlens, state_len):
    """The conv states at the end of each of several packed sequences: what :func:`causal_conv1d_update`
    continues from after a ``cu_seqlens`` prefill.

    Args:
        x: (total_tokens, dim), the conv inputs of the sequences, one after another.
        cu_seqlens: (num_seqs + 1,) int cumulative lengths: 0 first, non-decreasing, at most
            total_tokens last (the rows after it are padding, read by no state; the rule of
            :mod:`mamba_ssm.ops.backends._packing`).
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
    cu = check_cu_seqlens("causal_conv1d_varlen_states", cu_seqlens, x.shape[0])
    kernels, _ = _route("causal_conv1d", x, None, cu_seqlens)
    if kernels is not None:
        return kernels.varlen_states(x, cu_seqlens, state_len)
    starts, ends = cu[:-1], cu[1:]
    pos = ends[:, None] - state_len + torch.arange(state_len, device=x.device)  # (num_seqs, state_len)
    inside = pos >= starts[:, None]
    picked = torch.where(
        inside[..., None], x[pos.clamp(min=0)], x.new_zeros(())
    )  # (num_seqs, state_len, dim)
    return picked.transpose(1, 2)
