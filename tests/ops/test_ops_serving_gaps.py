"""The op gaps that upstream's own test suites found (issue 9, item 6), each against an independent
computation: padded (-1) slots in the decode ops, the circular conv state (cache_seqlens), the conv
states of packed sequences, upstream's Function names, the gated-norm entry points, the minimal SSD,
and ``from mamba_ssm import X`` for names this version lacks."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import reference as ref  # (tests/reference.py)
import torch

from mamba_ssm.modules.ssd_minimal import segsum, ssd_minimal_discrete
from mamba_ssm.ops.causal_conv1d import causal_conv1d_update, causal_conv1d_varlen_states
from mamba_ssm.ops.triton import layernorm_gated
from mamba_ssm.ops.triton.selective_state_update import selective_state_update

F32 = torch.float32
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs")


def _silu(v):
    return v / (1 + np.exp(-v))


def _softplus(v):
    return np.log1p(np.exp(v))


# ----------------------------------------------------------------------------------------------------
# Padded slots (-1) in the continuous-batching indices
# ----------------------------------------------------------------------------------------------------


def test_selective_state_update_padded_slot_outputs_zero_and_touches_no_state():
    torch.manual_seed(0)
    slots, h, p, n, g = 5, 4, 3, 6, 2
    state = torch.randn(slots, h, p, n)
    before = state.clone()
    idx = torch.tensor([3, -1, 0, -1], dtype=torch.int32)
    b = idx.numel()
    x, dt, z = torch.randn(b, h, p), torch.rand(b, h, p), torch.randn(b, h, p)
    A = -torch.rand(h, p, n) - 0.1
    B, C = torch.randn(b, g, n), torch.randn(b, g, n)
    D, dt_bias = torch.randn(h, p), torch.randn(h, p)
    out = selective_state_update(
        state, x, dt, A, B, C, D, z, dt_bias, dt_softplus=True, state_batch_indices=idx
    )
    # Expected, in float64 numpy: one step of h = exp(dt A) h + dt B x, y = C h + D x, * silu(z).
    npf = lambda t: t.double().numpy()
    s, xn, dtn, An, Bn, Cn, Dn, zn, bn = map(npf, (before, x, dt, A, B, C, D, z, dt_bias))
    exp_state = s.copy()
    exp_out = np.zeros((b, h, p))
    for r, slot in enumerate(idx.tolist()):
        if slot < 0:
            continue
        for hh in range(h):
            grp = hh // (h // g)
            d = _softplus(dtn[r, hh] + bn[hh])  # (p,)
            new = np.exp(d[:, None] * An[hh]) * s[slot, hh] + (d * xn[r, hh])[:, None] * Bn[r, grp][None]
            exp_state[slot, hh] = new
            exp_out[r, hh] = (new @ Cn[r, grp] + Dn[hh] * xn[r, hh]) * _silu(zn[r, hh])
    ref.assert_close(out, exp_out, F32, "outputs (0 for padded rows)")
    assert torch.equal(out[1], torch.zeros(h, p)) and torch.equal(out[3], torch.zeros(h, p))
    ref.assert_close(state, exp_state, F32, "state")
    for untouched in (1, 2, 4):  # slots no valid request names keep their bits exactly
        assert torch.equal(state[untouched], before[untouched]), untouched


@pytest.mark.parametrize(
    "indices",
    [[2, -1, 2, 0, 2, -1, 4], [1, 1, 1, 1], [3, 0, 3, -1, 0, 3, 1]],
    ids=["three_on_row2_and_padding", "all_on_one_row", "two_groups"],
)
@pytest.mark.parametrize("heads", [True, False], ids=["mamba2_heads", "mamba1_shapes"])
def test_selective_state_update_repeated_rows_apply_in_batch_order(indices, heads):
    """Entries naming the same state row are applied one after another in batch order (the docstring's
    rule): expected from a float64 numpy loop over the entries that updates the rows as it goes."""
    torch.manual_seed(3)
    slots, h, p, n, g = 6, (4 if heads else 1), 3, 5, (2 if heads else 1)
    idx = torch.tensor(indices)
    b = idx.numel()
    state = torch.randn(slots, h, p, n)
    before = state.clone()
    x, dt, z = torch.randn(b, h, p), torch.rand(b, h, p), torch.randn(b, h, p)
    A = -torch.rand(h, p, n) - 0.1
    B, C = torch.randn(b, g, n), torch.randn(b, g, n)
    D, dt_bias = torch.randn(h, p), torch.randn(h, p)
    if heads:
        args = (state, x, dt, A, B, C, D, z, dt_bias)
    else:  # Mamba-1's shapes: no head axis
        args = (state[:, 0], x[:, 0], dt[:, 0], A[0], B[:, 0], C[:, 0], D[0], z[:, 0], dt_bias[0])
    out = selective_state_update(*args, dt_softplus=True, state_batch_indices=idx)
    out = out if heads else out.unsqueeze(1)
    npf = lambda t: t.double().numpy()
    s, xn, dtn, An, Bn, Cn, Dn, zn, bn = map(npf, (before, x, dt, A, B, C, D, z, dt_bias))
    exp_out = np.zeros((b, h, p))
    for r, slot in enumerate(indices):  # in batch order, each step from the row as it is now
        if slot < 0:
            continue
        for hh in range(h):
            grp = hh // (h // g)
            d = _softplus(dtn[r, hh] + bn[hh])
            s[slot, hh] = (
                np.exp(d[:, None] * An[hh]) * s[slot, hh] + (d * xn[r, hh])[:, None] * Bn[r, grp][None]
            )
            exp_out[r, hh] = (s[slot, hh] @ Cn[r, grp] + Dn[hh] * xn[r, hh]) * _silu(zn[r, hh])
    ref.assert_close(out, exp_out, F32, "outputs in batch order")
    ref.assert_close(state, s, F32, "rows as the last entry on each left them")
    for row in set(range(slots)) - set(indices):
        assert torch.equal(state[row], before[row]), f"row {row} is named by no entry but changed"
    for r, slot in enumerate(indices):
        if slot < 0:
            assert torch.equal(out[r], torch.zeros(h, p)), f"padded entry {r}"


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_selective_state_update_mamba2_expanded_A_and_state_dtypes(state_dtype):
    # Mamba-2's call: one A per head and dt per head expanded with stride 0 over (headdim, dstate).
    torch.manual_seed(7)
    b, h, p, n = 3, 4, 2, 5
    state = torch.randn(b, h, p, n).to(state_dtype)
    before = state.double()
    x, dt_h, A_h = torch.randn(b, h, p), torch.rand(b, h), -torch.rand(h) - 0.1
    B, C, D = torch.randn(b, 1, n), torch.randn(b, 1, n), torch.randn(h)
    out = selective_state_update(
        state,
        x,
        dt_h[..., None].expand(b, h, p),
        A_h[:, None, None].expand(h, p, n),
        B,
        C,
        D=D[:, None].expand(h, p),
    )
    d = dt_h.double()[..., None, None]
    new = (
        torch.exp(d * A_h.double()[:, None, None]) * before
        + d * x.double()[..., None] * B.double()[:, :, None, :]
    )
    y = (new * C.double()[:, :, None, :]).sum(-1) + D.double()[:, None] * x.double()
    dtype = torch.bfloat16 if state_dtype == torch.bfloat16 else F32
    ref.assert_close(state, new, dtype, "state", scale=float(new.abs().max()))
    ref.assert_close(out, y, dtype, "out", scale=float(y.abs().max()))


def test_causal_conv1d_update_padded_slot_outputs_zero_and_touches_no_state(conv_backend):
    torch.manual_seed(1)
    dim, width, slots = 5, 4, 4
    conv_state = torch.randn(slots, dim, width)
    before = conv_state.clone()
    idx = torch.tensor([-1, 2, -1], dtype=torch.int32)
    x, w, bias = torch.randn(3, dim), torch.randn(dim, width), torch.randn(dim)
    out = causal_conv1d_update(x, conv_state, w, bias, activation="silu", conv_state_indices=idx)
    window = np.concatenate([before[2, :, 1:].double().numpy(), x[1].double().numpy()[:, None]], axis=1)
    exp = _silu((window * w.double().numpy()).sum(-1) + bias.double().numpy())
    ref.assert_close(out[1], exp, F32, "valid row")
    assert torch.equal(out[0], torch.zeros(dim)) and torch.equal(out[2], torch.zeros(dim))
    ref.assert_close(conv_state[2], window, F32, "shifted state of slot 2")
    for untouched in (0, 1, 3):
        assert torch.equal(conv_state[untouched], before[untouched]), untouched


# ----------------------------------------------------------------------------------------------------
# Circular conv state (cache_seqlens)
# ----------------------------------------------------------------------------------------------------


def _circular(history, seqlen_so_far, state_len):
    """The circular buffer holding the last state_len entries of ``history`` (dim, T) after
    ``seqlen_so_far`` writes: entry t lives at index t % state_len (zeros where never written)."""
    buf = np.zeros((history.shape[0], state_len))
    for t in range(max(0, seqlen_so_far - state_len), seqlen_so_far):
        buf[:, t % state_len] = history[:, t]
    return buf


@pytest.mark.parametrize("state_len,width", [(4, 4), (6, 3)])
@pytest.mark.parametrize("seqlen", [1, 3])
def test_causal_conv1d_update_cache_seqlens_is_a_circular_buffer(state_len, width, seqlen, conv_backend):
    torch.manual_seed(state_len * 10 + seqlen)
    dim, batch = 3, 3
    so_far = [2, 9, 4]  # tokens already written per row
    hist = [np.random.default_rng(i).standard_normal((dim, so_far[i])) for i in range(batch)]
    conv_state = torch.tensor(
        np.stack([_circular(hist[i], so_far[i], state_len) for i in range(batch)]), dtype=F32
    )
    x = torch.randn(batch, dim, seqlen)
    w = torch.randn(dim, width)
    out = causal_conv1d_update(
        x, conv_state, w, None, None, cache_seqlens=torch.tensor(so_far, dtype=torch.int32)
    )
    for i in range(batch):
        full = np.concatenate([hist[i], x[i].double().numpy()], axis=1)
        conv = ref.causal_conv1d(torch.tensor(full)[None], w)[0]  # the conv over the whole history
        ref.assert_close(out[i], conv[:, -seqlen:], F32, f"row {i} output")
        ref.assert_close(
            conv_state[i], _circular(full, so_far[i] + seqlen, state_len), F32, f"row {i} buffer"
        )


# ----------------------------------------------------------------------------------------------------
# Conv states of packed sequences
# ----------------------------------------------------------------------------------------------------


def test_causal_conv1d_varlen_states_are_each_sequences_last_inputs(conv_backend):
    torch.manual_seed(2)
    lengths = [5, 1, 0, 8]
    x = torch.randn(sum(lengths), 6)
    cu = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.int32)
    states = causal_conv1d_varlen_states(x, cu, state_len=4)
    assert states.shape == (4, 6, 4)
    start = 0
    for i, n in enumerate(lengths):
        seq = x[start : start + n].T.numpy()
        exp = np.zeros((6, 4))
        k = min(n, 4)
        if k:
            exp[:, 4 - k :] = seq[:, n - k :]
        np.testing.assert_array_equal(states[i].numpy(), exp, err_msg=f"sequence {i}")
        start += n
    with pytest.raises(ValueError, match="cumulative lengths"):
        causal_conv1d_varlen_states(x, torch.tensor([0, 3, 2, 14]), state_len=4)


# ----------------------------------------------------------------------------------------------------
# Upstream's names
# ----------------------------------------------------------------------------------------------------


def test_selective_scan_fn_and_mamba_inner_fn_classes_apply():
    from mamba_ssm.ops.selective_scan_interface import MambaInnerFn, SelectiveScanFn

    torch.manual_seed(3)
    b, d, n, L = 2, 4, 3, 9
    u, delta = torch.randn(b, d, L, requires_grad=True), torch.rand(b, d, L)
    A, B, C = -torch.rand(d, n) - 0.1, torch.randn(b, n, L), torch.randn(b, n, L)
    Dv, z, bias = torch.randn(d), torch.randn(b, d, L), torch.randn(d)
    out, last = SelectiveScanFn.apply(u, delta, A, B, C, Dv, z, bias, True, True)
    exp, exp_last = ref.selective_scan(u, delta, A, B, C, Dv, z, bias, True)
    ref.assert_close(out, exp, F32, "SelectiveScanFn out")
    ref.assert_close(last, exp_last, F32, "SelectiveScanFn last state")
    out.sum().backward()
    assert u.grad is not None and torch.isfinite(u.grad).all()
    # MambaInnerFn: conv + silu, x_proj to (dt, B, C), dt_proj, scan gated by silu(z), out_proj, in float64 numpy.
    dm, r = 6, 2
    xz = torch.randn(b, 2 * d, L)
    cw, cb = torch.randn(d, 1, 4), torch.randn(d)
    xw, dw, ow = torch.randn(r + 2 * n, d) * 0.3, torch.randn(d, r) * 0.3, torch.randn(dm, d)
    got = MambaInnerFn.apply(xz, cw, cb, xw, dw, ow, None, A, None, None, Dv, bias, None, None, True)
    xs, zs = xz[:, :d], xz[:, d:]
    conv = torch.tensor(ref.causal_conv1d(xs, cw[:, 0], cb, silu=True))
    dbl = torch.einsum("ed,bdl->bel", xw.double(), conv)
    dt = torch.einsum("dr,brl->bdl", dw.double(), dbl[:, :r])
    y, _ = ref.selective_scan(conv, dt, A, dbl[:, r : r + n], dbl[:, r + n :], Dv, zs, bias, True)
    ref.assert_close(got, np.einsum("md,bdl->blm", ow.double().numpy(), y), F32, "MambaInnerFn")


@pytest.mark.parametrize("norm_before_gate", [True, False])
@pytest.mark.parametrize("is_rms_norm", [True, False])
def test_layernorm_fn_is_rms_norm_and_rms_norm_ref(is_rms_norm, norm_before_gate):
    torch.manual_seed(4)
    x, z = torch.randn(3, 12), torch.randn(3, 12)
    w, bias = torch.randn(12), torch.randn(12)
    got = layernorm_gated.layernorm_fn(
        x, w, bias, z=z, eps=1e-5, group_size=4, norm_before_gate=norm_before_gate, is_rms_norm=is_rms_norm
    )
    xn, zn = x.double().numpy(), z.double().numpy()
    v = xn if norm_before_gate else xn * _silu(zn)
    g = v.reshape(3, 3, 4)
    if not is_rms_norm:
        g = g - g.mean(-1, keepdims=True)
    normed = (g / np.sqrt((g * g).mean(-1, keepdims=True) + 1e-5)).reshape(
        3, 12
    ) * w.double().numpy() + bias.double().numpy()
    exp = normed * _silu(zn) if norm_before_gate else normed
    ref.assert_close(got, exp, F32, "layernorm_fn")
    if is_rms_norm:
        ref.assert_close(
            layernorm_gated.rms_norm_ref(
                x, w, bias, z=z, eps=1e-5, group_size=4, norm_before_gate=norm_before_gate
            ),
            exp,
            F32,
            "rms_norm_ref",
        )
        low = layernorm_gated.rms_norm_ref(
            x.bfloat16(),
            w.bfloat16(),
            bias.bfloat16(),
            z=z.bfloat16(),
            eps=1e-5,
            group_size=4,
            norm_before_gate=norm_before_gate,
            upcast=False,
        )
        ref.assert_close(low, exp, torch.bfloat16, "rms_norm_ref in bf16", scale=float(abs(exp).max()))


def test_gated_norm_reset_parameters():
    for cls in (layernorm_gated.RMSNorm, layernorm_gated.LayerNorm):
        m = cls(8)
        with torch.no_grad():
            m.weight.uniform_(-3, 3)
            if m.bias is not None:
                m.bias.uniform_(-3, 3)
        m.reset_parameters()
        assert torch.equal(m.weight.detach(), torch.ones(8))
        assert (
            m.bias is None if cls is layernorm_gated.RMSNorm else torch.equal(m.bias.detach(), torch.zeros(8))
        )


# ----------------------------------------------------------------------------------------------------
# The minimal SSD
# ----------------------------------------------------------------------------------------------------


def test_segsum_is_the_sum_between_positions():
    x = torch.randn(2, 6, dtype=torch.float64)
    s = segsum(x)
    for i in range(6):
        for j in range(6):
            want = float(x[1, j + 1 : i + 1].sum()) if i >= j else float("-inf")
            assert float(s[1, i, j]) == pytest.approx(want, abs=1e-12)


@pytest.mark.parametrize("block_len,L", [(4, 12), (8, 8), (1, 5), (16, 48)])
@pytest.mark.parametrize("with_init", [False, True])
def test_ssd_minimal_discrete_matches_float64_recurrence(block_len, L, with_init):
    gen = torch.Generator().manual_seed(block_len * 100 + L)
    b, h, p, n = 2, 3, 4, 5
    x = torch.randn(b, L, h, p, generator=gen, dtype=torch.float64)
    dt = torch.rand(b, L, h, generator=gen, dtype=torch.float64) * 0.5 + 0.05
    A = -torch.rand(h, generator=gen, dtype=torch.float64) - 0.1
    B = torch.randn(b, L, h, n, generator=gen, dtype=torch.float64)
    C = torch.randn(b, L, h, n, generator=gen, dtype=torch.float64)
    init = torch.randn(b, h, p, n, generator=gen, dtype=torch.float64) if with_init else None
    Y, final = ssd_minimal_discrete(x * dt[..., None], A * dt, B, C, block_len, initial_states=init)
    # h_t = exp(dt A) h + dt x B^T, y = h C: the float64 sequential reference with ngroups = nheads.
    exp, exp_final, _ = ref.ssd(x, dt, A, B, C, initial_states=init)
    np.testing.assert_allclose(Y.numpy(), exp, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(final.numpy(), exp_final, rtol=1e-10, atol=1e-10)


def test_ssd_minimal_discrete_bad_input():
    x = torch.randn(1, 10, 2, 3)
    with pytest.raises(ValueError, match="multiple of block_len"):
        ssd_minimal_discrete(x, torch.randn(1, 10, 2), torch.randn(1, 10, 2, 4), torch.randn(1, 10, 2, 4), 4)
    with pytest.raises(TypeError, match="one float dtype"):
        ssd_minimal_discrete(
            x, torch.randn(1, 10, 2).double(), torch.randn(1, 10, 2, 4), torch.randn(1, 10, 2, 4), 5
        )


# ----------------------------------------------------------------------------------------------------
# from mamba_ssm import X
# ----------------------------------------------------------------------------------------------------


def _run_prog(name):
    """Run ``tests/ops/progs/<name>.py`` in the repository, in a fresh interpreter; the JSON it printed last."""
    import json

    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, os.path.join(PROGS, name + ".py")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_from_import_of_a_missing_name_explains_and_the_layers_are_exported():
    out = _run_prog("from_import_names")
    assert out["torch_after_import"] is False
    assert "cannot import name 'NoSuchThing'" in out["NoSuchThing"]
    assert "does not define it" in out["NoSuchThing"] and "Mamba3" in out["NoSuchThing"]
    assert out["NoSuchThing_hasattr"] is False
    assert out["Mamba2"] is True and out["Mamba3"] is True


def test_upstream_mamba3_paths_import_without_tilelang():
    out = _run_prog("upstream_mamba3_paths")
    assert out == {"torch_at_package_import": False, "callable": True, "tilelang_imported": False}
