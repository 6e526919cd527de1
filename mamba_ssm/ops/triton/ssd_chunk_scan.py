"""Upstream's ``mamba_ssm.ops.triton.ssd_chunk_scan``: SSD stage 4 (Dao & Gu, arXiv:2405.21060, section 6),
the outputs from the diagonal blocks and the states entering each chunk, in PyTorch
(:mod:`mamba_ssm._families.ssd.torch_impl`; the Triton SSD runs this stage fused with the C B^T products
inside :func:`mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined`):

    y_i = sum_{j <= i in the chunk} CB_ij exp(cs_i - cs_j) dt'_j x_j + exp(cs_i) C_i . H_c  (+ D x_i, * silu(z_i))

With ``seq_idx`` a term counts only within one sequence, H_c only for positions of its sequence, and a
padding token (seq_idx < 0) outputs 0. The backward pieces (``_chunk_scan_bwd_dC`` for the state term,
``_chunk_scan_bwd_dx`` for the in-chunk term) are the gradients of these expressions (through autograd of
the PyTorch stage).
"""

from __future__ import annotations

from typing import Any, Optional, Union

import torch

from mamba_ssm._families import recompute as _recompute
from mamba_ssm._families.ssd import torch_impl as S
from mamba_ssm._families.ssd.autograd import f32 as _f32
from mamba_ssm._families.ssd.autograd import grads as _grads
from mamba_ssm._families.ssd.autograd import or_zeros as _or_zeros
from mamba_ssm.ops.triton._helpers import init_to_zero, require, triton_at_least

__all__ = [
    "TRITON_22",
    "ChunkScanFn",
    "_chunk_scan_bwd_dC",
    "_chunk_scan_bwd_dx",
    "_chunk_scan_fwd",
    "chunk_scan",
    "chunk_scan_ref",
    "init_to_zero",
]

#: Whether the installed triton is 2.2 or later (upstream's flag; nothing here depends on it).
TRITON_22 = triton_at_least(2, 2)


def _check(
    fn: str,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    C: torch.Tensor,
    states: torch.Tensor,
    D: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    seq_idx: Optional[torch.Tensor],
) -> int:
    """The chunk size Q, after checking the shapes (TypeError / ValueError naming the argument)."""
    require(fn, "x", x, (None, None, None, None))
    batch, seqlen, nheads, headdim = x.shape
    require(fn, "C", C, (batch, seqlen, None, None))
    ngroups, dstate = C.shape[2], C.shape[3]
    if nheads % ngroups:
        raise ValueError(f"{fn}: C's ngroups {ngroups} must divide x's nheads {nheads}")
    require(fn, "dt", dt, (batch, nheads, None, None))
    nchunks, q = dt.shape[2], dt.shape[3]
    if not (nchunks - 1) * q < max(seqlen, 1) <= nchunks * q:
        raise ValueError(f"{fn}: dt's (nchunks, chunk_size) = ({nchunks}, {q}) do not cover seqlen {seqlen}")
    require(fn, "dA_cumsum", dA_cumsum, tuple(dt.shape))
    require(fn, "prev_states", states, (batch, nchunks, nheads, headdim, dstate))
    if z is not None:
        require(fn, "z", z, tuple(x.shape))
    if D is not None and tuple(D.shape) not in ((nheads, headdim), (nheads,)):
        raise ValueError(
            f"{fn}: D must have shape ({nheads}, {headdim}) or ({nheads},), got {tuple(D.shape)}"
        )
    if seq_idx is not None:
        require(fn, "seq_idx", seq_idx, (batch, seqlen))
    return q


