"""One decode step of the selective scan from a cached state, in PyTorch (every device), on the head
shapes of :func:`mamba_ssm.ops.triton.selective_state_update.selective_state_update` (which validated
them and gives Mamba-1's shapes a head axis of 1); computed in float32 (float64 for float64 inputs)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from mamba_ssm._families.packing import check_rows

__all__ = ["selective_state_update"]


def _indexed_steps(
    state_h: Tensor,
    indices: Tensor,
    valid: Tensor,
    dA: Tensor,
    dtx: Tensor,
    Bf: Tensor,
    Cf: Tensor,
    cdtype: torch.dtype,
) -> Tensor:
    """The state update through ``indices`` with repeated rows applied in batch order (the rule in
    :func:`selective_state_update`'s docstring); updates ``state_h`` (slots, nheads, dim, dstate) and
    returns (state . C) per entry (batch, nheads, dim) in ``cdtype`` (any value for padded entries).

    Round r updates the entries that have r earlier entries with the same row (their rows are distinct),
    from the rows as round r - 1 left them. Every entry writes its row back each round, with the value of
    the one entry of this round on that row, or else the row as it was: writes to one row agree, so
    ``index_put_`` with repeated indices is well defined without a mask (no host read)."""
    slot = indices.long().clamp(min=0)
    same = slot[:, None] == slot[None, :]
    rank = (same & valid[:, None] & valid[None, :]).tril(-1).sum(1)
    if slot.is_cuda and torch.cuda.is_current_stream_capturing():
        rounds = slot.shape[0]  # no host read while a CUDA graph is captured
    else:
        rounds = int(rank.max()) + 1 if slot.numel() else 0
    y = None
    for r in range(rounds):
        now = valid & (rank == r)
        cur = state_h[slot].to(cdtype)
        new = torch.addcmul(cur * dA, dtx, Bf.unsqueeze(2))
        y_r = torch.matmul(new, Cf.unsqueeze(-1)).squeeze(-1)
        y = y_r if y is None else torch.where(now.view(-1, 1, 1), y_r, y)
        pick = same & now[None, :]
        value = torch.where(pick.any(1).view(-1, 1, 1, 1), new[pick.int().argmax(1)], cur)
        state_h[slot] = value.to(state_h.dtype)
    if y is None:  # an empty batch
        y = dtx.new_zeros(dtx.shape[:-1])
    return y


def selective_state_update(
    state_h: Tensor,
    x_h: Tensor,
    dt_h: Tensor,
    A_h: Tensor,
    B_h: Tensor,
    C_h: Tensor,
    D_h: Tensor | None = None,
    z_h: Tensor | None = None,
    db_h: Tensor | None = None,
    dt_softplus: bool = False,
    state_batch_indices: Tensor | None = None,
) -> Tensor:
    """One step in place on ``state_h`` (slots, nheads, dim, dstate); x/dt/z (batch, nheads, dim), A
    (nheads, dim, dstate), B/C (batch, ngroups, dstate), D/dt_bias (nheads, dim) or (nheads,). Returns
    out (batch, nheads, dim) in x's dtype (zeros for a negative ``state_batch_indices`` entry)."""
    state, x = state_h, x_h
    nheads = state_h.shape[1]
    valid: Tensor | None = None  # (batch,) bool: the entries with a row (state_batch_indices >= 0)
    cdtype = torch.float64 if torch.float64 in (x.dtype, state.dtype, A_h.dtype) else torch.float32
    dtf = dt_h.to(cdtype)
    if db_h is not None:
        dtf = dtf + (db_h.to(cdtype) if db_h.dim() == 2 else db_h.to(cdtype)[:, None])
    if dt_softplus:
        dtf = F.softplus(dtf)
    Bf = B_h.to(cdtype).repeat_interleave(nheads // B_h.shape[1], dim=1)  # (batch, nheads, dstate)
    Cf = C_h.to(cdtype).repeat_interleave(nheads // C_h.shape[1], dim=1)
    xf = x_h.to(cdtype)
    # Mamba-2 passes one A per head expanded over dstate (stride 0): exponentiate once per (head, dim).
    A_c = A_h[..., :1] if A_h.stride(-1) == 0 else A_h
    dA = torch.exp(dtf.unsqueeze(-1) * A_c.to(cdtype))
    dtx = (dtf * xf).unsqueeze(-1)
    if state_batch_indices is None:
        in_place = state.dtype == cdtype
        new = state_h.mul_(dA) if in_place else state_h.to(cdtype) * dA
        new.addcmul_(dtx, Bf.unsqueeze(2))
        if not in_place:
            state_h.copy_(new)
        out = torch.matmul(new, Cf.unsqueeze(-1)).squeeze(-1)
    else:
        valid = state_batch_indices >= 0
        if state_batch_indices.device.type != "cpu" and not torch.cuda.is_current_stream_capturing():
            check_rows("selective_state_update", "state_batch_indices", state_batch_indices, state_h.shape[0])
        out = _indexed_steps(state_h, state_batch_indices, valid, dA, dtx, Bf, Cf, cdtype)
    if D_h is not None:
        out = out + xf * (D_h.to(cdtype) if D_h.dim() == 2 else D_h.to(cdtype)[:, None])
    if z_h is not None:
        out = out * F.silu(z_h.to(cdtype))
    if valid is not None:
        out = torch.where(valid.view(-1, 1, 1), out, out.new_zeros(()))
    return out.to(x.dtype)
