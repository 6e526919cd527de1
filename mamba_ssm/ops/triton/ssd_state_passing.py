"""Upstream's ``mamba_ssm.ops.triton.ssd_state_passing``: SSD stage 3 (Dao & Gu, arXiv:2405.21060,
section 6), the recurrence across chunks, as an entry point into this package's SSD (the Triton kernel of
:mod:`mamba_ssm._families.ssd.triton_kernels` on CUDA/ROCm devices with triton, the PyTorch stage of
:mod:`mamba_ssm._families.ssd.torch_impl` elsewhere):

    H_0 = initial_states (or 0),   H_{c+1} = exp(dA_chunk_cumsum[c]) H_c + S_c,   final = H_nchunks

where S_c is chunk c's own end state (stage 2) and dA_chunk_cumsum[c] the last in-chunk cumulative sum of
dt' A. With ``seq_idx`` (and ``chunk_size`` to find the chunk edges in it) H_c is carried through chunk c
only when the chunk ends in the sequence H_c belongs to, which is not padding (seq_idx < 0).
"""

from __future__ import annotations

from typing import Any, Optional, Union

import torch

from mamba_ssm import _dispatch
from mamba_ssm._families import recompute as _recompute
from mamba_ssm._families.ssd import torch_impl as S
from mamba_ssm._families.ssd.calls import carry as _carry
from mamba_ssm.ops.triton._helpers import require

__all__ = ["StatePassingFn", "_state_passing_bwd", "_state_passing_fwd", "state_passing", "state_passing_ref"]


def _check(
    fn: str,
    states: torch.Tensor,
    dA_chunk_cumsum: torch.Tensor,
    initial_states: Optional[torch.Tensor],
    seq_idx: Optional[torch.Tensor],
    chunk_size: Optional[int],
) -> None:
    require(fn, "states", states, (None, None, None, None))
    batch, nchunks, nheads, dim = states.shape
    require(fn, "dA_chunk_cumsum", dA_chunk_cumsum, (batch, nheads, nchunks))
    if initial_states is not None:
        require(fn, "initial_states", initial_states, (batch, nheads, dim))
    if seq_idx is not None:
        if not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"{fn}: seq_idx needs chunk_size (the chunk edges in it), got {chunk_size!r}")
        require(fn, "seq_idx", seq_idx, (batch, None))
        if not (nchunks - 1) * chunk_size < seq_idx.shape[1] <= nchunks * chunk_size:
            raise ValueError(
                f"{fn}: seq_idx's {seq_idx.shape[1]} positions are not {nchunks} chunks of {chunk_size}"
            )


