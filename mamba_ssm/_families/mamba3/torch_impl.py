"""Mamba-3's scan in PyTorch (Lahoti et al., "Mamba-3: Improved Sequence Modeling using State Space
Principles", arXiv:2603.15569): the chunked form for whole sequences and the one-token step, SISO and
MIMO, differentiable by autograd, on every device. The public ops
(:func:`mamba_ssm.ops.triton.mamba3.mamba3_siso_combined.mamba3_siso_combined`,
:func:`mamba_ssm.ops.tilelang.mamba3.mamba3_mimo.mamba3_mimo`, :func:`.mamba3_step.mamba3_step`) check
their arguments and call these.

Per token t and head h (R = MIMO rank, 1 for SISO; state h_t of shape (headdim, d_state)):

    lambda_t = sigmoid(trap_t),  alpha_t = exp(adt_t)  (adt = A dt <= 0)
    theta_t  = (theta_{t-1} + pi tanh(angles_t) dt_t) mod 2 pi          (one angle vector per head)
    q_{t,r}  = rot(q_{t,r} + q_bias_r, theta_t),  k_{t,r} = rot(k_{t,r} + k_bias_r, theta_t)
    x_{t,r}  = v_t * mimo_x_r                                             (SISO: x_t = v_t)
    h_t      = alpha_t h_{t-1} + (1 - lambda_t) dt_t alpha_t sum_r x_{t-1,r} k_{t-1,r}^T
                               + lambda_t dt_t sum_r x_{t,r} k_{t,r}^T
    y_{t,r}  = h_t q_{t,r} + D x_{t,r}, gated by silu(z_t * mimo_z_r) (or RMSNorm over headdim, times
               norm_weight, then the gate), and out_t = sum_r mimo_o_r y_{t,r} (SISO: y_t)

``rot`` turns pairs of d_state entries by theta's angles: ``"adjacent"`` pairs (2i, 2i+1) (SISO),
``"halves"`` pairs (i, i + d_state/2) (MIMO); entries beyond the angles' pairs stay as they are.

Chunked form (the SSD algorithm of arXiv:2405.21060, section 6, with a separate input weight): with
c_t = (1 - lambda_t) dt_t (the share of x_{t-1} k_{t-1} that step t adds) the state
g_t = h_t + c_{t+1} sum_r x_{t,r} k_{t,r}^T obeys g_t = alpha_t g_{t-1} + w_t sum_r x_{t,r} k_{t,r}^T with
the trapezoid weight w_t = lambda_t dt_t + c_{t+1}, an SSD scan
(:func:`mamba_ssm._families.ssd.torch_impl.ssd_chunk_scan_weighted`). MIMO runs it over R sub-steps per
token (decay alpha_t on the first, 1 on the others), so a chunk of ``chunk_size`` tokens is one of
``chunk_size * R`` sub-steps. y_{t,r} = g_t q_{t,r} then needs, per token, the R x R correction
sum_r' ([r' > r] w_t - c_{t+1}) (q_{t,r} . k_{t,r'}) x_{t,r'} (the ranks after r that the sub-step scan
has not reached, and the next token's share that h_t does not hold yet). c_{t+1} is 0 at a sequence's
last token, so g there is h.

Everything is computed in float32 (float64 for float64 inputs); memory beyond the inputs is
O(batch * seqlen * nheads * (chunk_size * R + d_state)).
"""

from __future__ import annotations

import math
from typing import Optional, Union, cast

import torch
import torch.nn.functional as F

from mamba_ssm._families.mamba3.states import (
    Mamba3States,
    compute_dtype,
    drop_padding,
    per_sequence,
    rotate,
)
from mamba_ssm._families.packing import seq_idx_from_cu_seqlens
from mamba_ssm._families.ssd.torch_impl import ssd_chunk_scan_weighted

__all__ = [
    "PAIRINGS",
    "Mamba3States",
    "angle_cumsum",
    "mamba3_chunk_scan_torch",
    "mamba3_step_torch",
    "per_sequence",
    "rotate",
]

#: How the rotation pairs d_state entries: SISO's adjacent pairs, MIMO's halves.
PAIRINGS = ("adjacent", "halves")

_TWO_PI = 2.0 * math.pi


