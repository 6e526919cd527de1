"""A float64, timestep-by-timestep selective scan (real A, and complex A in complex128): the references the
kernel tests compare against.

Written for these tests, independently of the kernels and of the runtime package's fallback. Math:
Mamba (Gu & Dao 2023, arXiv:2312.00752), eq. 2a-2b and Algorithm 2, zero-order hold with the
simplified B:  h_t = exp(dt_t A) h_{t-1} + dt_t B_t u_t,  y_t = C_t . h_t + D u_t,  out = y * silu(z).
Gradients come from autograd through this loop (float64), so they are independent of the kernels'
hand-written backward.
"""

import torch


def expand_bc(X, batch, dim, seqlen):
    """(dim, N) | (batch, N, L) | (batch, G, N, L) -> (batch, dim, N, L) float64 (complex128 if complex)."""
    X = X.to(torch.complex128) if X.is_complex() else X.double()
    if X.dim() == 2:
        return X[None, :, :, None].expand(batch, dim, X.shape[1], seqlen)
    if X.dim() == 3:
        X = X.unsqueeze(1)
    groups = X.shape[1]
    return X.repeat_interleave(dim // groups, dim=1)


def selective_scan_ref64(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    """Returns (out, last_state), both float64. Shapes as mamba_ssm.ops.backends.compiled."""
    batch, dim, seqlen = u.shape
    u64, dt = u.double(), delta.double()
    if delta_bias is not None:
        dt = dt + delta_bias.double()[:, None]
    if delta_softplus:
        dt = torch.nn.functional.softplus(dt)
    A64 = A.double()
    Bx = expand_bc(B, batch, dim, seqlen)
    Cx = expand_bc(C, batch, dim, seqlen)
    h = torch.zeros(batch, dim, A.shape[1], dtype=torch.float64, device=u.device)
    ys = []
    for t in range(seqlen):
        a = torch.exp(dt[:, :, t, None] * A64)
        h = a * h + (dt[:, :, t] * u64[:, :, t])[:, :, None] * Bx[..., t]
        ys.append((h * Cx[..., t]).sum(-1))
    y = torch.stack(ys, dim=-1) if ys else torch.zeros_like(u64)
    if D is not None:
        y = y + D.double()[:, None] * u64
    if z is not None:
        y = y * torch.nn.functional.silu(z.double())
    return y, h


def complex_bc64(X, batch, dim, seqlen):
    """B or C of a complex-A scan as complex128 (batch, dim, N, L), from any accepted form: complex or real
    (dim, N); variable (batch, N, n) / (batch, G, N, n) as real (re, im) pairs interleaved along time
    (n = 2 * seqlen), real (n = seqlen) or complex (n = seqlen)."""
    if X.dim() > 2 and not X.is_complex():
        Xd = X.double()
        pairs = X.shape[-1] == 2 * seqlen
        X = torch.complex(Xd[..., 0::2], Xd[..., 1::2]) if pairs else torch.complex(Xd, torch.zeros_like(Xd))
    return expand_bc(X.to(torch.complex128), batch, dim, seqlen)


def selective_scan_complex_ref64(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    """The selective scan with a complex diagonal A (Mamba's recurrence with S4D's complex state,
    arXiv:2312.00752 / arXiv:2206.11893), one timestep at a time in complex128:
        h_t = exp(dt_t A) h_{t-1} + dt_t u_t B_t,   y_t = 2 Re(sum_n C_t h_t) + D u_t,   out = y silu(z)
    (the 2 Re: each complex state stands for a conjugate pair of real ones). A complex (dim, N); B, C in
    any form of complex_bc64. Returns (out float64, last state complex128), differentiable by autograd."""
    batch, dim, seqlen = u.shape
    u64, dt = u.double(), delta.double()
    if delta_bias is not None:
        dt = dt + delta_bias.double()[:, None]
    if delta_softplus:
        dt = torch.nn.functional.softplus(dt)
    A128 = A.to(torch.complex128)
    Bx = complex_bc64(B, batch, dim, seqlen)
    Cx = complex_bc64(C, batch, dim, seqlen)
    h = torch.zeros(batch, dim, A.shape[1], dtype=torch.complex128, device=u.device)
    ys = []
    # Per-step slices by unbind (one autograd node each, so the backward stays linear in seqlen).
    for dt_t, u_t, B_t, C_t in zip(dt.unbind(-1), u64.unbind(-1), Bx.unbind(-1), Cx.unbind(-1)):
        a = torch.exp(dt_t[:, :, None] * A128)
        h = a * h + (dt_t * u_t)[:, :, None] * B_t
        ys.append(2.0 * (C_t * h).sum(-1).real)
    y = torch.stack(ys, dim=-1) if ys else torch.zeros_like(u64)
    if D is not None:
        y = y + D.double()[:, None] * u64
    if z is not None:
        y = y * torch.nn.functional.silu(z.double())
    return y, h
