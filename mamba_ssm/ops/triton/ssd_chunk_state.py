"""Upstream's ``mamba_ssm.ops.triton.ssd_chunk_state``: SSD stages 1 and 2 (Dao & Gu, arXiv:2405.21060,
section 6), entry points into this package's SSD: the Triton kernels of
:mod:`mamba_ssm._families.ssd.triton_kernels` on CUDA/ROCm devices with triton (float32/float16/bfloat16,
chunk_size a power of two in 16..256), the PyTorch stages of :mod:`mamba_ssm._families.ssd.torch_impl`
elsewhere (any chunk_size, float64 too).

    dt'_t      = clamp(softplus(dt_t + dt_bias), dt_limit)          (0 past seqlen)
    dA_cumsum  = in-chunk cumulative sum of dt' * A                  (batch, nheads, nchunks, chunk_size)
    S_c        = sum_{j in chunk c} exp(cs_end - cs_j) dt'_j x_j B_j^T  (batch, nchunks, nheads, headdim, dstate)

With ``seq_idx`` a chunk's state holds only the inputs of its last sequence (nothing when that is padding,
seq_idx < 0). The backward pieces (``_chunk_cumsum_bwd``, ``_chunk_state_bwd_*``) are the gradients of
these expressions (through autograd of the PyTorch stages). ``chunk_state`` / ``ChunkStateFn`` are
differentiable in B, x, dt and dA_cumsum; ``chunk_state_varlen`` gives each packed sequence's last state.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

import torch

from mamba_ssm import _dispatch
from mamba_ssm._families import packing as _packing
from mamba_ssm._families import recompute as _recompute
from mamba_ssm._families.ssd import torch_impl as S
from mamba_ssm._families.ssd.autograd import f32 as _f32
from mamba_ssm._families.ssd.autograd import grads as _grads
from mamba_ssm._families.ssd.autograd import or_zeros as _or_zeros
from mamba_ssm.ops.triton._helpers import init_to_zero, require

__all__ = [
    "ChunkStateFn",
    "_chunk_cumsum_bwd",
    "_chunk_cumsum_fwd",
    "_chunk_state_bwd_db",
    "_chunk_state_bwd_ddAcs_stable",
    "_chunk_state_bwd_dx",
    "_chunk_state_fwd",
    "chunk_state",
    "chunk_state_ref",
    "chunk_state_varlen",
    "init_to_zero",
]


def _check_dt(fn: str, dt: torch.Tensor, A: torch.Tensor, dt_bias: Optional[torch.Tensor]) -> None:
    require(fn, "dt", dt, (None, None, None))
    nheads = dt.shape[2]
    require(fn, "A", A, (nheads,))
    if dt_bias is not None:
        require(fn, "dt_bias", dt_bias, (nheads,))


def _check_state_args(
    fn: str,
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    seq_idx: Optional[torch.Tensor] = None,
) -> tuple[int, int, int, int, int, int, int, int]:
    """(batch, seqlen, nheads, headdim, ngroups, dstate, nchunks, chunk_size) after the shape checks."""
    require(fn, "x", x, (None, None, None, None))
    batch, seqlen, nheads, headdim = x.shape
    require(fn, "B", B, (batch, seqlen, None, None))
    ngroups, dstate = B.shape[2], B.shape[3]
    if nheads % ngroups:
        raise ValueError(f"{fn}: B's ngroups {ngroups} must divide x's nheads {nheads}")
    require(fn, "dt", dt, (batch, nheads, None, None))
    nchunks, chunk_size = dt.shape[2], dt.shape[3]
    if nchunks * chunk_size < seqlen or (nchunks - 1) * chunk_size >= max(seqlen, 1):
        raise ValueError(
            f"{fn}: dt's (nchunks, chunk_size) = ({nchunks}, {chunk_size}) do not cover seqlen {seqlen} in "
            f"whole chunks; use _chunk_cumsum_fwd's outputs"
        )
    require(fn, "dA_cumsum", dA_cumsum, tuple(dt.shape))
    if seq_idx is not None:
        require(fn, "seq_idx", seq_idx, (batch, seqlen))
    return batch, seqlen, nheads, headdim, ngroups, dstate, nchunks, chunk_size


def _chunk_cumsum_fwd(
    dt: torch.Tensor,
    A: torch.Tensor,
    chunk_size: int,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 1: the processed step and its in-chunk cumulative sum times A.

    Args:
        dt: (batch, seqlen, nheads) float. A: (nheads,) float32. chunk_size: positions per chunk.
        dt_bias: (nheads,) or None. dt_softplus: softplus on dt + dt_bias (upstream's threshold 20).
        dt_limit: (min, max) clamp of the processed step; (0, inf) means none.

    Returns:
        (dA_cumsum, dt_out), each (batch, nheads, nchunks, chunk_size) float32 (float64 for float64
        inputs); dt_out is 0 past seqlen, where dA_cumsum stays at the last position's value.

    Raises:
        TypeError / ValueError: shapes that disagree (naming the argument), chunk_size < 1.
    """
    _check_dt("_chunk_cumsum_fwd", dt, A, dt_bias)
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"_chunk_cumsum_fwd: chunk_size must be a positive int, got {chunk_size!r}")
    result: tuple[torch.Tensor, torch.Tensor] = _dispatch.call(
        "ssd_chunk_cumsum", dt, A, chunk_size, dt_bias, dt_softplus, dt_limit
    )
    return result


