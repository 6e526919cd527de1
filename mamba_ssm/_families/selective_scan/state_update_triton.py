"""Triton kernel for one decode step of the selective scan (``selective_state_update``), updating the
cached state in place.

Math (Gu & Dao, arXiv:2312.00752, Algorithm 2, one timestep with zero-order-hold A; Mamba-2 heads and
groups from arXiv:2405.21060):

    dt'        = softplus(dt + dt_bias)                       (softplus only with dt_softplus)
    state[p,n] = exp(dt'[p] A[p,n]) state[p,n] + dt'[p] x[p] B[g(h), n]
    out[p]     = sum_n state[p,n] C[g(h), n] + D[p] x[p], then * silu(z[p])

with head h reading group ``g(h) = h // (nheads / ngroups)``. ``state_batch_indices[b]`` picks the state
row of batch entry b; a negative index (-1) marks a padded slot: its output is 0 and no state row is
read or written. One program per (block of ``dim`` rows, batch entry, head) holds its rows' whole
``dstate`` in registers; float32 arithmetic, the state stored back in its own dtype.

Entries naming the same state row are applied one after another in batch order (each reads the state
the previous one left). Every program scans the index vector (``BLOCK_B`` indices per load): the
program of a row's last entry runs the whole group in order, from the row's first entry, storing each
entry's output and the final state; the programs of the earlier entries do nothing. So one program
touches each state row: no race between programs, no host synchronisation, the same result on every
run. Without repeats each program runs its own entry once, as before, after the scan.
"""

from typing import Optional

import torch
import triton
import triton.language as tl

from mamba_ssm._families.triton_common import Block, Pointer, Scalar, jit, pow2, unsupported_dtype

__all__ = ["MAX_DSTATE", "selective_state_update", "unsupported"]

#: The largest d_state one program holds.
MAX_DSTATE = 1024
#: Indices per load of the scan for repeated state rows (one constexpr: no recompile per batch size).
BLOCK_B = 128


