"""A float64, timestep-by-timestep selective scan: the reference the kernel tests compare against.

Written for these tests, independently of the kernels and of the runtime package's fallback. Math:
Mamba (Gu & Dao 2023, arXiv:2312.00752), eq. 2a-2b and Algorithm 2, zero-order hold with the
simplified B:  h_t = exp(dt_t A) h_{t-1} + dt_t B_t u_t,  y_t = C_t . h_t + D u_t,  out = y * silu(z).
Gradients come from autograd through this loop (float64), so they are independent of the kernels'
hand-written backward.
"""

import torch


def expand_bc(X, batch, dim, seqlen):
    """(dim, N) | (batch, N, L) | (batch, G, N, L) -> (batch, dim, N, L) float64."""
    X = X.double()
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
