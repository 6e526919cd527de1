"""Mamba-2's state space duality (SSD) scan with upstream's import path
``mamba_ssm.ops.triton.ssd_combined`` (transformers imports these names when mamba-ssm >= 2.0.4).

Math (Dao & Gu, arXiv:2405.21060, sections 6-7): per head h with scalar A[h] and head dimension p,

    dt'   = clamp(softplus(dt + dt_bias), dt_limit)
    h_t   = exp(dt'_t A) h_{t-1} + dt'_t x_t B_t^T          (h_t: (headdim, d_state))
    y_t   = h_t C_t + D x_t, then * silu(z_t)

Chunked algorithm (section 6 "SSD algorithm"): within a chunk of ``chunk_size`` steps the output is a
masked matrix product with the decay matrix ``L[i, j] = exp(cumsum(dA)_i - cumsum(dA)_j)`` (i >= j;
exponents are non-positive for A <= 0), each chunk's end state is a decayed sum of its inputs, the
states are carried across chunks, and each chunk adds ``C_t exp(cumsum(dA)_t) h_in``. ``seq_idx``
(packed sequences) masks every term that would cross a sequence boundary; the tokens of a sequence are
contiguous, and a negative ``seq_idx`` marks a padding token, whose output is 0 and which writes no
state (a row ending in padding has a zero final state). ``cu_seqlens`` follows the packed-sequence rule
of :mod:`mamba_ssm._families.packing` (its last entry may be below seqlen: the rest is padding; an empty
sequence has a zero state).

Two implementations: the Triton kernels (:mod:`mamba_ssm._families.ssd.triton_kernels`) on CUDA/ROCm devices
with triton >= 3.0, and the PyTorch stages (:mod:`mamba_ssm._families.ssd.torch_impl`, differentiable
through autograd) elsewhere and for float64; ``mamba_ssm._dispatch`` decides and says why. The stage
modules ``ssd_chunk_state``, ``ssd_state_passing``, ``ssd_bmm`` and ``ssd_chunk_scan`` expose the same
stages one at a time.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Sequence, Union, overload

import torch

from mamba_ssm import _dispatch
from mamba_ssm._families import recompute as _recompute
from mamba_ssm._families.ssd import autograd as _autograd
from mamba_ssm._families.ssd import conv_scan as _conv_scan
from mamba_ssm._families.ssd import torch_impl as S
from mamba_ssm._families.ssd.autograd import Grads, GradsAndOut
from mamba_ssm._families.ssd.checks import check_shape as _check
from mamba_ssm._families.ssd.checks import validate as _validate
from mamba_ssm._families.ssd.reference import as_selective_scan as _ssd_as_selective_scan
from mamba_ssm._families.ssd.reference import mamba_conv1d_scan_ref, ssd_chunk_scan_combined_ref
from mamba_ssm._families.ssd.torch_combined import FwdResult, FwdVarlenResult
from mamba_ssm._families.ssd.torch_impl import ssd_chunk_scan_weighted
from mamba_ssm.ops.triton._helpers import init_to_zero, triton_at_least

__all__ = [
    "TRITON_22",
    "MambaChunkScanCombinedFn",
    "MambaSplitConv1dScanCombinedFn",
    "_chunk_scan_chunk_state_bwd_dx",
    "_mamba_chunk_scan_combined_bwd",
    "_mamba_chunk_scan_combined_fwd",
    "ensure_stride",
    "init_to_zero",
    "mamba_chunk_scan",
    "mamba_chunk_scan_combined",
    "mamba_conv1d_scan_ref",
    "mamba_split_conv1d_scan_combined",
    "mamba_split_conv1d_scan_ref",
    "selective_scan_bwd",
    "ssd_chunk_scan_combined_ref",
    "ssd_chunk_scan_weighted",
    "ssd_selective_scan",
]

#: Whether the installed triton is 2.2 or later (upstream's flag; nothing here depends on it).
TRITON_22 = triton_at_least(2, 2)

_NO_LIMIT = (0.0, float("inf"))
#: :func:`mamba_chunk_scan_combined`'s result for flags that are not literals: out, or out with the final
#: and / or varlen states.
ScanResult = Union[
    torch.Tensor, tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor, torch.Tensor]
]
#: :func:`mamba_split_conv1d_scan_combined`'s result: out, or (out, final states) with
#: ``return_final_states``.
SplitResult = Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]


def ensure_stride(inp: torch.Tensor) -> torch.Tensor:
    """``inp`` (batch, seqlen, channels) with ``stride(1)`` a multiple of 8 (contiguous otherwise): the
    alignment upstream's kernels want of a (batch, seqlen, ...) view.

    Raises:
        ValueError: the last dimension is not a multiple of 8 (no layout can align it then)."""
    if inp.shape[2] % 8:
        raise ValueError(f"ensure_stride: the last dimension must be a multiple of 8, got {tuple(inp.shape)}")
    return inp if inp.stride(1) % 8 == 0 else inp.contiguous()


# ----------------------------------------------------------------------------------------------------
# mamba_chunk_scan_combined
# ----------------------------------------------------------------------------------------------------


@overload
def mamba_chunk_scan_combined(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    cu_seqlens: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Sequence[float] = _NO_LIMIT,
    return_final_states: Literal[False] = False,
    return_varlen_states: Literal[False] = False,
    state_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor: ...
@overload
def mamba_chunk_scan_combined(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    cu_seqlens: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Sequence[float] = _NO_LIMIT,
    *,
    return_final_states: Literal[True],
    return_varlen_states: Literal[False] = False,
    state_dtype: Optional[torch.dtype] = None,
) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def mamba_chunk_scan_combined(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    cu_seqlens: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Sequence[float] = _NO_LIMIT,
    return_final_states: Literal[False] = False,
    *,
    return_varlen_states: Literal[True],
    state_dtype: Optional[torch.dtype] = None,
) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def mamba_chunk_scan_combined(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    cu_seqlens: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Sequence[float] = _NO_LIMIT,
    *,
    return_final_states: Literal[True],
    return_varlen_states: Literal[True],
    state_dtype: Optional[torch.dtype] = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...
@overload
def mamba_chunk_scan_combined(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    cu_seqlens: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Sequence[float] = _NO_LIMIT,
    return_final_states: bool = False,
    return_varlen_states: bool = False,
    state_dtype: Optional[torch.dtype] = None,
) -> ScanResult: ...


def mamba_chunk_scan_combined(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    cu_seqlens: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Sequence[float] = _NO_LIMIT,
    return_final_states: bool = False,
    return_varlen_states: bool = False,
    state_dtype: Optional[torch.dtype] = None,
) -> ScanResult:
    """Mamba-2's SSD scan.

    Args:
        x: (batch, seqlen, nheads, headdim). dt: (batch, seqlen, nheads). A: (nheads,) real.
        B, C: (batch, seqlen, ngroups, dstate), ngroups dividing nheads (head h uses group
            h // (nheads / ngroups)).
        chunk_size: steps per chunk (e.g. 256).
        D: (nheads, headdim) or (nheads,), or None. z: (batch, seqlen, nheads, headdim) gate, or None.
        dt_bias: (nheads,) or None. dt_softplus: softplus on dt + dt_bias. dt_limit: (min, max) clamp of
            the processed dt ((0, inf) = none).
        initial_states: (batch, nheads, headdim, dstate) or None.
        seq_idx: (batch, seqlen) int ids of packed sequences (each sequence's tokens contiguous; a
            negative id marks a padding token: output 0, no state read or written), or None.
        cu_seqlens: (num_seqs + 1,) cumulative lengths (batch 1), for ``return_varlen_states``: 0
            first, non-decreasing, at most seqlen last (the rows after it are padding); seq_idx is
            derived from it when not given.
        return_final_states: also return the state after the last step (batch, nheads, headdim, dstate).
        return_varlen_states: also return each sequence's final state (num_seqs, nheads, headdim, dstate);
            zero for an empty sequence.
        state_dtype: the dtype the inter-chunk states are materialised in (upstream's argument, HEAD).
            None: float32 (float64 for float64 inputs); a narrower dtype rounds them to it.

    Returns:
        out (batch, seqlen, nheads, headdim) in x's dtype; then final_states (float32) and/or
        varlen_states when asked for, in that order.

    On CUDA/ROCm devices with triton >= 3.0 the Triton kernels run (``mamba_ssm._families.ssd.triton_kernels``;
    chunk_size must then be a power of two in 16..256); elsewhere and for float64 the PyTorch stages
    (``mamba_ssm._dispatch`` decides and says why: the op ``ssd_chunk_scan``).

    Raises:
        TypeError / ValueError: bad shapes, dtypes or arguments, naming the argument.
    """
    fn = "mamba_chunk_scan_combined"
    _validate(fn, x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, state_dtype)
    if return_varlen_states and (cu_seqlens is None or x.shape[0] != 1):
        raise ValueError(f"{fn}: return_varlen_states needs cu_seqlens and batch 1")
    if not return_varlen_states:
        cu_seqlens = None
    result: tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]] = _dispatch.call(
        "ssd_chunk_scan", x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens,
        dt_softplus, dt_limit, state_dtype,
    )  # fmt: skip
    out, final, varlen = result
    if return_varlen_states:
        if varlen is None:  # (cu_seqlens was given: every backend computed them)
            raise RuntimeError(f"{fn}: the backend returned no varlen states")
        return (out, final, varlen) if return_final_states else (out, varlen)
    return (out, final) if return_final_states else out


class MambaChunkScanCombinedFn(torch.autograd.Function):
    """:func:`mamba_chunk_scan_combined` as an autograd Function (upstream's class; same arguments and
    results, differentiable in x, dt, A, B, C, D, z, dt_bias, initial_states)."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        dt: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        chunk_size: int,
        D: Optional[torch.Tensor] = None,
        z: Optional[torch.Tensor] = None,
        dt_bias: Optional[torch.Tensor] = None,
        initial_states: Optional[torch.Tensor] = None,
        seq_idx: Optional[torch.Tensor] = None,
        cu_seqlens: Optional[torch.Tensor] = None,
        dt_softplus: bool = False,
        dt_limit: Sequence[float] = _NO_LIMIT,
        return_final_states: bool = False,
        return_varlen_states: bool = False,
        state_dtype: Optional[torch.dtype] = None,
    ) -> ScanResult:
        args = (
            x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_softplus,
            dt_limit, return_final_states, return_varlen_states, state_dtype,
        )  # fmt: skip
        out: ScanResult = _recompute.forward(ctx, mamba_chunk_scan_combined, args)
        return out

    @staticmethod
    def backward(
        ctx: Any, dout: torch.Tensor, *args: Optional[torch.Tensor]
    ) -> tuple[Optional[torch.Tensor], ...]:
        return _recompute.backward(ctx, dout, *args)


@overload
def _mamba_chunk_scan_combined_fwd(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    cu_seqlens: None = None,
    dt_softplus: bool = False,
    dt_limit: Sequence[float] = _NO_LIMIT,
    state_dtype: Optional[torch.dtype] = None,
) -> FwdResult: ...
@overload
def _mamba_chunk_scan_combined_fwd(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    *,
    cu_seqlens: torch.Tensor,
    dt_softplus: bool = False,
    dt_limit: Sequence[float] = _NO_LIMIT,
    state_dtype: Optional[torch.dtype] = None,
) -> FwdVarlenResult: ...
@overload
def _mamba_chunk_scan_combined_fwd(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    cu_seqlens: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Sequence[float] = _NO_LIMIT,
    state_dtype: Optional[torch.dtype] = None,
) -> Union[FwdResult, FwdVarlenResult]: ...


def _mamba_chunk_scan_combined_fwd(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    cu_seqlens: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Sequence[float] = _NO_LIMIT,
    state_dtype: Optional[torch.dtype] = None,
) -> Union[FwdResult, FwdVarlenResult]:
    """The SSD's forward with its intermediate results (upstream's entry point; no autograd).

    Args: as :func:`mamba_chunk_scan_combined`.

    Returns:
        (out, out_x, dt_out, dA_cumsum, states, final_states), plus varlen_states with cu_seqlens:
        out (batch, seqlen, nheads, headdim) in x's dtype; out_x the output before the z gate (None
        without z); dt_out and dA_cumsum (batch, nheads, nchunks, chunk_size) float32 (stage 1); states
        (batch, nchunks, nheads, headdim, dstate) the states entering the chunks; final_states (batch,
        nheads, headdim, dstate) float32; varlen_states (num_seqs, nheads, headdim, dstate) float32.

    Raises:
        TypeError / ValueError: bad shapes, dtypes or arguments, naming the argument; on the Triton
            kernels a chunk_size that is not a power of two in 16..256.
    """
    fn = "_mamba_chunk_scan_combined_fwd"
    _validate(fn, x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, state_dtype)
    result: Union[FwdResult, FwdVarlenResult] = _dispatch.call(
        "ssd_chunk_scan_fwd", x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens,
        dt_softplus, dt_limit, state_dtype,
    )  # fmt: skip
    return result


def _chunk_scan_chunk_state_bwd_dx(
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    B: torch.Tensor,
    CB: torch.Tensor,
    dout: torch.Tensor,
    dstates: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    dx: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """The gradients with respect to x, dt and D of the SSD's in-chunk output term (stage 4,
    ``sum_{j<=i} CB_ij exp(cs_i - cs_j) dt'_j x_j + D x_i``, given dout) plus those of the chunks' own end
    states (stage 2, ``S_c = sum_j exp(cs_end - cs_j) dt'_j x_j B_j^T``, given dstates); the two stages
    of :mod:`mamba_ssm._families.ssd.torch_impl` through autograd.

    Args:
        x, dout: (batch, seqlen, nheads, headdim). dt, dA_cumsum: (batch, nheads, nchunks, chunk_size).
        B: (batch, seqlen, ngroups, dstate). CB: (batch, nchunks, ngroups, chunk_size, chunk_size).
        dstates: (batch, nchunks, nheads, headdim, dstate). D: (nheads, headdim), (nheads,) or None.
        seq_idx: (batch, seqlen) or None. dx: a tensor of x's shape to write dx into, or None.

    Returns:
        (dx in x's dtype, ddt (batch, nheads, nchunks, chunk_size) float32 (float64 for float64 inputs),
        dD in D's shape and dtype or None).

    Raises:
        TypeError / ValueError: shapes that disagree, naming the argument.
    """
    from mamba_ssm.ops.triton.ssd_chunk_scan import _check as check_scan
    from mamba_ssm.ops.triton.ssd_chunk_state import _check_state_args

    fn = "_chunk_scan_chunk_state_bwd_dx"
    batch, seqlen, nheads, headdim, ngroups, dstate, nchunks, q = _check_state_args(
        fn, B, x, dt, dA_cumsum, seq_idx
    )
    C0 = x.new_zeros(batch, seqlen, ngroups, 1)  # (the shapes the output term is checked with)
    states0 = x.new_zeros(batch, nchunks, nheads, headdim, 1)
    check_scan(fn, x, dt, dA_cumsum, C0, states0, D, None, seq_idx)
    _check(fn, "CB", CB, (batch, nchunks, ngroups, q, q))
    _check(fn, "dout", dout, tuple(x.shape))
    _check(fn, "dstates", dstates, (batch, nchunks, nheads, headdim, dstate))
    _check(fn, "dx", dx, tuple(x.shape))
    return _autograd.chunk_scan_chunk_state_bwd_dx(x, dt, dA_cumsum, B, CB, dout, dstates, D, seq_idx, dx)


@overload
def _mamba_chunk_scan_combined_bwd(
    dout: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    out: Optional[torch.Tensor],
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
    dfinal_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Sequence[float] = _NO_LIMIT,
    dx: Optional[torch.Tensor] = None,
    ddt: Optional[torch.Tensor] = None,
    dB: Optional[torch.Tensor] = None,
    dC: Optional[torch.Tensor] = None,
    dz: Optional[torch.Tensor] = None,
    recompute_output: Literal[False] = False,
    state_dtype: Optional[torch.dtype] = None,
) -> Grads: ...
@overload
def _mamba_chunk_scan_combined_bwd(
    dout: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    out: Optional[torch.Tensor],
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
    dfinal_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Sequence[float] = _NO_LIMIT,
    dx: Optional[torch.Tensor] = None,
    ddt: Optional[torch.Tensor] = None,
    dB: Optional[torch.Tensor] = None,
    dC: Optional[torch.Tensor] = None,
    dz: Optional[torch.Tensor] = None,
    *,
    recompute_output: Literal[True],
    state_dtype: Optional[torch.dtype] = None,
) -> GradsAndOut: ...
@overload
def _mamba_chunk_scan_combined_bwd(
    dout: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    out: Optional[torch.Tensor],
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
    dfinal_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Sequence[float] = _NO_LIMIT,
    dx: Optional[torch.Tensor] = None,
    ddt: Optional[torch.Tensor] = None,
    dB: Optional[torch.Tensor] = None,
    dC: Optional[torch.Tensor] = None,
    dz: Optional[torch.Tensor] = None,
    recompute_output: bool = False,
    state_dtype: Optional[torch.dtype] = None,
) -> Union[Grads, GradsAndOut]: ...


def _mamba_chunk_scan_combined_bwd(
    dout: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    out: Optional[torch.Tensor],
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
    dfinal_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Sequence[float] = _NO_LIMIT,
    dx: Optional[torch.Tensor] = None,
    ddt: Optional[torch.Tensor] = None,
    dB: Optional[torch.Tensor] = None,
    dC: Optional[torch.Tensor] = None,
    dz: Optional[torch.Tensor] = None,
    recompute_output: bool = False,
    state_dtype: Optional[torch.dtype] = None,
) -> Union[Grads, GradsAndOut]:
    """The SSD's backward (upstream's entry point): the forward is recomputed (``out`` is not read).

    Args: dout (batch, seqlen, nheads, headdim), the gradient of out; dfinal_states (batch, nheads,
        headdim, dstate) or None, of the final state; dx, ddt, dB, dC, dz: tensors to write those
        gradients into, or None; recompute_output: also return out (after the z gate); the rest as
        :func:`mamba_chunk_scan_combined`.

    Returns:
        (dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial_states), None for an input that is None; plus
        out with ``recompute_output``.

    Raises:
        TypeError / ValueError: bad shapes, dtypes or arguments, naming the argument; on the Triton
            kernels a chunk_size that is not a power of two in 16..256.
    """
    del out
    fn = "_mamba_chunk_scan_combined_bwd"
    _validate(fn, x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, state_dtype)
    _check(fn, "dout", dout, tuple(x.shape))
    result: tuple[list[Optional[torch.Tensor]], torch.Tensor] = _dispatch.call(
        "ssd_chunk_scan_bwd", x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx,
        dt_softplus, dt_limit, state_dtype, dout, dfinal_states,
    )  # fmt: skip
    grads, y = result
    return _autograd.finish_backward(grads, y, dx, ddt, dB, dC, dz, recompute_output)


# ----------------------------------------------------------------------------------------------------
# Stage-by-stage compositions and references
# ----------------------------------------------------------------------------------------------------


def mamba_chunk_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
) -> torch.Tensor:
    """The SSD built from the stage functions (``_chunk_cumsum_fwd``, ``chunk_state``, ``state_passing``,
    ``chunk_scan``), differentiable through their autograd Functions: out (batch, seqlen, nheads,
    headdim) in x's dtype. Arguments as :func:`mamba_chunk_scan_combined` (no initial states).

    Raises:
        TypeError / ValueError: bad shapes, dtypes or arguments, naming the argument."""
    from mamba_ssm.ops.triton.ssd_chunk_scan import chunk_scan
    from mamba_ssm.ops.triton.ssd_chunk_state import chunk_state
    from mamba_ssm.ops.triton.ssd_state_passing import state_passing

    _validate("mamba_chunk_scan", x, dt, A, B, C, chunk_size, D, z, dt_bias, None, None)
    cs, dtp = S.chunk_cumsum(dt, A, chunk_size, dt_bias, dt_softplus)  # differentiable in dt, A, dt_bias
    states = chunk_state(B, x, dtp, cs)
    hin, _ = state_passing(states.flatten(3), cs[..., -1])
    out = chunk_scan(B, C, x, dtp, cs, hin.view(states.shape).to(states.dtype), D=D, z=z)
    return out.to(x.dtype)


def ssd_selective_scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Sequence[float] = _NO_LIMIT,
) -> torch.Tensor:
    """The SSD computed by Mamba's selective scan (``selective_scan_fn``): one channel per (head, headdim)
    index, A per head expanded over dstate (or a full (dim, dstate) A).

    Args:
        x: (batch, seqlen, nheads, headdim). dt: (batch, seqlen, nheads) or (batch, seqlen, nheads,
        headdim). A: (nheads,) or (nheads * headdim, dstate). B, C: (batch, seqlen, ngroups, dstate).
        D: (nheads, headdim) or (nheads,). z: x's shape. dt_bias: (nheads,) or (nheads, headdim).

    Returns:
        out (batch, seqlen, nheads, headdim) in x's dtype.
    """
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn

    b, l, h, p = x.shape
    u, delta, A2, Bs, Cs, Dv, zs = _ssd_as_selective_scan(
        x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_limit
    )
    out = selective_scan_fn(u.contiguous(), delta.contiguous(), A2, Bs, Cs, Dv, zs)
    return out.transpose(1, 2).reshape(b, l, h, p)