@jit
def _state_update_kernel(
    S: Pointer,
    X: Pointer,
    DT: Pointer,
    A: Pointer,
    Bm: Pointer,
    Cm: Pointer,
    Dp: Pointer,
    Z: Pointer,
    DTB: Pointer,
    IDX: Pointer,
    OUT: Pointer,
    dim: Scalar,
    dstate: Scalar,
    heads_per_group: Scalar,
    s_b: Scalar,
    s_h: Scalar,
    s_p: Scalar,
    s_n: Scalar,
    x_b: Scalar,
    x_h: Scalar,
    x_p: Scalar,
    dt_b: Scalar,
    dt_h: Scalar,
    dt_p: Scalar,
    a_h: Scalar,
    a_p: Scalar,
    a_n: Scalar,
    b_b: Scalar,
    b_g: Scalar,
    b_n: Scalar,
    c_b: Scalar,
    c_g: Scalar,
    c_n: Scalar,
    d_h: Scalar,
    d_p: Scalar,
    z_b: Scalar,
    z_h: Scalar,
    z_p: Scalar,
    dtb_h: Scalar,
    dtb_p: Scalar,
    o_b: Scalar,
    o_h: Scalar,
    o_p: Scalar,
    batch: Scalar,
    HAS_D: tl.constexpr,
    HAS_Z: tl.constexpr,
    HAS_DTB: tl.constexpr,
    HAS_IDX: tl.constexpr,
    SOFTPLUS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_B: tl.constexpr,
    SUB_M: tl.constexpr,
) -> None:
    pm = tl.program_id(0)
    b = tl.program_id(1).to(tl.int64)
    h = tl.program_id(2).to(tl.int64)
    g = h // heads_per_group
    rows = pm * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mr = rows < dim
    mc = cols < dstate
    if HAS_IDX:
        sb = tl.load(IDX + b).to(tl.int64)
    else:
        sb = b
    valid = sb >= 0
    # The group of entries sharing row sb: its first entry, and how many come after b.
    first = b
    later = tl.sum(tl.zeros((BLOCK_B,), dtype=tl.int32), axis=0)
    if HAS_IDX:
        for start in range(0, batch, BLOCK_B):
            offs = start + tl.arange(0, BLOCK_B)
            other = tl.load(IDX + offs, mask=offs < batch, other=-1).to(tl.int64)
            hit = (other == sb) & (offs < batch) & valid
            first = tl.minimum(first, tl.min(tl.where(hit, offs.to(tl.int64), b), axis=0))
            later += tl.sum((hit & (offs > b)).to(tl.int32), axis=0)
    owner = later == 0  # this program runs the group (or its lone entry, or a padded one)
    entry = sb
    sb = tl.where(valid, sb, 0)
    tile = mr[:, None] & mc[None, :] & valid
    srow = S + sb * s_b + h * s_h  # scalar pointers; the offsets within a tile stay 32-bit
    soff = rows[:, None] * s_p + cols[None, :] * s_n
    arow = A + h * a_h
    aoff = rows[:, None] * a_p + cols[None, :] * a_n
    if owner & (first < b):  # the last entry of a repeated row: the whole group, in batch order
        # (rare: a quarter of the tile's rows at a time, so that the loop-carried state stays small)
        for r0 in range(0, BLOCK_M, SUB_M):
            sub = pm * BLOCK_M + r0 + tl.arange(0, SUB_M)
            ms = sub < dim
            stile = ms[:, None] & mc[None, :] & valid
            ssub = sub[:, None] * s_p + cols[None, :] * s_n
            asub = sub[:, None] * a_p + cols[None, :] * a_n
            state = tl.load(srow + ssub, mask=stile, other=0.0).to(tl.float32)
            for j in range(first, b + 1):  # int64, as its bounds
                take = (j == b) | (tl.load(IDX + j).to(tl.int64) == entry)
                state = _advance(
                    state, j, take, valid, X, DT, arow, Bm, Cm, Dp, Z, DTB, OUT, sub, cols, ms, mc, h, g,
                    asub, x_b, x_h, x_p, dt_b, dt_h, dt_p, b_b, b_g, b_n, c_b, c_g, c_n, d_h, d_p, z_b, z_h,
                    z_p, dtb_h, dtb_p, o_b, o_h, o_p, HAS_D, HAS_Z, HAS_DTB, SOFTPLUS,
                )  # fmt: skip
            tl.store(srow + ssub, state, mask=stile)
    if owner & (first == b):  # one entry: no repeat before it (every entry without repeats)
        state = tl.load(srow + soff, mask=tile, other=0.0).to(tl.float32)
        state = _advance(
            state, b, True, valid, X, DT, arow, Bm, Cm, Dp, Z, DTB, OUT, rows, cols, mr, mc, h, g, aoff,
            x_b, x_h, x_p, dt_b, dt_h, dt_p, b_b, b_g, b_n, c_b, c_g, c_n, d_h, d_p, z_b, z_h, z_p,
            dtb_h, dtb_p, o_b, o_h, o_p, HAS_D, HAS_Z, HAS_DTB, SOFTPLUS,
        )  # fmt: skip
        tl.store(srow + soff, state, mask=tile)


@jit
def _advance(
    state: Block, j: Block, take: Block, valid: Block, X: Pointer, DT: Pointer, arow: Block, Bm: Pointer, Cm: Pointer, Dp: Pointer, Z: Pointer, DTB: Pointer, OUT: Pointer, rows: Block, cols: Block, mr: Block, mc: Block, h: Block, g: Block, aoff: Block,
    x_b: Scalar, x_h: Scalar, x_p: Scalar, dt_b: Scalar, dt_h: Scalar, dt_p: Scalar, b_b: Scalar, b_g: Scalar, b_n: Scalar, c_b: Scalar, c_g: Scalar, c_n: Scalar, d_h: Scalar, d_p: Scalar, z_b: Scalar, z_h: Scalar, z_p: Scalar,
    dtb_h: Scalar, dtb_p: Scalar, o_b: Scalar, o_h: Scalar, o_p: Scalar,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_DTB: tl.constexpr, SOFTPLUS: tl.constexpr,
) -> Block:  # fmt: skip
    """Batch entry j's step on ``state`` (float32 rows x dstate) when ``take``, and its output stored
    (0 for a padded entry); without ``take`` the state is returned as it is: decay exp(0) = 1, input 0,
    selected rather than multiplied, so that another row's values (even NaN) never reach it."""
    x = tl.load(X + j * x_b + h * x_h + rows * x_p, mask=mr, other=0.0).to(tl.float32)
    dt = tl.load(DT + j * dt_b + h * dt_h + rows * dt_p, mask=mr, other=0.0).to(tl.float32)
    if HAS_DTB:
        dt += tl.load(DTB + h * dtb_h + rows * dtb_p, mask=mr, other=0.0).to(tl.float32)
    if SOFTPLUS:
        dt = tl.where(dt > 20.0, dt, tl.log(1.0 + tl.exp(tl.minimum(dt, 20.0))))
    dt = tl.where(take, dt, 0.0)
    xdt = tl.where(take, x * dt, 0.0)
    bv = tl.load(Bm + j * b_b + g * b_g + cols * b_n, mask=mc, other=0.0).to(tl.float32)
    bv = tl.where(take, bv, 0.0)
    a = tl.load(arow + aoff, mask=mr[:, None] & mc[None, :], other=0.0).to(tl.float32)
    state = state * tl.exp(a * dt[:, None]) + bv[None, :] * xdt[:, None]
    cv = tl.load(Cm + j * c_b + g * c_g + cols * c_n, mask=mc, other=0.0).to(tl.float32)
    out = tl.sum(state * cv[None, :], axis=1)
    if HAS_D:
        out += x * tl.load(Dp + h * d_h + rows * d_p, mask=mr, other=0.0).to(tl.float32)
    if HAS_Z:
        z = tl.load(Z + j * z_b + h * z_h + rows * z_p, mask=mr, other=0.0).to(tl.float32)
        out = out * z * tl.sigmoid(z)
    out = tl.where(valid, out, 0.0)
    tl.store(OUT + j * o_b + h * o_h + rows * o_p, out, mask=mr & take)
    return state


