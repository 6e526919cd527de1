"""Float64 references for the Triton kernel tests, written from the formulas (independent of the code
under test): the SSD as a per-timestep recurrence, the decode step, and the norms."""

import torch
import torch.nn.functional as F


def ssd_recurrence(
    x,
    dt,
    A,
    B,
    C,
    D=None,
    z=None,
    dt_bias=None,
    initial_states=None,
    seq_idx=None,
    dt_softplus=False,
    dt_limit=(0.0, float("inf")),
    states_at=None,
):
    """Mamba-2's scan one timestep at a time (arXiv:2405.21060, eq. (1) with scalar A per head):
    h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T, y_t = h_t C_t + D x_t, y *= silu(z); a new sequence of
    seq_idx starts from a zero state (initial_states belongs to the first one); a padding token
    (seq_idx < 0) belongs to no sequence: its output is 0 and it holds no state. Differentiable.
    Returns (y (b, l, h, p), final state (b, h, p, n)); with ``states_at`` (timesteps) also the states
    of batch entry 0 after those steps (k, h, p, n)."""
    x, dt, A, B, C = (t.double() for t in (x, dt, A, B, C))
    b, l, h, p = x.shape
    g, n = B.shape[2], B.shape[3]
    dtp = dt + (dt_bias.double() if dt_bias is not None else 0.0)
    if dt_softplus:
        dtp = F.softplus(dtp)
    if tuple(dt_limit) != (0.0, float("inf")):
        dtp = dtp.clamp(dt_limit[0], dt_limit[1])
    Bh = B.repeat_interleave(h // g, dim=2)
    Ch = C.repeat_interleave(h // g, dim=2)
    state = (
        initial_states.double()
        if initial_states is not None
        else torch.zeros(b, h, p, n, dtype=torch.float64)
    )
    ys, picked = [], {}
    for t in range(l):
        if seq_idx is not None and t > 0:
            same = (seq_idx[:, t] == seq_idx[:, t - 1]).double().view(b, 1, 1, 1)
            state = state * same
        decay = torch.exp(dtp[:, t] * A).view(b, h, 1, 1)
        state = decay * state + (dtp[:, t].view(b, h, 1, 1) * x[:, t].unsqueeze(-1) * Bh[:, t].unsqueeze(2))
        if seq_idx is not None:
            state = state * (seq_idx[:, t] >= 0).double().view(b, 1, 1, 1)
        ys.append((state * Ch[:, t].unsqueeze(2)).sum(-1))
        picked[t] = state[0]
    y = torch.stack(ys, dim=1)
    if D is not None:
        Dd = D.double()
        y = y + x * (Dd if Dd.dim() == 2 else Dd[:, None])
    if z is not None:
        zd = z.double()
        y = y * zd * torch.sigmoid(zd)
    if seq_idx is not None:
        y = y * (seq_idx >= 0).double().view(b, l, 1, 1)
    if states_at is not None:  # (None: a zero state, for an empty sequence)
        zero = torch.zeros(h, p, n, dtype=torch.float64)
        return y, state, torch.stack([zero if t is None else picked[int(t)] for t in states_at])
    return y, state


def state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False, indices=None):
    """One decode step in float64 with heads (state (S, h, p, n), x/dt/z (b, h, p), A (h, p, n), B/C
    (b, g, n), D/dt_bias (h, p)); a negative index is a padded slot (output 0, state unchanged).
    Returns (out (b, h, p), new state (S, h, p, n))."""
    new = state.double().clone()
    b, h, p = x.shape
    g = B.shape[1]
    outs = torch.zeros(b, h, p, dtype=torch.float64)
    for i in range(b):
        row = i if indices is None else int(indices[i])
        if row < 0:
            continue
        for hh in range(h):
            gg = hh // (h // g)
            d = dt[i, hh].double() + (dt_bias[hh].double() if dt_bias is not None else 0.0)
            if dt_softplus:
                d = torch.log1p(torch.exp(d))
            s = (
                new[row, hh] * torch.exp(d[:, None] * A[hh].double())
                + (d * x[i, hh].double())[:, None] * B[i, gg].double()[None, :]
            )
            new[row, hh] = s
            o = s @ C[i, gg].double()
            if D is not None:
                o = o + D[hh].double() * x[i, hh].double()
            if z is not None:
                zz = z[i, hh].double()
                o = o * zz * torch.sigmoid(zz)
            outs[i, hh] = o
    return outs, new


def norm(x, weight, bias, eps, is_rms):
    """LayerNorm / RMSNorm over the last dim in float64 (differentiable)."""
    x = x.double()
    if is_rms:
        y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
    else:
        mu = x.mean(-1, keepdim=True)
        y = (x - mu) / torch.sqrt(((x - mu) ** 2).mean(-1, keepdim=True) + eps)
    if weight is not None:
        y = y * weight.double()
    if bias is not None:
        y = y + bias.double()
    return y


def gated_norm(x, weight, bias, z, eps, group_size, norm_before_gate, is_rms):
    """Mamba-2's gated norm in float64 over groups of group_size channels (differentiable)."""
    x = x.double()
    silu = lambda v: v * torch.sigmoid(v)
    if z is not None and not norm_before_gate:
        x = x * silu(z.double())
    shp = x.shape
    xg = x.reshape(*shp[:-1], shp[-1] // group_size, group_size)
    y = norm(xg, None, None, eps, is_rms).reshape(shp) * weight.double()
    if bias is not None:
        y = y + bias.double()
    if z is not None and norm_before_gate:
        y = y * silu(z.double())
    return y