def _state_passing_fwd(
    states: torch.Tensor,
    dA_chunk_cumsum: torch.Tensor,
    initial_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    chunk_size: Optional[int] = None,
    out_dtype: Optional[torch.dtype] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 3.

    Args:
        states: (batch, nchunks, nheads, dim) each chunk's own end state (dim = headdim * dstate
            flattened). dA_chunk_cumsum: (batch, nheads, nchunks). initial_states: (batch, nheads, dim) or
            None. seq_idx: (batch, seqlen) with chunk_size, or None. out_dtype: of the entering states
            (default states' dtype).

    Returns:
        (out (batch, nchunks, nheads, dim): the state entering each chunk, out[:, 0] = initial_states,
        final_states (batch, nheads, dim) float32 (float64 for float64 states)).
    """
    _check("_state_passing_fwd", states, dA_chunk_cumsum, initial_states, seq_idx, chunk_size)
    result: tuple[torch.Tensor, torch.Tensor] = _dispatch.call(
        "ssd_state_passing",
        states,
        dA_chunk_cumsum,
        initial_states,
        seq_idx,
        chunk_size,
        out_dtype or states.dtype,
    )
    return result


def _state_passing_bwd(
    states: torch.Tensor,
    dA_chunk_cumsum: torch.Tensor,
    dout: torch.Tensor,
    dfinal_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    has_initial_states: Optional[bool] = None,
    dstates_dtype: Optional[torch.dtype] = None,
    states_dtype: Optional[torch.dtype] = None,
    chunk_size: Optional[int] = None,
) -> Union[
    tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]],
    tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor], torch.Tensor],
]:
    """The adjoint of stage 3, from the recurrence: with a_c = exp(dA_chunk_cumsum[c]) (0 where not
    carried) and T_c the total gradient of H_c (T_nchunks = dfinal_states, T_c = dout_c + a_c T_{c+1}):
    dS_c = T_{c+1}, d dA_chunk_cumsum[c] = sum(T_{c+1} * a_c H_c), d initial_states = T_0.

    Args:
        states: (batch, nchunks, nheads, dim) the states entering the chunks (stage 3's ``out``).
        dA_chunk_cumsum: (batch, nheads, nchunks). dout: (batch, nchunks, nheads, dim), the gradient of
        ``out``. dfinal_states: (batch, nheads, dim) or None. seq_idx, chunk_size: as the forward's.
        has_initial_states: also return d initial_states. dstates_dtype: of dstates (default dout's).
        states_dtype: also return ``states`` converted to it.

    Returns:
        (dstates, ddA_chunk_cumsum (batch, nheads, nchunks) float32, dinitstates or None), plus the
        converted states when ``states_dtype`` is given.
    """
    _check("_state_passing_bwd", states, dA_chunk_cumsum, None, seq_idx, chunk_size)
    require("_state_passing_bwd", "dout", dout, tuple(states.shape))
    batch, nchunks, nheads, dim = states.shape
    cd = S.compute_dtype(states, dout, dA_chunk_cumsum)
    decay = torch.exp(dA_chunk_cumsum.to(cd)).permute(0, 2, 1)  # (batch, nchunks, nheads)
    carry = _carry(seq_idx, chunk_size)
    if carry is not None:
        decay = decay * carry.to(cd).unsqueeze(-1)
    total = (
        dfinal_states.to(cd)
        if dfinal_states is not None
        else torch.zeros(batch, nheads, dim, dtype=cd, device=states.device)
    )
    dstates = torch.empty(states.shape, dtype=dstates_dtype or dout.dtype, device=states.device)
    ddA = torch.empty(
        batch, nheads, nchunks, dtype=torch.float32 if cd == torch.float32 else cd, device=states.device
    )
    hin = states.to(cd)
    for c in reversed(range(nchunks)):
        dstates[:, c] = total
        a = decay[:, c].unsqueeze(-1)  # (batch, nheads, 1)
        ddA[:, :, c] = (total * a * hin[:, c]).sum(-1)
        total = dout[:, c].to(cd) + a * total
    dinit = total.to(torch.float32 if cd == torch.float32 else cd) if has_initial_states else None
    if states_dtype is not None:
        return dstates, ddA, dinit, states.to(states_dtype)
    return dstates, ddA, dinit


def _state_passing_autograd(
    states: torch.Tensor, dA_chunk_cumsum: torch.Tensor, initial_states: Optional[torch.Tensor] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:class:`StatePassingFn`'s forward (the routed stage) and, with grad enabled (the backward's
    recomputation), the differentiable PyTorch stage."""
    if torch.is_grad_enabled():
        cd = S.compute_dtype(states, dA_chunk_cumsum)
        return S.state_passing(states.to(cd), dA_chunk_cumsum, initial_states)
    return _state_passing_fwd(states, dA_chunk_cumsum, initial_states)


class StatePassingFn(torch.autograd.Function):
    """Stage 3 as an autograd Function: (out, final_states), differentiable in states, dA_chunk_cumsum
    and initial_states."""

    @staticmethod
    def forward(
        ctx: Any,
        states: torch.Tensor,
        dA_chunk_cumsum: torch.Tensor,
        initial_states: Optional[torch.Tensor] = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        out: tuple[torch.Tensor, torch.Tensor] = _recompute.forward(
            ctx, _state_passing_autograd, (states, dA_chunk_cumsum, initial_states)
        )
        return out

    @staticmethod
    def backward(
        ctx: Any, dout: Optional[torch.Tensor], dfinal_states: Optional[torch.Tensor]
    ) -> tuple[Optional[torch.Tensor], ...]:
        return _recompute.backward(ctx, dout, dfinal_states)


def state_passing(
    states: torch.Tensor, dA_chunk_cumsum: torch.Tensor, initial_states: Optional[torch.Tensor] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_state_passing_fwd` without seq_idx, differentiable (:class:`StatePassingFn`): states
    (batch, nchunks, nheads, dim), dA_chunk_cumsum (batch, nheads, nchunks), initial_states (batch,
    nheads, dim) or None -> (out (batch, nchunks, nheads, dim), final_states (batch, nheads, dim))."""
    out: tuple[torch.Tensor, torch.Tensor] = StatePassingFn.apply(states, dA_chunk_cumsum, initial_states)
    return out


def state_passing_ref(
    states: torch.Tensor, dA_chunk_cumsum: torch.Tensor, initial_states: Optional[torch.Tensor] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 3 in plain PyTorch: (out (batch, nchunks, nheads, dim), final_states (batch, nheads, dim))
    in states' dtype."""
    _check("state_passing_ref", states, dA_chunk_cumsum, initial_states, None, None)
    cd = S.compute_dtype(states, dA_chunk_cumsum)
    out, final = S.state_passing(states.to(cd), dA_chunk_cumsum, initial_states)
    return out.to(states.dtype), final.to(states.dtype)
