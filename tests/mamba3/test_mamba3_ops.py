"""The Mamba-3 ops (mamba3_siso_combined, mamba3_mimo, mamba3_step / mamba3_siso_step) against the float64
sequential oracle (mamba3_reference.py): outputs, final states and the gradient of every input, SISO
and MIMO, rope_fraction 0.5 and 1.0 (with each variant's pairing), ngroups > 1, a seqlen that is not a
multiple of chunk_size, input states, seq_idx, and cu_seqlens (packed == separate). float64 within
1e-10, float32 within 1e-4 (relative to the reference's largest magnitude)."""

from __future__ import annotations

import math

import mamba3_reference as ref
import pytest
import torch
import torch.nn.functional as F

from mamba_ssm import _dispatch
from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo import mamba3_mimo
from mamba_ssm.ops.triton.mamba3.mamba3_siso_combined import mamba3_siso_combined
from mamba_ssm.ops.triton.mamba3.mamba3_siso_step import mamba3_siso_step
from mamba_ssm.ops.triton.mamba3.mamba3_step import mamba3_step

TOL = {torch.float64: 1e-10, torch.float32: 1e-4}

# name: (mimo rank or None for SISO, ngroups, nheads, d_state, num_angles, fused head-wise norm)
CASES = {
    "siso-rope0.5": (None, 1, 2, 8, 2, False),  # d_state 8, rope_fraction 0.5: 2 angles
    "siso-rope1.0-groups": (None, 2, 4, 8, 4, False),
    "mimo-rope0.5-groups": (2, 2, 4, 8, 2, False),
    "mimo-rope1.0-norm": (3, 1, 2, 8, 4, True),
}
HEADDIM = 4


def _close(got, want, dtype, what):
    got, want = got.detach().double(), want.detach().double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    scale = max(1.0, float(want.abs().max()))
    err = float((got - want).abs().max())
    assert err <= TOL[dtype] * scale, f"{what}: max abs error {err:.3g} > {TOL[dtype] * scale:.3g}"


def make_inputs(case, batch=2, seqlen=13, states=0, seed=0):
    """float64 leaves in the ops' layout (Q, K with a rank dim even for SISO), and states for
    ``states`` rows when > 0."""
    rank, g, h, n, a, fused = CASES[case]
    R = rank or 1
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale

    dt = F.softplus(rnd(batch, h, seqlen) - 1)
    t = {
        "q": rnd(batch, seqlen, R, g, n, scale=0.5),
        "k": rnd(batch, seqlen, R, g, n, scale=0.5),
        "v": rnd(batch, seqlen, h, HEADDIM),
        "adt": -torch.rand(batch, h, seqlen, generator=gen, dtype=torch.float64) * 2 * dt,
        "dt": dt,
        "trap": rnd(batch, h, seqlen),
        "q_bias": 1 + rnd(h, R, n, scale=0.3),
        "k_bias": 1 + rnd(h, R, n, scale=0.3),
        "angles": rnd(batch, seqlen, h, a, scale=2),
        "D": rnd(h),
        "z": rnd(batch, seqlen, h, HEADDIM),
    }
    if rank:
        t.update(mimo_x=rnd(h, R, HEADDIM), mimo_z=rnd(h, R, HEADDIM), mimo_o=rnd(h, R, HEADDIM))
    if fused:
        t["norm_weight"] = 1 + rnd(h * HEADDIM, scale=0.3)
    if states:
        t["init"] = (
            rnd(states, h, a) % (2 * math.pi),
            rnd(states, h, HEADDIM, n, scale=0.3),
            rnd(states, R, h, n),
            rnd(states, h, HEADDIM),
        )
    return t


def leaves(t, dtype):
    """Copies in ``dtype`` that require grad (the integer-free inputs)."""
    out = {}
    for key, value in t.items():
        if isinstance(value, tuple):
            out[key] = tuple(v.detach().to(dtype).requires_grad_(True) for v in value)
        else:
            out[key] = value.detach().to(dtype).requires_grad_(True)
    return out


