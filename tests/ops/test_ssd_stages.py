"""Upstream's SSD stage modules (ssd_chunk_state, ssd_state_passing, ssd_bmm, ssd_chunk_scan) and
ssd_combined's stage-level names, on their PyTorch path, against float64 references written here from
the chunked algorithm of Dao & Gu (arXiv:2405.21060, section 6) one position at a time, and against the
per-timestep recurrence (tests/reference.py). Backward pieces and autograd Functions against
torch.autograd through those references. (The stages' Triton path: tests/ops/triton/test_triton_stages.py.)
"""

from __future__ import annotations

import math

import pytest
import reference as ref  # (tests/reference.py)
import torch
import torch.nn.functional as F

from mamba_ssm.ops.triton import ssd_bmm, ssd_chunk_scan, ssd_chunk_state, ssd_combined, ssd_state_passing

F64 = torch.float64


def _close(got, want, what, tol=1e-9):
    got, want = got.detach().double(), want.detach().double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    scale = max(1.0, float(want.abs().max())) if want.numel() else 1.0
    err = float((got - want).abs().max()) if want.numel() else 0.0
    assert err <= tol * scale, f"{what}: max error {err:.3g} > {tol * scale:.3g}"


# ---------------------------------------------------------------------------------------------- references
def r_cumsum(dt, A, Q, dt_bias=None, softplus=False, limit=None):
    """(dA_cumsum, dt') (b, h, nchunks, Q): dt' per position (0 past seqlen), cs its in-chunk sum of dt' A."""
    b, l, h = dt.shape
    nc = math.ceil(l / Q)
    d = torch.zeros(b, h, nc, Q, dtype=F64)
    for t in range(l):
        v = dt[:, t].double() + (dt_bias.double() if dt_bias is not None else 0.0)
        if softplus:
            v = torch.log1p(torch.exp(v))
        if limit is not None:
            v = v.clamp(*limit)
        d[:, :, t // Q, t % Q] = v
    cs = torch.zeros_like(d)
    run = torch.zeros(b, h, nc, dtype=F64)
    for i in range(Q):
        run = run + d[..., i] * A.double().view(1, h, 1)
        cs[..., i] = run
    return cs, d


def _seq(seq_idx, t, l):
    return None if seq_idx is None else seq_idx[:, min(t, l - 1)]


def r_chunk_state(B, x, d, cs, seq_idx=None):
    """S[b, c, h] = sum_j exp(cs_end - cs_j) dt'_j x_j B_j^T over chunk c's positions of its last
    sequence (none when that is padding)."""
    b, l, h, p = x.shape
    g, n = B.shape[2], B.shape[3]
    nc, Q = d.shape[2], d.shape[3]
    S = torch.zeros(b, nc, h, p, n, dtype=F64)
    for c in range(nc):
        last = _seq(seq_idx, c * Q + Q - 1, l)
        for j in range(Q):
            t = c * Q + j
            if t >= l:
                break
            w = torch.exp(cs[:, :, c, Q - 1] - cs[:, :, c, j]) * d[:, :, c, j]  # (b, h)
            if seq_idx is not None:
                w = w * ((seq_idx[:, t] == last) & (last >= 0)).double().unsqueeze(-1)
            Bt = B[:, t].double().repeat_interleave(h // g, dim=1)  # (b, h, n)
            S[:, c] += w[..., None, None] * x[:, t].double()[..., None] * Bt[:, :, None, :]
    return S


def r_state_passing(S, cs_end, h0=None, seq_idx=None, Q=None):
    """H_0 = h0, H_{c+1} = exp(cs_end_c) H_c [carried] + S_c, for S (b, c, h, ...)."""
    b, nc = S.shape[:2]
    H = torch.zeros_like(S[:, 0], dtype=F64) if h0 is None else h0.double()
    out = []
    for c in range(nc):
        out.append(H)
        a = torch.exp(cs_end[:, :, c].double())  # (b, h)
        if seq_idx is not None:
            l = seq_idx.shape[1]
            prev = seq_idx[:, max(c * Q - 1, 0)]
            last = _seq(seq_idx, c * Q + Q - 1, l)
            a = a * ((prev == last) & (last >= 0)).double().unsqueeze(-1)
        H = a.view(*a.shape, *([1] * (S.dim() - 3))) * H + S[:, c].double()
    return torch.stack(out, 1), H


def r_chunk_scan(B, C, x, d, cs, H, D=None, z=None, seq_idx=None):
    """y_i = sum_{j<=i} (C_i.B_j) exp(cs_i - cs_j) dt'_j x_j + exp(cs_i) C_i.H_c (+ D x_i) (* silu z_i)."""
    b, l, h, p = x.shape
    g = B.shape[2]
    Q = d.shape[3]
    y = torch.zeros(b, l, h, p, dtype=F64)
    for i_t in range(l):
        c, i = divmod(i_t, Q)
        Ci = C[:, i_t].double().repeat_interleave(h // g, dim=1)  # (b, h, n)
        si = None if seq_idx is None else seq_idx[:, i_t]
        prev = None if seq_idx is None else seq_idx[:, max(c * Q - 1, 0)]
        acc = torch.exp(cs[:, :, c, i])[..., None] * (H[:, c].double() * Ci[:, :, None, :]).sum(-1)
        if seq_idx is not None:
            acc = acc * (si == prev).double().view(b, 1, 1)
        for j in range(i + 1):
            j_t = c * Q + j
            Bj = B[:, j_t].double().repeat_interleave(h // g, dim=1)
            w = (Ci * Bj).sum(-1) * torch.exp(cs[:, :, c, i] - cs[:, :, c, j]) * d[:, :, c, j]  # (b, h)
            if seq_idx is not None:
                w = w * (seq_idx[:, j_t] == si).double().unsqueeze(-1)
            acc = acc + w[..., None] * x[:, j_t].double()
        if D is not None:
            acc = acc + x[:, i_t].double() * (D.double() if D.dim() == 2 else D.double()[:, None])
        if z is not None:
            acc = acc * F.silu(z[:, i_t].double())
        if seq_idx is not None:
            acc = acc * (si >= 0).double().view(b, 1, 1)
        y[:, i_t] = acc
    return y


def _inputs(b=2, l=37, h=4, p=3, g=2, n=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen)
    return dict(
        x=r(b, l, h, p),
        dt=torch.rand(b, l, h, generator=gen) * 0.6 - 0.3,
        A=-(torch.rand(h, generator=gen) + 0.2),
        B=r(b, l, g, n),
        C=r(b, l, g, n),
        D=r(h, p),
        z=r(b, l, h, p),
        dt_bias=r(h) * 0.3,
        h0=r(b, h, p, n),
    )


def _padded_seq(b, l):
    seq = torch.zeros(b, l, dtype=torch.int32)
    seq[:, l // 3 :] = 1
    seq[0, l - 6 :] = -1  # row 0 ends in padding
    seq[1, l // 2 : l // 2 + 4] = -1  # row 1: padding between two sequences
    seq[1, l // 2 + 4 :] = 2
    return seq


# ---------------------------------------------------------------------------------------------- forward stages
@pytest.mark.parametrize("limit", [None, (0.05, 0.5)])
def test_chunk_cumsum_fwd(limit):
    t = _inputs()
    kw = dict(dt_bias=t["dt_bias"], dt_softplus=True) | ({"dt_limit": limit} if limit else {})
    cs, d = ssd_chunk_state._chunk_cumsum_fwd(t["dt"], t["A"], 8, **kw)
    rcs, rd = r_cumsum(t["dt"], t["A"], 8, t["dt_bias"], True, limit)
    assert cs.shape == (2, 4, 5, 8) and cs.dtype == torch.float32
    _close(d, rd, "dt_out", 1e-6)
    _close(cs, rcs, "dA_cumsum", 1e-6)


@pytest.mark.parametrize("seq", [False, True])
def test_chunk_state_state_passing_chunk_scan_stages(seq):
    """Stages 2-4 in float64 against the position-by-position references, with padded packed sequences."""
    t = {k: v.double() for k, v in _inputs(seed=1).items()}
    Q = 8
    sid = _padded_seq(2, 37) if seq else None
    cs, d = ssd_chunk_state._chunk_cumsum_fwd(t["dt"], t["A"], Q, dt_bias=t["dt_bias"], dt_softplus=True)
    S = ssd_chunk_state._chunk_state_fwd(t["B"], t["x"], d, cs, seq_idx=sid)
    rcs, rd = r_cumsum(t["dt"], t["A"], Q, t["dt_bias"], True)
    rS = r_chunk_state(t["B"], t["x"], rd, rcs, sid)
    _close(S, rS, "chunk states")
    H, final = ssd_state_passing._state_passing_fwd(
        S.flatten(3), cs[..., -1], t["h0"].flatten(2), seq_idx=sid, chunk_size=Q
    )
    rH, rfinal = r_state_passing(rS, rcs[..., -1], t["h0"], sid, Q)
    _close(H.view(rH.shape), rH, "states entering the chunks")
    _close(final.view(rfinal.shape), rfinal, "final state")
    cb = ssd_bmm._bmm_chunk_fwd(t["C"], t["B"], Q, seq_idx=sid)
    y, y_pre = ssd_chunk_scan._chunk_scan_fwd(
        cb, t["x"], d, cs, t["C"], H.view(rH.shape), D=t["D"], z=t["z"], seq_idx=sid
    )
    _close(y, r_chunk_scan(t["B"], t["C"], t["x"], rd, rcs, rH, t["D"], t["z"], sid), "chunk scan out")
    _close(y_pre, r_chunk_scan(t["B"], t["C"], t["x"], rd, rcs, rH, t["D"], None, sid), "chunk scan out_x")
    # The stages compose to the scan itself (the per-timestep recurrence).
    want, want_final, _ = ref.ssd(
        t["x"], t["dt"], t["A"], t["B"], t["C"], D=t["D"], z=t["z"], dt_bias=t["dt_bias"], dt_softplus=True,
        initial_states=t["h0"], seq_idx=sid,
    )  # fmt: skip
    _close(y, torch.from_numpy(want), "stages vs recurrence")
    _close(final.view(rfinal.shape), torch.from_numpy(want_final), "final vs recurrence")


@pytest.mark.parametrize("causal", [False, True])
def test_bmm_chunk_fwd_and_bwd(causal):
    t = _inputs(seed=2)
    sid = _padded_seq(2, 37)
    a, b_ = t["C"].double(), t["B"].double()
    out = ssd_bmm._bmm_chunk_fwd(a, b_, 8, seq_idx=sid, causal=causal)
    want = torch.zeros(2, 5, 2, 8, 8, dtype=F64)
    for c in range(5):
        for i in range(8):
            for j in range(8):
                ti, tj = c * 8 + i, c * 8 + j
                if ti >= 37 or tj >= 37 or (causal and j > i):
                    continue
                same = (sid[:, ti] == sid[:, tj]).double()
                want[:, c, :, i, j] = (a[:, ti] * b_[:, tj]).sum(-1) * same[:, None]
    _close(out, want, "bmm")
    # _bmm_chunk_bwd(a, dout) is the gradient of the other factor: with out = a b^T, d b = dout^T a.
    dout = torch.randn(want.shape, dtype=F64)
    leaf = b_.clone().requires_grad_(True)
    (ssd_bmm._bmm_chunk_fwd(a, leaf, 8) * dout).sum().backward()
    residual = torch.randn_like(b_)
    _close(ssd_bmm._bmm_chunk_bwd(a, dout, residual=residual), leaf.grad + residual, "bmm bwd")


def test_chunk_state_varlen_padded_and_empty():
    """Upstream's test_chunk_state_varlen on the CPU: the stages of a packed row then chunk_state_varlen
    equal each sequence's own stages; plus the padded-varlen rule (trailing padding, empty sequences)."""
    gen = torch.Generator().manual_seed(3)
    lengths = [5, 0, 17, 1, 9, 0]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    total, pad = int(cu[-1]), 6
    h, p, n, g, Q = 4, 3, 5, 2, 8
    x = torch.randn(total + pad, h, p, generator=gen, dtype=F64)
    B = torch.randn(total + pad, g, n, generator=gen, dtype=F64) / 5
    A = -0.5 * torch.rand(h, generator=gen, dtype=F64)
    dt = F.softplus(torch.randn(total + pad, h, generator=gen, dtype=F64) - 1)
    from mamba_ssm._families.packing import seq_idx_from_cu_seqlens

    sid = seq_idx_from_cu_seqlens(cu, total + pad)
    cs, d = ssd_chunk_state._chunk_cumsum_fwd(dt.unsqueeze(0), A, Q)
    S = ssd_chunk_state._chunk_state_fwd(B.unsqueeze(0), x.unsqueeze(0), d, cs, seq_idx=sid)
    H, _ = ssd_state_passing._state_passing_fwd(S.flatten(3), cs[..., -1], seq_idx=sid, chunk_size=Q)
    got = ssd_chunk_state.chunk_state_varlen(B, x, d[0], cs[0], cu, H[0].view(S.shape[1:]))
    for i, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        if e == s:
            assert not got[i].any(), f"empty sequence {i} has a state"
            continue
        cs_i, d_i = ssd_chunk_state._chunk_cumsum_fwd(dt[s:e].unsqueeze(0), A, Q)
        S_i = ssd_chunk_state.chunk_state(B[s:e].unsqueeze(0), x[s:e].unsqueeze(0), d_i, cs_i)
        _, fin = ssd_state_passing._state_passing_fwd(S_i.flatten(3), cs_i[..., -1])
        _close(got[i], fin.view(h, p, n), f"sequence {i}")


def test_combined_compositions_and_references():
    """mamba_chunk_scan (the stage Functions), ssd_chunk_scan_combined_ref (the stage references),
    ssd_selective_scan (Mamba's selective scan on the SSD layout) and mamba_conv1d_scan_ref against the
    float64 recurrence."""
    t = _inputs(seed=4)
    args = (t["x"], t["dt"], t["A"], t["B"], t["C"])
    want, _, _ = ref.ssd(*args, D=t["D"], z=t["z"], dt_bias=t["dt_bias"], dt_softplus=True)
    want = torch.from_numpy(want)
    kw = dict(D=t["D"], z=t["z"], dt_bias=t["dt_bias"], dt_softplus=True)
    _close(ssd_combined.mamba_chunk_scan(*args, 8, **kw), want, "mamba_chunk_scan", 2e-5)
    _close(
        ssd_combined.ssd_chunk_scan_combined_ref(*args, 8, **kw), want, "ssd_chunk_scan_combined_ref", 2e-5
    )
    _close(ssd_combined.ssd_selective_scan(*args, **kw), want, "ssd_selective_scan", 2e-5)
    # conv then scan
    b, l, h, p = t["x"].shape
    g, n = t["B"].shape[2:]
    xBC = torch.cat(
        [t["x"].reshape(b, l, h * p), t["B"].reshape(b, l, g * n), t["C"].reshape(b, l, g * n)], -1
    )
    w, cb = torch.randn(xBC.shape[-1], 4) * 0.5, torch.randn(xBC.shape[-1]) * 0.1
    conv = torch.from_numpy(ref.causal_conv1d(xBC.transpose(1, 2), w, cb, silu=True)).transpose(1, 2)
    xs, Bs, Cs = torch.split(conv, [h * p, g * n, g * n], -1)
    want2, _, _ = ref.ssd(
        xs.reshape(b, l, h, p), t["dt"], t["A"], Bs.reshape(b, l, g, n), Cs.reshape(b, l, g, n), D=t["D"],
        dt_bias=t["dt_bias"], dt_softplus=True,
    )  # fmt: skip
    got2 = ssd_combined.mamba_conv1d_scan_ref(
        xBC, w, cb, t["dt"], t["A"], 8, D=t["D"], dt_bias=t["dt_bias"], dt_softplus=True, ngroups=g
    )
    _close(got2, torch.from_numpy(want2).reshape(b, l, h * p), "mamba_conv1d_scan_ref", 2e-5)


# ---------------------------------------------------------------------------------------------- backward pieces
def _ref_chain(t, Q, leaves):
    """The float64 reference from stage 1 on, differentiable in ``leaves`` (a dict of the inputs)."""
    cs, d = r_cumsum(leaves["dt"], leaves["A"], Q, leaves["dt_bias"], True)
    S = r_chunk_state(leaves["B"], leaves["x"], d, cs)
    H, final = r_state_passing(S, cs[..., -1], leaves["h0"])
    return r_chunk_scan(leaves["B"], leaves["C"], leaves["x"], d, cs, H, leaves["D"], leaves["z"]), final


def test_mamba_chunk_scan_combined_bwd_entry_point():
    t = _inputs(b=1, l=19, seed=5)
    Q = 8
    leaves = {k: v.double().requires_grad_(True) for k, v in t.items()}
    y, final = _ref_chain(t, Q, leaves)
    dout, dfinal = torch.randn(y.shape, dtype=F64), torch.randn(final.shape, dtype=F64)
    ((y * dout).sum() + (final * dfinal).sum()).backward()
    out = ssd_combined._mamba_chunk_scan_combined_fwd(
        t["x"], t["dt"], t["A"], t["B"], t["C"], Q, D=t["D"], z=t["z"], dt_bias=t["dt_bias"],
        initial_states=t["h0"], dt_softplus=True,
    )  # fmt: skip
    assert len(out) == 6
    _close(out[0], y, "out", 2e-5)
    _close(out[5], final, "final", 2e-5)
    dx = torch.empty_like(t["x"])
    grads = ssd_combined._mamba_chunk_scan_combined_bwd(
        dout.float(), t["x"], t["dt"], t["A"], t["B"], t["C"], out[0], Q, D=t["D"], z=t["z"],
        dt_bias=t["dt_bias"], initial_states=t["h0"], dfinal_states=dfinal.float(), dt_softplus=True, dx=dx,
        recompute_output=True,
    )  # fmt: skip
    names = ["x", "dt", "A", "B", "C", "D", "z", "dt_bias", "h0"]
    assert grads[0] is dx
    for name, g in zip(names, grads[:9]):
        _close(g, leaves[name].grad, f"d{name}", 2e-4)
    _close(grads[9], y, "recomputed out", 2e-5)


def test_stage_backward_pieces():
    t = {k: v.double() for k, v in _inputs(b=1, l=21, seed=6).items()}
    Q = 8
    # stage 1
    leaves = {k: t[k].clone().requires_grad_(True) for k in ("dt", "A", "dt_bias")}
    cs, d = r_cumsum(leaves["dt"], leaves["A"], Q, leaves["dt_bias"], True)
    per_step = d * leaves["A"].view(1, -1, 1, 1)
    ddA, ddt_out = torch.randn(per_step.shape, dtype=F64), torch.randn(d.shape, dtype=F64)
    ((per_step * ddA).sum() + (d * ddt_out).sum()).backward()
    ddt, dA, ddt_bias = ssd_chunk_state._chunk_cumsum_bwd(ddA, ddt_out, t["dt"], t["A"], t["dt_bias"], True)
    for name, g in (("dt", ddt), ("A", dA), ("dt_bias", ddt_bias)):
        _close(g, leaves[name].grad, f"_chunk_cumsum_bwd d{name}")
    # stage 2
    cs, d = r_cumsum(t["dt"], t["A"], Q, t["dt_bias"], True)
    leaves = {"B": t["B"].clone().requires_grad_(True), "x": t["x"].clone().requires_grad_(True),
              "d": d.clone().requires_grad_(True), "cs": cs.clone().requires_grad_(True)}  # fmt: skip
    S = r_chunk_state(leaves["B"], leaves["x"], leaves["d"], leaves["cs"])
    dS = torch.randn(S.shape, dtype=F64)
    (S * dS).sum().backward()
    dx, gd, gcs = ssd_chunk_state._chunk_state_bwd_dx(t["B"], t["x"], d, cs, dS)
    _close(dx, leaves["x"].grad, "_chunk_state_bwd_dx dx")
    _close(gd, leaves["d"].grad, "_chunk_state_bwd_dx ddt")
    _close(gcs, leaves["cs"].grad, "_chunk_state_bwd_dx ddA_cumsum")
    _close(ssd_chunk_state._chunk_state_bwd_db(t["x"], d, cs, dS, ngroups=2), leaves["B"].grad, "dB")
    dB, gcs2 = ssd_chunk_state._chunk_state_bwd_db(t["x"], d, cs, dS, B=t["B"], ngroups=2)
    _close(gcs2, leaves["cs"].grad, "_chunk_state_bwd_db ddA_cumsum")
    _close(
        ssd_chunk_state._chunk_state_bwd_ddAcs_stable(t["B"], t["x"], d, cs, dS), leaves["cs"].grad, "ddAcs"
    )
    # stage 3
    Sf = torch.randn(1, 3, 4, 6, dtype=F64, requires_grad=True)
    cend = (-torch.rand(1, 4, 3, dtype=F64)).requires_grad_(True)
    h0 = torch.randn(1, 4, 6, dtype=F64, requires_grad=True)
    H, final = r_state_passing(Sf, cend, h0)
    dH, dfin = torch.randn(H.shape, dtype=F64), torch.randn(final.shape, dtype=F64)
    ((H * dH).sum() + (final * dfin).sum()).backward()
    dS3, dcend, dh0 = ssd_state_passing._state_passing_bwd(
        H.detach(), cend.detach(), dH, dfin, has_initial_states=True
    )
    _close(dS3, Sf.grad, "_state_passing_bwd dstates")
    _close(dcend, cend.grad, "_state_passing_bwd ddA_chunk_cumsum", 1e-6)
    _close(dh0, h0.grad, "_state_passing_bwd dinitial_states")


def _cb(C, B, Q):
    """CB[b, c, g, i, j] = C_i . B_j within chunk c (float64; zero past seqlen)."""
    b, l, g = C.shape[:3]
    nc = math.ceil(l / Q)
    out = torch.zeros(b, nc, g, Q, Q, dtype=F64)
    for i_t in range(l):
        for j_t in range(l):
            if i_t // Q == j_t // Q:
                out[:, i_t // Q, :, i_t % Q, j_t % Q] = (C[:, i_t].double() * B[:, j_t].double()).sum(-1)
    return out


@pytest.mark.parametrize("seq", [False, True])
def test_chunk_scan_backward_pieces(seq):
    """Stage 4's backward pieces (upstream's tests call them one by one) against autograd of the float64
    sequential reference: _chunk_scan_bwd_dC (the state term's dC and ddA_cumsum), _chunk_scan_bwd_dx (the
    in-chunk term's dx and ddt, with D), _chunk_scan_chunk_state_bwd_dx (in-chunk term plus stage 2's
    states: dx, ddt, dD), with padding tokens and packed sequences where seq_idx is taken."""
    t = {k: v.double() for k, v in _inputs(b=2, l=21, seed=7).items()}
    Q = 8
    b, l, h, p = t["x"].shape
    n = t["B"].shape[-1]
    seq_idx = _padded_seq(b, l) if seq else None
    cs, d = r_cumsum(t["dt"], t["A"], Q, t["dt_bias"], True)
    H = torch.randn(b, cs.shape[2], h, p, n, dtype=F64)
    dout = torch.randn(b, l, h, p, dtype=F64)
    # the state term: x = 0 leaves exp(cs_i) C_i . H_c
    C, csl = t["C"].clone().requires_grad_(True), cs.clone().requires_grad_(True)
    (r_chunk_scan(t["B"], C, torch.zeros_like(t["x"]), d, csl, H, seq_idx=seq_idx) * dout).sum().backward()
    dC, ddA = ssd_chunk_scan._chunk_scan_bwd_dC(H, cs, dout, seq_idx=seq_idx, C=t["C"], ngroups=2)
    _close(dC, C.grad, "_chunk_scan_bwd_dC dC")
    _close(ddA, csl.grad, "_chunk_scan_bwd_dC ddA_cumsum")
    _close(ssd_chunk_scan._chunk_scan_bwd_dC(H, cs, dout, seq_idx=seq_idx, ngroups=2), C.grad, "dC without C")
    cb = _cb(t["C"], t["B"], Q)
    zero_H = torch.zeros_like(H)
    if not seq:  # the in-chunk term with D (no seq_idx argument)
        x, dl = t["x"].clone().requires_grad_(True), d.clone().requires_grad_(True)
        (r_chunk_scan(t["B"], t["C"], x, dl, cs, zero_H, D=t["D"]) * dout).sum().backward()
        dx, ddt = ssd_chunk_scan._chunk_scan_bwd_dx(cb, t["x"], d, cs, dout, D=t["D"])
        _close(dx, x.grad, "_chunk_scan_bwd_dx dx")
        _close(ddt, dl.grad, "_chunk_scan_bwd_dx ddt")
    # the in-chunk term and the chunks' own states
    for D in (t["D"], t["D"][:, 0]):
        x, dl = t["x"].clone().requires_grad_(True), d.clone().requires_grad_(True)
        Dl = D.clone().requires_grad_(True)
        y = r_chunk_scan(t["B"], t["C"], x, dl, cs, zero_H, D=Dl, seq_idx=seq_idx)
        S = r_chunk_state(t["B"], x, dl, cs, seq_idx)
        dS = torch.randn(S.shape, dtype=F64, generator=torch.Generator().manual_seed(D.dim()))
        ((y * dout).sum() + (S * dS).sum()).backward()
        into = torch.empty_like(t["x"])
        dx, ddt, dD = ssd_combined._chunk_scan_chunk_state_bwd_dx(
            t["x"], d, cs, t["B"], cb, dout, dS, D=D, seq_idx=seq_idx, dx=into
        )
        assert dx is into
        _close(dx, x.grad, "_chunk_scan_chunk_state_bwd_dx dx")
        _close(ddt, dl.grad, "_chunk_scan_chunk_state_bwd_dx ddt")
        _close(dD, Dl.grad, f"_chunk_scan_chunk_state_bwd_dx dD {tuple(D.shape)}")
    with pytest.raises(ValueError, match="dstates"):
        ssd_combined._chunk_scan_chunk_state_bwd_dx(t["x"], d, cs, t["B"], cb, dout, dS[:, :1])


def test_autograd_function_classes():
    """ChunkStateFn, StatePassingFn, ChunkScanFn, MambaChunkScanCombinedFn and
    MambaSplitConv1dScanCombinedFn are torch.autograd.Function subclasses whose gradients are the
    float64 references'."""
    for cls in (
        ssd_chunk_state.ChunkStateFn,
        ssd_state_passing.StatePassingFn,
        ssd_chunk_scan.ChunkScanFn,
        ssd_combined.MambaChunkScanCombinedFn,
        ssd_combined.MambaSplitConv1dScanCombinedFn,
    ):
        assert issubclass(cls, torch.autograd.Function), cls
    t = _inputs(b=1, l=19, seed=7)
    Q = 8
    leaves = {k: v.double().requires_grad_(True) for k, v in t.items()}
    y_ref, _ = _ref_chain(t, Q, leaves)
    dout = torch.randn(y_ref.shape, dtype=F64)
    (y_ref * dout).sum().backward()
    mine = {k: v.clone().requires_grad_(True) for k, v in t.items()}
    y = ssd_combined.MambaChunkScanCombinedFn.apply(
        mine["x"], mine["dt"], mine["A"], mine["B"], mine["C"], Q, mine["D"], mine["z"], mine["dt_bias"],
        mine["h0"], None, None, True,
    )  # fmt: skip
    _close(y, y_ref, "MambaChunkScanCombinedFn out", 2e-5)
    (y.double() * dout).sum().backward()
    for name in ("x", "dt", "A", "B", "C", "D", "z", "dt_bias", "h0"):
        _close(mine[name].grad, leaves[name].grad, f"MambaChunkScanCombinedFn d{name}", 2e-4)
    # The stage Functions chained by hand (mamba_chunk_scan's path) give the same gradients.
    mine2 = {k: v.clone().requires_grad_(True) for k, v in t.items()}
    cs, d = ssd_chunk_state._chunk_cumsum_fwd(
        mine2["dt"], mine2["A"], Q, dt_bias=mine2["dt_bias"], dt_softplus=True
    )
    S = ssd_chunk_state.chunk_state(mine2["B"], mine2["x"], d, cs)
    H, _ = ssd_state_passing.state_passing(S.flatten(3), cs[..., -1], mine2["h0"].flatten(2))
    y2 = ssd_chunk_scan.chunk_scan(
        mine2["B"], mine2["C"], mine2["x"], d, cs, H.view(S.shape), mine2["D"], mine2["z"]
    )
    (y2.double() * dout).sum().backward()
    for name in ("x", "B", "C", "D", "z", "h0"):
        _close(mine2[name].grad, leaves[name].grad, f"stage Functions d{name}", 2e-4)


@pytest.mark.parametrize("d_nonssm", [0, 4])
def test_split_conv1d_scan_ref_and_function(d_nonssm):
    """mamba_split_conv1d_scan_ref (PyTorch references) and MambaSplitConv1dScanCombinedFn equal
    mamba_split_conv1d_scan_combined; state_dtype=float32 changes nothing, bfloat16 rounds the
    inter-chunk states (close, not equal)."""
    gen = torch.Generator().manual_seed(8)
    b, l, h, p, g, n = 2, 23, 2, 4, 1, 6
    dim = h * p
    zxbcdt = torch.randn(b, l, 2 * d_nonssm + 2 * dim + 2 * g * n + h, generator=gen)
    w = torch.randn(dim + 2 * g * n, 4, generator=gen) * 0.4
    args = (zxbcdt, w, torch.randn(dim + 2 * g * n, generator=gen) * 0.1, torch.randn(h, generator=gen) * 0.2,
            -torch.rand(h, generator=gen) - 0.2, torch.randn(h, p, generator=gen), 8)  # fmt: skip
    kw = dict(
        rmsnorm_weight=torch.rand(dim, generator=gen) + 0.5,
        outproj_weight=torch.randn(5, d_nonssm + dim, generator=gen),
    )
    want = ssd_combined.mamba_split_conv1d_scan_combined(*args, **kw)
    _close(ssd_combined.mamba_split_conv1d_scan_ref(*args, **kw), want, "mamba_split_conv1d_scan_ref", 1e-5)
    leaf = zxbcdt.clone().requires_grad_(True)
    got = ssd_combined.MambaSplitConv1dScanCombinedFn.apply(leaf, *args[1:], None, None, (0.0, math.inf), False,
                                                           "silu", kw["rmsnorm_weight"], 1e-6, kw["outproj_weight"])  # fmt: skip
    _close(got, want, "MambaSplitConv1dScanCombinedFn", 1e-6)
    got.sum().backward()
    leaf2 = zxbcdt.clone().requires_grad_(True)
    ssd_combined.mamba_split_conv1d_scan_combined(leaf2, *args[1:], **kw).sum().backward()
    _close(leaf.grad, leaf2.grad, "MambaSplitConv1dScanCombinedFn dzxbcdt", 1e-6)
    same = ssd_combined.mamba_split_conv1d_scan_combined(*args, **kw, state_dtype=torch.float32)
    assert torch.equal(same, want)
    rounded = ssd_combined.mamba_split_conv1d_scan_combined(*args, **kw, state_dtype=torch.bfloat16)
    assert not torch.equal(rounded, want)
    _close(rounded, want, "state_dtype=bfloat16", 3e-2)
