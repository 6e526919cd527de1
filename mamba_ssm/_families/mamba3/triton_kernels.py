"""Triton kernels for Mamba-3 (Lahoti et al., arXiv:2603.15569): the chunked scan, SISO and MIMO, forward
and backward, and the decode step. The arguments and results are those of
:func:`mamba_ssm._families.mamba3.torch_impl.mamba3_chunk_scan_torch` and
:func:`~mamba_ssm._families.mamba3.torch_impl.mamba3_step_torch` (the module docstring there has the
math); :mod:`mamba_ssm.ops.triton.mamba3._triton_hook` calls them.

The chunked scan is the SSD scan of :mod:`.ssd` (its ``core_forward`` / ``core_backward``) with a
separate input weight, between a prologue and an epilogue of Mamba-3's own. Per batch entry b, head h,
token t and rank r (R ranks; SISO is R = 1), with lambda_t = sigmoid(trap_t), c_t = (1 - lambda_t) dt_t
and n_t = c_{t+1} (0 at a sequence's last token and at padding, seq_idx < 0: a padding token is a
boundary on both sides, outputs 0 and reads and writes no state):

    _angles_fwd   [b * nheads]             theta_t = (theta_{t-1} + pi tanh(angles_t) dt_t) mod 2 pi,
                                           restarting from 0 where seq_idx changes (sequential in t, a
                                           block of tokens at a time: a masked lower-triangular product)
    _decay_fwd    [b, nheads, chunks]      the SSD's input weight w_t = lambda_t dt_t + n_t and decay
                                           cumsum of A dt, per sub-step (t, r) (decay only on r = 0)
    _rotate_fwd   [b * nheads, row blocks] q_{t,r}, k_{t,r} + bias, rotated by theta_t (pairs (2i, 2i+1)
                                           or (i, i + d_state / 2))
    SSD core      (ssd.core_forward)       y = the scan over the l * R sub-steps, g_0 the input state
                                           plus c_0 times the cached x k^T
    _out_fwd      [b * nheads, token blocks]  y_{t,r} + sum_s ([s > r] w_t - n_t)(q_{t,r}.k_{t,s}) x_{t,s}
                                           + D x_{t,r}, the RMSNorm over headdim, the silu gate, the sum
                                           over ranks with mimo_o

The backward runs the adjoints in reverse (_out_bwd, ssd.core_backward, _decay_bwd, _rotate_bwd,
_angles_bwd); the sums over a group's heads and over the batch (the biases, D, mimo_x/z/o, the norm
weight) are torch reductions of per-program partial sums. ``_step`` is one token: the rotation, the
state update h' = alpha h + beta x_prev k_prev^T + gamma x k^T summed over ranks, and the outputs.

Interpreter-safe: no inline assembly; tanh is 2 sigmoid(2x) - 1, sin and cos are ``tl.sin`` /
``tl.cos``. Everything accumulates in float32; float32 inputs multiply exactly ("ieee"), float16 /
bfloat16 ones on tensor cores in the SSD core. MIMO ranks must be a power of two (the rows of one token
stay in one block); the SSD chunk is chunk_size * R rounded to a power of two in 16..256 (the
chunking changes the rounding only).
"""

import math
from typing import Any, Dict, Optional, Tuple, Union

import torch
import triton
import triton.language as tl

from mamba_ssm._families.mamba3.states import Mamba3States, drop_padding, per_sequence, rotate
from mamba_ssm._families.packing import seq_idx_from_cu_seqlens
from mamba_ssm._families.ssd import triton_kernels as ssd
from mamba_ssm._families.triton_common import Block, Pointer, Scalar, jit, pow2, unsupported_dtype

__all__ = ["MAX_DSTATE", "MAX_HEADDIM", "MAX_RANK", "chunk_scan", "step", "sub_chunk", "unsupported"]

#: The largest headdim / d_state / MIMO rank the kernels take (larger: the PyTorch path).
MAX_HEADDIM = 256
MAX_DSTATE = 256
MAX_RANK = 16

_PI = tl.constexpr(math.pi)
_TWO_PI = tl.constexpr(2.0 * math.pi)
# Tokens per block of the angle kernels (a masked BLOCK_T x BLOCK_T product per block).
_ANGLE_BLOCK = 32


def unsupported(op: str, **arguments: Any) -> Optional[str]:
    """None when the kernels take this (checked) call of ``op`` ("mamba3_siso", "mamba3_mimo" or
    "mamba3_step"; ``arguments``: the canonical ones of the hook), else why not (one sentence)."""
    tensors = {k: v for k, v in arguments.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}
    states = arguments.get("initial_states", arguments.get("states"))
    if states is not None:
        tensors.update({f"states.{name}": t for name, t in zip(states._fields, states)})
    why = unsupported_dtype(**tensors)
    if why is not None:
        return why
    v = arguments["v"]
    if (
        any(t.dtype == torch.bfloat16 for t in tensors.values())
        and v.device.type == "cuda"
        and not getattr(torch.version, "hip", None)
        and torch.cuda.get_device_capability(v.device) < (8, 0)
    ):
        return "Triton's bfloat16 arithmetic needs compute capability >= 8.0"
    p, n, R = v.shape[-1], arguments["q"].shape[-1], arguments["q"].shape[-3]
    if p > MAX_HEADDIM:
        return f"headdim {p} exceeds the Mamba-3 Triton kernels' {MAX_HEADDIM}"
    if n > MAX_DSTATE:
        return f"d_state {n} exceeds the Mamba-3 Triton kernels' {MAX_DSTATE}"
    if R > MAX_RANK or R & (R - 1):
        return f"mimo_rank {R} is not a power of two up to {MAX_RANK} (the Mamba-3 Triton kernels' ranks)"
    if op != "mamba3_step" and v.shape[1] == 0:
        return "seqlen is 0"
    return None


def sub_chunk(chunk_size: int, rank: int) -> int:
    """The SSD chunk (in sub-steps: R per token) for ``chunk_size`` tokens: chunk_size * R rounded down
    to a power of two, clamped to 16..256 and to at least R."""
    target = max(1, chunk_size * rank)
    q = 1 << (target.bit_length() - 1)
    return max(min(q, 256), 16, rank)


# ------------------------------------------------------------------------------------------ helpers


@jit
def _tanh(x: Block) -> Block:
    return 2.0 * tl.sigmoid(2.0 * x) - 1.0


@jit
def _mod_two_pi(x: Block) -> Block:
    return x - _TWO_PI * tl.floor(x / _TWO_PI)


@jit
def _pairs(rn: Block, nangles: Scalar, dstate: Scalar, ADJACENT: tl.constexpr) -> Block:
    """For d_state entries rn: (partner entry, angle index, sign of the sine term, rotated?). A pair
    (x1, x2) turns into (x1 cos - x2 sin, x1 sin + x2 cos): entry e becomes x_e cos + sgn_e x_partner sin."""
    if ADJACENT:
        partner = rn ^ 1
        aidx = rn // 2
        first = (rn % 2) == 0
    else:
        half = dstate // 2
        first = rn < half
        partner = tl.where(first, rn + half, rn - half)
        aidx = tl.where(first, rn, rn - half)
    rot = (aidx < nangles) & (rn < dstate) & (partner < dstate)
    sgn = tl.where(first, -1.0, 1.0)
    return partner, aidx, sgn, rot


@jit
def _biased(
    X: Pointer,
    XB: Pointer,
    b: Block,
    t: Block,
    r: Block,
    g: Block,
    h: Block,
    cols: Block,
    mask: Block,
    x_b: Scalar,
    x_l: Scalar,
    x_r: Scalar,
    x_g: Scalar,
    x_n: Scalar,
    xb_h: Scalar,
    xb_r: Scalar,
    xb_n: Scalar,
) -> Block:
    """X[b, t, r, g, cols] + XB[h, r, cols] in float32 for rows (t, r) (0 where masked)."""
    x = tl.load(
        X + b * x_b + t[:, None] * x_l + r[:, None] * x_r + g * x_g + cols[None, :] * x_n,
        mask=mask,
        other=0.0,
    ).to(tl.float32)
    return x + tl.load(XB + h * xb_h + r[:, None] * xb_r + cols[None, :] * xb_n, mask=mask, other=0.0).to(
        tl.float32
    )


# ----------------------------------------------------------------------------------------- angles


