"""Mamba-2's state space duality (SSD) scan, chunked, in PyTorch, with upstream's import path
``mamba_ssm.ops.triton.ssd_combined`` (transformers imports these names when mamba-ssm >= 2.0.4).

Math (Dao & Gu, arXiv:2405.21060, sections 6-7): per head h with scalar A[h] and head dimension p,

    dt'   = clamp(softplus(dt + dt_bias), dt_limit)
    h_t   = exp(dt'_t A) h_{t-1} + dt'_t x_t B_t^T          (h_t: (headdim, d_state))
    y_t   = h_t C_t + D x_t, then * silu(z_t)

Chunked algorithm (section 6 "SSD algorithm"): within a chunk of ``chunk_size`` steps the output is a
masked matrix product with the decay matrix ``L[i, j] = exp(cumsum(dA)_i - cumsum(dA)_j)`` (i >= j;
exponents are non-positive for A <= 0), each chunk's end state is a decayed sum of its inputs, the
states are carried across chunks, and each chunk adds ``C_t exp(cumsum(dA)_t) h_in``. ``seq_idx``
(packed sequences) masks every term that would cross a sequence boundary. Gradients via autograd.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mamba_ssm.ops.triton import _route

__all__ = [
    "mamba_chunk_scan_combined",
    "mamba_split_conv1d_scan_combined",
    "ssd_chunk_scan",
    "ssd_chunk_scan_weighted",
]


def _check(name, t, shape):
    if t is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(
            f"mamba_chunk_scan_combined: {name} must have shape {tuple(shape)}, got {tuple(t.shape)}"
        )


def ssd_chunk_scan(x, dt, A, B, C, chunk_size, initial_states=None, seq_idx=None, positions=None):
    """The SSD core on processed dt (no bias/softplus/D/z), in the compute dtype of the inputs.

    x (b, l, h, p), dt (b, l, h), A (h,), B, C (b, l, h, n) (already one group per head),
    initial_states (b, h, p, n) or None, seq_idx (b, l) or None; ``positions``: optional list of
    timesteps whose states to return (batch 1).

    Returns (y (b, l, h, p), final state (b, h, p, n), states at ``positions`` (k, h, p, n) or None).
    """
    return ssd_chunk_scan_weighted(
        x, dt * A.view(1, 1, -1), dt, B, C, chunk_size, initial_states, seq_idx, positions
    )


def ssd_chunk_scan_weighted(
    x, log_decay, weight, B, C, chunk_size, initial_states=None, seq_idx=None, positions=None
):
    """The SSD core with the decay and the input weight given separately:

        h_t = exp(log_decay_t) h_{t-1} + weight_t x_t B_t^T,    y_t = h_t C_t

    (Mamba-2's scan is log_decay = dt A, weight = dt; Mamba-3's exponential-trapezoidal scan uses its
    own weight). x (b, l, h, p), log_decay and weight (b, l, h) (log_decay <= 0), B, C (b, l, h, n),
    initial_states (b, h, p, n) or None, seq_idx (b, l) or None (nothing crosses from one id to the
    next); ``positions``: optional list of timesteps whose states to return (batch 1). Computed in the
    inputs' dtype; memory O(b l h chunk_size) beyond the inputs.

    Returns (y (b, l, h, p), final state (b, h, p, n), states at ``positions`` (k, h, p, n) or None).
    """
    b, l, h, p = x.shape
    n = B.shape[-1]
    q = max(
        1, min(chunk_size, l)
    )  # a sequence shorter than a chunk is one chunk of its own length (no padding)
    pad = (-l) % q
    if pad:
        x = F.pad(x, (0, 0, 0, 0, 0, pad))
        log_decay = F.pad(log_decay, (0, 0, 0, pad))
        weight = F.pad(weight, (0, 0, 0, pad))
        B = F.pad(B, (0, 0, 0, 0, 0, pad))
        C = F.pad(C, (0, 0, 0, 0, 0, pad))
        if seq_idx is not None:
            seq_idx = torch.cat([seq_idx, seq_idx[:, -1:].expand(b, pad)], dim=1)
    nc = (l + pad) // q
    xc = x.reshape(b, nc, q, h, p)
    Bc = B.reshape(b, nc, q, h, n)
    Cc = C.reshape(b, nc, q, h, n)
    wc = weight.reshape(b, nc, q, h).permute(0, 3, 1, 2)  # (b, h, c, q)
    cs = torch.cumsum(log_decay.reshape(b, nc, q, h).permute(0, 3, 1, 2), dim=-1)  # (b, h, c, q)
    causal = torch.ones(q, q, dtype=torch.bool, device=x.device).tril()
    mask = causal.view(1, 1, 1, q, q)
    if seq_idx is not None:
        sc = seq_idx.reshape(b, nc, q)
        mask = mask & (sc.unsqueeze(-1) == sc.unsqueeze(-2)).unsqueeze(1)  # (b, 1, c, q, q)
    seg = cs.unsqueeze(-1) - cs.unsqueeze(-2)  # (b, h, c, i, j)
    Lmat = torch.exp(torch.where(mask, seg, torch.full_like(seg, float("-inf"))))
    xdt = xc * wc.permute(0, 2, 3, 1).unsqueeze(-1)  # (b, c, q, h, p)
    scores = torch.einsum("bcihn,bcjhn->bhcij", Cc, Bc) * Lmat
    y = torch.einsum("bhcij,bcjhp->bcihp", scores, xdt)
    # Each chunk's end state from its own inputs.
    decay_to_end = torch.exp(cs[..., -1:] - cs)  # (b, h, c, q)
    if seq_idx is not None:
        same_end = (sc == sc[..., -1:]).unsqueeze(1)  # (b, 1, c, q)
        decay_to_end = decay_to_end * same_end
    local = torch.einsum("bcjhn,bhcj,bcjhp->bchpn", Bc, decay_to_end, xdt)
    # Carry across chunks.
    chunk_decay = torch.exp(cs[..., -1])  # (b, h, c)
    if seq_idx is not None:
        prev_end = torch.cat([sc[:, :1, 0], sc[:, :-1, -1]], dim=1)  # (b, c): sequence of the state in
        keep = (prev_end == sc[..., -1]).to(x.dtype)  # carried through the chunk
        use_in = sc == prev_end.unsqueeze(-1)  # (b, c, q)
    cur = (
        torch.zeros(b, h, p, n, dtype=x.dtype, device=x.device)
        if initial_states is None
        else initial_states.to(x.dtype)
    )
    states_in = []
    for c in range(nc):
        states_in.append(cur)
        carried = chunk_decay[:, :, c, None, None] * cur
        if seq_idx is not None:
            carried = carried * keep[:, c].view(b, 1, 1, 1)
        cur = local[:, c] + carried
    sin = torch.stack(states_in, dim=1)  # (b, c, h, p, n)
    decay_in = torch.exp(cs)  # (b, h, c, q)
    if seq_idx is not None:
        decay_in = decay_in * use_in.unsqueeze(1)
    y = y + torch.einsum("bcihn,bchpn,bhci->bcihp", Cc, sin, decay_in)
    y = y.reshape(b, nc * q, h, p)[:, :l]
    picked = None
    if positions is not None:
        out = []
        for t in positions:
            c, i = divmod(int(t), q)
            w = Lmat[0, :, c, i, :]  # (h, q)
            st = torch.einsum("hj,jhn,jhp->hpn", w, Bc[0, c], xdt[0, c])
            st = st + decay_in[0, :, c, i].view(h, 1, 1) * sin[0, c]
            out.append(st)
        picked = torch.stack(out) if out else x.new_zeros(0, h, p, n)
    return y, cur, picked


def mamba_chunk_scan_combined(
    x,
    dt,
    A,
    B,
    C,
    chunk_size,
    D=None,
    z=None,
    dt_bias=None,
    initial_states=None,
    seq_idx=None,
    cu_seqlens=None,
    dt_softplus=False,
    dt_limit=(0.0, float("inf")),
    return_final_states=False,
    return_varlen_states=False,
):
    """Mamba-2's SSD scan.

    Args:
        x: (batch, seqlen, nheads, headdim). dt: (batch, seqlen, nheads). A: (nheads,) real.
        B, C: (batch, seqlen, ngroups, dstate), ngroups dividing nheads (head h uses group
            h // (nheads / ngroups)).
        chunk_size: steps per chunk (e.g. 256).
        D: (nheads, headdim) or (nheads,), or None. z: (batch, seqlen, nheads, headdim) gate, or None.
        dt_bias: (nheads,) or None. dt_softplus: softplus on dt + dt_bias. dt_limit: (min, max) clamp of
            the processed dt ((0, inf) = none).
        initial_states: (batch, nheads, headdim, dstate) or None.
        seq_idx: (batch, seqlen) int ids of packed sequences (non-decreasing), or None.
        cu_seqlens: (num_seqs + 1,) cumulative lengths (batch 1), for ``return_varlen_states``.
        return_final_states: also return the state after the last step (batch, nheads, headdim, dstate).
        return_varlen_states: also return each sequence's final state (num_seqs, nheads, headdim, dstate).

    Returns:
        out (batch, seqlen, nheads, headdim) in x's dtype; then final_states (float32) and/or
        varlen_states when asked for, in that order.

    On CUDA/ROCm devices with triton >= 3.0 the Triton kernels run (``mamba_ssm.ops.triton._kernels.ssd``;
    chunk_size must then be a power of two in 16..256); elsewhere and for float64 the PyTorch
    implementation below (``mamba_ssm._dispatch`` decides and says why).

    Raises:
        TypeError / ValueError: bad shapes, dtypes or arguments, naming the argument.
    """
    for name, t in (("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(
                f"mamba_chunk_scan_combined: {name} must be a torch.Tensor, got {type(t).__name__}"
            )
        if t.is_complex() or not t.is_floating_point():
            raise TypeError(f"mamba_chunk_scan_combined: {name} has dtype {t.dtype}; expected a real float")
    if x.dim() != 4:
        raise ValueError(
            f"mamba_chunk_scan_combined: x must have shape (batch, seqlen, nheads, headdim), "
            f"got {tuple(x.shape)}"
        )
    b, l, h, p = x.shape
    if B.dim() != 4 or B.shape[:2] != (b, l) or h % B.shape[2]:
        raise ValueError(
            f"mamba_chunk_scan_combined: B must have shape (batch, seqlen, ngroups, dstate) = "
            f"({b}, {l}, ngroups dividing {h}, dstate), got {tuple(B.shape)}"
        )
    g, n = B.shape[2], B.shape[3]
    _check("C", C, (b, l, g, n))
    _check("dt", dt, (b, l, h))
    _check("A", A, (h,))
    _check("z", z, (b, l, h, p))
    _check("dt_bias", dt_bias, (h,))
    _check("initial_states", initial_states, (b, h, p, n))
    _check("seq_idx", seq_idx, (b, l))
    if D is not None and tuple(D.shape) not in ((h, p), (h,)):
        raise ValueError(
            f"mamba_chunk_scan_combined: D must have shape ({h}, {p}) or ({h},), got {tuple(D.shape)}"
        )
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"mamba_chunk_scan_combined: chunk_size must be a positive int, got {chunk_size!r}")
    if return_varlen_states and (cu_seqlens is None or b != 1):
        raise ValueError("mamba_chunk_scan_combined: return_varlen_states needs cu_seqlens and batch 1")
    if _route.use_triton(
        "ssd_chunk_scan",
        x,
        lambda: _route.kernels().ssd.unsupported(x, dt, A, B, C, D, z, dt_bias, initial_states),
    ):
        res = _route.kernels().ssd.chunk_scan_combined(  # ValueError for a chunk_size it does not take
            x,
            dt,
            A,
            B,
            C,
            chunk_size,
            D=D,
            z=z,
            dt_bias=dt_bias,
            initial_states=initial_states,
            seq_idx=seq_idx,
            dt_softplus=dt_softplus,
            dt_limit=dt_limit,
            cu_seqlens=cu_seqlens if return_varlen_states else None,
        )
        rest = ([res[1]] if return_final_states else []) + ([res[2]] if return_varlen_states else [])
        return (res[0], *rest) if rest else res[0]
    cdtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    dtp = dt.to(cdtype)
    if dt_bias is not None:
        dtp = dtp + dt_bias.to(cdtype)
    if dt_softplus:
        dtp = F.softplus(dtp)
    if dt_limit != (0.0, float("inf")):
        dtp = dtp.clamp(min=dt_limit[0], max=dt_limit[1])
    rep = h // g
    Bh = B.to(cdtype).repeat_interleave(rep, dim=2)
    Ch = C.to(cdtype).repeat_interleave(rep, dim=2)
    xf = x.to(cdtype)
    positions = None
    if return_varlen_states:
        positions = [int(e) - 1 for e in cu_seqlens[1:].tolist()]
        if seq_idx is None:
            lengths = torch.diff(cu_seqlens.to(torch.long))
            seq_idx = torch.repeat_interleave(torch.arange(len(lengths), device=x.device), lengths).unsqueeze(
                0
            )
    y, final, varlen = ssd_chunk_scan(
        xf, dtp, A.to(cdtype), Bh, Ch, chunk_size, initial_states, seq_idx, positions
    )
    if D is not None:
        y = y + xf * (D.to(cdtype) if D.dim() == 2 else D.to(cdtype).unsqueeze(-1))
    if z is not None:
        y = y * F.silu(z.to(cdtype))
    out = y.to(x.dtype)
    rest = []
    if return_final_states:
        rest.append(final.float() if cdtype == torch.float32 else final)
    if return_varlen_states:
        rest.append(varlen.float() if cdtype == torch.float32 else varlen)
    return (out, *rest) if rest else out


def mamba_split_conv1d_scan_combined(
    zxbcdt,
    conv1d_weight,
    conv1d_bias,
    dt_bias,
    A,
    D,
    chunk_size,
    initial_states=None,
    seq_idx=None,
    dt_limit=(0.0, float("inf")),
    return_final_states=False,
    activation="silu",
    rmsnorm_weight=None,
    rmsnorm_eps=1e-6,
    outproj_weight=None,
    outproj_bias=None,
    headdim=None,
    ngroups=1,
    norm_before_gate=True,
):
    """Mamba-2's block after in_proj (arXiv:2405.21060, Figure 6): split, causal conv1d on (x, B, C),
    SSD scan, gated RMSNorm (or the z gate), out_proj.

    Args:
        zxbcdt: (batch, seqlen, 2 * d_nonssm + 2 * dim + 2 * ngroups * dstate + nheads): z0, x0 (the
            gated-MLP part, d_nonssm >= 0 channels each, output silu(z0) * x0 in front), z, xBC, dt.
        conv1d_weight: (dim + 2 * ngroups * dstate, width) (or with a middle 1); conv1d_bias or None.
        dt_bias: (nheads,). A: (nheads,). D: (nheads, headdim) or (nheads,).
        chunk_size, initial_states, seq_idx, dt_limit, return_final_states: as
            :func:`mamba_chunk_scan_combined` (dt always goes through softplus).
        activation: "silu"/"swish" or None for the conv. rmsnorm_weight: (dim,) for the gated RMSNorm
            (then z gates through the norm), else z gates the scan output.
        outproj_weight: (d_model, dim) and outproj_bias, or None (the output stays (batch, seqlen, dim)).
        headdim: head dimension (inferred from a 2-D D when None). ngroups: B/C groups.
        norm_before_gate: the gated norm's order.

    Returns:
        out (batch, seqlen, d_model or dim), and the final states with ``return_final_states``.
    """
    from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn  # noqa: PLC0415
    from mamba_ssm.ops.triton.layernorm_gated import rmsnorm_fn  # noqa: PLC0415

    if zxbcdt.dim() != 3:
        raise ValueError(
            f"mamba_split_conv1d_scan_combined: zxbcdt must be (batch, seqlen, channels), got "
            f"{tuple(zxbcdt.shape)}"
        )
    nheads = A.shape[0]
    if headdim is None:
        if D is None or D.dim() != 2:
            raise ValueError(
                "mamba_split_conv1d_scan_combined: pass headdim (or a D of shape (nheads, headdim))"
            )
        headdim = D.shape[1]
    dim = nheads * headdim
    b, l, total = zxbcdt.shape
    conv_dim = conv1d_weight.shape[0]
    dstate = (conv_dim - dim) // (2 * ngroups)
    d_nonssm = (total - 2 * dim - 2 * ngroups * dstate - nheads) // 2
    if (
        dstate < 1
        or dim + 2 * ngroups * dstate != conv_dim
        or d_nonssm < 0
        or 2 * d_nonssm + 2 * dim + 2 * ngroups * dstate + nheads != total
    ):
        raise ValueError(
            f"mamba_split_conv1d_scan_combined: zxbcdt's last dim {total} and conv1d_weight's "
            f"{conv_dim} channels are not 2 * d_nonssm + 2 * dim + 2 * ngroups * dstate + nheads "
            f"and dim + 2 * ngroups * dstate with dim = {dim}, ngroups = {ngroups}, nheads = {nheads}"
        )
    z0, x0, z, xBC, dt = torch.split(
        zxbcdt, [d_nonssm, d_nonssm, dim, dim + 2 * ngroups * dstate, nheads], dim=-1
    )
    cw = conv1d_weight.reshape(conv1d_weight.shape[0], -1)
    xBC = causal_conv1d_fn(
        xBC.transpose(1, 2), cw, conv1d_bias, seq_idx=seq_idx, activation=activation
    ).transpose(1, 2)
    x, Bm, Cm = torch.split(xBC, [dim, ngroups * dstate, ngroups * dstate], dim=-1)
    res = mamba_chunk_scan_combined(
        x.reshape(b, l, nheads, headdim),
        dt,
        A,
        Bm.reshape(b, l, ngroups, dstate),
        Cm.reshape(b, l, ngroups, dstate),
        chunk_size,
        D=D,
        z=None if rmsnorm_weight is not None else z.reshape(b, l, nheads, headdim),
        dt_bias=dt_bias,
        initial_states=initial_states,
        seq_idx=seq_idx,
        dt_softplus=True,
        dt_limit=dt_limit,
        return_final_states=return_final_states,
    )
    y, final = res if return_final_states else (res, None)
    y = y.reshape(b, l, dim)
    if rmsnorm_weight is not None:
        y = rmsnorm_fn(
            y,
            rmsnorm_weight,
            None,
            z=z,
            eps=rmsnorm_eps,
            group_size=dim // ngroups,
            norm_before_gate=norm_before_gate,
        )
    if d_nonssm > 0:  # the gated-MLP channels in front of the SSM's (Mamba2 with d_ssm < d_inner)
        y = torch.cat([F.silu(z0) * x0, y], dim=-1)
    if outproj_weight is not None:
        y = F.linear(y, outproj_weight, outproj_bias)
    return (y, final) if return_final_states else y
