"""The other ops against independent references: causal conv1d, selective_state_update, RMSNorm /
LayerNorm (the formula), Mamba-2's SSD ops (their own float64 sequential reference), mamba_inner_fn."""

from __future__ import annotations

import numpy as np
import pytest
import reference as ref  # (tests/reference.py)
import torch
import torch.nn.functional as F

from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn, causal_conv1d_update
from mamba_ssm.ops.selective_scan_interface import mamba_inner_fn, mamba_inner_ref
from mamba_ssm.ops.triton.layer_norm import RMSNorm, layer_norm_fn, rms_norm_fn
from mamba_ssm.ops.triton.layernorm_gated import rmsnorm_fn as gated_rmsnorm_fn
from mamba_ssm.ops.triton.selective_state_update import selective_state_update
from mamba_ssm.ops.triton.ssd_combined import (
    mamba_chunk_scan_combined,
    mamba_split_conv1d_scan_combined,
)

F32 = torch.float32


# ----------------------------------------------------------------------------------------------------
# causal conv1d
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seqlen", [1, 2, 3, 4, 17])
@pytest.mark.parametrize("silu", [False, True])
def test_causal_conv1d_matches_reference(seqlen, silu):
    torch.manual_seed(seqlen)
    x, w, b = torch.randn(2, 5, seqlen), torch.randn(5, 4), torch.randn(5)
    out = causal_conv1d_fn(x, w, b, activation="silu" if silu else None)
    ref.assert_close(out, ref.causal_conv1d(x, w, b, silu), F32, "conv")


def test_causal_conv1d_initial_and_final_states_chain():
    torch.manual_seed(0)
    x, w, b = torch.randn(2, 3, 11), torch.randn(3, 4), torch.randn(3)
    full, final_full = causal_conv1d_fn(x, w, b, return_final_states=True, activation="silu")
    first, st = causal_conv1d_fn(x[..., :2], w, b, return_final_states=True, activation="silu")
    second, st2 = causal_conv1d_fn(
        x[..., 2:], w, b, initial_states=st, return_final_states=True, activation="silu"
    )
    ref.assert_close(torch.cat([first, second], -1), full, F32, "chained")
    ref.assert_close(st2, final_full, F32, "final states")
    ref.assert_close(final_full, x[..., -3:], F32, "final = last inputs")
    # A prompt shorter than width - 1: the final state keeps zeros in front.
    _, short = causal_conv1d_fn(x[..., :1], w, b, return_final_states=True)
    ref.assert_close(short[..., :2], torch.zeros(2, 3, 2), F32, "zeros")


def test_causal_conv1d_seq_idx_never_crosses_sequences():
    torch.manual_seed(1)
    x, w = torch.randn(1, 3, 9), torch.randn(3, 3)
    seq_idx = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 2, 2]], dtype=torch.int32)
    out = causal_conv1d_fn(x, w, None, seq_idx=seq_idx)
    parts = [ref.causal_conv1d(x[..., s:e], w) for s, e in ((0, 4), (4, 7), (7, 9))]
    ref.assert_close(out, np.concatenate(parts, axis=-1), F32, "seq_idx")


def test_causal_conv1d_update_matches_full_conv():
    torch.manual_seed(2)
    x, w, b = torch.randn(2, 3, 7), torch.randn(3, 4), torch.randn(3)
    full = causal_conv1d_fn(x, w, b, activation="silu")
    state = torch.zeros(2, 3, 4)
    outs = [causal_conv1d_update(x[..., t], state, w, b, "silu") for t in range(7)]
    ref.assert_close(torch.stack(outs, -1), full, F32, "update")
    ref.assert_close(state, x[..., -4:], F32, "state = last width inputs")


def test_causal_conv1d_bad_input():
    with pytest.raises(ValueError, match="activation"):
        causal_conv1d_fn(torch.randn(1, 2, 3), torch.randn(2, 4), activation="relu")
    with pytest.raises(ValueError, match="dim 3"):
        causal_conv1d_fn(torch.randn(1, 3, 5), torch.randn(2, 4))


