"""Float64 references for the Triton kernel tests, written from the formulas (independent of the code
under test): the SSD as a per-timestep recurrence (the shared oracle), the decode step, and the norms."""

import oracles
import torch


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
    """Mamba-2's scan one timestep at a time (:func:`oracles.ssd`; a padding token, seq_idx < 0, has
    output 0 and holds no state). Differentiable. Returns (y (b, l, h, p), final state (b, h, p, n));
    with ``states_at`` (timesteps; None: a zero state, for an empty sequence) also the states of batch
    entry 0 after those steps (k, h, p, n)."""
    y, final, states = oracles.ssd(
        x, dt, A, B, C, D, z, dt_bias, dt_softplus, initial_states, seq_idx, dt_limit
    )
    if states_at is not None:
        zero = torch.zeros(states.shape[2:], dtype=torch.float64, device=states.device)
        return y, final, torch.stack([zero if t is None else states[0, int(t)] for t in states_at])
    return y, final


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
