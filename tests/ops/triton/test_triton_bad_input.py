"""The argument checks in front of the Triton kernels (run on Triton's interpreter, the dispatcher told
that Triton runs on the CPU): the same errors naming the argument, and the same empty outputs at seqlen 0,
as the PyTorch path (tests/ops/test_bad_input_backends.py)."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "mamba3"))

import mamba3_cases as M3  # (tests/mamba3)

from mamba_ssm import _dispatch
from mamba_ssm._backends import triton as _triton_backend
from mamba_ssm.ops.triton.selective_state_update import selective_state_update


@pytest.fixture
def triton_on_cpu(interpreted, monkeypatch):
    monkeypatch.delenv("MAMBA_SSM_BACKEND", raising=False)
    _dispatch._reset_for_tests()
    monkeypatch.setattr(_triton_backend, "triton_unavailable", lambda device: None)
    yield interpreted
    _dispatch._reset_for_tests()


def test_state_update_out_of_range_index_is_named(triton_on_cpu, monkeypatch):
    ran = []
    real = triton_on_cpu.state_update.selective_state_update
    monkeypatch.setattr(
        triton_on_cpu.state_update, "selective_state_update", lambda *a: ran.append(1) or real(*a)
    )
    state = torch.zeros(3, 4, 2)
    args = (torch.randn(2, 4), torch.randn(2, 4), -torch.rand(4, 2), torch.randn(2, 2), torch.randn(2, 2))
    selective_state_update(state, *args, state_batch_indices=torch.tensor([0, 2]))
    assert ran == [1]  # the Triton kernel takes these calls
    with pytest.raises(ValueError, match=r"state_batch_indices holds 7, not a row of the cache \(3 rows"):
        selective_state_update(state, *args, state_batch_indices=torch.tensor([0, 7]))


@pytest.mark.parametrize("case", ["siso-rope0.5", "mimo-rope0.5-groups"])
def test_mamba3_at_seqlen_0_returns_the_empty_outputs(triton_on_cpu, case):
    t = {
        k: v.float() if torch.is_tensor(v) else tuple(s.float() for s in v)
        for k, v in M3.make_inputs(case, batch=2, seqlen=0, states=2).items()
    }
    out, final = M3.run_op(case, t, states=True)
    ref_out, _ = M3.run_ref(case, t)
    assert out.shape == ref_out.shape and out.dtype == torch.float32
    for got, given in zip(final, t["init"]):
        assert torch.equal(got, given)