def run_op(case, t, chunk_size=4, seq_idx=None, cu_seqlens=None, states=False):
    """The public op of ``case``: (out, states as (angle, ssm, k (S, R, h, n), v) or None)."""
    rank = CASES[case][0]
    init = t.get("init")
    if rank is None:
        res = mamba3_siso_combined(
            t["q"][:, :, 0],
            t["k"][:, :, 0],
            t["v"],
            t["adt"],
            t["dt"],
            t["trap"],
            t["q_bias"][:, 0],
            t["k_bias"][:, 0],
            t["angles"],
            D=t["D"],
            Z=t["z"],
            Input_States=None if init is None else (init[0], init[1], init[2][:, 0], init[3]),
            chunk_size=chunk_size,
            return_final_states=states,
            cu_seqlens=cu_seqlens,
            seq_idx=seq_idx,
        )
        if not states:
            return res, None
        out, angle, ssm, k, v = res
        return out, (angle, ssm, k.unsqueeze(1), v)
    fused = "norm_weight" in t
    res = mamba3_mimo(
        t["q"],
        t["k"],
        t["v"],
        t["adt"],
        t["dt"],
        t["trap"],
        t["q_bias"],
        t["k_bias"],
        t["mimo_x"],
        t["mimo_z"],
        t["mimo_o"],
        t["angles"],
        t["D"],
        t["z"],
        chunk_size,
        4 if t["angles"].shape[-1] == t["q"].shape[-1] // 4 else 2,
        t["v"].dtype,
        return_state=states,
        cu_seqlens=cu_seqlens,
        fuse_pregate_headwise_rms_norm=fused,
        outproj_norm_weight=t.get("norm_weight"),
        Input_States=init,
        seq_idx=seq_idx,
    )
    return (res[0], tuple(res[1:])) if states else (res, None)


def run_ref(case, t, seq_idx=None, cu_seqlens=None):
    rank = CASES[case][0]
    nw = t.get("norm_weight")
    out, states = ref.recurrence(
        t["q"],
        t["k"],
        t["v"],
        t["adt"],
        t["dt"],
        t["trap"],
        t["q_bias"],
        t["k_bias"],
        t["angles"],
        "halves" if rank else "adjacent",
        D=t["D"],
        z=t["z"],
        mimo_x=t.get("mimo_x"),
        mimo_z=t.get("mimo_z"),
        mimo_o=t.get("mimo_o"),
        norm_weight=None if nw is None else nw.reshape(t["v"].shape[2], HEADDIM),
        initial_states=t.get("init"),
        seq_idx=seq_idx,
        cu_seqlens=cu_seqlens,
    )
    return (out if rank else out[:, :, 0]), states


def _loss(out, states, weights):
    loss = (out.double() * weights[0]).sum()
    if states is not None:
        for s, w in zip(states, weights[1:]):
            loss = loss + (s.double() * w).sum()
    return loss


def check_against_reference(case, dtype, states_rows=0, seq_idx=None, cu_seqlens=None, batch=2):
    base = make_inputs(case, batch=batch, states=states_rows)
    got_in, ref_in = leaves(base, dtype), leaves({k: v for k, v in base.items()}, torch.float64)
    # the reference reads the same (rounded) values the op reads
    ref_in = {
        k: (
            tuple(x.detach().to(dtype).double().requires_grad_(True) for x in v)
            if isinstance(v, tuple)
            else v.detach().to(dtype).double().requires_grad_(True)
        )
        for k, v in ref_in.items()
    }
    want_states = states_rows > 0 or cu_seqlens is not None
    out, states = run_op(case, got_in, seq_idx=seq_idx, cu_seqlens=cu_seqlens, states=want_states)
    rout, rstates = run_ref(case, ref_in, seq_idx=seq_idx, cu_seqlens=cu_seqlens)
    assert out.dtype == dtype
    _close(out, rout, dtype, f"{case} out")
    if want_states:
        for name, s, r in zip(("angle", "ssm", "k", "v"), states, rstates):
            _close(s, r, dtype, f"{case} final {name} state")
    gen = torch.Generator().manual_seed(1)
    weights = [torch.randn(rout.shape, generator=gen, dtype=torch.float64)]
    if want_states:
        weights += [torch.randn(r.shape, generator=gen, dtype=torch.float64) for r in rstates]
        weights[1] = weights[1] * 0  # d/d(angle mod 2 pi) is 1 except at the wrap: not compared
    _loss(out, states if want_states else None, weights).backward()
    _loss(rout, rstates if want_states else None, weights).backward()
    for key in base:
        for i, (g_leaf, r_leaf) in enumerate(
            zip(*(v if isinstance(v, tuple) else (v,) for v in (got_in[key], ref_in[key])))
        ):
            assert g_leaf.grad is not None, f"{case}: no gradient for {key}"
            _close(
                g_leaf.grad,
                r_leaf.grad,
                dtype,
                f"{case} d{key}{f'[{i}]' if isinstance(base[key], tuple) else ''}",
            )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
