"""The float64 oracle of every Mamba-3 test: the recurrence one token at a time, written from the
layer's definition (Lahoti et al., arXiv:2603.15569, "exponential-trapezoidal" discretisation with the
complex state realised as a rotation of B and C; facts of issue 19's "The layer"), independent of
mamba_ssm's chunked code.

Per token t, head h, rank r (R = 1 for SISO):

    lambda = sigmoid(trap), alpha = exp(A dt), beta = (1 - lambda) dt alpha, gamma = lambda dt
    theta_t = theta_{t-1} + pi tanh(angles_t) dt_t                      (kept mod 2 pi)
    q_r = rot(C_r + C_bias_r, theta_t), k_r = rot(B_r + B_bias_r, theta_t)
    x_r = x * mimo_x_r
    h_t = alpha h_{t-1} + beta sum_r x_{t-1,r} k_{t-1,r}^T + gamma sum_r x_{t,r} k_{t,r}^T
    y_r = h_t q_r + D x_r, gated (optionally RMS-normed first), out = sum_r mimo_o_r y_r

The rotation is a complex multiplication: the pair (a, b) is the complex number a + ib, multiplied by
exp(i theta). SISO pairs adjacent entries (2i, 2i+1); MIMO pairs i with i + d_state/2.

Everything differentiable (autograd of this sequential code gives the reference gradients).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F


def pair_indices(n, num_angles, pairing):
    """(first, second) index lists of the rotated pairs of a d_state-long vector."""
    if pairing == "adjacent":
        return [2 * i for i in range(num_angles)], [2 * i + 1 for i in range(num_angles)]
    return list(range(num_angles)), [n // 2 + i for i in range(num_angles)]


def rotate_complex(x, theta, pairing):
    """x (..., n) with each pair read as a complex number and multiplied by exp(i theta) (..., a)."""
    n, a = x.shape[-1], theta.shape[-1]
    first, second = pair_indices(n, a, pairing)
    c = torch.complex(x[..., first], x[..., second]) * torch.polar(torch.ones_like(theta), theta)
    out = x.clone()
    out[..., first] = c.real
    out[..., second] = c.imag
    return out


def recurrence(
    q,
    k,
    v,
    adt,
    dt,
    trap,
    q_bias,
    k_bias,
    angles,
    pairing,
    D=None,
    z=None,
    mimo_x=None,
    mimo_z=None,
    mimo_o=None,
    norm_weight=None,
    norm_eps=1e-5,
    initial_states=None,
    seq_idx=None,
    cu_seqlens=None,
):
    """Mamba-3 one token at a time in float64.

    q, k (b, l, R, g, n); v (b, l, h, p); adt, dt, trap (b, h, l); q_bias, k_bias (h, R, n); angles
    (b, l, h, a); D (h,); z (b, l, h, p); mimo_x/z/o (h, R, p); norm_weight (h, p); initial_states
    (angle (S, h, a), ssm (S, h, p, n), k (S, R, h, n), v (S, h, p)) for the first sequence of each row
    (S = b) or for each packed sequence (cu_seqlens, S = its number of sequences); seq_idx (b, l).

    Packed sequences (the rule of mamba_ssm._families.packing, restated): the tokens from
    cu_seqlens[-1] on, and those with a negative seq_idx, are padding: their output is 0 and the
    recurrence skips them (no state read or written); a sequence's first token starts from its own
    state, never from the token before it.

    Returns (out ((b, l, h, p) with mimo_o else (b, l, R, h, p)), final states per row or sequence as
    (angle, ssm, k, v); a row ending in padding, or an empty sequence without input states: zeros).
    """
    f = torch.float64
    q, k, v, adt, dt, trap, q_bias, k_bias, angles = (
        t.to(f) for t in (q, k, v, adt, dt, trap, q_bias, k_bias, angles)
    )
    b, l, R, g, n = q.shape
    h, p = v.shape[2], v.shape[3]
    a = angles.shape[-1]
    if cu_seqlens is not None:
        bounds = [int(c) for c in cu_seqlens]
        ids = [i for i in range(len(bounds) - 1) for _ in range(bounds[i], bounds[i + 1])]
        seq_idx = torch.tensor([ids + [-1] * (l - bounds[-1])]).reshape(1, l)
    head_group = torch.arange(h) // (h // g)
    mx = None if mimo_x is None else mimo_x.to(f)

    def zero_state(rows):
        return (
            torch.zeros(rows, h, a, dtype=f),
            torch.zeros(rows, h, p, n, dtype=f),
            torch.zeros(rows, R, h, n, dtype=f),
            torch.zeros(rows, h, p, dtype=f),
        )

    def start_state(row, seq):
        """The state a sequence starts from: its own initial state (packed), the row's (first sequence
        of a row), else zeros."""
        if initial_states is None:
            return tuple(s[0] for s in zero_state(1))
        if cu_seqlens is not None:
            return tuple(s[seq].to(f) for s in initial_states)
        return tuple(s[row].to(f) for s in initial_states)

    outs = torch.zeros(b, l, R, h, p, dtype=f)
    finals = {}
    for row in range(b):
        theta, ssm, kprev, vprev = start_state(row, 0)
        for t in range(l):
            sid = int(seq_idx[row, t]) if seq_idx is not None else 0
            if sid < 0:  # padding: output 0 (outs starts at zeros), the recurrence skips it
                continue
            if t > 0 and seq_idx is not None and sid != int(seq_idx[row, t - 1]):
                if cu_seqlens is not None:
                    theta, ssm, kprev, vprev = start_state(row, sid)
                else:
                    theta, ssm, kprev, vprev = (s[0] for s in zero_state(1))
            lam = torch.sigmoid(trap[row, :, t])  # (h,)
            alpha = torch.exp(adt[row, :, t])
            beta = (1 - lam) * dt[row, :, t] * alpha
            gamma = lam * dt[row, :, t]
            theta = theta + math.pi * torch.tanh(angles[row, t]) * dt[row, :, t, None]
            qh = q[row, t][:, head_group] + q_bias.transpose(0, 1)  # (R, h, n)
            kh = k[row, t][:, head_group] + k_bias.transpose(0, 1)
            qr = rotate_complex(qh, theta.expand(R, h, a), pairing)
            kr = rotate_complex(kh, theta.expand(R, h, a), pairing)
            xr = v[row, t].expand(R, h, p) if mx is None else v[row, t] * mx.transpose(0, 1)
            xprev = vprev.expand(R, h, p) if mx is None else vprev * mx.transpose(0, 1)
            ssm = (
                alpha[:, None, None] * ssm
                + beta[:, None, None] * (xprev.unsqueeze(-1) * kprev.unsqueeze(-2)).sum(0)
                + gamma[:, None, None] * (xr.unsqueeze(-1) * kr.unsqueeze(-2)).sum(0)
            )
            y = (ssm.unsqueeze(0) * qr.unsqueeze(-2)).sum(-1)  # (R, h, p)
            if D is not None:
                y = y + D.to(f)[:, None] * xr
            outs[row, t] = y
            kprev, vprev = kr, v[row, t]
            finals[(row, sid)] = (torch.remainder(theta, 2 * math.pi), ssm, kr, v[row, t])
    y = outs
    if norm_weight is not None:
        y = y / torch.sqrt((y * y).mean(-1, keepdim=True) + norm_eps) * norm_weight.to(f)
    if z is not None:
        zr = z.to(f).unsqueeze(2)
        if mimo_z is not None:
            zr = zr * mimo_z.to(f).transpose(0, 1)
        y = y * zr * torch.sigmoid(zr)
    if mimo_o is not None:
        y = (y * mimo_o.to(f).transpose(0, 1)).sum(2)
    if cu_seqlens is not None:
        keys = [(0, s) for s in range(len(cu_seqlens) - 1)]
    else:
        keys = [(row, int(seq_idx[row, -1]) if seq_idx is not None else 0) for row in range(b)]
    zeros = tuple(s[0] for s in zero_state(1))
    states = tuple(
        torch.stack(
            [
                finals.get(key, start_state(key[0], key[1]) if cu_seqlens is not None else zeros)[i]
                for key in keys
            ]
        )
        for i in range(4)
    )
    return y, states


def heavy_tail(x):
    """The A activation: 1 + x for x >= 0, 1 / (1 - x) for x < 0."""
    return torch.where(x >= 0, 1 + x, 1 / (1 - torch.clamp(x, max=0)))


def layer(params, cfg, u, seq_idx=None, cu_seqlens=None):
    """The Mamba3 layer in float64 from its parameters ``params`` ({state_dict key: tensor}) and
    ``cfg`` (a dict: d_state, headdim, ngroups, mimo_rank (1 for SISO), is_mimo, num_rope_angles,
    is_outproj_norm, A_floor): u (b, l, d_model) -> (b, l, d_model).

    in_proj's output splits as z, x, B, C, dd_dt, dd_A, trap, angles; A = -max(heavy_tail(dd_A),
    A_floor), dt = softplus(dd_dt + dt_bias); B and C go through RMSNorm over d_state (eps 1e-5, times
    their weights); the angles are shared by all heads. With is_outproj_norm the y of each rank is
    RMS-normed over headdim (times norm.weight) before the silu(z) gate.
    """
    f = torch.float64
    P = {name: t.to(f) for name, t in params.items()}
    u = u.to(f)
    b, l, _ = u.shape
    N, hd, G, R = cfg["d_state"], cfg["headdim"], cfg["ngroups"], cfg["mimo_rank"]
    d_inner = P["out_proj.weight"].shape[1]
    H = d_inner // hd
    A_n = cfg["num_rope_angles"]
    proj = u @ P["in_proj.weight"].T
    sizes = [d_inner, d_inner, N * G * R, N * G * R, H, H, H, A_n]
    z, x, B, C, dd_dt, dd_A, trap, ang = torch.split(proj, sizes, dim=-1)

    def rms(t, w):
        return t / torch.sqrt((t * t).mean(-1, keepdim=True) + 1e-5) * w

    B = rms(B.reshape(b, l, R, G, N), P["B_norm.weight"])
    C = rms(C.reshape(b, l, R, G, N), P["C_norm.weight"])
    A = -torch.clamp(heavy_tail(dd_A), min=cfg["A_floor"])
    dt = F.softplus(dd_dt + P["dt_bias"])
    mimo = cfg["is_mimo"]
    y, _ = recurrence(
        C,
        B,
        x.reshape(b, l, H, hd),
        (A * dt).transpose(1, 2),
        dt.transpose(1, 2),
        trap.transpose(1, 2),
        P["C_bias"],
        P["B_bias"],
        ang.unsqueeze(2).expand(b, l, H, A_n),
        "halves" if mimo else "adjacent",
        D=P["D"],
        z=z.reshape(b, l, H, hd),
        mimo_x=P.get("mimo_x"),
        mimo_z=P.get("mimo_z"),
        mimo_o=P.get("mimo_o"),
        norm_weight=P["norm.weight"].reshape(H, hd) if cfg["is_outproj_norm"] else None,
        seq_idx=seq_idx,
        cu_seqlens=cu_seqlens,
    )
    if not mimo:
        y = y[:, :, 0]
    return y.reshape(b, l, d_inner) @ P["out_proj.weight"].T