# ----------------------------------------------------------------------------------------------------
# selective_state_update
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("options", [(False, False, False, False), (True, True, True, True)])
def test_selective_state_update_steps_equal_the_scan(options):
    has_D, has_z, has_bias, softplus = options
    inp = ref.make_scan_inputs(2, 4, 3, 9, "variable", has_D, has_z, has_bias, softplus, F32, seed=3)
    exp, exp_last = ref.selective_scan(**inp)
    state = torch.zeros(2, 4, 3)
    outs = []
    for t in range(9):
        outs.append(
            selective_state_update(
                state,
                inp["u"][..., t],
                inp["delta"][..., t],
                inp["A"],
                inp["B"][..., t],
                inp["C"][..., t],
                D=inp["D"],
                z=None if inp["z"] is None else inp["z"][..., t],
                dt_bias=inp["delta_bias"],
                dt_softplus=softplus,
            )
        )
    ref.assert_close(torch.stack(outs, -1), exp, F32, "steps", scale=float(abs(exp).max()))
    ref.assert_close(state, exp_last, F32, "state", scale=float(abs(exp_last).max()))


def test_selective_state_update_heads_and_groups():
    torch.manual_seed(4)
    b, h, p, n, g = 2, 4, 3, 5, 2
    state = torch.randn(b, h, p, n)
    x, dt, z = torch.randn(b, h, p), torch.rand(b, h, p), torch.randn(b, h, p)
    A = -torch.rand(h, p, n)
    B, C = torch.randn(b, g, n), torch.randn(b, g, n)
    D, dt_bias = torch.randn(h, p), torch.randn(h, p)
    old = state.clone()
    out = selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, True)
    dts = F.softplus(dt + dt_bias).double()
    Bh = B.double()[:, torch.arange(h) // (h // g)]
    Ch = C.double()[:, torch.arange(h) // (h // g)]
    new = (
        old.double() * torch.exp(dts[..., None] * A.double()) + (dts * x.double())[..., None] * Bh[:, :, None]
    )
    y = (new * Ch[:, :, None]).sum(-1) + D.double() * x.double()
    y = y * F.silu(z.double())
    ref.assert_close(state, new, F32, "state")
    ref.assert_close(out, y, F32, "out")
    with pytest.raises(ValueError, match="B must have shape"):
        selective_state_update(state, x, dt, A, torch.randn(b, 3, n), C)


# ----------------------------------------------------------------------------------------------------
# Norms against the formula
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_formula_with_residual(dtype):
    torch.manual_seed(5)
    x, res, w = torch.randn(3, 7, 16).to(dtype), torch.randn(3, 7, 16).to(dtype), torch.randn(16)
    y, resid = rms_norm_fn(x, w, None, residual=res, eps=1e-5, prenorm=True, residual_in_fp32=True)
    s = x.double() + res.double()
    assert resid.dtype == torch.float32
    ref.assert_close(resid, s, torch.float32, "residual out")
    assert y.dtype == dtype
    ref.assert_close(y, ref.rms_norm(s, w, 1e-5), dtype, "rms", scale=4.0)
    m = RMSNorm(16, eps=1e-5)
    with torch.no_grad():
        m.weight.copy_(w)
    ref.assert_close(m(x.float()), ref.rms_norm(x.float(), w, 1e-5), F32, "module")


def test_layer_norm_formula_and_parallel_output():
    torch.manual_seed(6)
    x, w, b, w1 = torch.randn(4, 10), torch.randn(10), torch.randn(10), torch.randn(10)
    y, y1 = layer_norm_fn(x, w, b, weight1=w1, eps=1e-6)
    xd = x.double()
    norm = (xd - xd.mean(-1, keepdim=True)) / torch.sqrt(xd.var(-1, unbiased=False, keepdim=True) + 1e-6)
    ref.assert_close(y, norm * w.double() + b.double(), F32, "layer norm")
    ref.assert_close(y1, norm * w1.double(), F32, "parallel output")
    with pytest.raises(ValueError, match=r"weight must have shape \(10,\)"):
        layer_norm_fn(x, torch.randn(9), None)


def test_gated_rmsnorm_formula():
    torch.manual_seed(7)
    x, z, w = torch.randn(2, 3, 8), torch.randn(2, 3, 8), torch.randn(8)
    got = gated_rmsnorm_fn(x, w, None, z=z, eps=1e-6, group_size=4, norm_before_gate=False)
    g = (x.double() * F.silu(z.double())).reshape(2, 3, 2, 4)
    exp = (g / torch.sqrt((g * g).mean(-1, keepdim=True) + 1e-6)).reshape(2, 3, 8) * w.double()
    ref.assert_close(got, exp, F32, "gated")


# ----------------------------------------------------------------------------------------------------
# SSD (Mamba-2)
# ----------------------------------------------------------------------------------------------------


def _ssd_inputs(b=2, l=37, h=4, p=3, g=2, n=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen)
    return dict(
        x=r(b, l, h, p),
        dt=torch.rand(b, l, h, generator=gen) * 0.5 + 0.01,
        A=-torch.rand(h, generator=gen) - 0.2,
        B=r(b, l, g, n),
        C=r(b, l, g, n),
    )


@pytest.mark.parametrize("l,chunk", [(1, 8), (37, 8), (64, 16), (50, 64)])
@pytest.mark.parametrize("full", [False, True])
def test_ssd_chunk_scan_matches_sequential(l, chunk, full):
    inp = _ssd_inputs(l=l)
    extra = {}
    if full:
        extra = dict(
            D=torch.randn(4, 3),
            z=torch.randn(2, l, 4, 3),
            dt_bias=torch.randn(4),
            initial_states=torch.randn(2, 4, 3, 5),
            dt_softplus=True,
            dt_limit=(0.01, 2.0),
        )
    out, final = mamba_chunk_scan_combined(**inp, chunk_size=chunk, return_final_states=True, **extra)
    exp, exp_final, _ = ref.ssd(**inp, **extra)
    ref.assert_close(out, exp, F32, "ssd out", scale=float(abs(exp).max()))
    ref.assert_close(final, exp_final, F32, "ssd final", scale=float(abs(exp_final).max()))


def test_ssd_seq_idx_and_varlen_states():
    inp = _ssd_inputs(b=1, l=30, seed=3)
    cu = torch.tensor([0, 7, 20, 30])
    seq_idx = torch.tensor([[0] * 7 + [1] * 13 + [2] * 10], dtype=torch.int32)
    out, final, varlen = mamba_chunk_scan_combined(
        **inp,
        chunk_size=8,
        D=torch.randn(4),
        seq_idx=seq_idx,
        cu_seqlens=cu,
        dt_softplus=True,
        return_final_states=True,
        return_varlen_states=True,
    )
    exp, exp_final, states = ref.ssd(**inp, D=None, seq_idx=seq_idx, dt_softplus=True)
    # D is added to both sides identically; compare the scan part.
    out_noD = mamba_chunk_scan_combined(**inp, chunk_size=8, seq_idx=seq_idx, dt_softplus=True)
    ref.assert_close(out_noD, exp, F32, "seq_idx out", scale=float(abs(exp).max()))
    ref.assert_close(final, exp_final, F32, "final")
    ref.assert_close(varlen, states[0, [6, 19, 29]], F32, "varlen states")


def test_ssd_gradients_match_sequential_autograd():
    inp = _ssd_inputs(b=1, l=20, h=2, p=2, g=1, n=3, seed=5)
    leaves = {k: v.clone().double().requires_grad_() for k, v in inp.items()}
    out = mamba_chunk_scan_combined(**leaves, chunk_size=8, dt_softplus=True)
    w = torch.randn(out.shape, dtype=torch.float64)
    (out * w).sum().backward()
    # Oracle: the recurrence unrolled in torch float64.
    lv2 = {k: v.clone().double().requires_grad_() for k, v in inp.items()}
    x, dt, A, B, C = lv2["x"], F.softplus(lv2["dt"]), lv2["A"], lv2["B"], lv2["C"]
    s = torch.zeros(1, 2, 2, 3, dtype=torch.float64)
    ys = []
    for t in range(20):
        s = (
            torch.exp(dt[:, t, :, None, None] * A[None, :, None, None]) * s
            + dt[:, t, :, None, None] * x[:, t, :, :, None] * B[:, t, 0][:, None, None, :]
        )
        ys.append((s * C[:, t, 0][:, None, None, :]).sum(-1))
    (torch.stack(ys, 1) * w).sum().backward()
    for k in leaves:
        ref.assert_close(leaves[k].grad, lv2[k].grad, torch.float64, f"d{k}")


def test_split_conv1d_scan_combined_matches_composition():
    torch.manual_seed(8)
    b, l, h, p, g, n, w = 2, 13, 4, 3, 2, 5, 4
    dim = h * p
    conv_dim = dim + 2 * g * n
    zxbcdt = torch.randn(b, l, 2 * dim + 2 * g * n + h)
    cw, cb = torch.randn(conv_dim, 1, w) * 0.5, torch.randn(conv_dim)
    dt_bias, A, D = torch.randn(h), -torch.rand(h) - 0.1, torch.randn(h)
    rw, ow = torch.randn(dim), torch.randn(6, dim)
    out = mamba_split_conv1d_scan_combined(
        zxbcdt,
        cw,
        cb,
        dt_bias,
        A,
        D,
        chunk_size=4,
        headdim=p,
        ngroups=g,
        rmsnorm_weight=rw,
        outproj_weight=ow,
        norm_before_gate=False,
    )
    z, xBC, dt = torch.split(zxbcdt, [dim, conv_dim, h], dim=-1)
    xBC = (
        torch.from_numpy(ref.causal_conv1d(xBC.transpose(1, 2), cw[:, 0], cb, silu=True))
        .float()
        .transpose(1, 2)
    )
    x, Bm, Cm = torch.split(xBC, [dim, g * n, g * n], dim=-1)
    y, _, _ = ref.ssd(
        x.reshape(b, l, h, p),
        dt,
        A,
        Bm.reshape(b, l, g, n),
        Cm.reshape(b, l, g, n),
        D=D,
        dt_bias=dt_bias,
        dt_softplus=True,
    )
    y = torch.from_numpy(y).reshape(b, l, dim) * F.silu(z.double())
    yg = y.reshape(b, l, g, dim // g)
    yn = (yg / torch.sqrt((yg * yg).mean(-1, keepdim=True) + 1e-6)).reshape(b, l, dim) * rw.double()
    exp = yn @ ow.double().t()
    ref.assert_close(out, exp, F32, "split conv1d scan", scale=float(exp.abs().max()))


# ----------------------------------------------------------------------------------------------------
# mamba_inner_fn
# ----------------------------------------------------------------------------------------------------


def test_mamba_inner_fn_matches_reference_composition():
    torch.manual_seed(9)
    b, d, l, n, r, dm = 2, 6, 11, 4, 2, 5
    xz = torch.randn(b, 2 * d, l)
    cw, cb = torch.randn(d, 1, 4) * 0.5, torch.randn(d)
    xp, dp = torch.randn(r + 2 * n, d) * 0.3, torch.randn(d, r)
    ow, ob = torch.randn(dm, d), torch.randn(dm)
    A, D, db = -torch.rand(d, n) - 0.1, torch.randn(d), torch.randn(d)
    got = mamba_inner_fn(xz, cw, cb, xp, dp, ow, ob, A, D=D, delta_bias=db)
    # Composition from the float64 references.
    x, z = xz[:, :d], xz[:, d:]
    xc = torch.from_numpy(ref.causal_conv1d(x, cw[:, 0], cb, silu=True))
    x_dbl = xc.transpose(1, 2) @ xp.double().t()  # (b, l, r + 2n)
    delta = (x_dbl[..., :r] @ dp.double().t()).transpose(1, 2)
    Bm, Cm = x_dbl[..., r : r + n].transpose(1, 2), x_dbl[..., r + n :].transpose(1, 2)
    y, _ = ref.selective_scan(xc, delta, A, Bm, Cm, D, z, db, True)
    exp = torch.from_numpy(y).transpose(1, 2) @ ow.double().t() + ob.double()
    ref.assert_close(got, exp, F32, "mamba_inner_fn", scale=float(exp.abs().max()))
    ref.assert_close(
        mamba_inner_ref(xz, cw, cb, xp, dp, ow, ob, A, D=D, delta_bias=db),
        exp,
        F32,
        "mamba_inner_ref",
        scale=float(exp.abs().max()),
    )
    # Gradients flow to every weight.
    leaves = [t.clone().requires_grad_() for t in (xz, cw, cb, xp, dp, ow, ob, A, D, db)]
    mamba_inner_fn(*leaves[:8], D=leaves[8], delta_bias=leaves[9]).sum().backward()
    assert all(t.grad is not None and torch.isfinite(t.grad).all() and t.grad.abs().sum() > 0 for t in leaves)
    with pytest.raises(ValueError, match="x_proj_weight"):
        mamba_inner_fn(xz, cw, cb, xp[:-1], dp, ow, ob, A)