@pytest.mark.parametrize("case", list(CASES))
def test_forward_and_every_gradient_match_the_recurrence(case, dtype):
    check_against_reference(case, dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
@pytest.mark.parametrize("case", ["siso-rope0.5", "mimo-rope0.5-groups"])
def test_input_states_and_final_states(case, dtype):
    check_against_reference(case, dtype, states_rows=2)


@pytest.mark.parametrize("case", ["siso-rope1.0-groups", "mimo-rope1.0-norm"])
def test_seq_idx_restarts_every_sequence(case):
    seq_idx = torch.tensor([[0] * 5 + [1] * 6 + [2] * 2, [0] * 3 + [1] * 10])
    check_against_reference(case, torch.float64, states_rows=2, seq_idx=seq_idx)


@pytest.mark.parametrize("case", ["siso-rope0.5", "mimo-rope0.5-groups"])
@pytest.mark.parametrize("with_states", [False, True], ids=["zero-start", "input-states"])
def test_cu_seqlens_packed_equals_separate(case, with_states):
    cu = torch.tensor([0, 4, 4, 11, 13], dtype=torch.int32)  # an empty sequence too
    check_against_reference(case, torch.float64, states_rows=4 if with_states else 0, cu_seqlens=cu, batch=1)
    # packed == each sequence on its own (through the op, not the reference)
    t = make_inputs(case, batch=1, states=4 if with_states else 0)
    packed, packed_states = run_op(case, t, cu_seqlens=cu, states=True)
    bounds = cu.tolist()
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        if hi == lo:
            continue
        one = {k: v for k, v in t.items() if k != "init"}
        for key in ("q", "k", "v", "angles", "z"):
            one[key] = t[key][:, lo:hi]
        for key in ("adt", "dt", "trap"):
            one[key] = t[key][..., lo:hi]
        if with_states:
            one["init"] = tuple(s[i : i + 1] for s in t["init"])
        alone, alone_states = run_op(case, one, states=True)
        _close(packed[:, lo:hi], alone, torch.float64, f"sequence {i} out")
        for name, s, a in zip(("angle", "ssm", "k", "v"), packed_states, alone_states):
            _close(s[i : i + 1], a, torch.float64, f"sequence {i} {name} state")


@pytest.mark.parametrize("chunk_size", [1, 3, 13, 64])
def test_chunk_size_does_not_change_the_result(chunk_size):
    t = make_inputs("mimo-rope0.5-groups")
    out, _ = run_op("mimo-rope0.5-groups", t, chunk_size=chunk_size)
    rout, _ = run_ref("mimo-rope0.5-groups", t)
    _close(out, rout, torch.float64, f"chunk_size {chunk_size}")


@pytest.mark.parametrize("case", list(CASES))
def test_step_matches_the_recurrence(case):
    """mamba3_step token by token from zero states == the recurrence (SISO also through
    mamba3_siso_step, upstream's path)."""
    t = make_inputs(case, seqlen=6, states=2)
    rank = CASES[case][0]
    rout, rstates = run_ref(case, t)
    states = t["init"]
    outs = []
    for i in range(t["q"].shape[1]):
        kwargs = {"D": t["D"], "Z": t["z"][:, i]}
        if rank:
            kwargs.update(
                MIMO_V=t["mimo_x"], MIMO_Z=t["mimo_z"], MIMO_Out=t["mimo_o"], rotary_pairing="halves"
            )
            kwargs["outproj_norm_weight"] = t.get("norm_weight")
        args = (
            t["q"][:, i],
            t["k"][:, i],
            t["v"][:, i],
            t["adt"][..., i],
            t["dt"][..., i],
            t["trap"][..., i],
            t["q_bias"],
            t["k_bias"],
            t["angles"][:, i],
        )
        if rank is None and i % 2:  # upstream's SISO step signature on every other token
            siso = (args[0][:, 0], args[1][:, 0], *args[2:6], args[6][:, 0], args[7][:, 0], args[8])
            out, new = mamba3_siso_step(
                *siso,
                D=t["D"],
                Z=t["z"][:, i],
                Input_States=(states[0], states[1], states[2][:, 0], states[3]),
            )
            states = (new[0], new[1], new[2].unsqueeze(1), new[3])
        else:
            out, new = mamba3_step(*args, states, **kwargs)
            states = tuple(new)
        outs.append(out)
    # the reference started from init for the first sequence of each row: same as the step's start
    _close(torch.stack(outs, dim=1), rout, torch.float64, f"{case} steps")
    for name, s, r in zip(("angle", "ssm", "k", "v"), states, rstates):
        _close(s, r, torch.float64, f"{case} step {name} state")


def test_siso_step_without_states_starts_from_zero():
    t = make_inputs("siso-rope0.5", seqlen=1)
    rout, _ = ref.recurrence(
        *(t[k] for k in ("q", "k", "v", "adt", "dt", "trap", "q_bias", "k_bias", "angles")),
        "adjacent",
        D=t["D"],
    )
    out, states = mamba3_siso_step(
        t["q"][:, 0, 0],
        t["k"][:, 0, 0],
        t["v"][:, 0],
        t["adt"][..., 0],
        t["dt"][..., 0],
        t["trap"][..., 0],
        t["q_bias"][:, 0],
        t["k_bias"][:, 0],
        t["angles"][:, 0],
        D=t["D"],
    )
    _close(out, rout[:, 0, 0], torch.float64, "first step")  # (batch, token 0, rank 0)
    assert [tuple(s.shape) for s in states] == [(2, 2, 2), (2, 2, HEADDIM, 8), (2, 2, 8), (2, 2, HEADDIM)]


def test_bfloat16_inputs_compute_in_float32():
    t = make_inputs("siso-rope0.5")
    bf = {k: (v.to(torch.bfloat16) if k in ("q", "k", "v", "z", "trap") else v.float()) for k, v in t.items()}
    out, states = run_op("siso-rope0.5", bf, states=True)
    assert out.dtype == torch.bfloat16 and states[1].dtype == torch.float32
    rout, _ = run_ref("siso-rope0.5", {k: v.double() for k, v in bf.items()})
    err = float((out.double() - rout).abs().max())
    assert err <= 2e-2 * max(1.0, float(rout.abs().max())), err


def test_bad_arguments_are_named():
    t = make_inputs("siso-rope0.5")
    good = {
        "Q": t["q"][:, :, 0],
        "K": t["k"][:, :, 0],
        "V": t["v"],
        "ADT": t["adt"],
        "DT": t["dt"],
        "Trap": t["trap"],
        "Q_bias": t["q_bias"][:, 0],
        "K_bias": t["k_bias"][:, 0],
        "Angles": t["angles"],
    }
    with pytest.raises(
        ValueError, match=r"mamba3_siso_combined: DT must have shape \(batch=2, nheads=2, seqlen=13\)"
    ):
        mamba3_siso_combined(**{**good, "DT": t["dt"].transpose(1, 2)})
    with pytest.raises(ValueError, match=r"Angles' last dim 5 must be between 1 and d_state // 2 = 4"):
        mamba3_siso_combined(**{**good, "Angles": torch.zeros(2, 13, 2, 5, dtype=torch.float64)})
    with pytest.raises(TypeError, match="mamba3_siso_combined: V has dtype torch.int64"):
        mamba3_siso_combined(**{**good, "V": t["v"].long()})
    with pytest.raises(ValueError, match="cu_seqlens packs sequences into a batch of one, got batch 2"):
        mamba3_siso_combined(**good, cu_seqlens=torch.tensor([0, 13]))
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        mamba3_siso_combined(**good, chunk_size=0)
    with pytest.raises(ValueError, match=r"Input_States\[1\] \(ssm\) must have shape"):
        mamba3_siso_combined(
            **good,
            Input_States=(
                torch.zeros(2, 2, 2),
                torch.zeros(2, 2, 3, 8),
                torch.zeros(2, 2, 8),
                torch.zeros(2, 2, 4),
            ),
        )
    m = make_inputs("mimo-rope0.5-groups")
    with pytest.raises(ValueError, match="rotary_dim_divisor must be 2"):
        run = dict(
            zip(("Q", "K", "V", "ADT", "DT", "Trap"), (m[k] for k in ("q", "k", "v", "adt", "dt", "trap")))
        )
        mamba3_mimo(
            **run,
            Q_bias=m["q_bias"],
            K_bias=m["k_bias"],
            MIMO_V=m["mimo_x"],
            MIMO_Z=m["mimo_z"],
            MIMO_Out=m["mimo_o"],
            Angles=m["angles"],
            D=m["D"],
            Z=m["z"],
            chunk_size=4,
            rotary_dim_divisor=3,
            dtype=torch.float64,
        )


def test_the_dispatcher_knows_the_ops_and_runs_pytorch_everywhere():
    """Doctor lists every op of _dispatch.OPS; the Mamba-3 ops have a PyTorch implementation only until
    Triton kernels plug in (they are not Triton ops yet)."""
    for op in ("mamba3_siso", "mamba3_mimo", "mamba3_step"):
        assert op in _dispatch.OPS and op not in _dispatch.TRITON_OPS and op not in _dispatch.COMPILED_OPS
        plan = _dispatch.plan(op, "cpu")
        assert plan["backend"] == "torch" and "PyTorch implementation" in plan["reason"], plan
        assert _dispatch.backend_for(op, torch.device("cpu")) == "torch"