def _chunk_cumsum_bwd(
    ddA: torch.Tensor,
    ddt_out: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: tuple[float, float] = (0.0, float("inf")),
    ddt: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """The gradients of stage 1 given ``ddA`` (of the per-position ``dt_out * A``, before the cumulative
    sum) and ``ddt_out`` (of dt_out), both (batch, nheads, nchunks, chunk_size).

    Returns:
        (ddt (batch, seqlen, nheads) in dt's dtype (written into ``ddt`` when given), dA (nheads,)
        float32, ddt_bias (nheads,) float32 or None).
    """
    _check_dt("_chunk_cumsum_bwd", dt, A, dt_bias)
    chunk_size = ddA.shape[-1]
    require("_chunk_cumsum_bwd", "ddA", ddA, (dt.shape[0], dt.shape[2], None, chunk_size))
    require("_chunk_cumsum_bwd", "ddt_out", ddt_out, tuple(ddA.shape))

    def per_step(
        dt_: torch.Tensor, A_: torch.Tensor, bias_: Optional[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        _, d = S.chunk_cumsum(dt_, A_, chunk_size, bias_, dt_softplus, dt_limit)
        return d * A_.view(1, -1, 1, 1), d

    wrt = [0, 1] + ([2] if dt_bias is not None else [])
    got = _grads(per_step, (dt, A, dt_bias), wrt, (ddA, ddt_out))
    g_dt = got[0] if got[0] is not None else torch.zeros_like(dt, dtype=torch.float32)
    g_A = got[1] if got[1] is not None else torch.zeros_like(A, dtype=torch.float32)
    if ddt is not None:
        ddt.copy_(g_dt)
    else:
        ddt = g_dt.to(dt.dtype)
    dA = _f32(g_A)
    ddt_bias: Optional[torch.Tensor] = None
    if dt_bias is not None:
        ddt_bias = _f32(got[2] if got[2] is not None else torch.zeros_like(dt_bias, dtype=torch.float32))
    return ddt, dA, ddt_bias


def _chunk_state_fwd(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    seq_idx: Optional[torch.Tensor] = None,
    states: Optional[torch.Tensor] = None,
    states_in_fp32: bool = True,
) -> torch.Tensor:
    """Stage 2: each chunk's end state from its own inputs.

    Args:
        B: (batch, seqlen, ngroups, dstate). x: (batch, seqlen, nheads, headdim). dt, dA_cumsum: (batch,
        nheads, nchunks, chunk_size) from :func:`_chunk_cumsum_fwd`. seq_idx: (batch, seqlen) or None.
        states: an output tensor (batch, nchunks, nheads, headdim, dstate) to write into, or None.
        states_in_fp32: float32 states (else x's dtype).

    Returns:
        states (batch, nchunks, nheads, headdim, dstate): float32 (float64 for float64 inputs) with
        ``states_in_fp32``, else x's dtype (``states`` itself when given).
    """
    batch, _, nheads, headdim, _, dstate, nchunks, _ = _check_state_args(
        "_chunk_state_fwd", B, x, dt, dA_cumsum, seq_idx
    )
    result: torch.Tensor = _dispatch.call("ssd_chunk_state", x, B, dt, dA_cumsum, seq_idx)
    if not states_in_fp32:
        result = result.to(x.dtype)
    elif result.dtype != torch.float64:
        result = result.float()
    if states is not None:
        require("_chunk_state_fwd", "states", states, (batch, nchunks, nheads, headdim, dstate))
        states.copy_(result)
        return states
    return result


def _state_grads(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    dstates: torch.Tensor,
    seq_idx: Optional[torch.Tensor],
    wrt: Sequence[int],
) -> tuple[Optional[torch.Tensor], ...]:
    """The gradients of stage 2's states (weighted by dstates) with respect to (B, x, dt, dA_cumsum)[wrt]."""
    require(
        "_chunk_state_bwd", "dstates", dstates, (x.shape[0], dt.shape[2], x.shape[2], x.shape[3], B.shape[3])
    )
    return _grads(
        lambda B_, x_, dt_, cs_: S.chunk_state(B_, x_, dt_, cs_, seq_idx),
        (B, x, dt, dA_cumsum),
        wrt,
        (dstates,),
    )


def _chunk_state_bwd_dx(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    dstates: torch.Tensor,
    dx: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of stage 2 given dstates (batch, nchunks, nheads, headdim, dstate).

    Returns:
        (dx in x's dtype (written into ``dx`` when given), ddt, ddA_cumsum (batch, nheads, nchunks,
        chunk_size) float32 (float64 for float64 inputs))."""
    _check_state_args("_chunk_state_bwd_dx", B, x, dt, dA_cumsum)
    got = _state_grads(B, x, dt, dA_cumsum, dstates, None, [1, 2, 3])
    g_x, g_dt, g_cs = _or_zeros(got[0], x), _or_zeros(got[1], dt), _or_zeros(got[2], dA_cumsum)
    if dx is not None:
        dx.copy_(g_x)
    else:
        dx = g_x.to(x.dtype)
    return dx, _f32(g_dt), _f32(g_cs)


def _chunk_state_bwd_db(
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    dstates: torch.Tensor,
    seq_idx: Optional[torch.Tensor] = None,
    B: Optional[torch.Tensor] = None,
    ngroups: int = 1,
) -> Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """dB (batch, seqlen, ngroups, dstate) float32 of stage 2 given dstates; with ``B`` also the
    gradient of dA_cumsum (batch, nheads, nchunks, chunk_size) float32: ``(dB, ddA_cumsum)``."""
    with_dA = B is not None
    if B is None:  # the gradient with respect to B does not depend on B: any B of the right shape
        B = x.new_zeros(x.shape[0], x.shape[1], ngroups, dstates.shape[-1])
    _check_state_args("_chunk_state_bwd_db", B, x, dt, dA_cumsum, seq_idx)
    got = _state_grads(B, x, dt, dA_cumsum, dstates, seq_idx, [0, 3] if with_dA else [0])
    dB = _f32(_or_zeros(got[0], B))
    return (dB, _f32(_or_zeros(got[1], dA_cumsum))) if with_dA else dB


def _chunk_state_bwd_ddAcs_stable(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    dstates: torch.Tensor,
    seq_idx: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The gradient of dA_cumsum (batch, nheads, nchunks, chunk_size) float32 of stage 2 given dstates."""
    _check_state_args("_chunk_state_bwd_ddAcs_stable", B, x, dt, dA_cumsum, seq_idx)
    return _f32(_or_zeros(_state_grads(B, x, dt, dA_cumsum, dstates, seq_idx, [3])[0], dA_cumsum))


def chunk_state_varlen(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    cu_seqlens: torch.Tensor,
    chunk_states: torch.Tensor,
) -> torch.Tensor:
    """Each packed sequence's state after its last token (batch 1, no batch axis).

    Args:
        B: (total, ngroups, dstate). x: (total, nheads, headdim). dt, dA_cumsum: (nheads, nchunks,
        chunk_size) (stage 1 of the packed row). cu_seqlens: (num_seqs + 1,) cumulative lengths (the rule
        of :mod:`mamba_ssm._families.packing`: its last entry may be below total, the rest being padding; an
        empty sequence gets a zero state). chunk_states: (nchunks, nheads, headdim, dstate), the states
        entering the chunks (``_state_passing_fwd`` of the row with the matching seq_idx).

    Returns:
        (num_seqs, nheads, headdim, dstate) in chunk_states' dtype.
    """
    fn = "chunk_state_varlen"
    require(fn, "x", x, (None, None, None))
    total, nheads, headdim = x.shape
    require(fn, "B", B, (total, None, None))
    require(fn, "dt", dt, (nheads, None, None))
    require(fn, "dA_cumsum", dA_cumsum, tuple(dt.shape))
    nchunks = dt.shape[1]
    require(fn, "chunk_states", chunk_states, (nchunks, nheads, headdim, B.shape[2]))
    cu = _packing.check_cu_seqlens(fn, cu_seqlens, total).to(x.device)
    seq_idx = _packing.seq_idx_from_cu_seqlens(cu, total, fn).to(x.device)
    out: torch.Tensor = _dispatch.call(
        "ssd_chunk_state_varlen", x, B, dt, dA_cumsum, chunk_states, cu, seq_idx
    )
    return out.to(chunk_states.dtype)


def _chunk_state_autograd(
    B: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, dA_cumsum: torch.Tensor, states_in_fp32: bool = True
) -> torch.Tensor:
    """The forward of :class:`ChunkStateFn` (the routed stage) and, with grad enabled (the backward's
    recomputation), the differentiable PyTorch stage."""
    if torch.is_grad_enabled():
        return S.chunk_state(B, x, dt, dA_cumsum)
    return _chunk_state_fwd(B, x, dt, dA_cumsum, states_in_fp32=states_in_fp32)


class ChunkStateFn(torch.autograd.Function):
    """Stage 2 as an autograd Function (differentiable in B, x, dt, dA_cumsum)."""

    @staticmethod
    def forward(
        ctx: Any,
        B: torch.Tensor,
        x: torch.Tensor,
        dt: torch.Tensor,
        dA_cumsum: torch.Tensor,
        states_in_fp32: bool = True,
    ) -> torch.Tensor:
        out: torch.Tensor = _recompute.forward(
            ctx, _chunk_state_autograd, (B, x, dt, dA_cumsum, states_in_fp32)
        )
        return out

    @staticmethod
    def backward(ctx: Any, dstates: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:
        return _recompute.backward(ctx, dstates)


def chunk_state(
    B: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, dA_cumsum: torch.Tensor, states_in_fp32: bool = True
) -> torch.Tensor:
    """:func:`_chunk_state_fwd` without seq_idx, differentiable (:class:`ChunkStateFn`): the same
    arguments (B, x, dt, dA_cumsum) and states (batch, nchunks, nheads, headdim, dstate)."""
    out: torch.Tensor = ChunkStateFn.apply(B, x, dt, dA_cumsum, states_in_fp32)
    return out


def chunk_state_ref(
    B: torch.Tensor, x: torch.Tensor, dt: torch.Tensor, dA_cumsum: torch.Tensor
) -> torch.Tensor:
    """Stage 2 in plain PyTorch (the PyTorch stage), in x's dtype: (batch, nchunks, nheads, headdim,
    dstate)."""
    _check_state_args("chunk_state_ref", B, x, dt, dA_cumsum)
    return S.chunk_state(B, x, dt, dA_cumsum).to(x.dtype)