def selective_scan_bwd(
    dout: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of dt and A of the SSD computed by Mamba's selective scan, given dout.

    Args:
        dout, x: (batch, seqlen, nheads, headdim). dt: the processed step in the chunked layout, (batch,
        nheads, nchunks, chunk_size) or (batch, nheads, headdim, nchunks, chunk_size). A: (nheads,) or
        (nheads * headdim, dstate). B, C: (batch, seqlen, ngroups, dstate). D, z: as
        :func:`ssd_selective_scan`.

    Returns:
        (ddt in dt's shape, dA in A's shape), float32.
    """
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn

    b, l, h, p = x.shape
    per_channel = dt.dim() == 5
    dt_leaf = dt.detach().float().requires_grad_(True)
    A_leaf = A.detach().float().requires_grad_(True)
    with torch.enable_grad():
        steps = dt_leaf if per_channel else dt_leaf.unsqueeze(2).expand(b, h, p, *dt.shape[2:])
        steps = steps.reshape(b, h, p, -1)[..., :l].permute(0, 3, 1, 2)  # (batch, seqlen, nheads, headdim)
        u, delta, A2, Bs, Cs, Dv, zs = _ssd_as_selective_scan(
            x, steps, A_leaf, B, C, D, z, None, False, S.NO_LIMIT
        )
        out = selective_scan_fn(
            u.float().contiguous(), delta.float().contiguous(), A2, Bs.float(), Cs.float(), Dv,
            zs.float() if zs is not None else None,
        )  # fmt: skip
        ddt, dA = torch.autograd.grad(
            out, (dt_leaf, A_leaf), dout.float().reshape(b, l, h * p).transpose(1, 2)
        )
    return ddt, dA


# ----------------------------------------------------------------------------------------------------
# mamba_split_conv1d_scan_combined
# ----------------------------------------------------------------------------------------------------


def _conv(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    seq_idx: Optional[torch.Tensor],
    activation: Optional[str],
) -> torch.Tensor:
    from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn

    # (no final states asked for: the output alone)
    return causal_conv1d_fn(x, weight, bias, seq_idx=seq_idx, activation=activation)


def _conv_ref(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    seq_idx: Optional[torch.Tensor],
    activation: Optional[str],
) -> torch.Tensor:
    from mamba_ssm.ops.causal_conv1d import causal_conv1d_ref

    return causal_conv1d_ref(x, weight, bias, seq_idx=seq_idx, activation=activation)


def _scan(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    dt_bias: Optional[torch.Tensor],
    initial_states: Optional[torch.Tensor],
    seq_idx: Optional[torch.Tensor],
    dt_limit: Sequence[float],
    return_final_states: bool,
    state_dtype: Optional[torch.dtype],
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    res = mamba_chunk_scan_combined(
        x, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias, initial_states=initial_states, seq_idx=seq_idx,
        dt_softplus=True, dt_limit=dt_limit, return_final_states=return_final_states, state_dtype=state_dtype,
    )  # fmt: skip
    if isinstance(res, torch.Tensor):
        return res, None
    return res[0], res[1]


def _norm(
    y: torch.Tensor,
    weight: torch.Tensor,
    z: torch.Tensor,
    eps: float,
    group_size: int,
    norm_before_gate: bool,
) -> torch.Tensor:
    from mamba_ssm.ops.triton.layernorm_gated import rmsnorm_fn

    return rmsnorm_fn(y, weight, None, z=z, eps=eps, group_size=group_size, norm_before_gate=norm_before_gate)


def _norm_ref(
    y: torch.Tensor,
    weight: torch.Tensor,
    z: torch.Tensor,
    eps: float,
    group_size: int,
    norm_before_gate: bool,
) -> torch.Tensor:
    from mamba_ssm.ops.triton.layernorm_gated import rms_norm_ref

    return rms_norm_ref(
        y, weight, None, z=z, eps=eps, group_size=group_size, norm_before_gate=norm_before_gate
    )


_STEPS = _conv_scan.ConvScanSteps(_conv, _scan, _norm)
#: The reference's steps: the conv's and the SSD's PyTorch references, and ``rms_norm_ref``.
_REF_STEPS = _conv_scan.ConvScanSteps(_conv_ref, _conv_scan.reference_scan, _norm_ref)


@overload
def mamba_split_conv1d_scan_combined(
    zxbcdt: torch.Tensor,
    conv1d_weight: torch.Tensor,
    conv1d_bias: Optional[torch.Tensor],
    dt_bias: Optional[torch.Tensor],
    A: torch.Tensor,
    D: Optional[torch.Tensor],
    chunk_size: int,
    initial_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    dt_limit: Sequence[float] = _NO_LIMIT,
    return_final_states: Literal[False] = False,
    activation: Optional[str] = "silu",
    rmsnorm_weight: Optional[torch.Tensor] = None,
    rmsnorm_eps: float = 1e-6,
    outproj_weight: Optional[torch.Tensor] = None,
    outproj_bias: Optional[torch.Tensor] = None,
    headdim: Optional[int] = None,
    ngroups: int = 1,
    norm_before_gate: bool = True,
    state_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor: ...
@overload
def mamba_split_conv1d_scan_combined(
    zxbcdt: torch.Tensor,
    conv1d_weight: torch.Tensor,
    conv1d_bias: Optional[torch.Tensor],
    dt_bias: Optional[torch.Tensor],
    A: torch.Tensor,
    D: Optional[torch.Tensor],
    chunk_size: int,
    initial_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    dt_limit: Sequence[float] = _NO_LIMIT,
    *,
    return_final_states: Literal[True],
    activation: Optional[str] = "silu",
    rmsnorm_weight: Optional[torch.Tensor] = None,
    rmsnorm_eps: float = 1e-6,
    outproj_weight: Optional[torch.Tensor] = None,
    outproj_bias: Optional[torch.Tensor] = None,
    headdim: Optional[int] = None,
    ngroups: int = 1,
    norm_before_gate: bool = True,
    state_dtype: Optional[torch.dtype] = None,
) -> tuple[torch.Tensor, torch.Tensor]: ...
@overload
def mamba_split_conv1d_scan_combined(
    zxbcdt: torch.Tensor,
    conv1d_weight: torch.Tensor,
    conv1d_bias: Optional[torch.Tensor],
    dt_bias: Optional[torch.Tensor],
    A: torch.Tensor,
    D: Optional[torch.Tensor],
    chunk_size: int,
    initial_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    dt_limit: Sequence[float] = _NO_LIMIT,
    return_final_states: bool = False,
    activation: Optional[str] = "silu",
    rmsnorm_weight: Optional[torch.Tensor] = None,
    rmsnorm_eps: float = 1e-6,
    outproj_weight: Optional[torch.Tensor] = None,
    outproj_bias: Optional[torch.Tensor] = None,
    headdim: Optional[int] = None,
    ngroups: int = 1,
    norm_before_gate: bool = True,
    state_dtype: Optional[torch.dtype] = None,
) -> SplitResult: ...


def mamba_split_conv1d_scan_combined(
    zxbcdt: torch.Tensor,
    conv1d_weight: torch.Tensor,
    conv1d_bias: Optional[torch.Tensor],
    dt_bias: Optional[torch.Tensor],
    A: torch.Tensor,
    D: Optional[torch.Tensor],
    chunk_size: int,
    initial_states: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    dt_limit: Sequence[float] = _NO_LIMIT,
    return_final_states: bool = False,
    activation: Optional[str] = "silu",
    rmsnorm_weight: Optional[torch.Tensor] = None,
    rmsnorm_eps: float = 1e-6,
    outproj_weight: Optional[torch.Tensor] = None,
    outproj_bias: Optional[torch.Tensor] = None,
    headdim: Optional[int] = None,
    ngroups: int = 1,
    norm_before_gate: bool = True,
    state_dtype: Optional[torch.dtype] = None,
) -> SplitResult:
    """Mamba-2's block after in_proj (arXiv:2405.21060, Figure 6): split, causal conv1d on (x, B, C),
    SSD scan, gated RMSNorm (or the z gate), out_proj; the public ops composed
    (:mod:`mamba_ssm._families.ssd.conv_scan`), each dispatched.

    Args:
        zxbcdt: (batch, seqlen, 2 * d_nonssm + 2 * dim + 2 * ngroups * dstate + nheads): z0, x0 (the
            gated-MLP part, d_nonssm >= 0 channels each, output silu(z0) * x0 in front), z, xBC, dt.
        conv1d_weight: (dim + 2 * ngroups * dstate, width) (or with a middle 1); conv1d_bias or None.
        dt_bias: (nheads,). A: (nheads,). D: (nheads, headdim) or (nheads,).
        chunk_size, initial_states, seq_idx, dt_limit, return_final_states, state_dtype: as
            :func:`mamba_chunk_scan_combined` (dt always goes through softplus).
        activation: "silu"/"swish" or None for the conv. rmsnorm_weight: (dim,) for the gated RMSNorm
            (then z gates through the norm), else z gates the scan output.
        outproj_weight: (d_model, dim) and outproj_bias, or None (the output stays (batch, seqlen, dim)).
        headdim: head dimension (inferred from a 2-D D when None). ngroups: B/C groups.
        norm_before_gate: the gated norm's order.

    Returns:
        out (batch, seqlen, d_model or dim), and the final states with ``return_final_states``.

    Raises:
        ValueError: zxbcdt's or conv1d_weight's channels that do not add up, no headdim to infer; the
            errors of the conv, the scan and the norm.
    """
    result = _conv_scan.split_conv1d_scan(
        "mamba_split_conv1d_scan_combined", _STEPS, zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D,
        chunk_size, initial_states, seq_idx, dt_limit, return_final_states, activation, rmsnorm_weight,
        rmsnorm_eps, outproj_weight, outproj_bias, headdim, ngroups, norm_before_gate, state_dtype,
    )  # fmt: skip
    return _split_result(result)


def _split_result(result: Union[torch.Tensor, tuple[torch.Tensor, Optional[torch.Tensor]]]) -> SplitResult:
    """The composition's result with the final states present (they are, when asked for)."""
    if isinstance(result, torch.Tensor):
        return result
    y, final = result
    if final is None:
        raise RuntimeError("mamba_split_conv1d_scan_combined: the scan returned no final states")
    return y, final


class MambaSplitConv1dScanCombinedFn(torch.autograd.Function):
    """:func:`mamba_split_conv1d_scan_combined` as an autograd Function (upstream's class; same arguments
    and results)."""

    @staticmethod
    def forward(
        ctx: Any,
        zxbcdt: torch.Tensor,
        conv1d_weight: torch.Tensor,
        conv1d_bias: Optional[torch.Tensor],
        dt_bias: Optional[torch.Tensor],
        A: torch.Tensor,
        D: Optional[torch.Tensor],
        chunk_size: int,
        initial_states: Optional[torch.Tensor] = None,
        seq_idx: Optional[torch.Tensor] = None,
        dt_limit: Sequence[float] = _NO_LIMIT,
        return_final_states: bool = False,
        activation: Optional[str] = "silu",
        rmsnorm_weight: Optional[torch.Tensor] = None,
        rmsnorm_eps: float = 1e-6,
        outproj_weight: Optional[torch.Tensor] = None,
        outproj_bias: Optional[torch.Tensor] = None,
        headdim: Optional[int] = None,
        ngroups: int = 1,
        norm_before_gate: bool = True,
        state_dtype: Optional[torch.dtype] = None,
    ) -> SplitResult:
        args = (
            zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, chunk_size, initial_states, seq_idx, dt_limit,
            return_final_states, activation, rmsnorm_weight, rmsnorm_eps, outproj_weight, outproj_bias,
            headdim, ngroups, norm_before_gate, state_dtype,
        )  # fmt: skip
        out: SplitResult = _recompute.forward(ctx, mamba_split_conv1d_scan_combined, args)
        return out

    @staticmethod
    def backward(
        ctx: Any, dout: torch.Tensor, *args: Optional[torch.Tensor]
    ) -> tuple[Optional[torch.Tensor], ...]:
        return _recompute.backward(ctx, dout, *args)


def mamba_split_conv1d_scan_ref(
    zxbcdt: torch.Tensor,
    conv1d_weight: torch.Tensor,
    conv1d_bias: Optional[torch.Tensor],
    dt_bias: Optional[torch.Tensor],
    A: torch.Tensor,
    D: Optional[torch.Tensor],
    chunk_size: int,
    dt_limit: Sequence[float] = _NO_LIMIT,
    activation: Optional[str] = "silu",
    rmsnorm_weight: Optional[torch.Tensor] = None,
    rmsnorm_eps: float = 1e-6,
    outproj_weight: Optional[torch.Tensor] = None,
    outproj_bias: Optional[torch.Tensor] = None,
    headdim: Optional[int] = None,
    ngroups: int = 1,
    norm_before_gate: bool = True,
) -> torch.Tensor:
    """:func:`mamba_split_conv1d_scan_combined` from the PyTorch references (the conv's, the PyTorch SSD
    stages, the gated norm's ``rms_norm_ref``): same arguments (no initial states, seq_idx or final
    states) and output.

    Raises:
        ValueError: as :func:`mamba_split_conv1d_scan_combined`."""
    result = _conv_scan.split_conv1d_scan(
        "mamba_split_conv1d_scan_ref", _REF_STEPS, zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D,
        chunk_size, None, None, dt_limit, False, activation, rmsnorm_weight, rmsnorm_eps, outproj_weight,
        outproj_bias, headdim, ngroups, norm_before_gate, None,
    )  # fmt: skip
    if not isinstance(result, torch.Tensor):  # (return_final_states is False)
        raise TypeError("mamba_split_conv1d_scan_ref: the composition returned a tuple")
    return result