@jit
def _angles_fwd(
    ANG: Pointer,
    DT: Pointer,
    SEQ: Pointer,
    TH0: Pointer,
    THETA: Pointer,
    seqlen: Scalar,
    nheads: Scalar,
    nangles: Scalar,
    a_b: Scalar,
    a_l: Scalar,
    a_h: Scalar,
    a_a: Scalar,
    dt_b: Scalar,
    dt_h: Scalar,
    dt_l: Scalar,
    s_b: Scalar,
    s_l: Scalar,
    HAS_SEQ: tl.constexpr,
    HAS_TH0: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_A: tl.constexpr,
) -> None:
    """THETA[b, t, h, :] (float32, contiguous) for one (b, h), a block of tokens at a time; the angle
    carried into a block counts only for its tokens of the carried angle's sequence. A padding token
    (seq_idx < 0) sums nothing and passes nothing on (theta 0)."""
    bh = tl.program_id(0)
    b = (bh // nheads).to(tl.int64)
    h = bh % nheads
    ra = tl.arange(0, BLOCK_A)
    ma = ra < nangles
    ri = tl.arange(0, BLOCK_T)
    if HAS_TH0:
        carry = tl.load(TH0 + (b * nheads + h) * nangles + ra, mask=ma, other=0.0)
    else:
        carry = tl.zeros([BLOCK_A], dtype=tl.float32)
    if HAS_SEQ:
        seq_prev = tl.load(SEQ + b * s_b)
    for t0 in range(0, seqlen, BLOCK_T):
        t = (t0 + ri).to(tl.int64)
        mt = t < seqlen
        ang = tl.load(
            ANG + b * a_b + t[:, None] * a_l + h * a_h + ra[None, :] * a_a,
            mask=mt[:, None] & ma[None, :],
            other=0.0,
        ).to(tl.float32)
        dtv = tl.load(DT + b * dt_b + h * dt_h + t * dt_l, mask=mt, other=0.0).to(tl.float32)
        inc = _PI * _tanh(ang) * dtv[:, None]
        keep = ri[:, None] >= ri[None, :]
        if HAS_SEQ:
            sq = tl.load(SEQ + b * s_b + t * s_l, mask=mt, other=-1)
            keep = keep & (sq[:, None] == sq[None, :]) & (sq[:, None] >= 0)
            use = ((sq == seq_prev) & (sq >= 0)).to(tl.float32)
        else:
            use = tl.full([BLOCK_T], 1.0, tl.float32)
        # The masked product runs on the finite increments (no 0 * inf from a later token); from a token
        # with a non-finite increment on, the block's angles are non-finite (all of a row's: every one of
        # them turns q and k, so the outputs from that token on are non-finite either way).
        fin = tl.abs(inc) < float("inf")
        local = tl.dot(keep.to(tl.float32), tl.where(fin, inc, 0.0), input_precision="ieee")
        reached = tl.cumsum(tl.max(tl.where(fin, 0, 1), axis=1), axis=0)  # (BLOCK_T,)
        local = tl.where(reached[:, None] > 0, float("nan"), local)
        theta = _mod_two_pi(local + carry[None, :] * use[:, None])
        tl.store(
            THETA + ((b * seqlen + t[:, None]) * nheads + h) * nangles + ra[None, :],
            theta,
            mask=mt[:, None] & ma[None, :],
        )
        last = tl.minimum(seqlen - t0, BLOCK_T) - 1
        carry = tl.sum(tl.where(ri[:, None] == last, theta, 0.0), axis=0)
        if HAS_SEQ:
            seq_prev = tl.load(SEQ + b * s_b + (t0 + last) * s_l)


@jit
def _angles_bwd(
    ANG: Pointer,
    DT: Pointer,
    SEQ: Pointer,
    DTHETA: Pointer,
    DANG: Pointer,
    DDT: Pointer,
    DTH0: Pointer,
    seqlen: Scalar,
    nheads: Scalar,
    nangles: Scalar,
    a_b: Scalar,
    a_l: Scalar,
    a_h: Scalar,
    a_a: Scalar,
    dt_b: Scalar,
    dt_h: Scalar,
    dt_l: Scalar,
    s_b: Scalar,
    s_l: Scalar,
    HAS_SEQ: tl.constexpr,
    HAS_TH0: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_A: tl.constexpr,
) -> None:
    """The adjoint of _angles_fwd, blocks in reverse: DANG[b, t, h, :] (float32, contiguous), DDT[b, h, t]
    (float32, contiguous) += the angle terms' share, DTH0[b, h, :] (the input angle's gradient)."""
    bh = tl.program_id(0)
    b = (bh // nheads).to(tl.int64)
    h = bh % nheads
    ra = tl.arange(0, BLOCK_A)
    ma = ra < nangles
    ri = tl.arange(0, BLOCK_T)
    dcarry = tl.zeros([BLOCK_A], dtype=tl.float32)
    nblocks = tl.cdiv(seqlen, BLOCK_T)
    for k in range(nblocks):
        t0 = (nblocks - 1 - k) * BLOCK_T
        t = (t0 + ri).to(tl.int64)
        mt = t < seqlen
        m2 = mt[:, None] & ma[None, :]
        last = tl.minimum(seqlen - t0, BLOCK_T) - 1
        dth = tl.load(
            DTHETA + ((b * seqlen + t[:, None]) * nheads + h) * nangles + ra[None, :], mask=m2, other=0.0
        )
        dth += tl.where(ri[:, None] == last, dcarry[None, :], 0.0)
        keep = ri[:, None] >= ri[None, :]
        if HAS_SEQ:
            sq = tl.load(SEQ + b * s_b + t * s_l, mask=mt, other=-1)
            seq_prev = tl.load(SEQ + b * s_b + tl.maximum(t0 - 1, 0) * s_l)
            keep = keep & (sq[:, None] == sq[None, :]) & (sq[:, None] >= 0)
            use = ((sq == seq_prev) & (sq >= 0)).to(tl.float32)
        else:
            use = tl.full([BLOCK_T], 1.0, tl.float32)
        dinc = tl.dot(tl.trans(keep.to(tl.float32)), dth, input_precision="ieee")
        dcarry = tl.sum(dth * use[:, None], axis=0)
        ang = tl.load(ANG + b * a_b + t[:, None] * a_l + h * a_h + ra[None, :] * a_a, mask=m2, other=0.0).to(
            tl.float32
        )
        dtv = tl.load(DT + b * dt_b + h * dt_h + t * dt_l, mask=mt, other=0.0).to(tl.float32)
        th = _tanh(ang)
        tl.store(
            DANG + ((b * seqlen + t[:, None]) * nheads + h) * nangles + ra[None, :],
            dinc * _PI * dtv[:, None] * (1.0 - th * th),
            mask=m2,
        )
        ddt_ptr = DDT + (b * nheads + h) * seqlen + t
        ddt = tl.load(ddt_ptr, mask=mt, other=0.0) + tl.sum(tl.where(m2, dinc * _PI * th, 0.0), axis=1)
        tl.store(ddt_ptr, ddt, mask=mt)
    if HAS_TH0:
        tl.store(DTH0 + (b * nheads + h) * nangles + ra, dcarry, mask=ma)


# ---------------------------------------------------------------------------------------- weights


@jit
def _decay_fwd(
    ADT: Pointer,
    DT: Pointer,
    TRAP: Pointer,
    SEQ: Pointer,
    CS: Pointer,
    DTP: Pointer,
    W: Pointer,
    NS: Pointer,
    seqlen: Scalar,
    nheads: Scalar,
    T: Scalar,
    adt_b: Scalar,
    adt_h: Scalar,
    adt_l: Scalar,
    dt_b: Scalar,
    dt_h: Scalar,
    dt_l: Scalar,
    tr_b: Scalar,
    tr_h: Scalar,
    tr_l: Scalar,
    s_b: Scalar,
    s_l: Scalar,
    HAS_SEQ: tl.constexpr,
    R: tl.constexpr,
    QT: tl.constexpr,
) -> None:
    """Chunk c (QT tokens = QT * R sub-steps): CS / DTP[b, h, t * R + r] = the in-chunk cumsum of adt
    and the weight w_t (every sub-step of the chunk, 0 weight past seqlen); W / NS[b, h, t] = w_t, n_t."""
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    c = tl.program_id(2)
    t = (c * QT + tl.arange(0, QT)).to(tl.int64)
    m = t < seqlen
    dtv = tl.load(DT + b * dt_b + h * dt_h + t * dt_l, mask=m, other=0.0).to(tl.float32)
    lam = tl.sigmoid(tl.load(TRAP + b * tr_b + h * tr_h + t * tr_l, mask=m, other=0.0).to(tl.float32))
    adt = tl.load(ADT + b * adt_b + h * adt_h + t * adt_l, mask=m, other=0.0).to(tl.float32)
    m1 = (t + 1) < seqlen
    dt1 = tl.load(DT + b * dt_b + h * dt_h + (t + 1) * dt_l, mask=m1, other=0.0).to(tl.float32)
    lam1 = tl.sigmoid(tl.load(TRAP + b * tr_b + h * tr_h + (t + 1) * tr_l, mask=m1, other=0.0).to(tl.float32))
    ns = (1.0 - lam1) * dt1
    if HAS_SEQ:
        s0 = tl.load(SEQ + b * s_b + t * s_l, mask=m, other=-1)
        s1 = tl.load(SEQ + b * s_b + (t + 1) * s_l, mask=m1, other=-2)
        m1 = m1 & (s0 == s1) & (s0 >= 0)
    # (a non-finite c_{t+1} counts as 0: it would reach y_t, before its token; token t + 1 still sees it
    # through its own lambda dt, non-finite whenever c_{t+1} is)
    ns = tl.where(m1 & (tl.abs(ns) < float("inf")), ns, 0.0)
    w = tl.where(m, lam * dtv + ns, 0.0)
    cs = tl.cumsum(adt, axis=0)
    base = b * nheads + h
    tl.store(W + base * seqlen + t, w, mask=m)
    tl.store(NS + base * seqlen + t, ns, mask=m)
    for r in tl.static_range(R):
        tl.store(CS + base * T + t * R + r, cs)
        tl.store(DTP + base * T + t * R + r, w)


@jit
def _decay_bwd(
    DT: Pointer,
    TRAP: Pointer,
    SEQ: Pointer,
    DCS: Pointer,
    DDTP: Pointer,
    DWE: Pointer,
    DNSE: Pointer,
    DADT: Pointer,
    DTRAP: Pointer,
    DDT: Pointer,
    seqlen: Scalar,
    nheads: Scalar,
    T: Scalar,
    dt_b: Scalar,
    dt_h: Scalar,
    dt_l: Scalar,
    tr_b: Scalar,
    tr_h: Scalar,
    tr_l: Scalar,
    s_b: Scalar,
    s_l: Scalar,
    HAS_SEQ: tl.constexpr,
    R: tl.constexpr,
    QT: tl.constexpr,
) -> None:
    """The adjoint of _decay_fwd: DCS / DDTP (per sub-step, from the SSD core) and DWE / DNSE (per token,
    from the epilogue) into DADT, DTRAP, DDT[b, h, t] (float32, contiguous; DDT without the angle terms)."""
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    c = tl.program_id(2)
    t = (c * QT + tl.arange(0, QT)).to(tl.int64)
    m = t < seqlen
    base = b * nheads + h
    tp = tl.maximum(t - 1, 0)
    mp = m & (t >= 1)
    dcs = tl.zeros([QT], dtype=tl.float32)
    dw = tl.load(DWE + base * seqlen + t, mask=m, other=0.0)
    dwp = tl.load(DWE + base * seqlen + tp, mask=mp, other=0.0)
    for r in tl.static_range(R):
        dcs += tl.load(DCS + base * T + t * R + r)
        dw += tl.load(DDTP + base * T + t * R + r, mask=m, other=0.0)
        dwp += tl.load(DDTP + base * T + tp * R + r, mask=mp, other=0.0)
    dadt = tl.sum(dcs, axis=0) - tl.cumsum(dcs, axis=0) + dcs  # reverse in-chunk cumsum
    # n_{t-1} = c_t: the share of token t that token t - 1's weight holds (same sequence only)
    dshare = dwp + tl.load(DNSE + base * seqlen + tp, mask=mp, other=0.0)
    if HAS_SEQ:
        s0 = tl.load(SEQ + b * s_b + t * s_l, mask=m, other=-1)
        s1 = tl.load(SEQ + b * s_b + tp * s_l, mask=mp, other=-2)
        mp = mp & (s0 == s1) & (s0 >= 0)
        # a padding token's decay reaches no sequence: exactly 0, not the rounding left by the sum above
        dadt = tl.where(s0 >= 0, dadt, 0.0)
    dshare = tl.where(mp, dshare, 0.0)
    dtv = tl.load(DT + b * dt_b + h * dt_h + t * dt_l, mask=m, other=0.0).to(tl.float32)
    lam = tl.sigmoid(tl.load(TRAP + b * tr_b + h * tr_h + t * tr_l, mask=m, other=0.0).to(tl.float32))
    dlam = (dw - dshare) * dtv
    tl.store(DADT + base * seqlen + t, dadt, mask=m)
    tl.store(DTRAP + base * seqlen + t, dlam * lam * (1.0 - lam), mask=m)
    tl.store(DDT + base * seqlen + t, dw * lam + dshare * (1.0 - lam), mask=m)


# --------------------------------------------------------------------------------------- rotation


@jit
def _rotate_fwd(
    Q: Pointer,
    K: Pointer,
    QB: Pointer,
    KB: Pointer,
    THETA: Pointer,
    QR: Pointer,
    KR: Pointer,
    seqlen: Scalar,
    nheads: Scalar,
    heads_per_group: Scalar,
    dstate: Scalar,
    nangles: Scalar,
    q_b: Scalar,
    q_l: Scalar,
    q_r: Scalar,
    q_g: Scalar,
    q_n: Scalar,
    k_b: Scalar,
    k_l: Scalar,
    k_r: Scalar,
    k_g: Scalar,
    k_n: Scalar,
    qb_h: Scalar,
    qb_r: Scalar,
    qb_n: Scalar,
    kb_h: Scalar,
    kb_r: Scalar,
    kb_n: Scalar,
    R: tl.constexpr,
    ADJACENT: tl.constexpr,
    BLOCK_U: tl.constexpr,
    BLOCK_N: tl.constexpr,
) -> None:
    """QR / KR[b, t * R + r, h, :] (contiguous) = rot(q / k[b, t, r, g] + bias[h, r], theta[b, t, h])."""
    bh = tl.program_id(0)
    b = (bh // nheads).to(tl.int64)
    h = bh % nheads
    g = h // heads_per_group
    u = tl.program_id(1).to(tl.int64) * BLOCK_U + tl.arange(0, BLOCK_U)
    t = u // R
    r = u % R
    mu = t < seqlen
    rn = tl.arange(0, BLOCK_N)
    mn = rn < dstate
    partner, aidx, sgn, rot = _pairs(rn, nangles, dstate, ADJACENT)
    mrot = mu[:, None] & rot[None, :]
    th = tl.load(
        THETA + ((b * seqlen + t[:, None]) * nheads + h) * nangles + aidx[None, :], mask=mrot, other=0.0
    )
    cos = tl.where(mrot, tl.cos(th), 1.0)
    sin = tl.where(mrot, tl.sin(th), 0.0) * sgn[None, :]
    m2 = mu[:, None] & mn[None, :]
    out = ((b * seqlen * R + u[:, None]) * nheads + h) * dstate + rn[None, :]
    x = _biased(Q, QB, b, t, r, g, h, rn, m2, q_b, q_l, q_r, q_g, q_n, qb_h, qb_r, qb_n)
    xp = _biased(Q, QB, b, t, r, g, h, partner, mrot, q_b, q_l, q_r, q_g, q_n, qb_h, qb_r, qb_n)
    tl.store(QR + out, x * cos + xp * sin, mask=m2)
    x = _biased(K, KB, b, t, r, g, h, rn, m2, k_b, k_l, k_r, k_g, k_n, kb_h, kb_r, kb_n)
    xp = _biased(K, KB, b, t, r, g, h, partner, mrot, k_b, k_l, k_r, k_g, k_n, kb_h, kb_r, kb_n)
    tl.store(KR + out, x * cos + xp * sin, mask=m2)


@jit
def _unrotate(
    X: Pointer,
    XB: Pointer,
    DXS: Pointer,
    DXE: Pointer,
    DXH: Pointer,
    b: Block,
    t: Block,
    r: Block,
    g: Block,
    h: Block,
    rn: Block,
    partner: Block,
    cos: Block,
    sin: Block,
    sgn: Block,
    m2: Block,
    mrot: Block,
    rows: Block,
    x_b: Scalar,
    x_l: Scalar,
    x_r: Scalar,
    x_g: Scalar,
    x_n: Scalar,
    xb_h: Scalar,
    xb_r: Scalar,
    xb_n: Scalar,
) -> Block:
    """Stores d(x + bias) (the rotation's adjoint) at DXH[rows] and returns the angle gradient per entry
    pair, summed onto the pair's first entry (BLOCK_U, BLOCK_N); DXS + DXE is the rotated one's gradient."""
    x = _biased(X, XB, b, t, r, g, h, rn, m2, x_b, x_l, x_r, x_g, x_n, xb_h, xb_r, xb_n)
    xp = _biased(X, XB, b, t, r, g, h, partner, mrot, x_b, x_l, x_r, x_g, x_n, xb_h, xb_r, xb_n)
    dr = tl.load(DXS + rows + rn[None, :], mask=m2, other=0.0) + tl.load(
        DXE + rows + rn[None, :], mask=m2, other=0.0
    )
    drp = tl.load(DXS + rows + partner[None, :], mask=mrot, other=0.0) + tl.load(
        DXE + rows + partner[None, :], mask=mrot, other=0.0
    )
    tl.store(DXH + rows + rn[None, :], dr * cos - drp * sin, mask=m2)
    # d theta of the pair (e, partner), kept at e: dr_e d(r_e)/d theta + dr_partner d(r_partner)/d theta
    # (sin = sgn_e sin theta; the partner's sign is -sgn_e)
    return sgn[None, :] * (dr * (xp * cos - x * sin) - drp * (x * cos + xp * sin))


@jit
def _rotate_bwd(
    Q: Pointer,
    K: Pointer,
    QB: Pointer,
    KB: Pointer,
    THETA: Pointer,
    DQS: Pointer,
    DQE: Pointer,
    DKS: Pointer,
    DKE: Pointer,
    DQH: Pointer,
    DKH: Pointer,
    DTHETA: Pointer,
    seqlen: Scalar,
    nheads: Scalar,
    heads_per_group: Scalar,
    dstate: Scalar,
    nangles: Scalar,
    q_b: Scalar,
    q_l: Scalar,
    q_r: Scalar,
    q_g: Scalar,
    q_n: Scalar,
    k_b: Scalar,
    k_l: Scalar,
    k_r: Scalar,
    k_g: Scalar,
    k_n: Scalar,
    qb_h: Scalar,
    qb_r: Scalar,
    qb_n: Scalar,
    kb_h: Scalar,
    kb_r: Scalar,
    kb_n: Scalar,
    R: tl.constexpr,
    ADJACENT: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_U: tl.constexpr,
    BLOCK_N: tl.constexpr,
) -> None:
    """The adjoint of _rotate_fwd: DQH / DKH[b, t * R + r, h, :] = d(q / k + bias) (float32, contiguous)
    from the rotated ones' gradients (SSD core + epilogue), DTHETA[b, t, h, :] (float32, contiguous)."""
    bh = tl.program_id(0)
    b = (bh // nheads).to(tl.int64)
    h = bh % nheads
    g = h // heads_per_group
    blk = tl.program_id(1).to(tl.int64)
    u = blk * BLOCK_U + tl.arange(0, BLOCK_U)
    t = u // R
    r = u % R
    mu = t < seqlen
    rn = tl.arange(0, BLOCK_N)
    mn = rn < dstate
    partner, aidx, sgn, rot = _pairs(rn, nangles, dstate, ADJACENT)
    mrot = mu[:, None] & rot[None, :]
    th = tl.load(
        THETA + ((b * seqlen + t[:, None]) * nheads + h) * nangles + aidx[None, :], mask=mrot, other=0.0
    )
    cos = tl.where(mrot, tl.cos(th), 1.0)
    sin = tl.where(mrot, tl.sin(th), 0.0) * sgn[None, :]
    m2 = mu[:, None] & mn[None, :]
    rows = ((b * seqlen * R + u[:, None]) * nheads + h) * dstate
    dth = _unrotate(
        Q, QB, DQS, DQE, DQH, b, t, r, g, h, rn, partner, cos, sin, sgn, m2, mrot, rows,
        q_b, q_l, q_r, q_g, q_n, qb_h, qb_r, qb_n,
    )  # fmt: skip
    dth += _unrotate(
        K, KB, DKS, DKE, DKH, b, t, r, g, h, rn, partner, cos, sin, sgn, m2, mrot, rows,
        k_b, k_l, k_r, k_g, k_n, kb_h, kb_r, kb_n,
    )  # fmt: skip
    # the ranks of a token are R consecutive rows (BLOCK_U = BLOCK_T * R)
    dth = tl.sum(tl.reshape(tl.where(mrot, dth, 0.0), (BLOCK_T, R, BLOCK_N)), axis=1)
    tt = blk * BLOCK_T + tl.arange(0, BLOCK_T)
    first = sgn < 0
    tl.store(
        DTHETA + ((b * seqlen + tt[:, None]) * nheads + h) * nangles + aidx[None, :],
        dth,
        mask=(tt < seqlen)[:, None] & (rot & first)[None, :],
    )


# --------------------------------------------------------------------------------------- epilogue


@jit
def _rows(
    YS: Pointer,
    V: Pointer,
    MX: Pointer,
    QR: Pointer,
    KR: Pointer,
    W: Pointer,
    NS: Pointer,
    Dp: Pointer,
    b: Block,
    h: Block,
    u: Block,
    t: Block,
    r: Block,
    m2p: Block,
    m2n: Block,
    rp: Block,
    rn: Block,
    seqlen: Scalar,
    nheads: Scalar,
    hdim: Scalar,
    dstate: Scalar,
    v_b: Scalar,
    v_l: Scalar,
    v_h: Scalar,
    v_p: Scalar,
    mx_h: Scalar,
    mx_r: Scalar,
    mx_p: Scalar,
    R: tl.constexpr,
    HAS_MX: tl.constexpr,
    HAS_D: tl.constexpr,
) -> Block:
    """Rows u = (t, r) of a token block: y before the norm (the SSD core's + the in-token correction
    + D x), x, q, k, w_t, n_t, the correction matrix (R > 1; None-like 0 for SISO) and D."""
    L = seqlen * R
    y = tl.load(YS + ((b * L + u[:, None]) * nheads + h) * hdim + rp[None, :], mask=m2p, other=0.0)
    x = tl.load(V + b * v_b + t[:, None] * v_l + h * v_h + rp[None, :] * v_p, mask=m2p, other=0.0).to(
        tl.float32
    )
    if HAS_MX:
        x *= tl.load(MX + h * mx_h + r[:, None] * mx_r + rp[None, :] * mx_p, mask=m2p, other=0.0).to(
            tl.float32
        )
    rown = ((b * L + u[:, None]) * nheads + h) * dstate + rn[None, :]
    q = tl.load(QR + rown, mask=m2n, other=0.0).to(tl.float32)
    k = tl.load(KR + rown, mask=m2n, other=0.0).to(tl.float32)
    mu = t < seqlen
    w = tl.load(W + (b * nheads + h) * seqlen + t, mask=mu, other=0.0)
    ns = tl.load(NS + (b * nheads + h) * seqlen + t, mask=mu, other=0.0)
    if R > 1:
        # y_r += sum_s ([s > r] w_t - n_t) (q_r . k_s) x_s over the ranks s of the same token
        qk = tl.dot(q, tl.trans(k), input_precision="ieee")
        same = t[:, None] == t[None, :]
        coef = tl.where(same, tl.where(r[None, :] > r[:, None], w[:, None], 0.0) - ns[:, None], 0.0)
        # Another token's non-finite q, k or x never enters a row as 0 * inf: the products of other
        # tokens are selected away and the product runs on the finite x (a row's own token's non-finite
        # x already made its SSD output non-finite).
        fin = tl.abs(x) < float("inf")
        y += tl.dot(tl.where(same, coef * qk, 0.0), tl.where(fin, x, 0.0), input_precision="ieee")
    else:
        qk = tl.sum(q * k, axis=1)
        coef = -ns
        y += (coef * qk)[:, None] * x
    dval = 0.0
    if HAS_D:
        dval = tl.load(Dp + h).to(tl.float32)
        y += dval * x
    return y, x, q, k, qk, coef, dval


@jit
def _out_fwd(
    YS: Pointer,
    V: Pointer,
    MX: Pointer,
    QR: Pointer,
    KR: Pointer,
    W: Pointer,
    NS: Pointer,
    Dp: Pointer,
    Z: Pointer,
    MZ: Pointer,
    MO: Pointer,
    NW: Pointer,
    OUT: Pointer,
    seqlen: Scalar,
    nheads: Scalar,
    hdim: Scalar,
    dstate: Scalar,
    eps: Scalar,
    v_b: Scalar,
    v_l: Scalar,
    v_h: Scalar,
    v_p: Scalar,
    z_b: Scalar,
    z_l: Scalar,
    z_h: Scalar,
    z_p: Scalar,
    o_b: Scalar,
    o_l: Scalar,
    o_r: Scalar,
    o_h: Scalar,
    o_p: Scalar,
    mx_h: Scalar,
    mx_r: Scalar,
    mx_p: Scalar,
    mz_h: Scalar,
    mz_r: Scalar,
    mz_p: Scalar,
    mo_h: Scalar,
    mo_r: Scalar,
    mo_p: Scalar,
    nw_h: Scalar,
    nw_p: Scalar,
    R: tl.constexpr,
    HAS_MX: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_MZ: tl.constexpr,
    HAS_MO: tl.constexpr,
    HAS_NORM: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_U: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
) -> None:
    """OUT for BLOCK_T tokens (BLOCK_U = BLOCK_T * R rows): (b, l, h, p) with mimo_o, else (b, l, R, h, p)."""
    bh = tl.program_id(0)
    b = (bh // nheads).to(tl.int64)
    h = bh % nheads
    blk = tl.program_id(1).to(tl.int64)
    u = blk * BLOCK_U + tl.arange(0, BLOCK_U)
    t = u // R
    r = u % R
    mu = t < seqlen
    rp = tl.arange(0, BLOCK_P)
    rn = tl.arange(0, BLOCK_N)
    mp = rp < hdim
    m2p = mu[:, None] & mp[None, :]
    m2n = mu[:, None] & (rn < dstate)[None, :]
    y, _x, _q, _k, _qk, _coef, _dval = _rows(
        YS, V, MX, QR, KR, W, NS, Dp, b, h, u, t, r, m2p, m2n, rp, rn, seqlen, nheads, hdim, dstate,
        v_b, v_l, v_h, v_p, mx_h, mx_r, mx_p, R, HAS_MX, HAS_D,
    )  # fmt: skip
    if HAS_NORM:
        rs = tl.rsqrt(tl.sum(y * y, axis=1) / hdim + eps)
        y = y * rs[:, None] * tl.load(NW + h * nw_h + rp * nw_p, mask=mp, other=0.0).to(tl.float32)[None, :]
    if HAS_Z:
        zr = tl.load(Z + b * z_b + t[:, None] * z_l + h * z_h + rp[None, :] * z_p, mask=m2p, other=0.0).to(
            tl.float32
        )
        if HAS_MZ:
            zr *= tl.load(MZ + h * mz_h + r[:, None] * mz_r + rp[None, :] * mz_p, mask=m2p, other=0.0).to(
                tl.float32
            )
        y = y * zr * tl.sigmoid(zr)
    if HAS_MO:
        y *= tl.load(MO + h * mo_h + r[:, None] * mo_r + rp[None, :] * mo_p, mask=m2p, other=0.0).to(
            tl.float32
        )
        o = tl.sum(tl.reshape(y, (BLOCK_T, R, BLOCK_P)), axis=1)
        tt = blk * BLOCK_T + tl.arange(0, BLOCK_T)
        tl.store(
            OUT + b * o_b + tt[:, None] * o_l + h * o_h + rp[None, :] * o_p,
            o,
            mask=(tt < seqlen)[:, None] & mp[None, :],
        )
    else:
        tl.store(
            OUT + b * o_b + t[:, None] * o_l + r[:, None] * o_r + h * o_h + rp[None, :] * o_p, y, mask=m2p
        )


@jit
def _out_bwd(
    DOUT: Pointer,
    YS: Pointer,
    V: Pointer,
    MX: Pointer,
    QR: Pointer,
    KR: Pointer,
    W: Pointer,
    NS: Pointer,
    Dp: Pointer,
    Z: Pointer,
    MZ: Pointer,
    MO: Pointer,
    NW: Pointer,
    DY: Pointer,
    DXE: Pointer,
    DQE: Pointer,
    DKE: Pointer,
    DWE: Pointer,
    DNSE: Pointer,
    DZ: Pointer,
    PD: Pointer,
    PNW: Pointer,
    PMZ: Pointer,
    PMO: Pointer,
    seqlen: Scalar,
    nheads: Scalar,
    hdim: Scalar,
    dstate: Scalar,
    eps: Scalar,
    v_b: Scalar,
    v_l: Scalar,
    v_h: Scalar,
    v_p: Scalar,
    z_b: Scalar,
    z_l: Scalar,
    z_h: Scalar,
    z_p: Scalar,
    do_b: Scalar,
    do_l: Scalar,
    do_r: Scalar,
    do_h: Scalar,
    do_p: Scalar,
    mx_h: Scalar,
    mx_r: Scalar,
    mx_p: Scalar,
    mz_h: Scalar,
    mz_r: Scalar,
    mz_p: Scalar,
    mo_h: Scalar,
    mo_r: Scalar,
    mo_p: Scalar,
    nw_h: Scalar,
    nw_p: Scalar,
    R: tl.constexpr,
    HAS_MX: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_MZ: tl.constexpr,
    HAS_MO: tl.constexpr,
    HAS_NORM: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_U: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
) -> None:
    """The adjoint of _out_fwd for its rows: DY (the SSD core's output gradient), DXE / DQE / DKE (the
    correction's and D's share of the x / q / k gradients), DWE / DNSE[b, h, t], DZ[b, t, h, :] (all
    float32, contiguous) and this program's partial sums of dD, d norm_weight, d mimo_z, d mimo_o."""
    bh = tl.program_id(0)
    b = (bh // nheads).to(tl.int64)
    h = bh % nheads
    blk = tl.program_id(1).to(tl.int64)
    nblk = tl.num_programs(1)
    part = bh * nblk + blk
    u = blk * BLOCK_U + tl.arange(0, BLOCK_U)
    t = u // R
    r = u % R
    mu = t < seqlen
    tt = blk * BLOCK_T + tl.arange(0, BLOCK_T)
    mtt = tt < seqlen
    rp = tl.arange(0, BLOCK_P)
    rn = tl.arange(0, BLOCK_N)
    mp = rp < hdim
    m2p = mu[:, None] & mp[None, :]
    m2n = mu[:, None] & (rn < dstate)[None, :]
    rr = tl.arange(0, R)
    y, x, q, k, qk, coef, dval = _rows(
        YS, V, MX, QR, KR, W, NS, Dp, b, h, u, t, r, m2p, m2n, rp, rn, seqlen, nheads, hdim, dstate,
        v_b, v_l, v_h, v_p, mx_h, mx_r, mx_p, R, HAS_MX, HAS_D,
    )  # fmt: skip
    if HAS_MO:
        dtok = tl.load(
            DOUT + b * do_b + t[:, None] * do_l + h * do_h + rp[None, :] * do_p, mask=m2p, other=0.0
        ).to(tl.float32)
        dg = dtok * tl.load(MO + h * mo_h + r[:, None] * mo_r + rp[None, :] * mo_p, mask=m2p, other=0.0).to(
            tl.float32
        )
    else:
        dg = tl.load(
            DOUT + b * do_b + t[:, None] * do_l + r[:, None] * do_r + h * do_h + rp[None, :] * do_p,
            mask=m2p,
            other=0.0,
        ).to(tl.float32)
    if HAS_NORM:
        rs = tl.rsqrt(tl.sum(y * y, axis=1) / hdim + eps)
        yhat = y * rs[:, None]
        nw = tl.load(NW + h * nw_h + rp * nw_p, mask=mp, other=0.0).to(tl.float32)
        nrm = yhat * nw[None, :]
    else:
        nrm = y
    if HAS_Z:
        zraw = tl.load(Z + b * z_b + t[:, None] * z_l + h * z_h + rp[None, :] * z_p, mask=m2p, other=0.0).to(
            tl.float32
        )
        if HAS_MZ:
            mz = tl.load(MZ + h * mz_h + r[:, None] * mz_r + rp[None, :] * mz_p, mask=m2p, other=0.0).to(
                tl.float32
            )
            zr = zraw * mz
        else:
            zr = zraw
        sz = tl.sigmoid(zr)
        gated = nrm * zr * sz
        dn = dg * zr * sz
        dzr = dg * nrm * sz * (1.0 + zr * (1.0 - sz))
        if HAS_MZ:
            tl.store(
                PMZ + (part * R + rr[:, None]) * hdim + rp[None, :],
                tl.sum(tl.reshape(dzr * zraw, (BLOCK_T, R, BLOCK_P)), axis=0),
                mask=mp[None, :],
            )
            dzr = dzr * mz
        tl.store(
            DZ + ((b * seqlen + tt[:, None]) * nheads + h) * hdim + rp[None, :],
            tl.sum(tl.reshape(dzr, (BLOCK_T, R, BLOCK_P)), axis=1),
            mask=mtt[:, None] & mp[None, :],
        )
    else:
        gated = nrm
        dn = dg
    if HAS_MO:
        tl.store(
            PMO + (part * R + rr[:, None]) * hdim + rp[None, :],
            tl.sum(tl.reshape(dtok * gated, (BLOCK_T, R, BLOCK_P)), axis=0),
            mask=mp[None, :],
        )
    if HAS_NORM:
        tl.store(PNW + part * hdim + rp, tl.sum(dn * yhat, axis=0), mask=mp)
        gn = dn * nw[None, :]
        gy = rs[:, None] * (gn - yhat * (tl.sum(gn * yhat, axis=1) / hdim)[:, None])
    else:
        gy = dn
    gy = tl.where(m2p, gy, 0.0)
    L = seqlen * R
    rowp = ((b * L + u[:, None]) * nheads + h) * hdim + rp[None, :]
    rown = ((b * L + u[:, None]) * nheads + h) * dstate + rn[None, :]
    tl.store(DY + rowp, gy, mask=m2p)
    dx = gy * dval
    if HAS_D:
        tl.store(PD + part, tl.sum(tl.sum(gy * x, axis=1), axis=0))
    if R > 1:
        cm = coef * qk
        dx += tl.dot(tl.trans(cm), gy, input_precision="ieee")
        same = t[:, None] == t[None, :]
        dcm = tl.where(same, tl.dot(gy, tl.trans(x), input_precision="ieee"), 0.0)
        dqk = dcm * coef
        dcoef = dcm * qk
        dq = tl.dot(dqk, k, input_precision="ieee")
        dk = tl.dot(tl.trans(dqk), q, input_precision="ieee")
        dw = tl.sum(tl.where(r[None, :] > r[:, None], dcoef, 0.0), axis=1)
        dns = -tl.sum(dcoef, axis=1)
        dw = tl.sum(tl.reshape(dw, (BLOCK_T, R)), axis=1)
        dns = tl.sum(tl.reshape(dns, (BLOCK_T, R)), axis=1)
    else:
        dx += (coef * qk)[:, None] * gy
        dc = tl.sum(gy * x, axis=1)
        dqk = dc * coef
        dq = dqk[:, None] * k
        dk = dqk[:, None] * q
        dw = tl.zeros([BLOCK_T], dtype=tl.float32)
        dns = -(qk * dc)
    tl.store(DXE + rowp, dx, mask=m2p)
    tl.store(DQE + rown, dq, mask=m2n)
    tl.store(DKE + rown, dk, mask=m2n)
    tl.store(DWE + (b * nheads + h) * seqlen + tt, dw, mask=mtt)
    tl.store(DNSE + (b * nheads + h) * seqlen + tt, dns, mask=mtt)


# ------------------------------------------------------------------------------------------- step


@jit
def _rot_vec(
    X: Pointer,
    XB: Pointer,
    b: Block,
    r: Block,
    g: Block,
    h: Block,
    rn: Block,
    partner: Block,
    cos: Block,
    sin: Block,
    mn: Block,
    rot: Block,
    x_b: Scalar,
    x_r: Scalar,
    x_g: Scalar,
    x_n: Scalar,
    xb_h: Scalar,
    xb_r: Scalar,
    xb_n: Scalar,
) -> Block:
    """rot(X[b, r, g, :] + XB[h, r, :]) as a float32 vector (``sin`` carries each entry's sign)."""
    base = X + b * x_b + r * x_r + g * x_g
    bias = XB + h * xb_h + r * xb_r
    x = tl.load(base + rn * x_n, mask=mn, other=0.0).to(tl.float32)
    x += tl.load(bias + rn * xb_n, mask=mn, other=0.0).to(tl.float32)
    xp = tl.load(base + partner * x_n, mask=rot, other=0.0).to(tl.float32)
    xp += tl.load(bias + partner * xb_n, mask=rot, other=0.0).to(tl.float32)
    return x * cos + xp * sin


@jit
def _step_state(
    S: Pointer, V: Pointer, VP: Pointer, KP: Pointer, K: Pointer, KB: Pointer, MX: Pointer, b: Block, h: Block, g: Block, p0: Block, rn: Block, mn: Block, partner: Block, cos: Block, sin: Block, rot: Block, alpha: Block, beta: Block, gamma: Block, rank: Scalar, hdim: Scalar,
    s_b: Scalar, s_h: Scalar, s_p: Scalar, s_n: Scalar, v_b: Scalar, v_h: Scalar, v_p: Scalar, vp_b: Scalar, vp_h: Scalar, vp_p: Scalar, kp_b: Scalar, kp_r: Scalar, kp_h: Scalar, kp_n: Scalar, k_b: Scalar, k_r: Scalar, k_g: Scalar, k_n: Scalar,
    kb_h: Scalar, kb_r: Scalar, kb_n: Scalar, mx_h: Scalar, mx_r: Scalar, mx_p: Scalar,
    HAS_MX: tl.constexpr, BLOCK_P: tl.constexpr,
) -> Block:  # fmt: skip
    """Rows p0 + [0, BLOCK_P) of the new state: alpha S + sum_r (beta x_prev,r k_prev,r^T + gamma x_r
    k_r^T), x_r = v * mimo_x_r. Returns (state rows (BLOCK_P, BLOCK_N), rows, row mask, v rows)."""
    rp = p0 + tl.arange(0, BLOCK_P)
    mp = rp < hdim
    v = tl.load(V + b * v_b + h * v_h + rp * v_p, mask=mp, other=0.0).to(tl.float32)
    vp = tl.load(VP + b * vp_b + h * vp_h + rp * vp_p, mask=mp, other=0.0).to(tl.float32)
    st = alpha * tl.load(
        S + b * s_b + h * s_h + rp[:, None] * s_p + rn[None, :] * s_n,
        mask=mp[:, None] & mn[None, :],
        other=0.0,
    ).to(tl.float32)
    for r in range(rank):
        if HAS_MX:
            m = tl.load(MX + h * mx_h + r * mx_r + rp * mx_p, mask=mp, other=0.0).to(tl.float32)
        else:
            m = tl.full([BLOCK_P], 1.0, tl.float32)
        kr = _rot_vec(K, KB, b, r, g, h, rn, partner, cos, sin, mn, rot, k_b, k_r, k_g, k_n, kb_h, kb_r, kb_n)
        kp = tl.load(KP + b * kp_b + r * kp_r + h * kp_h + rn * kp_n, mask=mn, other=0.0).to(tl.float32)
        st += (beta * vp * m)[:, None] * kp[None, :] + (gamma * v * m)[:, None] * kr[None, :]
    return st, rp, mp, v


@jit
def _step_y(
    st: Block, v: Block, Q: Pointer, QB: Pointer, MX: Pointer, Dp: Pointer, b: Block, r: Block, g: Block, h: Block, rp: Block, mp: Block, rn: Block, mn: Block, partner: Block, cos: Block, sin: Block, rot: Block,
    q_b: Scalar, q_r: Scalar, q_g: Scalar, q_n: Scalar, qb_h: Scalar, qb_r: Scalar, qb_n: Scalar, mx_h: Scalar, mx_r: Scalar, mx_p: Scalar,
    HAS_MX: tl.constexpr, HAS_D: tl.constexpr,
) -> Block:  # fmt: skip
    """Rank r's output rows before the norm and gate: the state rows times q_r, + D x_r."""
    q = _rot_vec(Q, QB, b, r, g, h, rn, partner, cos, sin, mn, rot, q_b, q_r, q_g, q_n, qb_h, qb_r, qb_n)
    y = tl.sum(st * q[None, :], axis=1)
    if HAS_D:
        x = v
        if HAS_MX:
            x = x * tl.load(MX + h * mx_h + r * mx_r + rp * mx_p, mask=mp, other=0.0).to(tl.float32)
        y += tl.load(Dp + h).to(tl.float32) * x
    return y


@jit
def _step(
    Q: Pointer,
    K: Pointer,
    V: Pointer,
    ADT: Pointer,
    DT: Pointer,
    TRAP: Pointer,
    QB: Pointer,
    KB: Pointer,
    ANG: Pointer,
    TH: Pointer,
    S: Pointer,
    KP: Pointer,
    VP: Pointer,
    Dp: Pointer,
    Z: Pointer,
    MX: Pointer,
    MZ: Pointer,
    MO: Pointer,
    NW: Pointer,
    OUT: Pointer,
    TH_OUT: Pointer,
    S_OUT: Pointer,
    K_OUT: Pointer,
    nheads: Scalar,
    heads_per_group: Scalar,
    hdim: Scalar,
    dstate: Scalar,
    nangles: Scalar,
    rank: Scalar,
    eps: Scalar,
    q_b: Scalar,
    q_r: Scalar,
    q_g: Scalar,
    q_n: Scalar,
    k_b: Scalar,
    k_r: Scalar,
    k_g: Scalar,
    k_n: Scalar,
    v_b: Scalar,
    v_h: Scalar,
    v_p: Scalar,
    adt_b: Scalar,
    adt_h: Scalar,
    dt_b: Scalar,
    dt_h: Scalar,
    tr_b: Scalar,
    tr_h: Scalar,
    qb_h: Scalar,
    qb_r: Scalar,
    qb_n: Scalar,
    kb_h: Scalar,
    kb_r: Scalar,
    kb_n: Scalar,
    ang_b: Scalar,
    ang_h: Scalar,
    ang_a: Scalar,
    th_b: Scalar,
    th_h: Scalar,
    th_a: Scalar,
    s_b: Scalar,
    s_h: Scalar,
    s_p: Scalar,
    s_n: Scalar,
    kp_b: Scalar,
    kp_r: Scalar,
    kp_h: Scalar,
    kp_n: Scalar,
    vp_b: Scalar,
    vp_h: Scalar,
    vp_p: Scalar,
    z_b: Scalar,
    z_h: Scalar,
    z_p: Scalar,
    mx_h: Scalar,
    mx_r: Scalar,
    mx_p: Scalar,
    mz_h: Scalar,
    mz_r: Scalar,
    mz_p: Scalar,
    mo_h: Scalar,
    mo_r: Scalar,
    mo_p: Scalar,
    nw_h: Scalar,
    nw_p: Scalar,
    o_b: Scalar,
    o_r: Scalar,
    o_h: Scalar,
    o_p: Scalar,
    ADJACENT: tl.constexpr,
    HAS_MX: tl.constexpr,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_MZ: tl.constexpr,
    HAS_MO: tl.constexpr,
    HAS_NORM: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_A: tl.constexpr,
) -> None:
    """One token for (b, h, a block of headdim rows; every block of the head, in two passes, with the
    norm): the new angles, state (S_OUT, float32) and rotated keys (K_OUT, float32), and OUT. The ranks
    are a loop (each adds its outer products to the state rows and reads its output from them)."""
    b = tl.program_id(0).to(tl.int64)
    h = tl.program_id(1)
    pb = tl.program_id(2)
    g = h // heads_per_group
    rn = tl.arange(0, BLOCK_N)
    mn = rn < dstate
    rr = tl.arange(0, BLOCK_R)
    dtv = tl.load(DT + b * dt_b + h * dt_h).to(tl.float32)
    adt = tl.load(ADT + b * adt_b + h * adt_h).to(tl.float32)
    lam = tl.sigmoid(tl.load(TRAP + b * tr_b + h * tr_h).to(tl.float32))
    alpha = tl.exp(adt)
    beta = (1.0 - lam) * dtv * alpha
    gamma = lam * dtv
    # the new angles, per d_state entry (an entry's angle index aidx)
    partner, aidx, sgn, rot = _pairs(rn, nangles, dstate, ADJACENT)
    th = tl.load(TH + b * th_b + h * th_h + aidx * th_a, mask=rot, other=0.0).to(tl.float32)
    ang = tl.load(ANG + b * ang_b + h * ang_h + aidx * ang_a, mask=rot, other=0.0).to(tl.float32)
    th = _mod_two_pi(th + _PI * _tanh(ang) * dtv)
    cos = tl.where(rot, tl.cos(th), 1.0)
    sin = tl.where(rot, tl.sin(th), 0.0) * sgn
    if pb == 0:
        ra = tl.arange(0, BLOCK_A)
        ma = ra < nangles
        tha = tl.load(TH + b * th_b + h * th_h + ra * th_a, mask=ma, other=0.0).to(tl.float32)
        anga = tl.load(ANG + b * ang_b + h * ang_h + ra * ang_a, mask=ma, other=0.0).to(tl.float32)
        tl.store(
            TH_OUT + (b * nheads + h) * nangles + ra, _mod_two_pi(tha + _PI * _tanh(anga) * dtv), mask=ma
        )
        for r in range(rank):
            kr = _rot_vec(
                K, KB, b, r, g, h, rn, partner, cos, sin, mn, rot, k_b, k_r, k_g, k_n, kb_h, kb_r, kb_n
            )
            tl.store(K_OUT + ((b * rank + r) * nheads + h) * dstate + rn, kr, mask=mn)
    if HAS_NORM:
        # the RMSNorm over headdim: a first pass for each rank's mean square (the rows are recomputed)
        sumsq = tl.zeros([BLOCK_R], dtype=tl.float32)
        for p0 in range(0, hdim, BLOCK_P):
            st, rp, mp, v = _step_state(
                S, V, VP, KP, K, KB, MX, b, h, g, p0, rn, mn, partner, cos, sin, rot, alpha, beta, gamma,
                rank, hdim, s_b, s_h, s_p, s_n, v_b, v_h, v_p, vp_b, vp_h, vp_p, kp_b, kp_r, kp_h, kp_n,
                k_b, k_r, k_g, k_n, kb_h, kb_r, kb_n, mx_h, mx_r, mx_p, HAS_MX, BLOCK_P,
            )  # fmt: skip
            for r in range(rank):
                y = _step_y(
                    st, v, Q, QB, MX, Dp, b, r, g, h, rp, mp, rn, mn, partner, cos, sin, rot,
                    q_b, q_r, q_g, q_n, qb_h, qb_r, qb_n, mx_h, mx_r, mx_p, HAS_MX, HAS_D,
                )  # fmt: skip
                sumsq += tl.where(rr == r, tl.sum(y * y, axis=0), 0.0)
        rs = tl.rsqrt(sumsq / hdim + eps)
        lo = 0
        hi = hdim
    else:
        lo = pb * BLOCK_P
        hi = lo + BLOCK_P
    for p0 in range(lo, hi, BLOCK_P):
        st, rp, mp, v = _step_state(
            S, V, VP, KP, K, KB, MX, b, h, g, p0, rn, mn, partner, cos, sin, rot, alpha, beta, gamma,
            rank, hdim, s_b, s_h, s_p, s_n, v_b, v_h, v_p, vp_b, vp_h, vp_p, kp_b, kp_r, kp_h, kp_n,
            k_b, k_r, k_g, k_n, kb_h, kb_r, kb_n, mx_h, mx_r, mx_p, HAS_MX, BLOCK_P,
        )  # fmt: skip
        tl.store(
            S_OUT + ((b * nheads + h) * hdim + rp[:, None]) * dstate + rn[None, :],
            st,
            mask=mp[:, None] & mn[None, :],
        )
        acc = tl.zeros([BLOCK_P], dtype=tl.float32)
        for r in range(rank):
            y = _step_y(
                st, v, Q, QB, MX, Dp, b, r, g, h, rp, mp, rn, mn, partner, cos, sin, rot,
                q_b, q_r, q_g, q_n, qb_h, qb_r, qb_n, mx_h, mx_r, mx_p, HAS_MX, HAS_D,
            )  # fmt: skip
            if HAS_NORM:
                nw = tl.load(NW + h * nw_h + rp * nw_p, mask=mp, other=0.0).to(tl.float32)
                y = y * tl.sum(tl.where(rr == r, rs, 0.0), axis=0) * nw
            if HAS_Z:
                zr = tl.load(Z + b * z_b + h * z_h + rp * z_p, mask=mp, other=0.0).to(tl.float32)
                if HAS_MZ:
                    zr *= tl.load(MZ + h * mz_h + r * mz_r + rp * mz_p, mask=mp, other=0.0).to(tl.float32)
                y = y * zr * tl.sigmoid(zr)
            if HAS_MO:
                acc += tl.load(MO + h * mo_h + r * mo_r + rp * mo_p, mask=mp, other=0.0).to(tl.float32) * y
            else:
                tl.store(OUT + b * o_b + r * o_r + h * o_h + rp * o_p, y, mask=mp)
        if HAS_MO:
            tl.store(OUT + b * o_b + h * o_h + rp * o_p, acc, mask=mp)


# ----------------------------------------------------------------------------------------- Python


def _strides(t: Optional[torch.Tensor], n: int) -> Tuple[int, ...]:
    """t's strides, or n zeros for an absent tensor."""
    return tuple(t.stride()) if t is not None else (0,) * n


def _epilogue_launch(R: int, hdim: int, dstate: int, backward: bool) -> Dict[str, int]:
    """Tokens per epilogue program (BLOCK_T; BLOCK_U = BLOCK_T * R rows of headdim and d_state entries)
    and warps: 32 rows for the SISO forward, else 16 (the MIMO in-token products need >= 16 rows);
    tests/ops/triton/compile_check.py: no spills at headdim 64 x d_state 128, ranks 1 and 4."""
    big = max(pow2(hdim, 16), pow2(dstate, 16)) > 128
    rows = 16 if backward or big or R > 1 else 32
    bt = max(rows // R, 1)
    return {"BLOCK_T": bt, "BLOCK_U": bt * R, "num_warps": 8 if (R > 1 or backward) else 4}


def _rotate_rows(dstate: int) -> int:
    """Rows (tokens x ranks) per program of the rotation kernels: tiles of 2048 entries at most."""
    return max(16, min(64, 2048 // pow2(dstate, 16)))


class _Mamba3Fn(torch.autograd.Function):
    """out, final ssm state (after the last token; float32), the last token's angles (float32)."""

    @staticmethod
    def forward(
        ctx: Any,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        adt: torch.Tensor,
        dt: torch.Tensor,
        trap: torch.Tensor,
        q_bias: torch.Tensor,
        k_bias: torch.Tensor,
        angles: torch.Tensor,
        D: Optional[torch.Tensor],
        z: Optional[torch.Tensor],
        mimo_x: Optional[torch.Tensor],
        mimo_z: Optional[torch.Tensor],
        mimo_o: Optional[torch.Tensor],
        norm_weight: Optional[torch.Tensor],
        g0: Optional[torch.Tensor],
        th0: Optional[torch.Tensor],
        seq_idx: Optional[torch.Tensor],
        adjacent: bool,
        chunk_size: int,
        norm_eps: float,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, l, R, ng, n = q.shape
        h, p = v.shape[2], v.shape[3]
        a = angles.shape[-1]
        L = l * R
        dev = v.device
        f32: Dict[str, Any] = {"dtype": torch.float32, "device": dev}
        qs = sub_chunk(chunk_size, R)
        qt = qs // R
        nc = triton.cdiv(l, qt)
        T = nc * qs
        seq = seq_idx if seq_idx is not None else dt
        s_str = tuple(seq_idx.stride()) if seq_idx is not None else (0, 0)
        block_a = pow2(a, 16)
        theta = torch.empty((b, l, h, a), **f32)
        _angles_fwd[(b * h,)](
            angles, dt, seq, th0 if th0 is not None else theta, theta, l, h, a, *angles.stride(), *dt.stride(),
            *s_str, HAS_SEQ=seq_idx is not None, HAS_TH0=th0 is not None, BLOCK_T=_ANGLE_BLOCK,
            BLOCK_A=block_a, num_warps=4,
        )  # fmt: skip
        cs = torch.empty((b, h, T), **f32)
        dtp = torch.empty((b, h, T), **f32)
        w = torch.empty((b, h, l), **f32)
        ns = torch.empty((b, h, l), **f32)
        _decay_fwd[(b, h, nc)](
            adt, dt, trap, seq, cs, dtp, w, ns, l, h, T, *adt.stride(), *dt.stride(), *trap.stride(), *s_str,
            HAS_SEQ=seq_idx is not None, R=R, QT=qt, num_warps=1,
        )  # fmt: skip
        qr = torch.empty((b, L, h, n), dtype=v.dtype, device=dev)
        kr = torch.empty_like(qr)
        bn = pow2(n, 16)
        bu = _rotate_rows(n)
        _rotate_fwd[(b * h, triton.cdiv(L, bu))](
            q, k, q_bias, k_bias, theta, qr, kr, l, h, h // ng, n, a, *q.stride(), *k.stride(),
            *q_bias.stride(), *k_bias.stride(), R=R, ADJACENT=adjacent, BLOCK_U=bu, BLOCK_N=bn,
            num_warps=4,
        )  # fmt: skip
        if mimo_x is not None:
            x = (v.unsqueeze(2) * mimo_x.transpose(0, 1).to(v.dtype)).reshape(b, L, h, p)
        else:
            x = v
        seq_sub = None
        if seq_idx is not None:
            seq_sub = seq_idx.repeat_interleave(R, dim=1) if R > 1 else seq_idx
        ys, final, hin, _ = ssd.core_forward(x, kr, qr, dtp, cs, qs, seq_sub, g0, out_dtype=torch.float32)
        mo_shape = (b, l, h, p) if mimo_o is not None else (b, l, R, h, p)
        out = torch.empty(mo_shape, dtype=v.dtype, device=dev)
        o_str = (
            (out.stride(0), out.stride(1), 0, out.stride(2), out.stride(3))
            if mimo_o is not None
            else out.stride()
        )
        launch = _epilogue_launch(R, p, n, backward=False)
        bt = launch["BLOCK_T"]
        meta = {
            "R": R,
            "HAS_MX": mimo_x is not None,
            "HAS_D": D is not None,
            "HAS_Z": z is not None,
            "HAS_MZ": mimo_z is not None,
            "HAS_MO": mimo_o is not None,
            "HAS_NORM": norm_weight is not None,
            "BLOCK_P": pow2(p, 16),
            "BLOCK_N": bn,
        }
        dummy = w
        _out_fwd[(b * h, triton.cdiv(l, bt))](
            ys, v, mimo_x if mimo_x is not None else dummy, qr, kr, w, ns, D if D is not None else dummy,
            z if z is not None else dummy, mimo_z if mimo_z is not None else dummy,
            mimo_o if mimo_o is not None else dummy, norm_weight if norm_weight is not None else dummy, out,
            l, h, p, n, float(norm_eps), *v.stride(), *_strides(z, 4), *o_str, *_strides(mimo_x, 3),
            *_strides(mimo_z, 3), *_strides(mimo_o, 3), *_strides(norm_weight, 2), **launch, **meta,
        )  # fmt: skip
        ctx.save_for_backward(
            q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z, mimo_x, mimo_z, mimo_o, norm_weight,
            seq_idx, seq_sub, theta, cs, dtp, w, ns, qr, kr, x, ys, hin,
        )  # fmt: skip
        ctx.meta = meta
        ctx.info = (adjacent, qs, float(norm_eps), g0 is not None, th0 is not None)
        theta_last = theta[:, -1].clone()
        return out, final, theta_last

    @staticmethod
    def backward(
        ctx: Any,
        dout: Optional[torch.Tensor],
        dfinal: Optional[torch.Tensor],
        dtheta_last: Optional[torch.Tensor],
    ) -> Tuple[Optional[torch.Tensor], ...]:
        (
            q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z, mimo_x, mimo_z, mimo_o, norm_weight,
            seq_idx, seq_sub, theta, cs, dtp, w, ns, qr, kr, x, ys, hin,
        ) = ctx.saved_tensors  # fmt: skip
        meta = ctx.meta
        adjacent, qs, norm_eps, has_g0, has_th0 = ctx.info
        b, l, R, ng, n = q.shape
        h, p = v.shape[2], v.shape[3]
        a = angles.shape[-1]
        L = l * R
        dev = v.device
        f32: Dict[str, Any] = {"dtype": torch.float32, "device": dev}
        launch = _epilogue_launch(R, p, n, backward=True)
        nblk = triton.cdiv(l, launch["BLOCK_T"])
        if dout is None:
            dout = torch.zeros((b, l, h, p) if mimo_o is not None else (b, l, R, h, p), **f32)
        do_str = (
            (dout.stride(0), dout.stride(1), 0, dout.stride(2), dout.stride(3))
            if mimo_o is not None
            else dout.stride()
        )
        dy = torch.empty((b, L, h, p), **f32)
        dxe = torch.empty((b, L, h, p), **f32)
        dqe = torch.empty((b, L, h, n), **f32)
        dke = torch.empty((b, L, h, n), **f32)
        dwe = torch.empty((b, h, l), **f32)
        dnse = torch.empty((b, h, l), **f32)
        dz = torch.empty((b, l, h, p), **f32) if z is not None else None
        pd = torch.empty((b * h * nblk,), **f32) if D is not None else None
        pnw = torch.empty((b * h, nblk, p), **f32) if norm_weight is not None else None
        pmz = torch.empty((b * h, nblk, R, p), **f32) if mimo_z is not None else None
        pmo = torch.empty((b * h, nblk, R, p), **f32) if mimo_o is not None else None
        dummy = w
        _out_bwd[(b * h, nblk)](
            dout, ys, v, mimo_x if mimo_x is not None else dummy, qr, kr, w, ns,
            D if D is not None else dummy, z if z is not None else dummy,
            mimo_z if mimo_z is not None else dummy, mimo_o if mimo_o is not None else dummy,
            norm_weight if norm_weight is not None else dummy, dy, dxe, dqe, dke, dwe, dnse,
            dz if dz is not None else dummy, pd if pd is not None else dummy,
            pnw if pnw is not None else dummy, pmz if pmz is not None else dummy,
            pmo if pmo is not None else dummy, l, h, p, n, norm_eps, *v.stride(), *_strides(z, 4), *do_str,
            *_strides(mimo_x, 3), *_strides(mimo_z, 3), *_strides(mimo_o, 3), *_strides(norm_weight, 2),
            **launch, **meta,
        )  # fmt: skip
        dfin = dfinal.float().contiguous() if dfinal is not None else None
        dxs, dks, dqs, ddtp, dcs, dg0 = ssd.core_backward(x, kr, qr, dtp, cs, qs, seq_sub, hin, dy, dfin)
        qt = qs // R
        nc = triton.cdiv(l, qt)
        T = nc * qs
        seq = seq_idx if seq_idx is not None else dt
        s_str = tuple(seq_idx.stride()) if seq_idx is not None else (0, 0)
        dadt = torch.empty((b, h, l), **f32)
        dtrap = torch.empty((b, h, l), **f32)
        ddt = torch.empty((b, h, l), **f32)
        _decay_bwd[(b, h, nc)](
            dt, trap, seq, dcs, ddtp, dwe, dnse, dadt, dtrap, ddt, l, h, T, *dt.stride(), *trap.stride(),
            *s_str, HAS_SEQ=seq_idx is not None, R=R, QT=qt, num_warps=1,
        )  # fmt: skip
        dqh = torch.empty((b, L, h, n), **f32)
        dkh = torch.empty((b, L, h, n), **f32)
        dtheta = torch.zeros((b, l, h, a), **f32)
        bn = pow2(n, 16)
        bu = _rotate_rows(n)
        _rotate_bwd[(b * h, triton.cdiv(L, bu))](
            q, k, q_bias, k_bias, theta, dqs, dqe, dks, dke, dqh, dkh, dtheta, l, h, h // ng, n, a,
            *q.stride(), *k.stride(), *q_bias.stride(), *k_bias.stride(), R=R, ADJACENT=adjacent,
            BLOCK_T=bu // R, BLOCK_U=bu, BLOCK_N=bn, num_warps=8,
        )  # fmt: skip
        if dtheta_last is not None:
            dtheta[:, -1] += dtheta_last
        dang = torch.empty((b, l, h, a), **f32)
        dth0 = torch.empty((b, h, a), **f32) if has_th0 else None
        _angles_bwd[(b * h,)](
            angles, dt, seq, dtheta, dang, ddt, dth0 if dth0 is not None else dang, l, h, a,
            *angles.stride(), *dt.stride(), *s_str, HAS_SEQ=seq_idx is not None, HAS_TH0=has_th0,
            BLOCK_T=_ANGLE_BLOCK, BLOCK_A=pow2(a, 16), num_warps=8,
        )  # fmt: skip
        # torch reductions: ranks -> v and mimo_x, a group's heads -> q / k, the batch -> the biases
        dxr = (dxs + dxe).view(b, l, R, h, p)
        if mimo_x is not None:
            dv = (dxr * mimo_x.float().transpose(0, 1)).sum(2)
            dmx = (dxr * v.float().unsqueeze(2)).sum((0, 1)).transpose(0, 1).to(mimo_x.dtype)
        else:
            dv = dxr.sum(2)
            dmx = None
        dqh = dqh.view(b, l, R, h, n)
        dkh = dkh.view(b, l, R, h, n)
        hpg = h // ng
        dq = dqh.view(b, l, R, ng, hpg, n).sum(4).to(q.dtype)
        dk = dkh.view(b, l, R, ng, hpg, n).sum(4).to(k.dtype)
        dqb = dqh.sum((0, 1)).transpose(0, 1).to(q_bias.dtype)
        dkb = dkh.sum((0, 1)).transpose(0, 1).to(k_bias.dtype)
        dD = pd.view(b * h, nblk).view(b, h, nblk).sum((0, 2)).to(D.dtype) if pd is not None else None
        dnw = pnw.view(b, h, nblk, p).sum((0, 2)).to(norm_weight.dtype) if pnw is not None else None
        dmz = pmz.view(b, h, nblk, R, p).sum((0, 2)).to(mimo_z.dtype) if pmz is not None else None
        dmo = pmo.view(b, h, nblk, R, p).sum((0, 2)).to(mimo_o.dtype) if pmo is not None else None
        return (
            dq, dk, dv.to(v.dtype), dadt.to(adt.dtype), ddt.to(dt.dtype), dtrap.to(trap.dtype), dqb, dkb,
            dang.to(angles.dtype), dD, dz.to(z.dtype) if dz is not None else None, dmx, dmz, dmo, dnw,
            dg0 if has_g0 else None, dth0, None, None, None, None,
        )  # fmt: skip


def _rank_values(v: torch.Tensor, mimo_x: Optional[torch.Tensor]) -> torch.Tensor:
    """(S, h, p) -> (S, R, h, p) float32: v * mimo_x_r (R = 1 without mimo_x)."""
    v = v.float().unsqueeze(1)
    return v if mimo_x is None else v * mimo_x.float().transpose(0, 1)


def chunk_scan(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    adt: torch.Tensor,
    dt: torch.Tensor,
    trap: torch.Tensor,
    q_bias: torch.Tensor,
    k_bias: torch.Tensor,
    angles: torch.Tensor,
    pairing: str,
    chunk_size: int = 64,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    mimo_x: Optional[torch.Tensor] = None,
    mimo_z: Optional[torch.Tensor] = None,
    mimo_o: Optional[torch.Tensor] = None,
    norm_weight: Optional[torch.Tensor] = None,
    norm_eps: float = 1e-5,
    initial_states: Optional[Mamba3States] = None,
    seq_idx: Optional[torch.Tensor] = None,
    cu_seqlens: Optional[torch.Tensor] = None,
    return_final_states: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, Mamba3States]]:
    """Mamba-3's chunked scan on the Triton kernels, SISO and MIMO; differentiable in every float input
    (the input states included, and through the final states).

    Arguments and results: those of
    :func:`mamba_ssm._families.mamba3.torch_impl.mamba3_chunk_scan_torch` (checked by the public ops;
    float32 / float16 / bfloat16 on a CUDA/ROCm device, or CPU tensors under ``TRITON_INTERPRET=1``):
    q, k (b, l, R, g, n); v (b, l, h, p); adt, dt, trap (b, h, l); q_bias, k_bias (h, R, n); angles
    (b, l, h, a); D (h,); z (b, l, h, p); mimo_x/z/o (h, R, p); norm_weight (h, p); initial_states a
    Mamba3States; seq_idx (b, l); cu_seqlens (S + 1,). Returns out ((b, l, h, p) with mimo_o, else
    (b, l, R, h, p)) in v's dtype, and with ``return_final_states`` also the Mamba3States (angle, ssm,
    k in float32, v in v's dtype).

    Packed sequences (cu_seqlens) with input or final states run one sequence at a time (each starts
    from its own state and ends in its own); otherwise seq_idx (built from cu_seqlens when None) masks
    them. Padding (seq_idx < 0, the rows from cu_seqlens[-1] on; :mod:`mamba_ssm._families.packing`)
    outputs 0 and reads and writes no state; a row that ends in padding has zero final states.
    """
    arguments = {
        "q": q, "k": k, "v": v, "adt": adt, "dt": dt, "trap": trap, "q_bias": q_bias, "k_bias": k_bias,
        "angles": angles, "pairing": pairing, "chunk_size": chunk_size, "D": D, "z": z, "mimo_x": mimo_x,
        "mimo_z": mimo_z, "mimo_o": mimo_o, "norm_weight": norm_weight, "norm_eps": norm_eps,
    }  # fmt: skip
    if cu_seqlens is not None and (initial_states is not None or return_final_states):
        return per_sequence(chunk_scan, arguments, initial_states, cu_seqlens, return_final_states)
    if cu_seqlens is not None and seq_idx is None:
        seq_idx = seq_idx_from_cu_seqlens(cu_seqlens, v.shape[1], "mamba3 chunk_scan").to(v.device)
    if seq_idx is not None and seq_idx.dtype not in (torch.int32, torch.int64):
        seq_idx = seq_idx.long()
    b, h = v.shape[0], v.shape[2]
    g0 = th0 = None
    if initial_states is not None:
        # g_0 = h_0 + c_0 sum_r x_prev,r k_prev,r^T (the first token's share of the cached token)
        share0 = (1 - torch.sigmoid(trap[:, :, 0].float())) * dt[:, :, 0].float()
        g0 = initial_states.ssm.float() + share0.view(b, h, 1, 1) * torch.einsum(
            "brhp,brhn->bhpn", _rank_values(initial_states.v, mimo_x), initial_states.k.float()
        )
        th0 = initial_states.angle.float().contiguous()
    out, final, theta_last = _Mamba3Fn.apply(
        q, k, v, adt, dt, trap, q_bias, k_bias, angles, D, z, mimo_x, mimo_z, mimo_o, norm_weight,
        g0.contiguous() if g0 is not None else None, th0, seq_idx, pairing == "adjacent", int(chunk_size),
        float(norm_eps),
    )  # fmt: skip
    if not return_final_states:
        return drop_padding(out, None, seq_idx)[0]
    ng = q.shape[3]
    k_last = k[:, -1].float().repeat_interleave(h // ng, dim=-2) + k_bias.float().transpose(0, 1)
    states = Mamba3States(theta_last, final, rotate(k_last, theta_last.unsqueeze(1), pairing), v[:, -1])
    out, final_states = drop_padding(out, states, seq_idx)
    return out, final_states


def step(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    adt: torch.Tensor,
    dt: torch.Tensor,
    trap: torch.Tensor,
    q_bias: torch.Tensor,
    k_bias: torch.Tensor,
    angles: torch.Tensor,
    states: Mamba3States,
    pairing: str,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    mimo_x: Optional[torch.Tensor] = None,
    mimo_z: Optional[torch.Tensor] = None,
    mimo_o: Optional[torch.Tensor] = None,
    norm_weight: Optional[torch.Tensor] = None,
    norm_eps: float = 1e-5,
) -> Tuple[torch.Tensor, Mamba3States]:
    """One Mamba-3 token on the Triton kernel; pure (new state tensors).

    Arguments and results: those of :func:`mamba_ssm._families.mamba3.torch_impl.mamba3_step_torch`:
    q, k (b, R, g, n); v (b, h, p); adt, dt, trap (b, h); q_bias, k_bias (h, R, n); angles (b, h, a);
    states Mamba3States (angle (b, h, a), ssm (b, h, p, n), k (b, R, h, n), v (b, h, p)). Returns
    (out ((b, h, p) with mimo_o, else (b, R, h, p)) in v's dtype, Mamba3States(angle, ssm, k in
    float32, v)). No autograd.
    """
    b, R, ng, n = q.shape
    h, p = v.shape[1], v.shape[2]
    a = angles.shape[-1]
    dev = v.device
    f32: Dict[str, Any] = {"dtype": torch.float32, "device": dev}
    th_out = torch.empty((b, h, a), **f32)
    s_out = torch.empty((b, h, p, n), **f32)
    k_out = torch.empty((b, R, h, n), **f32)
    out = torch.empty((b, h, p) if mimo_o is not None else (b, R, h, p), dtype=v.dtype, device=dev)
    o_str = (out.stride(0), 0, out.stride(1), out.stride(2)) if mimo_o is not None else out.stride()
    bn = pow2(n, 16)
    # tiles of 2048 state entries; with the norm one program takes every block of its head (two passes)
    bp = min(pow2(p, 16), max(16, 2048 // bn))
    dummy = th_out
    opt = [D, z, mimo_x, mimo_z, mimo_o, norm_weight]
    _step[(b, h, 1 if norm_weight is not None else triton.cdiv(p, bp))](
        q, k, v, adt, dt, trap, q_bias, k_bias, angles, states.angle, states.ssm, states.k, states.v,
        *(t if t is not None else dummy for t in opt), out, th_out, s_out, k_out,
        h, h // ng, p, n, a, R, float(norm_eps), *q.stride(), *k.stride(), *v.stride(), *adt.stride(),
        *dt.stride(), *trap.stride(), *q_bias.stride(), *k_bias.stride(), *angles.stride(),
        *states.angle.stride(), *states.ssm.stride(), *states.k.stride(), *states.v.stride(),
        *_strides(z, 3), *_strides(mimo_x, 3), *_strides(mimo_z, 3), *_strides(mimo_o, 3),
        *_strides(norm_weight, 2), *o_str, ADJACENT=pairing == "adjacent", HAS_MX=mimo_x is not None,
        HAS_D=D is not None, HAS_Z=z is not None, HAS_MZ=mimo_z is not None, HAS_MO=mimo_o is not None,
        HAS_NORM=norm_weight is not None, BLOCK_R=pow2(R), BLOCK_P=bp, BLOCK_N=bn,
        BLOCK_A=pow2(a, 16), num_warps=8 if norm_weight is not None else 4, num_stages=1,
    )  # fmt: skip
    return out, Mamba3States(th_out, s_out, k_out, v)
