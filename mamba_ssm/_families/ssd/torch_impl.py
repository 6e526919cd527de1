"""The PyTorch SSD (Mamba-2's scan) as its stages, in upstream's stage layouts: the PyTorch path of
``mamba_chunk_scan_combined`` composes them, and the stage modules (``ssd_chunk_state``,
``ssd_state_passing``, ``ssd_bmm``, ``ssd_chunk_scan``) expose them. Differentiable (autograd), computed
in float32 (float64 for float64 inputs).

Math (Dao & Gu, arXiv:2405.21060, section 6, "the SSD algorithm"), chunk length Q, chunk c, in-chunk
positions i, j; dt' the processed step, ``cs`` its in-chunk cumulative sum times A:

    chunk_cumsum:  dt' = clamp(softplus(dt + dt_bias), dt_limit) (0 past seqlen), cs_i = sum_{k<=i} dt'_k A
    bmm_chunk:     CB[c, i, j] = C_i . B_j                                   (per group)
    chunk_state:   S_c = sum_j exp(cs_end - cs_j) dt'_j x_j B_j^T           (the chunk's own end state)
    state_passing: H_0 = initial_states, H_{c+1} = exp(cs_end(c)) H_c + S_c  (H_c enters chunk c)
    chunk_scan:    y_i = sum_{j<=i} CB_ij exp(cs_i - cs_j) dt'_j x_j + exp(cs_i) C_i H_c (+ D x_i, * silu(z_i))

Layouts: x (batch, seqlen, nheads, headdim); B, C (batch, seqlen, ngroups, dstate); dt', cs (batch, nheads,
nchunks, Q); CB (batch, nchunks, ngroups, Q, Q); states S and H (batch, nchunks, nheads, headdim, dstate).
A seqlen that is not a multiple of Q is zero-padded to one (dt' = 0 there: nothing flows in or out).

Packed sequences (``seq_idx`` (batch, seqlen), each sequence's tokens contiguous): a term linking two
positions counts only when both belong to the same sequence; a chunk's S_c holds only its last sequence's
inputs; H_c is read only by positions of the sequence it belongs to (the one of the position before the
chunk; for chunk 0 the row's first token's) and carried through a chunk only when the chunk ends in that
sequence. A negative id marks a padding token: output 0, no state read or written (a chunk ending in
padding has S_c = 0 and carries nothing).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F

__all__ = [
    "NO_LIMIT",
    "bmm_chunk",
    "carry_mask",
    "chunk_cumsum",
    "chunk_scan",
    "chunk_seq",
    "chunk_state",
    "chunked",
    "compute_dtype",
    "nchunks",
    "per_head",
    "ssd_chunk_scan_weighted",
    "state_passing",
    "varlen_states",
]

NO_LIMIT: tuple[float, float] = (0.0, float("inf"))


def compute_dtype(*tensors: Optional[torch.Tensor]) -> torch.dtype:
    """float64 when any tensor is float64, else float32."""
    return (
        torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32
    )


def nchunks(seqlen: int, chunk_size: int) -> int:
    """The number of chunks of ``chunk_size`` that cover ``seqlen`` (the last one may be partial)."""
    return -(-seqlen // chunk_size)


def chunked(t: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """(batch, seqlen, ...) -> (batch, nchunks, chunk_size, ...), zero-padded."""
    b, l = t.shape[:2]
    nc = nchunks(l, chunk_size)
    pad = nc * chunk_size - l
    if pad:
        t = torch.cat([t, t.new_zeros(b, pad, *t.shape[2:])], dim=1)
    return t.reshape(b, nc, chunk_size, *t.shape[2:])


def per_head(t: torch.Tensor, nheads: int) -> torch.Tensor:
    """(..., ngroups, n) -> (..., nheads, n): head h uses group h // (nheads / ngroups)."""
    return t.repeat_interleave(nheads // t.shape[-2], dim=-2)


def chunk_cumsum(
    dt: torch.Tensor,
    A: torch.Tensor,
    chunk_size: int,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    dt_limit: Sequence[float] = NO_LIMIT,
) -> tuple[torch.Tensor, torch.Tensor]:
    """dt (batch, seqlen, nheads), A (nheads,) -> (cs, dt'), each (batch, nheads, nchunks, chunk_size)
    in the compute dtype. ``dt_limit`` (0, inf) means no clamp."""
    cd = compute_dtype(dt, A)
    h = dt.shape[2]
    d = dt.to(cd)
    if dt_bias is not None:
        d = d + dt_bias.to(cd)
    if dt_softplus:
        d = F.softplus(d)
    if tuple(dt_limit) != NO_LIMIT:
        d = d.clamp(dt_limit[0], dt_limit[1])
    d = chunked(d, chunk_size).permute(0, 3, 1, 2)  # (b, h, c, Q)
    cs = torch.cumsum(d * A.to(cd).view(1, h, 1, 1), dim=-1)
    return cs, d


def chunk_seq(seq_idx: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """seq_idx (batch, seqlen) -> (batch, nchunks, chunk_size); the padded tail repeats the last id."""
    b, l = seq_idx.shape
    pad = nchunks(l, chunk_size) * chunk_size - l
    if pad:
        seq_idx = torch.cat([seq_idx, seq_idx[:, -1:].expand(b, pad)], dim=1)
    return seq_idx.reshape(b, -1, chunk_size)


def _prev_seq(sc: torch.Tensor) -> torch.Tensor:
    """(batch, nchunks): the sequence of the state entering each chunk (chunk 0: the first token's)."""
    return torch.cat([sc[:, :1, 0], sc[:, :-1, -1]], dim=1)


def carry_mask(seq_idx: torch.Tensor, chunk_size: int) -> torch.Tensor:
    """(batch, nchunks) bool: the state entering a chunk is carried through it (it ends in the state's
    sequence, which is not padding)."""
    sc = chunk_seq(seq_idx, chunk_size)
    last = sc[..., -1]
    return (_prev_seq(sc) == last) & (last >= 0)


def bmm_chunk(
    a: torch.Tensor,
    b: torch.Tensor,
    chunk_size: int,
    seq_idx: Optional[torch.Tensor] = None,
    causal: bool = False,
) -> torch.Tensor:
    """a, b (batch, seqlen, k) or (batch, seqlen, ngroups, k) -> out (batch, nchunks, [ngroups,] Q, Q),
    ``out[..., i, j] = a_i . b_j`` within each chunk (0 past seqlen); with seq_idx 0 where i and j are of
    different sequences; with ``causal`` 0 above the diagonal. In the compute dtype."""
    cd = compute_dtype(a, b)
    ac, bc = chunked(a.to(cd), chunk_size), chunked(b.to(cd), chunk_size)
    if a.dim() == 4:
        out = torch.einsum("bcigk,bcjgk->bcgij", ac, bc)
    else:
        out = torch.einsum("bcik,bcjk->bcij", ac, bc)
    keep = None
    if causal:
        keep = torch.ones(chunk_size, chunk_size, dtype=torch.bool, device=a.device).tril()
    if seq_idx is not None:
        sc = chunk_seq(seq_idx, chunk_size)
        same = sc.unsqueeze(-1) == sc.unsqueeze(-2)  # (b, c, i, j)
        same = same.unsqueeze(2) if a.dim() == 4 else same
        keep = same if keep is None else same & keep
    if keep is not None:
        out = out * keep.to(cd)
    return out


def chunk_state(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    cs: torch.Tensor,
    seq_idx: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Each chunk's end state from its own inputs: (batch, nchunks, nheads, headdim, dstate).

    B (batch, seqlen, ngroups, dstate), x (batch, seqlen, nheads, headdim), dt' and cs (batch, nheads,
    nchunks, Q); with seq_idx only the chunk's last sequence counts (nothing when it is padding)."""
    cd = compute_dtype(dt, cs, x, B)
    Q, h = dt.shape[-1], x.shape[2]
    w = torch.exp(cs[..., -1:].to(cd) - cs.to(cd)) * dt.to(cd)  # (b, h, c, Q)
    if seq_idx is not None:
        sc = chunk_seq(seq_idx, Q)
        last = sc[..., -1:]
        w = w * ((sc == last) & (last >= 0)).unsqueeze(1).to(cd)
    xc = chunked(x.to(cd), Q)  # (b, c, Q, h, p)
    Bc = per_head(chunked(B.to(cd), Q), h)  # (b, c, Q, h, n)
    return torch.einsum("bcjhn,bhcj,bcjhp->bchpn", Bc, w, xc)


def state_passing(
    states: torch.Tensor,
    cs_end: torch.Tensor,
    initial_states: Optional[torch.Tensor] = None,
    carry: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """H_0 = initial_states (or 0), H_{c+1} = exp(cs_end(c)) H_c [carry] + S_c.

    states (batch, nchunks, nheads, ...), cs_end (batch, nheads, nchunks), carry (batch, nchunks) bool or
    None. Returns (H (batch, nchunks, nheads, ...): the state entering each chunk, final state (batch,
    nheads, ...)), in states' dtype."""
    b, nc, h = states.shape[:3]
    tail = (1,) * (states.dim() - 3)
    decay = torch.exp(cs_end.to(states.dtype)).permute(0, 2, 1)  # (b, c, h)
    if carry is not None:
        decay = decay * carry.to(states.dtype).unsqueeze(-1)
    cur = (
        initial_states.to(states.dtype)
        if initial_states is not None
        else states.new_zeros(b, h, *states.shape[3:])
    )
    entering: list[torch.Tensor] = []
    for c in range(nc):
        entering.append(cur)
        cur = decay[:, c].reshape(b, h, *tail) * cur + states[:, c]
    stacked = torch.stack(entering, dim=1) if entering else states.new_zeros(states.shape)
    return stacked, cur


def chunk_scan(
    cb: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    cs: torch.Tensor,
    C: torch.Tensor,
    prev_states: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The outputs from CB, the inputs and the states entering each chunk.

    cb (batch, nchunks, ngroups, Q, Q) or (batch, nchunks, Q, Q); x (batch, seqlen, nheads, headdim);
    dt', cs (batch, nheads, nchunks, Q); C (batch, seqlen, ngroups, dstate); prev_states (batch, nchunks,
    nheads, headdim, dstate); D (nheads, headdim) or (nheads,); z like x.

    Returns (y, y_before_z): y (batch, seqlen, nheads, headdim) in the compute dtype, 0 at padding
    tokens; y_before_z is y before the ``* silu(z)`` gate (None without z)."""
    cd = compute_dtype(x, cs, C, prev_states)
    b, l, h, p = x.shape
    Q = dt.shape[-1]
    cb = cb.to(cd)
    if cb.dim() == 4:
        cb = cb.unsqueeze(2)
    cs = cs.to(cd)
    seg = cs.unsqueeze(-1) - cs.unsqueeze(-2)  # (b, h, c, i, j)
    mask = torch.ones(Q, Q, dtype=torch.bool, device=x.device).tril()
    decay_in = torch.exp(cs)  # (b, h, c, i)
    if seq_idx is not None:
        sc = chunk_seq(seq_idx, Q)
        real = sc >= 0
        mask = mask & ((sc.unsqueeze(-1) == sc.unsqueeze(-2)) & real.unsqueeze(-1)).unsqueeze(1)
        use_in = (sc == _prev_seq(sc).unsqueeze(-1)) & real  # (b, c, i)
        decay_in = decay_in * use_in.unsqueeze(1).to(cd)
    # Causality holds for non-finite inputs too: a masked (i < j) term is never 0 * (a NaN or inf of a
    # later token). The masked exponent is -inf before exp (no overflow, no NaN gradient), C_i . B_j is
    # selected, not multiplied, by the mask, and the product over j runs on the finite inputs only; a
    # non-finite input x_j dt_j reaches the outputs i >= j of its chunk through a (causal) cumsum.
    cb = torch.where(mask if mask.dim() == 2 else mask.transpose(1, 2), cb, cb.new_zeros(()))
    cbh = cb.repeat_interleave(h // cb.shape[2], dim=2).transpose(1, 2)  # (b, h, c, i, j)
    weights = torch.exp(torch.where(mask, seg, torch.full_like(seg, float("-inf")))) * cbh
    xc = chunked(x.to(cd), Q)  # (b, c, Q, h, p)
    xdt = xc * dt.to(cd).permute(0, 2, 3, 1).unsqueeze(-1)
    xdt_finite = torch.nan_to_num(xdt, nan=0.0, posinf=0.0, neginf=0.0)
    y = torch.einsum("bhcij,bcjhp->bcihp", weights, xdt_finite)
    y = y + (xdt - xdt_finite).cumsum(dim=2)  # 0 but at (and so after) a non-finite input
    Ch = per_head(chunked(C.to(cd), Q), h)  # (b, c, Q, h, n)
    y = y + torch.einsum("bcihn,bchpn,bhci->bcihp", Ch, prev_states.to(cd), decay_in)
    y = y.reshape(b, -1, h, p)[:, :l]
    if D is not None:
        Dc = D.to(cd)
        y = y + x.to(cd) * (Dc if Dc.dim() == 2 else Dc.unsqueeze(-1))
    if seq_idx is not None:
        y = torch.where((seq_idx >= 0)[:, :, None, None], y, y.new_zeros(()))
    if z is None:
        return y, None
    return y * F.silu(z.to(cd)), y


def varlen_states(
    B: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    cs: torch.Tensor,
    chunk_states: torch.Tensor,
    cu_seqlens: torch.Tensor,
    seq_idx: torch.Tensor,
) -> torch.Tensor:
    """Each packed sequence's state after its last token (batch 1, no batch axis).

    B (total, ngroups, dstate), x (total, nheads, headdim), dt', cs (nheads, nchunks, Q), chunk_states
    (nchunks, nheads, headdim, dstate) (the states entering the chunks), cu_seqlens (num_seqs + 1,)
    int64, seq_idx (total,) ids matching cu_seqlens. Returns (num_seqs, nheads, headdim, dstate) in the
    compute dtype; zero for an empty sequence."""
    cd = compute_dtype(x, cs, B, chunk_states)
    h, Q = cs.shape[0], cs.shape[2]
    begins, ends = cu_seqlens[:-1], cu_seqlens[1:]
    nonempty = ends > begins
    last = (ends - 1).clamp(min=0)
    c_of, i_of = last // Q, last % Q  # (S,)
    sc = chunk_seq(seq_idx.unsqueeze(0), Q)[0]  # (c, Q)
    seq_t = sc[c_of, i_of]  # (S,)
    sc_s = sc[c_of]  # (S, Q)
    j = torch.arange(Q, device=x.device)
    keep = (j.unsqueeze(0) <= i_of.unsqueeze(1)) & (sc_s == seq_t.unsqueeze(1))  # (S, Q)
    cs_s = cs.to(cd)[:, c_of]  # (h, S, Q)
    cs_t = cs_s.gather(-1, i_of.view(1, -1, 1).expand(h, -1, 1))  # (h, S, 1)
    seg = torch.where(keep.unsqueeze(0), cs_t - cs_s, torch.full_like(cs_s, float("-inf")))
    w = torch.exp(seg) * dt.to(cd)[:, c_of]  # (h, S, Q)
    xc = chunked(x.to(cd).unsqueeze(0), Q)[0][c_of]  # (S, Q, h, p)
    Bc = per_head(chunked(B.to(cd).unsqueeze(0), Q)[0], h)[c_of]  # (S, Q, h, n)
    out = torch.einsum("hsj,sjhp,sjhn->shpn", w, xc, Bc)
    prev = _prev_seq(sc.unsqueeze(0))[0][c_of]  # (S,)
    incoming = torch.exp(cs_t.squeeze(-1)).transpose(0, 1) * (prev == seq_t).unsqueeze(-1).to(cd)  # (S, h)
    out = out + incoming[:, :, None, None] * chunk_states.to(cd)[c_of]
    return out * nonempty.to(cd)[:, None, None, None]


def ssd_chunk_scan_weighted(
    x: torch.Tensor,
    log_decay: torch.Tensor,
    weight: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    initial_states: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The SSD core with the decay and the input weight given separately, composed from the PyTorch
    stages of this module (differentiable):

        h_t = exp(log_decay_t) h_{t-1} + weight_t x_t B_t^T,    y_t = h_t C_t

    (Mamba-2's scan is log_decay = dt A, weight = dt; Mamba-3's exponential-trapezoidal scan uses its
    own weight). x (b, l, h, p), log_decay and weight (b, l, h) (log_decay <= 0), B, C (b, l, h, n),
    initial_states (b, h, p, n) or None, seq_idx (b, l) or None (nothing crosses from one id to the
    next; a negative id is a padding token: output 0, no state); cu_seqlens (S + 1,) int64 on x's
    device with seq_idx matching it (batch 1), or None. Computed in float32 (float64 for float64
    inputs); a sequence shorter than ``chunk_size`` is one chunk of its own length.

    Returns (y (b, l, h, p), final state (b, h, p, n), each packed sequence's last state (S, h, p, n),
    zero for an empty one, or None without cu_seqlens).
    """
    q = max(1, min(chunk_size, x.shape[1]))
    cs = torch.cumsum(chunked(log_decay, q).permute(0, 3, 1, 2), dim=-1)  # (b, h, c, q)
    wc = chunked(weight, q).permute(0, 3, 1, 2)  # (b, h, c, q), 0 past l
    states = chunk_state(B, x, wc, cs, seq_idx)
    carry = carry_mask(seq_idx, q) if seq_idx is not None else None
    hin, final = state_passing(states, cs[..., -1], initial_states, carry)
    y, _ = chunk_scan(bmm_chunk(C, B, q), x, wc, cs, C, hin, seq_idx=seq_idx)
    varlen = None
    if cu_seqlens is not None:
        if seq_idx is None:
            raise ValueError("ssd_chunk_scan_weighted: cu_seqlens needs the seq_idx derived from it")
        varlen = varlen_states(B[0], x[0], wc[0], cs[0], hin[0], cu_seqlens, seq_idx[0])
    return y, final, varlen