def angle_cumsum(
    angles: torch.Tensor,
    dt: torch.Tensor,
    chunk_size: int,
    initial: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """theta_t = (theta_{t-1} + pi * tanh(angles_t) * dt_t) mod 2 pi, restarting from 0 where seq_idx
    changes (``initial`` belongs to each row's first sequence); a padding token (seq_idx < 0) is a
    boundary on both sides: it sums nothing (theta 0) and passes nothing on.

    angles (b, l, h, a), dt (b, l, h), initial (b, h, a) or None, seq_idx (b, l) or None; all in the
    compute dtype. Summed within chunks of ``chunk_size`` and carried across them reduced mod 2 pi, so
    the sums stay small. Returns theta (b, l, h, a).
    """
    b, l, h, a = angles.shape
    inc = math.pi * torch.tanh(angles) * dt.unsqueeze(-1)
    q = max(1, min(chunk_size, l))
    pad = (-l) % q
    if pad:
        inc = F.pad(inc, (0, 0, 0, 0, 0, pad))
        if seq_idx is not None:
            seq_idx = torch.cat([seq_idx, seq_idx[:, -1:].expand(b, pad)], dim=1)
    nc = (l + pad) // q
    inc = inc.reshape(b, nc, q, h, a)
    if seq_idx is None:
        local = torch.cumsum(inc, dim=2)
    else:
        sc = seq_idx.reshape(b, nc, q)
        tri = torch.ones(q, q, dtype=torch.bool, device=inc.device).tril()
        real = sc >= 0
        same = (sc.unsqueeze(-1) == sc.unsqueeze(-2)) & real.unsqueeze(-1)  # (b, c, i, j)
        # (the masked sum runs on the finite increments; a non-finite one reaches the later tokens of
        # its chunk through a causal cumsum, never the earlier ones through 0 * inf)
        finite = torch.nan_to_num(inc, nan=0.0, posinf=0.0, neginf=0.0)
        local = torch.einsum("bcij,bcjha->bciha", (tri & same).to(inc.dtype), finite)
        local = local + (inc - finite).cumsum(dim=2)
        prev_end = torch.cat([sc[:, :1, 0], sc[:, :-1, -1]], dim=1)  # (b, c): the carried angle's sequence
        use_in = ((sc == prev_end.unsqueeze(-1)) & real).to(inc.dtype)  # (b, c, q)
    carry = torch.zeros(b, h, a, dtype=inc.dtype, device=inc.device) if initial is None else initial
    out: list[torch.Tensor] = []
    for c in range(nc):
        carried = carry.unsqueeze(1)
        if seq_idx is not None:
            carried = carried * use_in[:, c].view(b, q, 1, 1)
        theta = local[:, c] + carried
        out.append(theta)
        carry = torch.remainder(theta[:, -1], _TWO_PI)
    return torch.remainder(torch.stack(out, dim=1), _TWO_PI).reshape(b, nc * q, h, a)[:, :l]


def _per_head(t: torch.Tensor, bias: torch.Tensor, nheads: int, cdtype: torch.dtype) -> torch.Tensor:
    """(..., R, g, n) -> (..., R, nheads, n) in cdtype (head h reads group h // (nheads / g)), plus the
    bias (nheads, R, n)."""
    g = t.shape[-2]
    t = t.to(cdtype).repeat_interleave(nheads // g, dim=-2)
    return t + bias.to(cdtype).transpose(0, 1)


def _rank_values(v: torch.Tensor, mimo_x: Optional[torch.Tensor], cdtype: torch.dtype) -> torch.Tensor:
    """(..., h, p) -> (..., R, h, p): v times mimo_x (h, R, p), or v with R = 1 when mimo_x is None."""
    v = v.to(cdtype).unsqueeze(-3)
    return v if mimo_x is None else v * mimo_x.to(cdtype).transpose(0, 1)


def _gate_and_project(
    y: torch.Tensor,
    z: Optional[torch.Tensor],
    mimo_z: Optional[torch.Tensor],
    mimo_o: Optional[torch.Tensor],
    norm_weight: Optional[torch.Tensor],
    norm_eps: float,
) -> torch.Tensor:
    """y (..., R, h, p) -> the gated output: per rank an optional RMSNorm over headdim (times
    norm_weight (h, p)) and the silu(z * mimo_z_r) gate, then sum_r mimo_o_r y_r (..., h, p) when
    mimo_o is given (else (..., R, h, p))."""
    cdtype = y.dtype
    if norm_weight is not None:
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + norm_eps)
        y = y * norm_weight.to(cdtype).reshape(y.shape[-2:])
    if z is not None:
        zr = z.to(cdtype).unsqueeze(-3)
        if mimo_z is not None:
            zr = zr * mimo_z.to(cdtype).transpose(0, 1)
        y = y * F.silu(zr)
    if mimo_o is not None:
        y = (y * mimo_o.to(cdtype).transpose(0, 1)).sum(dim=-3)
    return y


def mamba3_chunk_scan_torch(
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
) -> Union[torch.Tensor, tuple[torch.Tensor, Mamba3States]]:
    """Mamba-3 over whole sequences, chunked (see the module docstring for the math). Arguments are
    checked by the public ops; shapes here:

    q, k (b, l, R, g, n); v (b, l, h, p); adt, dt, trap (b, h, l) (trap before the sigmoid); q_bias,
    k_bias (h, R, n); angles (b, l, h, a) before tanh; pairing: one of :data:`PAIRINGS`; D (h,) or None;
    z (b, l, h, p) or None; mimo_x, mimo_z, mimo_o (h, R, p) or None; norm_weight (h, p) or None;
    initial_states: :class:`Mamba3States` with S = b (or the number of sequences with cu_seqlens), or
    None (zeros); seq_idx (b, l) or None (derived from cu_seqlens when None); cu_seqlens (S + 1,)
    (batch 1) or None.

    Packed sequences follow :mod:`mamba_ssm._families.packing`: a padding token (seq_idx < 0, the
    rows from cu_seqlens[-1] on) has an output row of 0 and reads and writes no state; nothing crosses
    a change of seq_idx (the angle sum, the trapezoid's previous-token term, the state).

    Returns out ((b, l, h, p) with mimo_o, else (b, l, R, h, p)) in v's dtype, and with
    ``return_final_states`` also the :class:`Mamba3States` after each row's (or sequence's) last token
    (angle and ssm in the compute dtype, k in the compute dtype, v in v's dtype): zero for a row that
    ends in padding and for an empty sequence without input states.
    """
    if cu_seqlens is not None and initial_states is not None:
        arguments = {
            "q": q, "k": k, "v": v, "adt": adt, "dt": dt, "trap": trap, "q_bias": q_bias, "k_bias": k_bias,
            "angles": angles, "pairing": pairing, "chunk_size": chunk_size, "D": D, "z": z,
            "mimo_x": mimo_x, "mimo_z": mimo_z, "mimo_o": mimo_o, "norm_weight": norm_weight,
            "norm_eps": norm_eps,
        }  # fmt: skip
        return per_sequence(
            mamba3_chunk_scan_torch, arguments, initial_states, cu_seqlens, return_final_states
        )
    cdtype = compute_dtype(v)
    b, l, R, _, n = q.shape
    h, p = v.shape[2], v.shape[3]
    if cu_seqlens is not None and seq_idx is None:
        seq_idx = seq_idx_from_cu_seqlens(cu_seqlens, l, "mamba3_chunk_scan_torch").to(v.device)
    dtf = dt.to(cdtype).transpose(1, 2)  # (b, l, h)
    lam = torch.sigmoid(trap.to(cdtype)).transpose(1, 2)
    gamma = lam * dtf
    share = (1 - lam) * dtf  # c_t
    # c_{t+1}; 0 after the last token. It enters g_t (and leaves y_t through the correction below), so a
    # non-finite c_{t+1} would reach y_t, before its token: it counts as 0 here, and token t+1 still
    # sees it through its own lambda dt (non-finite whenever c_{t+1} is).
    next_share = torch.nan_to_num(F.pad(share[:, 1:], (0, 0, 0, 1)), nan=0.0, posinf=0.0, neginf=0.0)
    if seq_idx is not None:  # c_{t+1} stays within a sequence (a padding token has no next token)
        same_next = F.pad(((seq_idx[:, 1:] == seq_idx[:, :-1]) & (seq_idx[:, :-1] >= 0)).to(cdtype), (0, 1))
        next_share = next_share * same_next.unsqueeze(-1)
    w = gamma + next_share
    init = None if initial_states is None else initial_states
    theta = angle_cumsum(
        angles.to(cdtype),
        dtf,
        chunk_size,
        None if init is None else init.angle.to(cdtype),
        seq_idx,
    )  # (b, l, h, a)
    qr = rotate(_per_head(q, q_bias, h, cdtype), theta.unsqueeze(2), pairing)  # (b, l, R, h, n)
    kr = rotate(_per_head(k, k_bias, h, cdtype), theta.unsqueeze(2), pairing)
    xr = _rank_values(v, mimo_x, cdtype)  # (b, l, R, h, p)
    log_decay = F.pad(adt.to(cdtype).transpose(1, 2).unsqueeze(2), (0, 0, 0, R - 1))  # (b, l, R, h)
    weight = w.unsqueeze(2).expand(b, l, R, h)
    g0 = None
    if init is not None:
        x0 = _rank_values(init.v, mimo_x, cdtype)  # (b, R, h, p)
        g0 = init.ssm.to(cdtype) + share[:, 0].view(b, h, 1, 1) * torch.einsum(
            "brhp,brhn->bhpn", x0, init.k.to(cdtype)
        )
    sub_cu = None  # the packed sequences' bounds in sub-steps
    if return_final_states and cu_seqlens is not None:
        sub_cu = cu_seqlens.to(device=v.device, dtype=torch.long) * R
    y, final, picked = ssd_chunk_scan_weighted(
        xr.reshape(b, l * R, h, p),
        log_decay.reshape(b, l * R, h),
        weight.reshape(b, l * R, h),
        kr.reshape(b, l * R, h, n),
        qr.reshape(b, l * R, h, n),
        chunk_size * R,
        g0,
        None if seq_idx is None else seq_idx.repeat_interleave(R, dim=1),
        sub_cu,
    )
    y = y.reshape(b, l, R, h, p)
    # Per token: the ranks after r (not yet in the sub-step state) and minus the next token's share.
    qk = torch.einsum("blrhn,blshn->blhrs", qr, kr)
    later = torch.ones(R, R, dtype=torch.bool, device=v.device).triu(1).to(cdtype)
    corr = (later * w[..., None, None] - next_share[..., None, None]) * qk
    y = y + torch.einsum("blhrs,blshp->blrhp", corr, xr)
    if D is not None:
        y = y + D.to(cdtype).view(h, 1) * xr
    out = _gate_and_project(y, z, mimo_z, mimo_o, norm_weight, norm_eps).to(v.dtype)
    if not return_final_states:
        return drop_padding(out, None, seq_idx)[0]
    if cu_seqlens is None:
        return drop_padding(out, Mamba3States(theta[:, -1], final, kr[:, -1], v[:, -1]), seq_idx)
    ends = (cu_seqlens[1:].to(torch.long) - 1).clamp(min=0).to(v.device)
    empty = (cu_seqlens[1:] == cu_seqlens[:-1]).to(v.device)

    def pick(t: torch.Tensor) -> torch.Tensor:  # (S, ...): an empty sequence's state stays zero
        return t.masked_fill(empty.view(-1, *([1] * (t.dim() - 1))), 0)

    last = cast(torch.Tensor, picked)  # ssd_chunk_scan_weighted returns them whenever cu_seqlens is given
    states = Mamba3States(pick(theta[0, ends]), pick(last), pick(kr[0, ends]), pick(v[0, ends]))
    return drop_padding(out, None, seq_idx)[0], states


def mamba3_step_torch(
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
) -> tuple[torch.Tensor, Mamba3States]:
    """One token of Mamba-3 from the previous states; nothing is written in place.

    q, k (b, R, g, n); v (b, h, p); adt, dt, trap (b, h); q_bias, k_bias (h, R, n); angles (b, h, a);
    states: :class:`Mamba3States` with S = b; the rest as :func:`mamba3_chunk_scan_torch`.

    Returns (out ((b, h, p) with mimo_o, else (b, R, h, p)) in v's dtype, the new
    :class:`Mamba3States` (angle and ssm in the compute dtype, k in the compute dtype, v = v)).
    """
    cdtype = compute_dtype(v)
    b = q.shape[0]
    h = v.shape[1]
    dtf, adtf = dt.to(cdtype), adt.to(cdtype)
    lam = torch.sigmoid(trap.to(cdtype))
    theta = torch.remainder(
        states.angle.to(cdtype) + math.pi * torch.tanh(angles.to(cdtype)) * dtf.unsqueeze(-1), _TWO_PI
    )
    qr = rotate(_per_head(q, q_bias, h, cdtype), theta.unsqueeze(1), pairing)  # (b, R, h, n)
    kr = rotate(_per_head(k, k_bias, h, cdtype), theta.unsqueeze(1), pairing)
    xr = _rank_values(v, mimo_x, cdtype)  # (b, R, h, p)
    xprev = _rank_values(states.v, mimo_x, cdtype)
    alpha = torch.exp(adtf)
    beta = (1 - lam) * dtf * alpha
    gamma = lam * dtf
    ssm = (
        alpha.view(b, h, 1, 1) * states.ssm.to(cdtype)
        + beta.view(b, h, 1, 1) * torch.einsum("brhp,brhn->bhpn", xprev, states.k.to(cdtype))
        + gamma.view(b, h, 1, 1) * torch.einsum("brhp,brhn->bhpn", xr, kr)
    )
    y = torch.einsum("bhpn,brhn->brhp", ssm, qr)
    if D is not None:
        y = y + D.to(cdtype).view(h, 1) * xr
    out = _gate_and_project(y, z, mimo_z, mimo_o, norm_weight, norm_eps).to(v.dtype)
    return out, Mamba3States(theta, ssm, kr, v)
