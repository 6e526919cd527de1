"""Bad input meets one argument check in front of every backend of an op: the compiled kernels
(``mamba_ssm.set_backend("compiled")``) and the PyTorch fallback raise the same exception type with a
message naming the argument, and at seqlen 0 the fallback returns the empty outputs the compiled kernels
return (same shapes, dtypes and final states). The Triton side: tests/ops/triton/test_triton_bad_input.py."""

from __future__ import annotations

import os
import sys

import pytest
import torch

import mamba_ssm
from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn, causal_conv1d_update
from mamba_ssm.ops.selective_scan_interface import mamba_inner_fn
from mamba_ssm.ops.triton.selective_state_update import selective_state_update

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "mamba3"))

import mamba3_cases as M3  # (tests/mamba3)

BACKENDS = ["compiled", "torch"]
W, B4 = torch.randn(4, 4), torch.randn(4)


@pytest.fixture(autouse=True)
def _restore_backend():
    prev = mamba_ssm.set_backend(None)
    yield
    mamba_ssm.set_backend(prev)


def _use(backend):
    if backend == "compiled":
        from mamba_ssm._families.causal_conv1d import compiled as compiled_conv1d

        if not compiled_conv1d.available():
            pytest.skip("mamba_ssm._C (with its conv1d kernels) is not loaded")
    mamba_ssm.set_backend(backend)


def _inner_args(xz):
    d_inner, d_state, rank = xz.shape[1] // 2, 2, 1
    return (
        xz, torch.randn(d_inner, 1, 4), torch.randn(d_inner), torch.randn(rank + 2 * d_state, d_inner),
        torch.randn(d_inner, rank), torch.randn(6, d_inner), None, -torch.rand(d_inner, d_state),
    )  # fmt: skip


BAD_CALLS = {
    # id: (call, exception, text naming the argument)
    "conv-int32-x": (
        lambda: causal_conv1d_fn(torch.ones(1, 4, 5, dtype=torch.int32), W, B4),
        TypeError,
        "causal_conv1d_fn: x has dtype torch.int32",
    ),
    "conv-int32-weight": (
        lambda: causal_conv1d_fn(torch.ones(1, 4, 5), W.int(), B4),
        TypeError,
        "causal_conv1d_fn: weight has dtype torch.int32",
    ),
    "conv-1d-x": (
        lambda: causal_conv1d_fn(torch.ones(4), W, B4),
        ValueError,
        r"causal_conv1d_fn: x must have shape \(batch, dim, seqlen\), got \(4,\)",
    ),
    "conv-float-seq_idx": (
        lambda: causal_conv1d_fn(torch.ones(1, 4, 5), W, B4, seq_idx=torch.zeros(1, 5)),
        TypeError,
        "causal_conv1d_fn: seq_idx must be an integer tensor",
    ),
    "update-int32-conv_state": (
        lambda: causal_conv1d_update(torch.ones(2, 4), torch.full((2, 4, 4), 2.7).int(), W, B4),
        TypeError,
        "causal_conv1d_update: conv_state has dtype torch.int32",
    ),
    "update-1d-x": (
        lambda: causal_conv1d_update(torch.ones(4), torch.zeros(2, 4, 4), W, B4),
        ValueError,
        r"causal_conv1d_update: x must have shape \(batch, dim\) or \(batch, dim, seqlen\)",
    ),
    "update-conv_state_indices-out-of-range": (
        lambda: causal_conv1d_update(
            torch.ones(2, 4),
            torch.zeros(2, 4, 4),
            W,
            B4,
            conv_state_indices=torch.tensor([0, 5], dtype=torch.int32),
        ),
        ValueError,
        r"causal_conv1d_update: conv_state_indices holds 5, not a row of the cache \(2 rows",
    ),
    "inner-int32-xz": (
        lambda: mamba_inner_fn(*_inner_args(torch.ones(1, 8, 5, dtype=torch.int32))),
        TypeError,
        "mamba_inner_fn: xz has dtype torch.int32",
    ),
    "state_update-state_batch_indices-out-of-range": (
        lambda: selective_state_update(
            torch.zeros(3, 4, 2),
            torch.randn(2, 4),
            torch.randn(2, 4),
            -torch.rand(4, 2),
            torch.randn(2, 2),
            torch.randn(2, 2),
            state_batch_indices=torch.tensor([0, 7]),
        ),
        ValueError,
        r"selective_state_update: state_batch_indices holds 7, not a row of the cache \(3 rows",
    ),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", list(BAD_CALLS))
def test_bad_input_gets_the_same_error_naming_the_argument(backend, case):
    call, exc, text = BAD_CALLS[case]
    _use(backend)
    with pytest.raises(exc, match=text):
        call()


CONV_EMPTY = {
    "plain": {},
    "final": {"return_final_states": True},
    "initial": {"initial_states": torch.randn(2, 4, 3), "return_final_states": True},
    "seq_idx": {"seq_idx": torch.zeros(2, 0, dtype=torch.int32)},
}


def _run_on(backend, fn):
    _use(backend)
    out = fn()
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("case", list(CONV_EMPTY))
def test_conv_at_seqlen_0_returns_the_compiled_kernels_empty_outputs(case):
    def call():
        return causal_conv1d_fn(torch.ones(2, 4, 0), W, B4, activation="silu", **CONV_EMPTY[case])

    want, got = _run_on("compiled", call), _run_on("torch", call)
    assert [(t.shape, t.dtype) for t in got] == [(t.shape, t.dtype) for t in want]
    for g, w in zip(got, want):
        assert torch.equal(g, w)  # the final states: the initial ones (or zeros)


def test_mamba_inner_at_seqlen_0_returns_the_compiled_kernels_empty_output():
    torch.manual_seed(0)
    args = _inner_args(torch.randn(2, 8, 0))
    (want,), (got,) = (
        _run_on("compiled", lambda: mamba_inner_fn(*args)),
        _run_on("torch", lambda: mamba_inner_fn(*args)),
    )
    assert (got.shape, got.dtype) == (want.shape, want.dtype) == ((2, 0, 6), torch.float32)


@pytest.mark.parametrize("states", [0, 2])
@pytest.mark.parametrize("case", ["siso-rope0.5", "mimo-rope0.5-groups"])
def test_mamba3_at_seqlen_0_returns_the_references_empty_outputs(case, states):
    """No output rows, as the float64 recurrence; the final states are the input states (the rule of an
    empty packed sequence), zeros without them (the recurrence's)."""
    t = M3.make_inputs(case, batch=2, seqlen=0, states=states)
    out, final = M3.run_op(case, t, states=True)
    ref_out, ref_final = M3.run_ref(case, t)
    assert out.shape == ref_out.shape and out.dtype == torch.float64
    for got, zero, given in zip(final, ref_final, t.get("init", ref_final)):
        assert got.shape == zero.shape
        assert torch.equal(got, given.to(got.dtype))
