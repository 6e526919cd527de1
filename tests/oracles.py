"""The float64 oracles every test compares against: the selective scan of Mamba and the SSD of
Mamba-2, each written once, from the papers, one timestep at a time, independently of ``mamba_ssm``.

* :func:`selective_scan`: Gu & Dao 2023 (arXiv:2312.00752), eq. 2a-2b and Algorithm 2, zero-order hold
  for A with the simplified B:  h_t = exp(dt_t A) h_{t-1} + dt_t B_t u_t,  y_t = C_t . h_t + D u_t,
  out = y * silu(z), with dt = softplus(delta + delta_bias) when asked.
* :func:`selective_scan_complex`: the same recurrence with a complex diagonal A (S4D's complex state,
  arXiv:2206.11893) in complex128:  y_t = 2 Re(C_t . h_t) + D u_t  (each complex state stands for a
  conjugate pair of real ones).
* :func:`ssd`: Dao & Gu 2024 (arXiv:2405.21060), eq. (1) with a scalar A per head:
  h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T,  y_t = h_t C_t + D x_t,  y *= silu(z); a new sequence of
  ``seq_idx`` starts from a zero state; a padding token (``seq_idx`` < 0) has output 0 and no state.

Both compute in float64 with plain torch ops on the inputs' device and are differentiable (autograd
through the loop is the gradient oracle), so they share nothing with the kernels, the chunked PyTorch
fallback or the package's own reference.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["complex_bc", "expand_bc", "selective_scan", "selective_scan_complex", "ssd"]


def _f64(t):
    return None if t is None else t.double()


def expand_bc(X, batch, dim, seqlen):
    """B or C of a selective scan, per channel: (dim, N) | (batch, N, L) | (batch, G, N, L) ->
    (batch, dim, N, L) float64, complex128 if X is complex (channel d uses group d // (dim / G))."""
    X = X.to(torch.complex128) if X.is_complex() else X.double()
    if X.dim() == 2:
        return X[None, :, :, None].expand(batch, dim, X.shape[1], seqlen)
    if X.dim() == 3:
        X = X.unsqueeze(1)
    return X.repeat_interleave(dim // X.shape[1], dim=1)


def selective_scan(
    u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, initial_state=None
):
    """Mamba's S6 scan in float64, one timestep at a time.

    Args:
        u, delta: (batch, dim, L). A: (dim, N). B, C: (dim, N) | (batch, N, L) | (batch, G, N, L).
        D, delta_bias: (dim,) or None. z: (batch, dim, L) or None. initial_state: (batch, dim, N) or None.

    Returns:
        (out (batch, dim, L), last state (batch, dim, N)), float64 tensors on u's device.
    """
    batch, dim, seqlen = u.shape
    u64, dt, A64 = u.double(), delta.double(), A.double()
    if delta_bias is not None:
        dt = dt + delta_bias.double()[:, None]
    if delta_softplus:
        dt = F.softplus(dt)
    Bx = expand_bc(B, batch, dim, seqlen)
    Cx = expand_bc(C, batch, dim, seqlen)
    h = (
        initial_state.double().clone()
        if initial_state is not None
        else torch.zeros(batch, dim, A.shape[1], dtype=torch.float64, device=u.device)
    )
    ys = []
    for t in range(seqlen):
        h = torch.exp(dt[:, :, t, None] * A64) * h + (dt[:, :, t] * u64[:, :, t])[:, :, None] * Bx[..., t]
        ys.append((h * Cx[..., t]).sum(-1))
    y = torch.stack(ys, dim=-1) if ys else torch.zeros_like(u64)
    if D is not None:
        y = y + D.double()[:, None] * u64
    if z is not None:
        zz = z.double()
        y = y * zz * torch.sigmoid(zz)
    return y, h


def complex_bc(X, batch, dim, seqlen):
    """B or C of a complex-A scan as complex128 (batch, dim, N, L), from any accepted form: complex or
    real (dim, N); variable (batch, N, n) / (batch, G, N, n) as real (re, im) pairs interleaved along
    time (n = 2 * seqlen), real (n = seqlen) or complex (n = seqlen)."""
    if X.dim() > 2 and not X.is_complex():
        Xd = X.double()
        pairs = X.shape[-1] == 2 * seqlen
        X = torch.complex(Xd[..., 0::2], Xd[..., 1::2]) if pairs else torch.complex(Xd, torch.zeros_like(Xd))
    return expand_bc(X.to(torch.complex128), batch, dim, seqlen)


def selective_scan_complex(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    """Mamba's scan with a complex diagonal A, one timestep at a time in complex128:
    h_t = exp(dt_t A) h_{t-1} + dt_t u_t B_t,  y_t = 2 Re(sum_n C_t h_t) + D u_t,  out = y * silu(z).

    Args:
        u, delta: (batch, dim, L). A: complex (dim, N). B, C: any form of :func:`complex_bc`.
        D, delta_bias: (dim,) or None. z: (batch, dim, L) or None.

    Returns:
        (out float64 (batch, dim, L), last state complex128 (batch, dim, N)), differentiable by autograd.
    """
    batch, dim, seqlen = u.shape
    u64, dt = u.double(), delta.double()
    if delta_bias is not None:
        dt = dt + delta_bias.double()[:, None]
    if delta_softplus:
        dt = F.softplus(dt)
    A128 = A.to(torch.complex128)
    Bx = complex_bc(B, batch, dim, seqlen)
    Cx = complex_bc(C, batch, dim, seqlen)
    h = torch.zeros(batch, dim, A.shape[1], dtype=torch.complex128, device=u.device)
    ys = []
    # Per-step slices by unbind: one autograd node each, so the backward stays linear in seqlen.
    for dt_t, u_t, B_t, C_t in zip(dt.unbind(-1), u64.unbind(-1), Bx.unbind(-1), Cx.unbind(-1)):
        h = torch.exp(dt_t[:, :, None] * A128) * h + (dt_t * u_t)[:, :, None] * B_t
        ys.append(2.0 * (C_t * h).sum(-1).real)
    y = torch.stack(ys, dim=-1) if ys else torch.zeros_like(u64)
    if D is not None:
        y = y + D.double()[:, None] * u64
    if z is not None:
        y = y * F.silu(z.double())
    return y, h


def ssd(
    x,
    dt,
    A,
    B,
    C,
    D=None,
    z=None,
    dt_bias=None,
    dt_softplus=False,
    initial_states=None,
    seq_idx=None,
    dt_limit=(0.0, float("inf")),
):
    """Mamba-2's SSD recurrence in float64, one timestep at a time.

    Args:
        x: (b, l, h, p). dt: (b, l, h). A: (h,). B, C: (b, l, g, n). D: (h,) or (h, p). z: like x.
        dt_bias: (h,). initial_states: (b, h, p, n), the state before the first step of the first
        sequence. seq_idx: (b, l) sequence ids; the state restarts from zero where it changes; a
        padding token (seq_idx < 0) belongs to no sequence: its output is 0 and it holds no state.
        dt_limit: dt is clamped to it (the default means no clamp).

    Returns:
        (out (b, l, h, p), final state (b, h, p, n), the state after every step (b, l, h, p, n)),
        float64 tensors.
    """
    x, dt, A, B, C = (t.double() for t in (x, dt, A, B, C))
    b, l, h, p = x.shape
    g = B.shape[2]
    n = B.shape[3]
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
        else torch.zeros(b, h, p, n, dtype=torch.float64, device=x.device)
    )
    ys, states = [], []
    for t in range(l):
        if seq_idx is not None and t > 0:
            same = (seq_idx[:, t] == seq_idx[:, t - 1]).double().view(b, 1, 1, 1)
            state = state * same
        decay = torch.exp(dtp[:, t] * A).view(b, h, 1, 1)
        state = decay * state + dtp[:, t].view(b, h, 1, 1) * x[:, t].unsqueeze(-1) * Bh[:, t].unsqueeze(2)
        if seq_idx is not None:  # a padding token (seq_idx < 0) holds no state
            state = state * (seq_idx[:, t] >= 0).double().view(b, 1, 1, 1).to(x.device)
        ys.append((state * Ch[:, t].unsqueeze(2)).sum(-1))
        states.append(state)
    y = torch.stack(ys, dim=1)
    if D is not None:
        Dd = D.double()
        y = y + x * (Dd if Dd.dim() == 2 else Dd[:, None])
    if z is not None:
        zd = z.double()
        y = y * zd * torch.sigmoid(zd)
    if seq_idx is not None:  # a padding token's output is 0
        y = y * (seq_idx >= 0).double().view(b, l, 1, 1).to(x.device)
    return y, state, torch.stack(states, dim=1)
