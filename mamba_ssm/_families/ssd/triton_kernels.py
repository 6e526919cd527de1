"""Triton kernels for Mamba-2's SSD scan (``mamba_chunk_scan_combined``), forward and backward.

Math (Dao & Gu, arXiv:2405.21060, section 6, "the SSD algorithm"), per batch entry and head h with
scalar A, head dimension p, state size n, chunk length Q; position t of chunk c, cs the in-chunk
cumulative sum of ``dt' A``, ``dt' = clamp(softplus(dt + dt_bias), dt_limit)``:

    1. chunk cumsum:   cs_t = sum_{k <= t, k in chunk} dt'_k A
    2. chunk states:   S_c[p, n] = sum_j exp(cs_end - cs_j) dt'_j x_j[p] B_j[n]
    3. state passing:  H_0 = initial_states, H_{c+1} = exp(cs_end(c)) H_c + S_c   (H_c enters chunk c)
    4. chunk outputs:  y_i = sum_{j <= i} (C_i . B_j) exp(cs_i - cs_j) dt'_j x_j + exp(cs_i) H_c C_i,
                       then + D x_i and * silu(z_i)

With ``seq_idx`` (packed sequences) every term linking two positions of different sequences is masked:
``j`` counts for ``i`` only when ``seq_j == seq_i``; a chunk's incoming state only for positions of
the sequence the state belongs to (the one of the position before the chunk; for chunk 0 the first
one, so ``initial_states`` belongs to the first sequence), and it is carried through a chunk only when
the chunk ends in that sequence. A negative ``seq_idx`` marks a padding token: its output is 0 (so its
output gradient is dropped) and it writes no state (a chunk ending in padding has S_c = 0 and carries
nothing, so a row ending in padding has a zero final state). A sequence length that is not a multiple
of Q pads the last chunk with dt' = 0 and zero x, B, C (nothing flows from or into the padding).

Backward (the adjoint of the same four steps): with G_c the gradient of H_c, G_nc = d final_states,
G_c = exp(cs_end(c)) G_{c+1} + sum_i exp(cs_i) dy_i C_i^T (reverse state passing); the in-chunk
gradients of C, B and x' = dt' x follow from step 4 and 2 with dS_c = G_{c+1}; every exponent's
gradient is collected as a gradient of cs (row sums minus column sums of
``P_ij = exp(cs_i - cs_j) (C_i.B_j)(dy_i.x'_j)``, plus the state and decay terms) and a reverse
in-chunk cumsum turns it into the gradient of ``dt' A``, hence of dt and A.

Kernels (grids in brackets; no Python loop over chunks or heads):
    _dt_cumsum_fwd   [batch, nheads, nchunks]      dt' and cs
    _chunk_state     [batch*nheads, nchunks, tiles] S_c (and, in the backward, sum_i exp(cs_i) dy_i C_i^T)
    _state_pass_fwd  [batch*nheads, tiles]         H_c in order, the final state
    _chunk_scan_fwd  [batch*nheads, nchunks, tiles] y (+ D x, * silu(z))
    _state_pass_bwd  [batch*nheads, tiles]         G_c in reverse, d initial_states, decay gradients
    _chunk_scan_bwd_dc  [batch*nheads, nchunks, row blocks]  dC, cs gradient (rows)
    _chunk_scan_bwd_dbx [batch*nheads, nchunks, col blocks]  dB, dx, d dt' (direct), cs gradient (cols)
    _dt_cumsum_bwd   [batch, nheads, nchunks]      d dt, dA and d dt_bias partial sums
    _varlen_states   [num_seqs, nheads, tiles]     with cu_seqlens: each sequence's last state (forward only)
Launchers: one per stage (``dt_cumsum``, ``chunk_states``, ``state_passing``, ``chunk_outputs``,
``varlen_states``; upstream's stage modules call them); ``core_forward`` / ``core_backward`` are steps
2-4 and their adjoint on a given weight dt' and decay cumsum cs (Mamba-3's kernels call them with their
own); ``forward`` / ``backward`` add stage 1, D and z around them (Mamba-2's autograd function).
The D / z parts of the backward and the sums over a group's heads (dB, dC) are torch element-wise
ops and reductions. Float32 accumulation; matrix products take float16/bfloat16 operands for those
inputs and exact float32 ("ieee") products for float32 inputs.
"""

import math
import os
from typing import Any, Dict, Optional, Tuple, TypedDict, Union, cast

import torch
import triton
import triton.language as tl

from mamba_ssm._families import packing as _packing
from mamba_ssm._families.triton_common import Block, Pointer, Scalar, jit, pow2, unsupported_dtype

__all__ = [
    "CHUNK_SIZES",
    "backward",
    "check_chunk_size",
    "chunk_outputs",
    "chunk_scan_combined",
    "chunk_states",
    "core_backward",
    "core_forward",
    "dt_cumsum",
    "forward",
    "prepare_packing",
    "round_states",
    "stage_unsupported",
    "state_passing",
    "unsupported",
    "varlen_states",
]

#: The chunk sizes the kernels take.
CHUNK_SIZES = (16, 32, 64, 128, 256)
_MAX_HEADDIM = 256
_MAX_DSTATE = 256


def check_chunk_size(chunk_size: object) -> None:
    """Raise ValueError unless ``chunk_size`` is a power of two in 16..256."""
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size not in CHUNK_SIZES:
        raise ValueError(
            f"mamba_chunk_scan_combined: chunk_size={chunk_size!r} is not supported by the Triton "
            f"SSD kernels: use a power of two from 16 to 256 ({', '.join(map(str, CHUNK_SIZES))}; "
            "256 is Mamba-2's default)"
        )


def unsupported(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
) -> Optional[str]:
    """None when the kernels take this (validated) call, else why not (one sentence)."""
    why = unsupported_dtype(
        x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias, initial_states=initial_states
    )
    if why is not None:
        return why
    if (
        x.dtype == torch.bfloat16
        and x.device.type == "cuda"
        and not getattr(torch.version, "hip", None)
        and torch.cuda.get_device_capability(x.device) < (8, 0)
    ):
        return "Triton's bfloat16 matrix products need compute capability >= 8.0"
    if x.shape[-1] > _MAX_HEADDIM:
        return f"headdim {x.shape[-1]} exceeds the Triton SSD kernels' {_MAX_HEADDIM}"
    if B.shape[-1] > _MAX_DSTATE:
        return f"dstate {B.shape[-1]} exceeds the Triton SSD kernels' {_MAX_DSTATE}"
    if x.shape[1] == 0:
        return "seqlen is 0"
    return None


def stage_unsupported(chunk_size: int, **tensors: Optional[torch.Tensor]) -> Optional[str]:
    """None when the kernels take an SSD stage call (upstream's stage functions), else why not:
    ``tensors`` by name (None entries skipped); ``x`` (batch, seqlen, nheads, headdim) and ``B``
    (batch, seqlen, ngroups, dstate) give the sizes checked."""
    why = unsupported_dtype(**tensors)
    if why is not None:
        return why
    if chunk_size not in CHUNK_SIZES:
        return f"chunk_size {chunk_size} is not a power of two in 16..256"
    x, B = tensors.get("x"), tensors.get("B")
    if x is not None and x.shape[-1] > _MAX_HEADDIM:
        return f"headdim {x.shape[-1]} exceeds the Triton SSD kernels' {_MAX_HEADDIM}"
    if B is not None and B.shape[-1] > _MAX_DSTATE:
        return f"dstate {B.shape[-1]} exceeds the Triton SSD kernels' {_MAX_DSTATE}"
    return None


_TL_DTYPES = {torch.float32: tl.float32, torch.float16: tl.float16, torch.bfloat16: tl.bfloat16}
# Tile edge of the forward kernels and of the backward's chunk-state product: exact float32 products
# hold twice the registers of half-precision ones (tests/ops/triton/compile_check.py: no spills this way).
_TILE = {torch.float32: 32, torch.float16: 64, torch.bfloat16: 64}

# Triton's interpreter (3.8) computes tl.dot of bfloat16 operands wrongly; there the operands are
# rounded to bfloat16 and multiplied in float32, which is the same arithmetic as a GPU's bf16 MMA.
_EMULATE_BF16_DOT = tl.constexpr(os.environ.get("TRITON_INTERPRET", "") == "1")


@jit
def _dot(a: Block, b: Block, DOT_DT: tl.constexpr, IEEE: tl.constexpr) -> Block:
    if IEEE:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    elif _EMULATE_BF16_DOT and tl.bfloat16 == DOT_DT:
        return tl.dot(a.to(DOT_DT).to(tl.float32), b.to(DOT_DT).to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a.to(DOT_DT), b.to(DOT_DT))


@jit
def _softplus(v: Block) -> Block:
    return tl.where(v > 20.0, v, tl.log(1.0 + tl.exp(tl.minimum(v, 20.0))))