def unsupported(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
) -> Optional[str]:
    """None when the kernel takes this (validated) call, else why not."""
    why = unsupported_dtype(state=state, x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias)
    if why is None and state.shape[-1] > MAX_DSTATE:
        why = f"dstate {state.shape[-1]} exceeds the kernel's {MAX_DSTATE}"
    return why


def _per_row(t: torch.Tensor, nheads: int, dim: int) -> torch.Tensor:
    """(nheads, dim) view of a per-(head, row) parameter given as (nheads, dim) or (nheads,)."""
    return t if t.dim() == 2 else t.unsqueeze(-1).expand(nheads, dim)


def selective_state_update(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    state_batch_indices: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """One decode step, in place on ``state`` (Triton), on the head shapes of the public
    ``mamba_ssm.ops.triton.selective_state_update.selective_state_update`` (which validated them and
    gives Mamba-1's shapes a head axis of 1): state (slots, nheads, dim, dstate), x/dt/z (batch, nheads,
    dim), A (nheads, dim, dstate), B/C (batch, ngroups, dstate), D/dt_bias (nheads, dim) or (nheads,).
    Returns out (batch, nheads, dim) in x's dtype; a negative ``state_batch_indices`` entry gives zeros
    and leaves the state alone. No autograd (decode)."""
    batch, nheads, dim = x.shape
    dstate = state.shape[-1]
    ngroups = B.shape[1]
    if D is not None:
        D = _per_row(D, nheads, dim)
    if dt_bias is not None:
        dt_bias = _per_row(dt_bias, nheads, dim)
    out = torch.empty((batch, nheads, dim), dtype=x.dtype, device=x.device)
    idx = None
    if state_batch_indices is not None:
        idx = state_batch_indices.reshape(-1)
        if idx.dtype not in (torch.int32, torch.int64):
            idx = idx.long()
        idx = idx.contiguous()
    block_n = pow2(dstate, 16)
    block_m = max(1, min(pow2(dim), max(4, 4096 // block_n)))
    grid = (triton.cdiv(dim, block_m), batch, nheads)
    dummy = x
    _state_update_kernel[grid](
        state,
        x,
        dt,
        A,
        B,
        C,
        D if D is not None else dummy,
        z if z is not None else dummy,
        dt_bias if dt_bias is not None else dummy,
        idx if idx is not None else dummy,
        out,
        dim,
        dstate,
        nheads // ngroups,
        *state.stride(),
        *x.stride(),
        *dt.stride(),
        *A.stride(),
        *B.stride(),
        *C.stride(),
        *(D.stride() if D is not None else (0, 0)),
        *(z.stride() if z is not None else (0, 0, 0)),
        *(dt_bias.stride() if dt_bias is not None else (0, 0)),
        *out.stride(),
        batch,
        HAS_D=D is not None,
        HAS_Z=z is not None,
        HAS_DTB=dt_bias is not None,
        HAS_IDX=idx is not None,
        SOFTPLUS=bool(dt_softplus),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_B=BLOCK_B,
        SUB_M=max(1, block_m // 4),
        num_warps=4 if block_m * block_n >= 2048 else 1,
    )
    return out
