"""Upstream's ``mamba_ssm.ops.triton.ssd_chunk_scan``: SSD stage 4 (Dao & Gu, arXiv:2405.21060, section 6),
the outputs from the diagonal blocks and the states entering each chunk, in PyTorch
(:mod:`mamba_ssm.ops.triton._ssd_stages`; the Triton SSD runs this stage fused with the C B^T products
inside :func:`mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined`):

    y_i = sum_{j <= i in the chunk} CB_ij exp(cs_i - cs_j) dt'_j x_j + exp(cs_i) C_i . H_c  (+ D x_i, * silu(z_i))

With ``seq_idx`` a term counts only within one sequence, H_c only for positions of its sequence, and a
padding token (seq_idx < 0) outputs 0.
"""

from __future__ import annotations

import torch

from mamba_ssm.ops import _recompute
from mamba_ssm.ops.triton import _ssd_stages as S
from mamba_ssm.ops.triton._helpers import init_to_zero, require, triton_at_least

__all__ = ["TRITON_22", "init_to_zero", "ChunkScanFn", "chunk_scan", "chunk_scan_ref", "_chunk_scan_fwd"]

#: Whether the installed triton is 2.2 or later (upstream's flag; nothing here depends on it).
TRITON_22 = triton_at_least(2, 2)


def _check(fn, x, dt, dA_cumsum, C, states, D, z, seq_idx):
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


def _chunk_scan_fwd(cb, x, dt, dA_cumsum, C, states, D=None, z=None, seq_idx=None):
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


def chunk_scan_ref(B, C, x, dt, dA_cumsum, prev_states, D=None, z=None):
    """Stage 4 with the C B^T products, in plain PyTorch: out (batch, seqlen, nheads, headdim) in x's
    dtype. B, C: (batch, seqlen, ngroups, dstate); the rest as :func:`_chunk_scan_fwd`."""
    q = _check("chunk_scan_ref", x, dt, dA_cumsum, C, prev_states, D, z, None)
    require("chunk_scan_ref", "B", B, tuple(C.shape))
    y, _ = S.chunk_scan(S.bmm_chunk(C, B, q), x, dt, dA_cumsum, C, prev_states, D, z)
    return y.to(x.dtype)


class ChunkScanFn(torch.autograd.Function):
    """Stage 4 as an autograd Function, differentiable in B, C, x, dt, dA_cumsum, prev_states, D, z."""

    @staticmethod
    def forward(ctx, B, C, x, dt, dA_cumsum, prev_states, D=None, z=None):
        return _recompute.forward(ctx, chunk_scan_ref, (B, C, x, dt, dA_cumsum, prev_states, D, z))

    @staticmethod
    def backward(ctx, dout):
        return _recompute.backward(ctx, dout)


def chunk_scan(B, C, x, dt, dA_cumsum, prev_states, D=None, z=None):
    """:func:`chunk_scan_ref`, differentiable (:class:`ChunkScanFn`)."""
    return ChunkScanFn.apply(B, C, x, dt, dA_cumsum, prev_states, D, z)