@jit
def _dt_cumsum_fwd(
    DT: Pointer,
    A: Pointer,
    DTB: Pointer,
    DTP: Pointer,
    CS: Pointer,
    seqlen: Scalar,
    T: Scalar,
    dt_b: Scalar,
    dt_l: Scalar,
    dt_h: Scalar,
    nheads: Scalar,
    lo: Scalar,
    hi: Scalar,
    HAS_DTB: tl.constexpr,
    SOFTPLUS: tl.constexpr,
    HAS_LIMIT: tl.constexpr,
    Q: tl.constexpr,
) -> None:
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    c = tl.program_id(2)
    t = (c * Q + tl.arange(0, Q)).to(tl.int64)
    m = t < seqlen
    dt = tl.load(DT + b * dt_b + t * dt_l + h * dt_h, mask=m, other=0.0).to(tl.float32)
    if HAS_DTB:
        dt += tl.load(DTB + h).to(tl.float32)
    if SOFTPLUS:
        dt = _softplus(dt)
    if HAS_LIMIT:
        dt = tl.minimum(tl.maximum(dt, lo), hi)
    dt = tl.where(m, dt, 0.0)
    a = tl.load(A + h).to(tl.float32)
    cs = tl.cumsum(dt * a, axis=0)
    base = (b * nheads + h) * T
    tl.store(DTP + base + t, dt)
    tl.store(CS + base + t, cs)


