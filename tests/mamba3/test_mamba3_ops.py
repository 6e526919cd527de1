"""The Mamba-3 ops (mamba3_siso_combined, mamba3_mimo, mamba3_step / mamba3_siso_step) against the float64
sequential oracle (mamba3_reference.py): outputs, final states and the gradient of every input, SISO
and MIMO, rope_fraction 0.5 and 1.0 (with each variant's pairing), ngroups > 1, a seqlen that is not a
multiple of chunk_size, input states, seq_idx, and cu_seqlens (packed == separate; with padding rows
after its last entry and empty sequences, each sequence == the oracle on it alone; padding in seq_idx;
bad cu_seqlens named with their values). float64 within 1e-10, float32 within 1e-4 (relative to the
reference's largest magnitude)."""

from __future__ import annotations

import re

import mamba3_reference as ref
import pytest
import torch
from mamba3_cases import (
    CASES,
    HEADDIM,
    PADDED_SEQ_IDX,
    check_against_reference,
    check_packed_against_alone,
    check_steps,
    close,
    make_inputs,
    run_op,
    run_ref,
)

from mamba_ssm import _dispatch
from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo import mamba3_mimo
from mamba_ssm.ops.triton.mamba3.mamba3_siso_combined import mamba3_siso_combined
from mamba_ssm.ops.triton.mamba3.mamba3_siso_step import mamba3_siso_step


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
        close(packed[:, lo:hi], alone, torch.float64, f"sequence {i} out")
        for name, s, a in zip(("angle", "ssm", "k", "v"), packed_states, alone_states):
            close(s[i : i + 1], a, torch.float64, f"sequence {i} {name} state")


# cu_seqlens over 13 tokens whose last entry may be below 13: the rows after it are padding
PADDED = {
    "trailing-padding": [0, 5, 11],
    "empty-in-the-middle": [0, 4, 4, 10],
    "only-padding": [0, 0],
}


@pytest.mark.parametrize("with_states", [False, True], ids=["zero-start", "input-states"])
@pytest.mark.parametrize("cu", list(PADDED))
@pytest.mark.parametrize("case", ["siso-rope0.5", "mimo-rope1.0-norm"])
def test_padded_cu_seqlens_equal_each_sequence_alone(case, cu, with_states):
    """Each packed sequence's outputs, final states and gradients == the oracle on it alone; padding
    rows output 0 and get zero gradients; an empty sequence ends in its input state (zero without)."""
    check_packed_against_alone(
        case, torch.float64, torch.tensor(PADDED[cu], dtype=torch.int32), 13, with_states
    )


@pytest.mark.parametrize("case", ["siso-rope1.0-groups", "mimo-rope0.5-groups"])
def test_seq_idx_padding_is_a_boundary_on_both_sides(case):
    """seq_idx -1 (padding) before, between and after sequences: output 0, no state read or written
    (the angle sum and the trapezoid's previous-token term restart after it); a row that ends in
    padding has zero final states."""
    seq_idx = torch.tensor(PADDED_SEQ_IDX, dtype=torch.int32)
    check_against_reference(case, torch.float64, states_rows=2, seq_idx=seq_idx, final_states=True)


@pytest.mark.parametrize("chunk_size", [1, 3, 13, 64])
def test_chunk_size_does_not_change_the_result(chunk_size):
    t = make_inputs("mimo-rope0.5-groups")
    out, _ = run_op("mimo-rope0.5-groups", t, chunk_size=chunk_size)
    rout, _ = run_ref("mimo-rope0.5-groups", t)
    close(out, rout, torch.float64, f"chunk_size {chunk_size}")


@pytest.mark.parametrize("case", list(CASES))
def test_step_matches_the_recurrence(case):
    """mamba3_step token by token from input states == the recurrence (SISO also through
    mamba3_siso_step, upstream's path)."""
    check_steps(case)


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
    close(out, rout[:, 0, 0], torch.float64, "first step")  # (batch, token 0, rank 0)
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
    run = dict(
        zip(("Q", "K", "V", "ADT", "DT", "Trap"), (m[k] for k in ("q", "k", "v", "adt", "dt", "trap")))
    )
    with pytest.raises(ValueError, match="rotary_dim_divisor must be 2"):
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


@pytest.mark.parametrize(
    ("case", "op"), [("siso-rope0.5", "mamba3_siso_combined"), ("mimo-rope0.5-groups", "mamba3_mimo")]
)
def test_bad_cu_seqlens_are_named_with_their_values(case, op):
    t = make_inputs(case, batch=1)  # 13 tokens
    for bad in ([0, 5, 14], [0, 7, 5, 13], [1, 5, 13]):  # past the tokens, decreasing, not from 0
        with pytest.raises(
            ValueError,
            match=rf"{op}: cu_seqlens must be non-decreasing cumulative lengths from 0 to at most the 13 "
            rf"packed tokens \(rows after the last entry are padding\), got {re.escape(str(bad))}",
        ):
            run_op(case, t, cu_seqlens=torch.tensor(bad))
    with pytest.raises(ValueError, match=rf"{op}: cu_seqlens must be a 1-D integer tensor"):
        run_op(case, t, cu_seqlens=torch.tensor([0.0, 13.0]))


def test_the_dispatcher_runs_the_pytorch_path_on_the_cpu():
    """Doctor lists every op of _dispatch.OPS; the Mamba-3 ops have Triton kernels (for CUDA/ROCm
    devices: tests/ops/triton/test_triton_mamba3.py runs them under Triton's interpreter), and on a CPU
    device they run this PyTorch path, with nothing to fix."""
    for op in ("mamba3_siso", "mamba3_mimo", "mamba3_step"):
        assert op in _dispatch.OPS and op in _dispatch.TRITON_OPS and op not in _dispatch.COMPILED_OPS
        plan = _dispatch.plan(op, "cpu")
        assert plan.backend == "torch" and plan.fix is None, plan
        assert _dispatch.backend_for(op, torch.device("cpu")) == "torch"
