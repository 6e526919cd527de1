"""The PyTorch implementation of the causal conv1d ops (every device, every dtype): the conv, the
decode update and the varlen states, with the packing rule of the module docstring of
:mod:`mamba_ssm.ops.causal_conv1d`. Computation in float32 (float64 for float64 inputs)."""

from __future__ import annotations

from typing import Literal, overload

import torch
import torch.nn.functional as F
from torch import Tensor

from mamba_ssm._families.causal_conv1d.checks import check_activation
from mamba_ssm._families.packing import check_cu_seqlens, check_rows

__all__ = ["causal_conv1d_ref", "causal_conv1d_update", "causal_conv1d_varlen_states"]


def _cdtype(*xs: Tensor | None) -> torch.dtype:
    return torch.float64 if any(x is not None and x.dtype == torch.float64 for x in xs) else torch.float32


@overload
def causal_conv1d_ref(
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
def causal_conv1d_ref(
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
def causal_conv1d_ref(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    seq_idx: Tensor | None = None,
    initial_states: Tensor | None = None,
    return_final_states: bool = False,
    final_states_out: Tensor | None = None,
    activation: str | None = None,
) -> Tensor | tuple[Tensor, Tensor]: ...


def causal_conv1d_ref(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    seq_idx: Tensor | None = None,
    initial_states: Tensor | None = None,
    return_final_states: bool = False,
    final_states_out: Tensor | None = None,
    activation: str | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """The PyTorch implementation of :func:`causal_conv1d_fn` (same arguments and results)."""
    check_activation(activation)
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
    if sid is not None and seq_idx is not None:  # padding outputs 0
        out = torch.where((seq_idx >= 0).unsqueeze(1), out, out.new_zeros(()))
    out = out.to(x.dtype)
    if not return_final_states:
        return out
    final = xpad[..., xpad.shape[-1] - (width - 1) :]
    if sid is not None and seq_idx is not None:  # the inputs of the row's last sequence (none: padding)
        last = seq_idx[:, -1:]
        keep = (sid[:, sid.shape[-1] - (width - 1) :] == last) & (last >= 0)
        final = final * keep.unsqueeze(1).to(cdtype)
    final = final.to(x.dtype)
    if final_states_out is not None:
        final_states_out.copy_(final)
        final = final_states_out
    return out, final


def causal_conv1d_update(
    x: Tensor,
    conv_state: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    activation: str | None = None,
    cache_seqlens: Tensor | None = None,
    conv_state_indices: Tensor | None = None,
) -> Tensor:
    """The PyTorch implementation of :func:`mamba_ssm.ops.causal_conv1d.causal_conv1d_update` (same
    arguments, results and in-place update of ``conv_state``)."""
    squeeze = x.dim() == 2
    xs = x.unsqueeze(-1) if squeeze else x
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
    elif valid is not None:
        conv_state[conv_state_indices[valid].long()] = new_state[valid]
        out = torch.where(valid.view(batch, 1, 1), out, out.new_zeros(()))
    out = out.to(x.dtype)
    return out.squeeze(-1) if squeeze else out


def causal_conv1d_varlen_states(x: Tensor, cu_seqlens: Tensor, state_len: int) -> Tensor:
    """The PyTorch implementation of :func:`mamba_ssm.ops.causal_conv1d.causal_conv1d_varlen_states`."""
    cu = check_cu_seqlens("causal_conv1d_varlen_states", cu_seqlens, x.shape[0])
    starts, ends = cu[:-1], cu[1:]
    pos = ends[:, None] - state_len + torch.arange(state_len, device=x.device)  # (num_seqs, state_len)
    inside = pos >= starts[:, None]
    picked = torch.where(
        inside[..., None], x[pos.clamp(min=0)], x.new_zeros(())
    )  # (num_seqs, state_len, dim)
    return picked.transpose(1, 2)