@jit
def _head_of_program(nheads: Scalar, heads_per_group: Scalar) -> Block:
    """(batch entry, head, group, chunk) of this program: axis 0 is batch * nheads, axis 1 the chunk."""
    bh = tl.program_id(0)
    h = bh % nheads
    return (bh // nheads).to(tl.int64), h, h // heads_per_group, tl.program_id(1)


@jit
def _seq_refs(
    SEQ: Pointer, b: Block, c: Block, seqlen: Scalar, s_b: Scalar, s_l: Scalar, Q: tl.constexpr
) -> Block:
    """The sequence id of the state entering chunk c and of the chunk's last real position."""
    prev = tl.load(SEQ + b * s_b + tl.maximum(c * Q - 1, 0) * s_l)
    last = tl.load(SEQ + b * s_b + (tl.minimum(c * Q + Q, seqlen) - 1) * s_l)
    return prev, last


@jit
def _chunk_state(
    X: Pointer,
    Bm: Pointer,
    DTP: Pointer,
    CS: Pointer,
    SEQ: Pointer,
    OUT: Pointer,
    seqlen: Scalar,
    T: Scalar,
    nheads: Scalar,
    heads_per_group: Scalar,
    hdim: Scalar,
    dstate: Scalar,
    x_b: Scalar,
    x_l: Scalar,
    x_h: Scalar,
    x_p: Scalar,
    b_b: Scalar,
    b_l: Scalar,
    b_g: Scalar,
    b_n: Scalar,
    s_b: Scalar,
    s_l: Scalar,
    MODE: tl.constexpr,
    HAS_SEQ: tl.constexpr,
    Q: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DOT_DT: tl.constexpr,
    IEEE: tl.constexpr,
) -> None:
    """OUT[b, c, h] (p, n) = sum_j wt_j X_j[p] B_j[n] over chunk c. MODE 0: wt = exp(cs_end - cs_j) dt'_j
    (j in the chunk's last sequence); MODE 1: wt = exp(cs_j) (j in the incoming state's sequence)."""
    b, h, g, c = _head_of_program(nheads, heads_per_group)
    tile = tl.program_id(2)
    ntn = tl.cdiv(dstate, BLOCK_N)
    rp = (tile // ntn) * BLOCK_P + tl.arange(0, BLOCK_P)
    rn = (tile % ntn) * BLOCK_N + tl.arange(0, BLOCK_N)
    mp = rp < hdim
    mn = rn < dstate
    base = (b * nheads + h) * T
    cs_end = tl.load(CS + base + c * Q + Q - 1)
    if HAS_SEQ:
        prev, last = _seq_refs(SEQ, b, c, seqlen, s_b, s_l, Q)
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, Q, BLOCK_K):
        t = (c * Q + k0 + tl.arange(0, BLOCK_K)).to(tl.int64)
        mt = t < seqlen
        cs = tl.load(CS + base + t)
        if MODE == 0:
            wt = tl.exp(cs_end - cs) * tl.load(DTP + base + t)
        else:
            wt = tl.exp(cs)
        if HAS_SEQ:
            sq = tl.load(SEQ + b * s_b + t * s_l, mask=mt, other=-1)
            if MODE == 0:
                wt = tl.where((sq == last) & (last >= 0), wt, 0.0)
            else:
                wt = tl.where(sq == prev, wt, 0.0)
        wt = tl.where(mt, wt, 0.0)
        xt = tl.load(
            X + b * x_b + t[None, :] * x_l + h * x_h + rp[:, None] * x_p,
            mask=mp[:, None] & mt[None, :],
            other=0.0,
        ).to(tl.float32)
        bt = tl.load(
            Bm + b * b_b + t[:, None] * b_l + g * b_g + rn[None, :] * b_n,
            mask=mt[:, None] & mn[None, :],
            other=0.0,
        )
        acc += _dot(xt * wt[None, :], bt, DOT_DT, IEEE)
    nc = tl.num_programs(1)
    out = OUT + ((b * nc + c) * nheads + h) * hdim * dstate
    tl.store(out + rp[:, None] * dstate + rn[None, :], acc, mask=mp[:, None] & mn[None, :])


@jit
def _state_pass_fwd(
    S: Pointer,
    CS: Pointer,
    SEQ: Pointer,
    H0: Pointer,
    HIN: Pointer,
    HFIN: Pointer,
    seqlen: Scalar,
    T: Scalar,
    cs_c: Scalar,
    cs_off: Scalar,
    nheads: Scalar,
    size: Scalar,
    nchunks: Scalar,
    s_b: Scalar,
    s_l: Scalar,
    HAS_SEQ: tl.constexpr,
    HAS_H0: tl.constexpr,
    Q: tl.constexpr,
    BLOCK: tl.constexpr,
) -> None:
    """HIN[b, c, h] = H_c, HFIN[b, h] = H_nc; chunk c's cs_end is CS[(b * nheads + h) * T + c * cs_c +
    cs_off] (the last in-chunk cumsum, or a (batch, nheads, nchunks) tensor of them)."""
    bh = tl.program_id(0)
    b = (bh // nheads).to(tl.int64)
    h = bh % nheads
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = offs < size
    if HAS_H0:
        hs = tl.load(H0 + (b * nheads + h) * size + offs, mask=m, other=0.0).to(tl.float32)
    else:
        hs = tl.zeros([BLOCK], dtype=tl.float32)
    base = (b * nheads + h) * T
    for c in range(0, nchunks):
        at = ((b * nchunks + c) * nheads + h) * size
        tl.store(HIN + at + offs, hs, mask=m)
        decay = tl.exp(tl.load(CS + base + c * cs_c + cs_off))
        if HAS_SEQ:
            prev, last = _seq_refs(SEQ, b, c, seqlen, s_b, s_l, Q)
            decay = tl.where((prev == last) & (last >= 0), decay, 0.0)
        hs = decay * hs + tl.load(S + at + offs, mask=m, other=0.0)
    tl.store(HFIN + (b * nheads + h) * size + offs, hs, mask=m)


@jit
def _chunk_scan_fwd(
    X: Pointer,
    Bm: Pointer,
    Cm: Pointer,
    DTP: Pointer,
    CS: Pointer,
    SEQ: Pointer,
    HIN: Pointer,
    Dp: Pointer,
    Z: Pointer,
    OUT: Pointer,
    YPRE: Pointer,
    seqlen: Scalar,
    T: Scalar,
    nheads: Scalar,
    heads_per_group: Scalar,
    hdim: Scalar,
    dstate: Scalar,
    x_b: Scalar,
    x_l: Scalar,
    x_h: Scalar,
    x_p: Scalar,
    b_b: Scalar,
    b_l: Scalar,
    b_g: Scalar,
    b_n: Scalar,
    c_b: Scalar,
    c_l: Scalar,
    c_g: Scalar,
    c_n: Scalar,
    z_b: Scalar,
    z_l: Scalar,
    z_h: Scalar,
    z_p: Scalar,
    o_b: Scalar,
    o_l: Scalar,
    o_h: Scalar,
    o_p: Scalar,
    s_b: Scalar,
    s_l: Scalar,
    d_h: Scalar,
    d_p: Scalar,
    HAS_SEQ: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_J: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_DT: tl.constexpr,
    IEEE: tl.constexpr,
) -> None:
    b, h, g, c = _head_of_program(nheads, heads_per_group)
    tile = tl.program_id(2)
    ntp = tl.cdiv(hdim, BLOCK_P)
    i0 = (tile // ntp) * BLOCK_M
    ri = i0 + tl.arange(0, BLOCK_M)  # in-chunk rows
    rp = (tile % ntp) * BLOCK_P + tl.arange(0, BLOCK_P)
    mp = rp < hdim
    ti = (c * Q + ri).to(tl.int64)
    mi = ti < seqlen
    base = (b * nheads + h) * T
    cs_i = tl.load(CS + base + ti)
    if HAS_SEQ:
        seq_i = tl.load(SEQ + b * s_b + ti * s_l, mask=mi, other=-1)
        prev, last = _seq_refs(SEQ, b, c, seqlen, s_b, s_l, Q)
    # The incoming state's contribution: exp(cs_i) C_i . H_c[p, :].
    acc = tl.zeros([BLOCK_M, BLOCK_P], dtype=tl.float32)
    nc = tl.num_programs(1)
    hin = HIN + ((b * nc + c) * nheads + h) * hdim * dstate
    for n0 in range(0, dstate, BLOCK_N):
        rn = n0 + tl.arange(0, BLOCK_N)
        mn = rn < dstate
        ct = tl.load(
            Cm + b * c_b + ti[:, None] * c_l + g * c_g + rn[None, :] * c_n,
            mask=mi[:, None] & mn[None, :],
            other=0.0,
        )
        ht = tl.load(hin + rp[None, :] * dstate + rn[:, None], mask=mn[:, None] & mp[None, :], other=0.0)
        acc += _dot(ct, ht, DOT_DT, IEEE)
    e_i = tl.exp(cs_i)
    if HAS_SEQ:
        e_i = tl.where(seq_i == prev, e_i, 0.0)
    acc = acc * e_i[:, None]
    # In-chunk terms, j <= i.
    for j0 in range(0, i0 + BLOCK_M, BLOCK_J):
        rj = j0 + tl.arange(0, BLOCK_J)
        tj = (c * Q + rj).to(tl.int64)
        mj = tj < seqlen
        cb = tl.zeros([BLOCK_M, BLOCK_J], dtype=tl.float32)
        for n0 in range(0, dstate, BLOCK_N):
            rn = n0 + tl.arange(0, BLOCK_N)
            mn = rn < dstate
            ct = tl.load(
                Cm + b * c_b + ti[:, None] * c_l + g * c_g + rn[None, :] * c_n,
                mask=mi[:, None] & mn[None, :],
                other=0.0,
            )
            btt = tl.load(
                Bm + b * b_b + tj[None, :] * b_l + g * b_g + rn[:, None] * b_n,
                mask=mn[:, None] & mj[None, :],
                other=0.0,
            )
            cb += _dot(ct, btt, DOT_DT, IEEE)
        cs_j = tl.load(CS + base + tj)
        keep = (ri[:, None] >= rj[None, :]) & mj[None, :]
        if HAS_SEQ:
            seq_j = tl.load(SEQ + b * s_b + tj * s_l, mask=mj, other=-2)
            keep = keep & (seq_i[:, None] == seq_j[None, :])
        decay = tl.exp(tl.where(keep, cs_i[:, None] - cs_j[None, :], float("-inf")))
        dt_j = tl.load(DTP + base + tj)
        xj = tl.load(
            X + b * x_b + tj[:, None] * x_l + h * x_h + rp[None, :] * x_p,
            mask=mj[:, None] & mp[None, :],
            other=0.0,
        )
        # Causal for non-finite inputs too: a masked (j > i) weight is selected to 0, never 0 * (a later
        # token's NaN or inf in B or dt); in the blocks that hold j > i a non-finite x_j enters the dot as
        # 0 and makes the rows i >= j non-finite afterwards (no 0 * inf into an earlier row).
        w = tl.where(keep, cb * decay * dt_j[None, :], 0.0)
        if j0 + BLOCK_J > i0:
            fin = tl.abs(xj.to(tl.float32)) < float("inf")  # False for NaN and +-inf
            first = tl.min(tl.where(fin, Q, rj[:, None]), axis=0)  # per column: the first non-finite row
            acc += _dot(w, tl.where(fin, xj, 0.0), DOT_DT, IEEE)
            acc = tl.where(ri[:, None] >= first[None, :], float("nan"), acc)
        else:
            acc += _dot(w, xj, DOT_DT, IEEE)
    mo = mi[:, None] & mp[None, :]
    if HAS_D:
        dv = tl.load(Dp + h * d_h + rp * d_p, mask=mp, other=0.0).to(tl.float32)
        xi = tl.load(X + b * x_b + ti[:, None] * x_l + h * x_h + rp[None, :] * x_p, mask=mo, other=0.0)
        acc += xi.to(tl.float32) * dv[None, :]
    if HAS_SEQ:  # padding outputs 0
        acc = tl.where((seq_i >= 0)[:, None], acc, 0.0)
    if HAS_Z:
        tl.store(YPRE + b * o_b + ti[:, None] * o_l + h * o_h + rp[None, :] * o_p, acc, mask=mo)
        zt = tl.load(Z + b * z_b + ti[:, None] * z_l + h * z_h + rp[None, :] * z_p, mask=mo, other=0.0)
        zt = zt.to(tl.float32)
        acc = acc * zt * tl.sigmoid(zt)
    tl.store(OUT + b * o_b + ti[:, None] * o_l + h * o_h + rp[None, :] * o_p, acc, mask=mo)


@jit
def _state_pass_bwd(
    HIN: Pointer,
    DINTER: Pointer,
    CS: Pointer,
    SEQ: Pointer,
    DFIN: Pointer,
    DS: Pointer,
    DH0: Pointer,
    DDECAY: Pointer,
    seqlen: Scalar,
    T: Scalar,
    nheads: Scalar,
    size: Scalar,
    nchunks: Scalar,
    ntiles: Scalar,
    s_b: Scalar,
    s_l: Scalar,
    HAS_SEQ: tl.constexpr,
    HAS_DFIN: tl.constexpr,
    Q: tl.constexpr,
    BLOCK: tl.constexpr,
) -> None:
    """G runs backwards: DS[c] = G_{c+1}; DDECAY[b, h, c, tile] = partial of d cs_end(c) from the decay."""
    bh = tl.program_id(0)
    tile = tl.program_id(1)
    b = (bh // nheads).to(tl.int64)
    h = bh % nheads
    offs = tile * BLOCK + tl.arange(0, BLOCK)
    m = offs < size
    if HAS_DFIN:
        gs = tl.load(DFIN + (b * nheads + h) * size + offs, mask=m, other=0.0).to(tl.float32)
    else:
        gs = tl.zeros([BLOCK], dtype=tl.float32)
    base = (b * nheads + h) * T
    for k in range(0, nchunks):
        c = nchunks - 1 - k
        at = ((b * nchunks + c) * nheads + h) * size
        tl.store(DS + at + offs, gs, mask=m)
        decay = tl.exp(tl.load(CS + base + c * Q + Q - 1))
        if HAS_SEQ:
            prev, last = _seq_refs(SEQ, b, c, seqlen, s_b, s_l, Q)
            decay = tl.where((prev == last) & (last >= 0), decay, 0.0)
        hin = tl.load(HIN + at + offs, mask=m, other=0.0)
        tl.store(DDECAY + ((b * nheads + h) * nchunks + c) * ntiles + tile, tl.sum(gs * hin, axis=0) * decay)
        gs = decay * gs + tl.load(DINTER + at + offs, mask=m, other=0.0)
    tl.store(DH0 + (b * nheads + h) * size + offs, gs, mask=m)


@jit
def _chunk_scan_bwd_dc(
    X: Pointer,
    Bm: Pointer,
    Cm: Pointer,
    DTP: Pointer,
    CS: Pointer,
    SEQ: Pointer,
    HIN: Pointer,
    DY: Pointer,
    DC: Pointer,
    DCS: Pointer,
    seqlen: Scalar,
    T: Scalar,
    nheads: Scalar,
    heads_per_group: Scalar,
    hdim: Scalar,
    dstate: Scalar,
    x_b: Scalar,
    x_l: Scalar,
    x_h: Scalar,
    x_p: Scalar,
    b_b: Scalar,
    b_l: Scalar,
    b_g: Scalar,
    b_n: Scalar,
    c_b: Scalar,
    c_l: Scalar,
    c_g: Scalar,
    c_n: Scalar,
    s_b: Scalar,
    s_l: Scalar,
    HAS_SEQ: tl.constexpr,
    Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_J: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_DT: tl.constexpr,
    IEEE: tl.constexpr,
) -> None:
    """Rows i of chunk c: dC_i (per head) and the cs gradient's row part sum_j P_ij + exp(cs_i) dy_i.(H C_i)."""
    b, h, g, c = _head_of_program(nheads, heads_per_group)
    i0 = tl.program_id(2) * BLOCK_M
    ri = i0 + tl.arange(0, BLOCK_M)
    rp = tl.arange(0, BLOCK_P)
    rn = tl.arange(0, BLOCK_N)
    mp = rp < hdim
    mn = rn < dstate
    ti = (c * Q + ri).to(tl.int64)
    mi = ti < seqlen
    base = (b * nheads + h) * T
    cs_i = tl.load(CS + base + ti)
    if HAS_SEQ:
        seq_i = tl.load(SEQ + b * s_b + ti * s_l, mask=mi, other=-1)
        prev, last = _seq_refs(SEQ, b, c, seqlen, s_b, s_l, Q)
    # dy rows: float32, contiguous (batch, seqlen, nheads, headdim).
    dy = tl.load(
        DY + ((b * seqlen + ti[:, None]) * nheads + h) * hdim + rp[None, :],
        mask=mi[:, None] & mp[None, :],
        other=0.0,
    )
    ci = tl.load(
        Cm + b * c_b + ti[:, None] * c_l + g * c_g + rn[None, :] * c_n,
        mask=mi[:, None] & mn[None, :],
        other=0.0,
    )
    nc = tl.num_programs(1)
    hin = tl.load(
        HIN + ((b * nc + c) * nheads + h) * hdim * dstate + rp[:, None] * dstate + rn[None, :],
        mask=mp[:, None] & mn[None, :],
        other=0.0,
    )
    e_i = tl.exp(cs_i)
    if HAS_SEQ:
        e_i = tl.where(seq_i == prev, e_i, 0.0)
    dyh = _dot(dy, hin, DOT_DT, IEEE)  # (M, N): sum_p dy[p] H[p, n]
    acc = dyh * e_i[:, None]
    rowp = tl.sum(ci.to(tl.float32) * dyh, axis=1) * e_i
    for j0 in range(0, i0 + BLOCK_M, BLOCK_J):
        rj = j0 + tl.arange(0, BLOCK_J)
        tj = (c * Q + rj).to(tl.int64)
        mj = tj < seqlen
        bj = tl.load(
            Bm + b * b_b + tj[:, None] * b_l + g * b_g + rn[None, :] * b_n,
            mask=mj[:, None] & mn[None, :],
            other=0.0,
        )
        xj = tl.load(
            X + b * x_b + tj[:, None] * x_l + h * x_h + rp[None, :] * x_p,
            mask=mj[:, None] & mp[None, :],
            other=0.0,
        ).to(tl.float32)
        dt_j = tl.load(DTP + base + tj)
        xdj = xj * dt_j[:, None]
        cb = _dot(ci, tl.trans(bj), DOT_DT, IEEE)  # (M, J)
        dyx = _dot(dy, tl.trans(xdj), DOT_DT, IEEE)  # (M, J)
        cs_j = tl.load(CS + base + tj)
        keep = (ri[:, None] >= rj[None, :]) & mj[None, :]
        if HAS_SEQ:
            seq_j = tl.load(SEQ + b * s_b + tj * s_l, mask=mj, other=-2)
            keep = keep & (seq_i[:, None] == seq_j[None, :])
        decay = tl.exp(tl.where(keep, cs_i[:, None] - cs_j[None, :], float("-inf")))
        w1 = decay * dyx
        acc += _dot(w1, bj, DOT_DT, IEEE)
        rowp += tl.sum(w1 * cb, axis=1)
    tl.store(
        DC + ((b * seqlen + ti[:, None]) * nheads + h) * dstate + rn[None, :],
        acc,
        mask=mi[:, None] & mn[None, :],
    )
    tl.store(DCS + base + ti, rowp)


@jit
def _chunk_scan_bwd_dbx(
    X: Pointer,
    Bm: Pointer,
    Cm: Pointer,
    DTP: Pointer,
    CS: Pointer,
    SEQ: Pointer,
    DS: Pointer,
    DY: Pointer,
    DB: Pointer,
    DX: Pointer,
    DDT: Pointer,
    DCS: Pointer,
    RJ: Pointer,
    seqlen: Scalar,
    T: Scalar,
    nheads: Scalar,
    heads_per_group: Scalar,
    hdim: Scalar,
    dstate: Scalar,
    x_b: Scalar,
    x_l: Scalar,
    x_h: Scalar,
    x_p: Scalar,
    b_b: Scalar,
    b_l: Scalar,
    b_g: Scalar,
    b_n: Scalar,
    c_b: Scalar,
    c_l: Scalar,
    c_g: Scalar,
    c_n: Scalar,
    s_b: Scalar,
    s_l: Scalar,
    HAS_SEQ: tl.constexpr,
    Q: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_J: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
    DOT_DT: tl.constexpr,
    IEEE: tl.constexpr,
) -> None:
    """Columns j of chunk c: dB_j (per head), dx_j, the direct d dt'_j, the cs gradient's column part
    (minus column sums of P, minus the state term R_j) and R_j itself (for cs_end)."""
    b, h, g, c = _head_of_program(nheads, heads_per_group)
    j0 = tl.program_id(2) * BLOCK_J
    rj = j0 + tl.arange(0, BLOCK_J)
    rp = tl.arange(0, BLOCK_P)
    rn = tl.arange(0, BLOCK_N)
    mp = rp < hdim
    mn = rn < dstate
    tj = (c * Q + rj).to(tl.int64)
    mj = tj < seqlen
    base = (b * nheads + h) * T
    cs_j = tl.load(CS + base + tj)
    dt_j = tl.load(DTP + base + tj)
    cs_end = tl.load(CS + base + c * Q + Q - 1)
    if HAS_SEQ:
        seq_j = tl.load(SEQ + b * s_b + tj * s_l, mask=mj, other=-2)
        prev, last = _seq_refs(SEQ, b, c, seqlen, s_b, s_l, Q)
    bj = tl.load(
        Bm + b * b_b + tj[:, None] * b_l + g * b_g + rn[None, :] * b_n,
        mask=mj[:, None] & mn[None, :],
        other=0.0,
    )
    xj = tl.load(
        X + b * x_b + tj[:, None] * x_l + h * x_h + rp[None, :] * x_p,
        mask=mj[:, None] & mp[None, :],
        other=0.0,
    ).to(tl.float32)
    xdj = xj * dt_j[:, None]
    nc = tl.num_programs(1)
    ds = tl.load(
        DS + ((b * nc + c) * nheads + h) * hdim * dstate + rp[:, None] * dstate + rn[None, :],
        mask=mp[:, None] & mn[None, :],
        other=0.0,
    )  # (P, N)
    w = tl.exp(cs_end - cs_j)
    if HAS_SEQ:
        w = tl.where((seq_j == last) & (last >= 0), w, 0.0)
    w = tl.where(mj, w, 0.0)
    bds = _dot(bj.to(tl.float32), tl.trans(ds), DOT_DT, IEEE)  # (J, P): sum_n B[n] dS[p, n]
    acc_x = bds * w[:, None]
    acc_b = _dot(xdj, ds, DOT_DT, IEEE) * w[:, None]  # (J, N)
    r = tl.sum(xdj * bds, axis=1) * w
    colp = tl.zeros([BLOCK_J], dtype=tl.float32)
    for i0 in range(j0 - j0 % BLOCK_M, Q, BLOCK_M):
        ri = i0 + tl.arange(0, BLOCK_M)
        ti = (c * Q + ri).to(tl.int64)
        mi = ti < seqlen
        ci = tl.load(
            Cm + b * c_b + ti[:, None] * c_l + g * c_g + rn[None, :] * c_n,
            mask=mi[:, None] & mn[None, :],
            other=0.0,
        )
        dy = tl.load(
            DY + ((b * seqlen + ti[:, None]) * nheads + h) * hdim + rp[None, :],
            mask=mi[:, None] & mp[None, :],
            other=0.0,
        )
        cs_i = tl.load(CS + base + ti)
        keep = (ri[None, :] >= rj[:, None]) & mi[None, :] & mj[:, None]
        if HAS_SEQ:
            seq_i = tl.load(SEQ + b * s_b + ti * s_l, mask=mi, other=-1)
            keep = keep & (seq_i[None, :] == seq_j[:, None])
        decay = tl.exp(tl.where(keep, cs_i[None, :] - cs_j[:, None], float("-inf")))  # (J, M)
        bc = _dot(bj, tl.trans(ci), DOT_DT, IEEE)  # (J, M)
        xdy = _dot(xdj, tl.trans(dy), DOT_DT, IEEE)  # (J, M)
        m1 = decay * bc
        acc_x += _dot(m1, dy, DOT_DT, IEEE)
        m2 = decay * xdy
        acc_b += _dot(m2, ci, DOT_DT, IEEE)
        colp += tl.sum(m1 * xdy, axis=1)
    mo = mj[:, None] & mp[None, :]
    tl.store(
        DX + ((b * seqlen + tj[:, None]) * nheads + h) * hdim + rp[None, :], acc_x * dt_j[:, None], mask=mo
    )
    tl.store(DDT + base + tj, tl.sum(acc_x * xj, axis=1))
    tl.store(
        DB + ((b * seqlen + tj[:, None]) * nheads + h) * dstate + rn[None, :],
        acc_b,
        mask=mj[:, None] & mn[None, :],
    )
    tl.store(DCS + base + tj, -colp - r)
    tl.store(RJ + base + tj, r)


@jit
def _varlen_states(
    X: Pointer,
    Bm: Pointer,
    DTP: Pointer,
    CS: Pointer,
    SEQ: Pointer,
    HIN: Pointer,
    CU: Pointer,
    OUT: Pointer,
    seqlen: Scalar,
    T: Scalar,
    nheads: Scalar,
    heads_per_group: Scalar,
    hdim: Scalar,
    dstate: Scalar,
    nchunks: Scalar,
    x_l: Scalar,
    x_h: Scalar,
    x_p: Scalar,
    b_l: Scalar,
    b_g: Scalar,
    b_n: Scalar,
    s_l: Scalar,
    Q: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    DOT_DT: tl.constexpr,
    IEEE: tl.constexpr,
) -> None:
    """Batch 1: OUT[s, h] = the state after position cu[s + 1] - 1 (sequence s's last): its chunk's terms
    up to there from the same sequence, plus exp(cs_t) H_c when the incoming state is that sequence's;
    0 for an empty sequence (cu[s + 1] == cu[s])."""
    sid = tl.program_id(0)
    h = tl.program_id(1)
    tile = tl.program_id(2)
    g = h // heads_per_group
    ntn = tl.cdiv(dstate, BLOCK_N)
    rp = (tile // ntn) * BLOCK_P + tl.arange(0, BLOCK_P)
    rn = (tile % ntn) * BLOCK_N + tl.arange(0, BLOCK_N)
    mp = rp < hdim
    mn = rn < dstate
    t_begin = tl.load(CU + sid).to(tl.int64)
    t_stop = tl.load(CU + sid + 1).to(tl.int64)
    t_end = tl.minimum(tl.maximum(t_stop - 1, 0), seqlen - 1)
    c = t_end // Q
    base = h.to(tl.int64) * T
    cs_t = tl.load(CS + base + t_end)
    seq_t = tl.load(SEQ + t_end * s_l)
    prev = tl.load(SEQ + tl.maximum(c * Q - 1, 0) * s_l)
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, Q, BLOCK_K):
        t = c * Q + k0 + tl.arange(0, BLOCK_K)
        valid = t <= t_end
        sq = tl.load(SEQ + t * s_l, mask=valid, other=-1)
        keep = valid & (sq == seq_t)
        cs = tl.load(CS + base + t, mask=valid, other=0.0)
        wt = tl.exp(tl.where(keep, cs_t - cs, float("-inf"))) * tl.load(DTP + base + t, mask=valid, other=0.0)
        xt = tl.load(
            X + t[None, :] * x_l + h * x_h + rp[:, None] * x_p, mask=mp[:, None] & keep[None, :], other=0.0
        ).to(tl.float32)
        bt = tl.load(
            Bm + t[:, None] * b_l + g * b_g + rn[None, :] * b_n, mask=keep[:, None] & mn[None, :], other=0.0
        )
        acc += _dot(xt * wt[None, :], bt, DOT_DT, IEEE)
    hin = tl.load(
        HIN + (c * nheads + h) * hdim * dstate + rp[:, None] * dstate + rn[None, :],
        mask=mp[:, None] & mn[None, :],
        other=0.0,
    )
    acc += tl.where(prev == seq_t, tl.exp(cs_t), 0.0) * hin
    acc = tl.where(t_stop > t_begin, acc, 0.0)
    tl.store(
        OUT + ((sid * nheads + h) * hdim + rp[:, None]) * dstate + rn[None, :],
        acc,
        mask=mp[:, None] & mn[None, :],
    )


@jit
def _dt_cumsum_bwd(
    DT: Pointer,
    A: Pointer,
    DTB: Pointer,
    DTP: Pointer,
    DCS: Pointer,
    DDTP: Pointer,
    DDT: Pointer,
    DA: Pointer,
    DDTB: Pointer,
    seqlen: Scalar,
    T: Scalar,
    dt_b: Scalar,
    dt_l: Scalar,
    dt_h: Scalar,
    nheads: Scalar,
    lo: Scalar,
    hi: Scalar,
    HAS_DTB: tl.constexpr,
    SOFTPLUS: tl.constexpr,
    HAS_LIMIT: tl.constexpr,
    Q: tl.constexpr,
) -> None:
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    c = tl.program_id(2)
    nc = tl.num_programs(2)
    t = (c * Q + tl.arange(0, Q)).to(tl.int64)
    m = t < seqlen
    base = (b * nheads + h) * T
    dcs = tl.load(DCS + base + t)
    dda = tl.sum(dcs, axis=0) - tl.cumsum(dcs, axis=0) + dcs  # reverse in-chunk cumsum
    a = tl.load(A + h).to(tl.float32)
    dtp = tl.load(DTP + base + t)
    ddtp = tl.load(DDTP + base + t) + dda * a
    at = (b * nheads + h) * nc + c
    tl.store(DA + at, tl.sum(tl.where(m, dda * dtp, 0.0), axis=0))
    raw = tl.load(DT + b * dt_b + t * dt_l + h * dt_h, mask=m, other=0.0).to(tl.float32)
    if HAS_DTB:
        raw += tl.load(DTB + h).to(tl.float32)
    if SOFTPLUS:
        pre = _softplus(raw)
    else:
        pre = raw
    if HAS_LIMIT:
        ddtp = tl.where((pre >= lo) & (pre <= hi), ddtp, 0.0)
    if SOFTPLUS:
        ddtp = ddtp * tl.sigmoid(raw)
    ddtp = tl.where(m, ddtp, 0.0)
    tl.store(DDT + (b * seqlen + t) * nheads + h, ddtp, mask=m)
    tl.store(DDTB + at, tl.sum(ddtp, axis=0))


def _blocks(q: int, hdim: int, dstate: int) -> Dict[str, int]:
    """Block sizes of the backward's in-chunk kernels, which hold a whole headdim x dstate tile (dS or H)
    and (rows, headdim) / (rows, dstate) accumulators in registers: fewer rows per block as that grows.
    (compile_check.py at headdim 64 x dstate 128: no spills in bf16 on sm_90; float32, whose exact
    products need more registers, spills a few hundred bytes, also with 16 rows.)"""
    bp = pow2(hdim, 16)
    bn = pow2(dstate, 16)
    rows = 64 if bp * bn <= 2048 else (32 if bp * bn <= 8192 else 16)
    return dict(BLOCK_M=min(q, rows), BLOCK_J=min(q, rows), BLOCK_P=bp, BLOCK_N=bn)


def _f32(ref: torch.Tensor) -> Dict[str, Any]:
    """``torch.empty`` keywords: float32 on ``ref``'s device."""
    return {"dtype": torch.float32, "device": ref.device}


def _seq_args(seq_idx: Optional[torch.Tensor], dtp: torch.Tensor) -> Tuple[torch.Tensor, Tuple[int, ...]]:
    """(SEQ pointer, its (batch, seqlen) strides): a dummy pointer and zero strides without seq_idx."""
    if seq_idx is None:
        return dtp, (0, 0)
    return seq_idx, seq_idx.stride()


def _state_tiles(x_dtype: torch.dtype, hdim: int, dstate: int) -> Tuple[int, int, int, int]:
    """Block sizes of the chunk-state and varlen-state kernels: (BLOCK_P, BLOCK_N, tiles, BLOCK_K cap)."""
    tile = _TILE[x_dtype]
    bp, bn = min(pow2(hdim, 16), tile), min(pow2(dstate, 16), tile)
    return bp, bn, triton.cdiv(hdim, bp) * triton.cdiv(dstate, bn), tile


def dt_cumsum(
    dt: torch.Tensor,
    A: torch.Tensor,
    chunk_size: int,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Tuple[float, float] = (0.0, float("inf")),
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Stage 1: dt (batch, seqlen, nheads) -> (dt', cs), each (batch, nheads, nchunks * chunk_size)
    float32 (dt' = 0 past seqlen); ``dt_limit`` (0, inf) means no clamp."""
    batch, seqlen, nheads = dt.shape
    nc = triton.cdiv(seqlen, chunk_size)
    T = nc * chunk_size
    lo, hi = float(dt_limit[0]), float(dt_limit[1])
    has_limit = (lo, hi) != (0.0, math.inf)
    A = A.contiguous()  # the kernel reads A[h] and dt_bias[h] with unit stride
    dt_bias = dt_bias.contiguous() if dt_bias is not None else None
    dtp = torch.empty((batch, nheads, T), **_f32(dt))
    cs = torch.empty((batch, nheads, T), **_f32(dt))
    _dt_cumsum_fwd[(batch, nheads, nc)](
        dt,
        A,
        dt_bias if dt_bias is not None else A,
        dtp,
        cs,
        seqlen,
        T,
        *dt.stride(),
        nheads,
        lo if has_limit else 0.0,
        hi if has_limit else 0.0,
        HAS_DTB=dt_bias is not None,
        SOFTPLUS=bool(dt_softplus),
        HAS_LIMIT=has_limit,
        Q=chunk_size,
        num_warps=1,
    )
    return dtp, cs


def chunk_states(
    x: torch.Tensor,
    B: torch.Tensor,
    dtp: torch.Tensor,
    cs: torch.Tensor,
    seq_idx: Optional[torch.Tensor],
    chunk_size: int,
    mode: int = 0,
) -> torch.Tensor:
    """Stage 2 (mode 0): S_c (batch, nchunks, nheads, headdim, dstate) float32 from x (batch, seqlen, nheads,
    headdim), B (batch, seqlen, ngroups, dstate) and dt', cs (batch, nheads, nchunks * chunk_size).
    Mode 1 (the backward's): sum_i exp(cs_i) dy_i C_i^T, with x = dy and B = C."""
    batch, seqlen, nheads, hdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    nc = triton.cdiv(seqlen, chunk_size)
    bp, bn, tiles, tile = _state_tiles(x.dtype if mode == 0 else B.dtype, hdim, dstate)
    seq, s_strides = _seq_args(seq_idx, dtp)
    out = torch.empty((batch, nc, nheads, hdim, dstate), **_f32(x))
    _chunk_state[(batch * nheads, nc, tiles)](
        x,
        B,
        dtp,
        cs,
        seq,
        out,
        seqlen,
        nc * chunk_size,
        nheads,
        nheads // ngroups,
        hdim,
        dstate,
        *x.stride(),
        *B.stride(),
        *s_strides,
        MODE=mode,
        HAS_SEQ=seq_idx is not None,
        Q=chunk_size,
        BLOCK_P=bp,
        BLOCK_N=bn,
        BLOCK_K=min(chunk_size, tile),
        DOT_DT=_TL_DTYPES[B.dtype if mode else x.dtype],
        IEEE=(B.dtype if mode else x.dtype) == torch.float32,
        num_warps=8,
    )
    return out


def state_passing(
    states: torch.Tensor,
    cs_end: torch.Tensor,
    seq_idx: Optional[torch.Tensor],
    initial_states: Optional[torch.Tensor],
    chunk_size: int,
    cs_layout: Optional[Tuple[int, int]] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Stage 3: (H (batch, nchunks, nheads, *state) entering each chunk, H_nc (batch, nheads, *state)),
    float32, from S_c (batch, nchunks, nheads, *state) float32 contiguous.

    ``cs_end``: the chunks' last in-chunk cumsums, a (batch, nheads, nchunks) tensor, or with
    ``cs_layout=(T, Q)`` the whole (batch, nheads, T) cumsum (read at c * Q + Q - 1). ``chunk_size``
    locates the chunk edges in seq_idx."""
    batch, nc, nheads = states.shape[:3]
    size = states[0, 0, 0].numel()
    if cs_layout is None:
        cs_end = cs_end.to(torch.float32).contiguous()
        T, cs_c, cs_off = nc, 1, 0
    else:
        T, q = cs_layout
        cs_c, cs_off = q, q - 1
    seqlen = seq_idx.shape[1] if seq_idx is not None else nc * chunk_size
    seq, s_strides = _seq_args(seq_idx, states)
    hin = torch.empty_like(states)
    final = torch.empty((batch, nheads, *states.shape[3:]), **_f32(states))
    h0 = initial_states.contiguous() if initial_states is not None else None
    block = min(pow2(size), 1024)
    _state_pass_fwd[(batch * nheads, triton.cdiv(size, block))](
        states,
        cs_end,
        seq,
        h0 if h0 is not None else states,
        hin,
        final,
        seqlen,
        T,
        cs_c,
        cs_off,
        nheads,
        size,
        nc,
        *s_strides,
        HAS_SEQ=seq_idx is not None,
        HAS_H0=h0 is not None,
        Q=chunk_size,
        BLOCK=block,
        num_warps=4,
    )
    return hin, final


def varlen_states(
    x: torch.Tensor,
    B: torch.Tensor,
    dtp: torch.Tensor,
    cs: torch.Tensor,
    seq_idx: torch.Tensor,
    hin: torch.Tensor,
    cu_seqlens: torch.Tensor,
    chunk_size: int,
) -> torch.Tensor:
    """Each packed sequence's last state (num_seqs, nheads, headdim, dstate) float32, batch 1: x (1, total,
    nheads, headdim), B (1, total, ngroups, dstate), dt', cs (1, nheads, T), seq_idx (1, total) matching
    cu_seqlens (num_seqs + 1,) int64, hin (1, nchunks, nheads, headdim, dstate) the states entering the
    chunks. Zero for an empty sequence."""
    _, seqlen, nheads, hdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    nc = triton.cdiv(seqlen, chunk_size)
    bp, bn, tiles, tile = _state_tiles(x.dtype, hdim, dstate)
    nseq = cu_seqlens.numel() - 1
    out = torch.empty((nseq, nheads, hdim, dstate), **_f32(x))
    if nseq == 0:
        return out
    _varlen_states[(nseq, nheads, tiles)](
        x,
        B,
        dtp,
        cs,
        seq_idx,
        hin,
        cu_seqlens,
        out,
        seqlen,
        nc * chunk_size,
        nheads,
        nheads // ngroups,
        hdim,
        dstate,
        nc,
        *x.stride()[1:],
        *B.stride()[1:],
        seq_idx.stride(1),
        Q=chunk_size,
        BLOCK_P=bp,
        BLOCK_N=bn,
        BLOCK_K=min(chunk_size, tile),
        DOT_DT=_TL_DTYPES[x.dtype],
        IEEE=x.dtype == torch.float32,
        num_warps=8,
    )
    return out


def round_states(hin: torch.Tensor, state_dtype: Optional[torch.dtype]) -> torch.Tensor:
    """The inter-chunk states materialised in ``state_dtype`` (upstream's ``state_dtype``): rounded in
    place when it is narrower than float32 (float32 / float64 / None keep them as they are)."""
    if state_dtype is not None and torch.finfo(state_dtype).bits < 32:
        hin.copy_(hin.to(state_dtype))
    return hin


def chunk_outputs(
    x: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    dtp: torch.Tensor,
    cs: torch.Tensor,
    seq_idx: Optional[torch.Tensor],
    hin: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Stage 4: y_i = sum_{j <= i} (C_i . B_j) exp(cs_i - cs_j) dt'_j x_j + exp(cs_i) H_c C_i (+ D x_i,
    * silu(z_i)), 0 at padding tokens (seq_idx < 0). x (batch, seqlen, nheads, headdim); B, C (batch,
    seqlen, ngroups, dstate) (any strides); dt', cs (batch, nheads, nchunks * chunk_size) float32; hin
    (batch, nchunks, nheads, headdim, dstate) float32 (the states entering the chunks); D (nheads,
    headdim) or None; z x's shape or None; out_dtype: the output's dtype (x's by default).

    Returns (out (batch, seqlen, nheads, headdim), ypre: out before the z gate (None without z))."""
    batch, seqlen, nheads, hdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    q = chunk_size
    nc = triton.cdiv(seqlen, q)
    seq, s_strides = _seq_args(seq_idx, dtp)
    tile = _TILE[x.dtype]
    out = torch.empty((batch, seqlen, nheads, hdim), dtype=out_dtype or x.dtype, device=x.device)
    ypre = torch.empty_like(out) if z is not None else None
    bm = min(q, tile)
    bpo = min(pow2(hdim, 16), tile)
    bno = min(pow2(dstate, 16), tile)
    _chunk_scan_fwd[(batch * nheads, nc, triton.cdiv(q, bm) * triton.cdiv(hdim, bpo))](
        x,
        B,
        C,
        dtp,
        cs,
        seq,
        hin,
        D if D is not None else dtp,
        z if z is not None else x,
        out,
        ypre if ypre is not None else out,
        seqlen,
        nc * q,
        nheads,
        nheads // ngroups,
        hdim,
        dstate,
        *x.stride(),
        *B.stride(),
        *C.stride(),
        *(z.stride() if z is not None else (0, 0, 0, 0)),
        *out.stride(),
        *s_strides,
        *(D.stride() if D is not None else (0, 0)),
        HAS_SEQ=seq_idx is not None,
        HAS_D=D is not None,
        HAS_Z=z is not None,
        Q=q,
        BLOCK_M=bm,
        BLOCK_J=bm,
        BLOCK_P=bpo,
        BLOCK_N=bno,
        DOT_DT=_TL_DTYPES[x.dtype],
        IEEE=x.dtype == torch.float32,
        num_warps=8,
    )
    return out, ypre


def core_forward(
    x: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    dtp: torch.Tensor,
    cs: torch.Tensor,
    chunk_size: int,
    seq_idx: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    out_dtype: Optional[torch.dtype] = None,
    state_dtype: Optional[torch.dtype] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """Stages 2-4 of the SSD algorithm (chunk states, state passing, chunk outputs) on a processed weight
    and decay: h_t = exp(log_decay_t) h_{t-1} + dtp_t x_t B_t^T, y_t = h_t C_t (+ D x_t, * silu(z_t)),
    with ``cs`` the in-chunk cumulative sum of log_decay (every position of every chunk, padding
    included). A padding token (seq_idx < 0) outputs 0 and writes no state (the module docstring).

    x (batch, seqlen, nheads, headdim); B, C (batch, seqlen, ngroups, dstate) (any strides); dtp, cs
    (batch, nheads, nchunks * chunk_size) float32, contiguous, dtp 0 past seqlen; seq_idx (batch,
    seqlen) int or None; initial_states (batch, nheads, headdim, dstate) or None; D (nheads, headdim) or
    None; z x's shape or None; out_dtype: the output's dtype (x's by default); state_dtype: the dtype the
    states entering the chunks are rounded to (None: float32, see :func:`round_states`).

    Returns (out (batch, seqlen, nheads, headdim), final state (batch, nheads, headdim, dstate) float32,
    hin (batch, nchunks, nheads, headdim, dstate) float32: the state entering each chunk, ypre: out
    before the z gate (None without z)).
    """
    q = chunk_size
    T = triton.cdiv(x.shape[1], q) * q
    states = chunk_states(x, B, dtp, cs, seq_idx, q)
    hin, final = state_passing(states, cs, seq_idx, initial_states, q, cs_layout=(T, q))
    round_states(hin, state_dtype)
    out, ypre = chunk_outputs(x, B, C, dtp, cs, seq_idx, hin, q, D, z, out_dtype)
    return out, final, hin, ypre


def _drop_padding(dy: torch.Tensor, seq_idx: Optional[torch.Tensor]) -> torch.Tensor:
    """dy with the rows of padding tokens (seq_idx < 0) zeroed: their output is the constant 0."""
    if seq_idx is None:
        return dy
    return dy * (seq_idx >= 0)[:, :, None, None]


def core_backward(
    x: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    dtp: torch.Tensor,
    cs: torch.Tensor,
    chunk_size: int,
    seq_idx: Optional[torch.Tensor],
    hin: torch.Tensor,
    dy: torch.Tensor,
    dfinal: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The adjoint of :func:`core_forward` without D and z: ``dy`` (batch, seqlen, nheads, headdim)
    float32 is the gradient of y_t = h_t C_t (dropped at padding tokens), ``dfinal`` (batch, nheads,
    headdim, dstate) float32 contiguous or None that of the final state; the other arguments are
    core_forward's (hin its result).

    Returns (dx (batch, seqlen, nheads, headdim), dB and dC per head (batch, seqlen, nheads, dstate),
    d dtp and d cs (batch, nheads, nchunks * chunk_size), d initial_states (batch, nheads, headdim,
    dstate)), all float32; the gradient of log_decay is the reverse in-chunk cumulative sum of d cs.
    """
    batch, seqlen, nheads, hdim = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    q = chunk_size
    nc = hin.shape[1]
    T = nc * q
    f32 = _f32(x)
    hpg = nheads // ngroups
    size = hdim * dstate
    dot_dt = _TL_DTYPES[x.dtype]
    ieee = x.dtype == torch.float32
    seq, s_strides = _seq_args(seq_idx, dtp)
    has_seq = seq_idx is not None
    dy = _drop_padding(dy, seq_idx).contiguous()
    # Reverse state passing needs sum_i exp(cs_i) dy_i C_i^T per chunk (mode 1 of the chunk-state kernel).
    dinter = chunk_states(dy, C, dtp, cs, seq_idx, q, mode=1)
    block = min(pow2(size), 1024)
    ntiles = triton.cdiv(size, block)
    ds = torch.empty_like(dinter)
    dh0 = torch.empty((batch, nheads, hdim, dstate), **f32)
    ddecay = torch.empty((batch, nheads, nc, ntiles), **f32)
    _state_pass_bwd[(batch * nheads, ntiles)](
        hin,
        dinter,
        cs,
        seq,
        dfinal if dfinal is not None else dinter,
        ds,
        dh0,
        ddecay,
        seqlen,
        T,
        nheads,
        size,
        nc,
        ntiles,
        *s_strides,
        HAS_SEQ=has_seq,
        HAS_DFIN=dfinal is not None,
        Q=q,
        BLOCK=block,
        num_warps=4,
    )
    blk = _blocks(q, hdim, dstate)
    dc_h = torch.empty((batch, seqlen, nheads, dstate), **f32)
    db_h = torch.empty((batch, seqlen, nheads, dstate), **f32)
    dx = torch.empty((batch, seqlen, nheads, hdim), **f32)
    dcs_row = torch.empty((batch, nheads, T), **f32)
    dcs_col = torch.empty((batch, nheads, T), **f32)
    ddtp = torch.empty((batch, nheads, T), **f32)
    rj = torch.empty((batch, nheads, T), **f32)
    warps = 4 if blk["BLOCK_P"] * blk["BLOCK_N"] <= 4096 else 8
    common = (seqlen, T, nheads, hpg, hdim, dstate, *x.stride(), *B.stride(), *C.stride(), *s_strides)
    _chunk_scan_bwd_dc[(batch * nheads, nc, triton.cdiv(q, blk["BLOCK_M"]))](
        x,
        B,
        C,
        dtp,
        cs,
        seq,
        hin,
        dy,
        dc_h,
        dcs_row,
        *common,
        HAS_SEQ=has_seq,
        Q=q,
        DOT_DT=dot_dt,
        IEEE=ieee,
        num_warps=warps,
        **blk,
    )
    _chunk_scan_bwd_dbx[(batch * nheads, nc, triton.cdiv(q, blk["BLOCK_J"]))](
        x,
        B,
        C,
        dtp,
        cs,
        seq,
        ds,
        dy,
        db_h,
        dx,
        ddtp,
        dcs_col,
        rj,
        *common,
        HAS_SEQ=has_seq,
        Q=q,
        DOT_DT=dot_dt,
        IEEE=ieee,
        num_warps=warps,
        **blk,
    )
    dcs = (dcs_row + dcs_col).view(batch, nheads, nc, q)
    dcs[..., -1] += rj.view(batch, nheads, nc, q).sum(-1) + ddecay.sum(-1)
    return dx, db_h, dc_h, ddtp, dcs.view(batch, nheads, T), dh0


class ForwardResult(TypedDict):
    """What :func:`forward` returns (the keys its docstring lists)."""

    out: torch.Tensor
    ypre: Optional[torch.Tensor]
    dtp: torch.Tensor
    cs: torch.Tensor
    hin: torch.Tensor
    final: torch.Tensor
    varlen: Optional[torch.Tensor]


def forward(
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
    dt_softplus: bool = False,
    dt_limit: Tuple[float, float] = (0.0, float("inf")),
    cu_seqlens: Optional[torch.Tensor] = None,
    state_dtype: Optional[torch.dtype] = None,
) -> ForwardResult:
    """The forward kernels (no autograd): stage 1 (:func:`dt_cumsum`), :func:`core_forward` and, with
    cu_seqlens, :func:`varlen_states`. Returns a dict: ``out`` (x's dtype), ``ypre`` (before the z gate,
    or None), ``dtp`` / ``cs`` (batch, nheads, T), ``hin`` (batch, nchunks, nheads, headdim, dstate,
    entering each chunk), ``final`` and ``varlen`` (float32; varlen None without cu_seqlens)."""
    nheads, hdim = x.shape[2], x.shape[3]
    q = chunk_size
    dtp, cs = dt_cumsum(dt, A, q, dt_bias, dt_softplus, dt_limit)
    Dv = None
    if D is not None:
        Dv = D if D.dim() == 2 else D.unsqueeze(-1).expand(nheads, hdim)
    out, final, hin, ypre = core_forward(
        x, B, C, dtp, cs, q, seq_idx, initial_states, Dv, z, state_dtype=state_dtype
    )
    varlen = None
    if cu_seqlens is not None:
        if seq_idx is None:
            raise ValueError("ssd.forward: cu_seqlens needs its seq_idx (prepare_packing builds it)")
        varlen = varlen_states(x, B, dtp, cs, seq_idx, hin, cu_seqlens, q)
    return {"out": out, "ypre": ypre, "dtp": dtp, "cs": cs, "hin": hin, "final": final, "varlen": varlen}


def backward(
    dout: Optional[torch.Tensor],
    dfinal: Optional[torch.Tensor],
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    dt_bias: Optional[torch.Tensor],
    seq_idx: Optional[torch.Tensor],
    dt_softplus: bool,
    dt_limit: Tuple[float, float],
    dtp: torch.Tensor,
    cs: torch.Tensor,
    hin: torch.Tensor,
    ypre: Optional[torch.Tensor],
    initial_states_dtype: Optional[torch.dtype] = None,
) -> Tuple[
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    torch.Tensor,
    Optional[torch.Tensor],
    Optional[torch.Tensor],
    Optional[torch.Tensor],
    Optional[torch.Tensor],
]:
    """The backward kernels from the forward's ``dtp``, ``cs``, ``hin``, ``ypre`` (D and z element-wise,
    :func:`core_backward`, the adjoint of stage 1). dout: the gradient of out (or None), dfinal: of the
    final state (or None). Returns (dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial_states) in the inputs'
    dtypes (None for an input that is None; dinitial_states None unless ``initial_states_dtype`` is
    given)."""
    batch, seqlen, nheads, _ = x.shape
    ngroups, dstate = B.shape[2], B.shape[3]
    q = chunk_size
    nc = hin.shape[1]
    T = nc * q
    f32 = _f32(x)
    hpg = nheads // ngroups
    lo, hi = float(dt_limit[0]), float(dt_limit[1])
    has_limit = (lo, hi) != (0.0, math.inf)
    A = A.contiguous()
    dt_bias = dt_bias.contiguous() if dt_bias is not None else None
    # D and z (element-wise, torch).
    dout = dout.float() if dout is not None else torch.zeros(x.shape, **f32)
    dz = None
    if z is not None:
        zf = z.float()
        sz = torch.sigmoid(zf)
        # the forward returned ypre (out before the gate) as z was given
        dz = (dout * cast(torch.Tensor, ypre).float() * sz * (1 + zf * (1 - sz))).to(z.dtype)
        dy = dout * zf * sz
    else:
        dy = dout
    dy = _drop_padding(dy, seq_idx).contiguous()
    dfin = dfinal.float().contiguous() if dfinal is not None else None
    dx, db_h, dc_h, ddtp, dcs, dh0 = core_backward(x, B, C, dtp, cs, q, seq_idx, hin, dy, dfin)
    ddt = torch.empty((batch, seqlen, nheads), **f32)
    da_part = torch.empty((batch, nheads, nc), **f32)
    ddtb_part = torch.empty((batch, nheads, nc), **f32)
    _dt_cumsum_bwd[(batch, nheads, nc)](
        dt,
        A,
        dt_bias if dt_bias is not None else A,
        dtp,
        dcs,
        ddtp,
        ddt,
        da_part,
        ddtb_part,
        seqlen,
        T,
        *dt.stride(),
        nheads,
        lo if has_limit else 0.0,
        hi if has_limit else 0.0,
        HAS_DTB=dt_bias is not None,
        SOFTPLUS=bool(dt_softplus),
        HAS_LIMIT=has_limit,
        Q=q,
        num_warps=1,
    )
    dD = None
    if D is not None:
        xf = x.float()
        if D.dim() == 2:
            dD = (dy * xf).sum((0, 1)).to(D.dtype)
            dx += dy * D.float()
        else:
            dD = (dy * xf).sum((0, 1, 3)).to(D.dtype)
            dx += dy * D.float()[:, None]
    dB = db_h.view(batch, seqlen, ngroups, hpg, dstate).sum(3).to(B.dtype)
    dC = dc_h.view(batch, seqlen, ngroups, hpg, dstate).sum(3).to(C.dtype)
    dA = da_part.sum((0, 2)).to(A.dtype)
    ddt_bias = ddtb_part.sum((0, 2)).to(dt_bias.dtype) if dt_bias is not None else None
    dinit = dh0.to(initial_states_dtype) if initial_states_dtype is not None else None
    return dx.to(x.dtype), ddt.to(dt.dtype), dA, dB, dC, dD, dz, ddt_bias, dinit


class _SSDFn(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
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
        dt_softplus: bool,
        dt_limit: Tuple[float, float],
        cu_seqlens: Optional[torch.Tensor],
        state_dtype: Optional[torch.dtype],
    ) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
        r = forward(
            x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, dt_softplus, dt_limit,
            cu_seqlens, state_dtype,
        )  # fmt: skip
        if r["varlen"] is not None:
            ctx.mark_non_differentiable(r["varlen"])
        ctx.save_for_backward(x, dt, A, B, C, D, z, dt_bias, seq_idx, r["dtp"], r["cs"], r["hin"], r["ypre"])
        ctx.meta = (
            chunk_size,
            bool(dt_softplus),
            tuple(dt_limit),
            initial_states.dtype if initial_states is not None else None,
        )
        return r["out"], r["final"], r["varlen"]

    @staticmethod
    def backward(
        ctx: Any,
        dout: Optional[torch.Tensor],
        dfinal: Optional[torch.Tensor],
        dvarlen: Optional[torch.Tensor] = None,
    ) -> Tuple[Optional[torch.Tensor], ...]:
        x, dt, A, B, C, D, z, dt_bias, seq_idx, dtp, cs, hin, ypre = ctx.saved_tensors
        q, softplus, limit, h0_dtype = ctx.meta
        grads = backward(
            dout, dfinal, x, dt, A, B, C, q, D, z, dt_bias, seq_idx, softplus, limit, dtp, cs, hin, ypre,
            h0_dtype,
        )  # fmt: skip
        dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinit = grads
        return dx, ddt, dA, dB, dC, None, dD, dz, ddt_bias, dinit, None, None, None, None, None


def prepare_packing(
    x: torch.Tensor, seq_idx: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor]
) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """(seq_idx, cu_seqlens) as the kernels take them: cu_seqlens checked against the packed-sequence rule
    (batch 1) as int64 on x's device, seq_idx built from it when not given, seq_idx int32/int64.

    Raises:
        ValueError: cu_seqlens with batch > 1 or breaking the rule of ``mamba_ssm._families.packing``."""
    if cu_seqlens is not None:
        if x.shape[0] != 1:
            raise ValueError(f"mamba_chunk_scan_combined: cu_seqlens needs batch 1, got batch {x.shape[0]}")
        cu_seqlens = _packing.check_cu_seqlens("mamba_chunk_scan_combined", cu_seqlens, x.shape[1])
        cu_seqlens = cu_seqlens.to(device=x.device).contiguous()
        if seq_idx is None:
            seq_idx = _packing.seq_idx_from_cu_seqlens(cu_seqlens, x.shape[1]).to(x.device)
    if seq_idx is not None and seq_idx.dtype not in (torch.int32, torch.int64):
        seq_idx = seq_idx.long()
    return seq_idx, cu_seqlens


def chunk_scan_combined(
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
    dt_softplus: bool = False,
    dt_limit: Tuple[float, float] = (0.0, float("inf")),
    cu_seqlens: Optional[torch.Tensor] = None,
    state_dtype: Optional[torch.dtype] = None,
) -> Union[Tuple[torch.Tensor, torch.Tensor], Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """SSD scan on the Triton kernels (differentiable in x, dt, A, B, C, D, z, dt_bias, initial_states).

    Args (validated by ``mamba_chunk_scan_combined``; float32/float16/bfloat16; a CUDA device, or CPU
    tensors under ``TRITON_INTERPRET=1``):
        x: (batch, seqlen, nheads, headdim). dt: (batch, seqlen, nheads). A: (nheads,).
        B, C: (batch, seqlen, ngroups, dstate). chunk_size: a power of two in 16..256.
        D: (nheads, headdim) or (nheads,) or None. z: x's shape or None. dt_bias: (nheads,) or None.
        initial_states: (batch, nheads, headdim, dstate) or None. seq_idx: (batch, seqlen) int or None
            (negative: padding, see the module docstring).
        dt_softplus, dt_limit: dt processing (see the module docstring).
        cu_seqlens: (num_seqs + 1,) int cumulative sequence lengths (batch 1), or None: also return each
            sequence's last state (zero for an empty sequence); seq_idx is built from it when not given
            (rows from cu_seqlens[-1] on are padding: the rule of ``mamba_ssm._families.packing``).
        state_dtype: the dtype the inter-chunk states are materialised in (None: float32; a narrower one
            rounds them, as upstream's kernels do).

    Returns:
        ``(out, final_states)``, or ``(out, final_states, varlen_states)`` with cu_seqlens: out (batch,
        seqlen, nheads, headdim) in x's dtype, final_states (batch, nheads, headdim, dstate) float32,
        varlen_states (num_seqs, nheads, headdim, dstate) float32 (no gradient flows through them: they
        are the cache of a prefill).

    Raises:
        ValueError: chunk_size not a power of two in 16..256; cu_seqlens with batch > 1 or breaking the
            packed-sequence rule.
    """
    check_chunk_size(chunk_size)
    seq_idx, cu_seqlens = prepare_packing(x, seq_idx, cu_seqlens)
    out, final, varlen = _SSDFn.apply(
        x,
        dt,
        A,
        B,
        C,
        chunk_size,
        D,
        z,
        dt_bias,
        initial_states,
        seq_idx,
        dt_softplus,
        tuple(dt_limit),
        cu_seqlens,
        state_dtype,
    )
    return (out, final) if cu_seqlens is None else (out, final, varlen)