def _chunk_scan_fwd(
    cb: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    C: torch.Tensor,
    states: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Stage 4.

    Args:
        cb: (batch, nchunks, ngroups, Q, Q), C B^T per chunk (``_bmm_chunk_fwd(C, B, Q)``).
        x: (batch, seqlen, nheads, headdim). dt, dA_cumsum: (batch, nheads, nchunks, Q).
        C: (batch, seqlen, ngroups, dstate). states: (batch, nchunks, nheads, headdim, dstate), the
        states entering the chunks. D: (nheads, headdim) or (nheads,). z: x's shape. seq_idx: (batch,
        seqlen) or None.

    Returns:
        (out, out_x) in x's dtype: out the outputs (gated by silu(z) when z is given), out_x the outputs
        before the gate (None without z).
    """
    q = _check("_chunk_scan_fwd", x, dt, dA_cumsum, C, states, D, z, seq_idx)
    require("_chunk_scan_fwd", "cb", cb, (x.shape[0], dt.shape[2], C.shape[2], q, q))
    y, y_pre = S.chunk_scan(cb, x, dt, dA_cumsum, C, states, D, z, seq_idx)
    return y.to(x.dtype), (y_pre.to(x.dtype) if y_pre is not None else None)


def _chunk_scan_bwd_dC(
    prev_states: torch.Tensor,
    dA_cumsum: torch.Tensor,
    dout: torch.Tensor,
    seq_idx: Optional[torch.Tensor] = None,
    C: Optional[torch.Tensor] = None,
    ngroups: int = 1,
) -> Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """The gradients of stage 4's state term ``exp(cs_i) C_i . H_c`` given dout.

    Args:
        prev_states: (batch, nchunks, nheads, headdim, dstate), the states H_c entering the chunks.
        dA_cumsum: (batch, nheads, nchunks, chunk_size). dout: (batch, seqlen, nheads, headdim).
        seq_idx: (batch, seqlen) or None. C: (batch, seqlen, ngroups, dstate) or None; ngroups: C's
        groups when C is None.

    Returns:
        dC (batch, seqlen, ngroups, dstate) float32 (float64 for float64 inputs), summed over each
        group's heads; with ``C`` the pair ``(dC, ddA_cumsum)``, ddA_cumsum (batch, nheads, nchunks,
        chunk_size) the state term's gradient of dA_cumsum.

    Raises:
        TypeError / ValueError: shapes that disagree, naming the argument.
    """
    fn = "_chunk_scan_bwd_dC"
    require(fn, "prev_states", prev_states, (None, None, None, None, None))
    batch, nchunks, nheads, headdim, dstate = prev_states.shape
    require(fn, "dA_cumsum", dA_cumsum, (batch, nheads, nchunks, None))
    require(fn, "dout", dout, (batch, None, nheads, headdim))
    seqlen, q = dout.shape[1], dA_cumsum.shape[-1]
    with_dA = C is not None
    if C is None:  # the gradient of C does not depend on C: any C of the right shape
        C = dout.new_zeros(batch, seqlen, ngroups, dstate)
    # x = 0: no in-chunk term, so the gradients are the state term's alone
    x0 = dout.new_zeros(batch, seqlen, nheads, headdim)
    dt0 = dA_cumsum.new_zeros(dA_cumsum.shape)
    _check(fn, x0, dt0, dA_cumsum, C, prev_states, None, None, seq_idx)
    cb0 = x0.new_zeros(batch, nchunks, C.shape[2], q, q)

    def state_term(C_: torch.Tensor, cs_: torch.Tensor) -> torch.Tensor:
        return S.chunk_scan(cb0, x0, dt0, cs_, C_, prev_states, None, None, seq_idx)[0]

    got = _grads(state_term, (C, dA_cumsum), [0, 1] if with_dA else [0], (dout,))
    dC = _f32(_or_zeros(got[0], C))
    if not with_dA:
        return dC
    ddA = got[1] if got[1] is not None else torch.zeros_like(dA_cumsum, dtype=dC.dtype)
    return dC, _f32(ddA)


def _chunk_scan_bwd_dx(
    cb: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    dout: torch.Tensor,
    D: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The gradients of stage 4's in-chunk term ``sum_{j<=i} CB_ij exp(cs_i - cs_j) dt'_j x_j (+ D x_i)``
    given dout, without seq_idx.

    Args:
        cb: (batch, nchunks, ngroups, chunk_size, chunk_size). x, dout: (batch, seqlen, nheads, headdim).
        dt, dA_cumsum: (batch, nheads, nchunks, chunk_size). D: (nheads, headdim), (nheads,) or None.

    Returns:
        (dx in x's dtype, ddt (batch, nheads, nchunks, chunk_size) float32 (float64 for float64 inputs)).

    Raises:
        TypeError / ValueError: shapes that disagree, naming the argument.
    """
    fn = "_chunk_scan_bwd_dx"
    require(fn, "x", x, (None, None, None, None))
    require(fn, "cb", cb, (x.shape[0], None, None, None, None))
    batch, nchunks, ngroups = cb.shape[:3]
    require(fn, "dout", dout, tuple(x.shape))
    C0 = x.new_zeros(batch, x.shape[1], ngroups, 1)  # no state term: it does not depend on x or dt
    states0 = x.new_zeros(batch, nchunks, x.shape[2], x.shape[3], 1)
    q = _check(fn, x, dt, dA_cumsum, C0, states0, D, None, None)
    require(fn, "cb", cb, (batch, nchunks, ngroups, q, q))

    def in_chunk(x_: torch.Tensor, dt_: torch.Tensor) -> torch.Tensor:
        return S.chunk_scan(cb, x_, dt_, dA_cumsum, C0, states0, D)[0]

    g_x, g_dt = _grads(in_chunk, (x, dt), [0, 1], (dout,))
    if g_dt is None:
        g_dt = torch.zeros_like(dt, dtype=S.compute_dtype(dt))
    return _or_zeros(g_x, x).to(x.dtype), _f32(g_dt)


def chunk_scan_ref(
    B: torch.Tensor,
    C: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    prev_states: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Stage 4 with the C B^T products, in plain PyTorch: out (batch, seqlen, nheads, headdim) in x's
    dtype (gated by silu(z) when z is given). B, C: (batch, seqlen, ngroups, dstate); prev_states
    (batch, nchunks, nheads, headdim, dstate); the rest as :func:`_chunk_scan_fwd`."""
    q = _check("chunk_scan_ref", x, dt, dA_cumsum, C, prev_states, D, z, None)
    require("chunk_scan_ref", "B", B, tuple(C.shape))
    y, _ = S.chunk_scan(S.bmm_chunk(C, B, q), x, dt, dA_cumsum, C, prev_states, D, z)
    return y.to(x.dtype)


class ChunkScanFn(torch.autograd.Function):
    """Stage 4 as an autograd Function, differentiable in B, C, x, dt, dA_cumsum, prev_states, D, z."""

    @staticmethod
    def forward(
        ctx: Any,
        B: torch.Tensor,
        C: torch.Tensor,
        x: torch.Tensor,
        dt: torch.Tensor,
        dA_cumsum: torch.Tensor,
        prev_states: torch.Tensor,
        D: Optional[torch.Tensor] = None,
        z: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        out: torch.Tensor = _recompute.forward(
            ctx, chunk_scan_ref, (B, C, x, dt, dA_cumsum, prev_states, D, z)
        )
        return out

    @staticmethod
    def backward(ctx: Any, dout: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:
        return _recompute.backward(ctx, dout)


def chunk_scan(
    B: torch.Tensor,
    C: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    prev_states: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """:func:`chunk_scan_ref`, differentiable (:class:`ChunkScanFn`): the same arguments and out
    (batch, seqlen, nheads, headdim) in x's dtype."""
    out: torch.Tensor = ChunkScanFn.apply(B, C, x, dt, dA_cumsum, prev_states, D, z)
    return out
