"""What doctor reports per op is what the ops run, for every backend asked for.

* selective_scan / mamba_inner follow the backend asked for (compiled kernels, PyTorch fallback or the
  sequential reference).
* The other ops have one PyTorch implementation and no compiled kernel: doctor says "torch" and, when
  ``ref``/``compiled`` is asked for, that the request does not change them.
* causal_conv1d / causal_conv1d_update use the causal-conv1d package's kernels on CUDA only when the
  package imports and ``auto``/``compiled`` is asked for; ``torch``/``ref`` keep them on PyTorch. The
  ops and doctor answer this through the same function. (A stand-in ``causal_conv1d`` module plays the
  package; no GPU is needed to ask about a CUDA device.)
"""
from __future__ import annotations

import sys
import types

import pytest
import torch

import mamba_ssm
from mamba_ssm import _doctor
from mamba_ssm.ops import causal_conv1d as cc

CONV_OPS = ("causal_conv1d", "causal_conv1d_update")
ONE_IMPL = ("causal_conv1d", "causal_conv1d_update")
# These have a Triton kernel for CUDA/ROCm devices (tests/triton); on a CPU their PyTorch implementation runs.
TRITON_OPS = ("selective_state_update", "ssd_chunk_scan", "rms_norm", "layer_norm")


@pytest.fixture
def fake_package(monkeypatch):
    calls = []
    mod = types.ModuleType("causal_conv1d")
    mod.causal_conv1d_fn = lambda *a, **k: calls.append("fn")
    mod.causal_conv1d_update = lambda *a, **k: calls.append("update")
    monkeypatch.setitem(sys.modules, "causal_conv1d", mod)
    monkeypatch.setattr(cc, "_external", None)   # look the package up again
    return calls


@pytest.fixture(autouse=True)
def _restore_backend():
    prev = mamba_ssm.set_backend(None)
    yield
    mamba_ssm.set_backend(prev)


def _doctor_ops(monkeypatch, device="cuda:0"):
    """doctor's per-op report for ``device`` (a stand-in GPU when it is a CUDA device)."""
    if device.startswith("cuda"):
        gpu = {"device": device, "name": "stand-in", "compute_capability": "9.0", "arch": "sm_90",
               "total_memory_mib": 1}
        monkeypatch.setattr(_doctor, "_gpu_info", lambda torch_ok: {"count": 1, "devices": [gpu], "error": None})
    report = _doctor.collect()
    (entry,) = [e for e in report["devices"] if e["device"] == device]
    return entry["ops"]


@pytest.mark.parametrize("asked,expect", [("auto", "causal-conv1d"), ("compiled", "causal-conv1d"),
                                          ("torch", "torch"), ("ref", "torch")])
def test_conv_ops_on_cuda_follow_the_backend_asked_for(monkeypatch, fake_package, asked, expect):
    mamba_ssm.set_backend(asked)
    assert cc.implementation(torch.device("cuda", 0)) == expect
    assert cc.implementation("cpu") == "torch"
    ops = _doctor_ops(monkeypatch)
    for op in CONV_OPS:
        assert ops[op]["backend"] == expect, (op, ops[op])
    if expect == "torch":
        assert "installed but not used" in ops["causal_conv1d"]["reason"]
        assert f"the {asked} backend was asked for" in ops["causal_conv1d"]["reason"]


def test_conv_ops_without_the_package_are_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "causal_conv1d", None)   # import fails
    monkeypatch.setattr(cc, "_external", None)
    assert cc.implementation("cuda:0") == "torch"
    ops = _doctor_ops(monkeypatch)
    assert [ops[op]["backend"] for op in CONV_OPS] == ["torch", "torch"]


@pytest.mark.parametrize("asked", ["torch", "ref"])
def test_forced_torch_or_ref_never_calls_the_package(fake_package, asked):
    """The conv op on CPU never reaches the package; on CUDA it asks implementation() (checked above).
    Here: with the package present and torch/ref asked for, a CPU call gives the PyTorch result."""
    mamba_ssm.set_backend(asked)
    g = torch.Generator().manual_seed(3)
    x, w, b = torch.randn(2, 3, 9, generator=g), torch.randn(3, 4, generator=g), torch.randn(3, generator=g)
    out = cc.causal_conv1d_fn(x, w, b, activation="silu")
    xp = torch.nn.functional.pad(x.double(), (3, 0))
    ref = torch.stack([(xp[..., t:t + 4] * w.double()).sum(-1) for t in range(9)], -1) + b.double()[:, None]
    torch.testing.assert_close(out.double(), torch.nn.functional.silu(ref), rtol=1e-5, atol=1e-6)
    assert fake_package == []


@pytest.mark.parametrize("asked", ["auto", "torch", "ref", "compiled"])
def test_doctor_says_what_the_single_implementation_ops_run(monkeypatch, asked):
    mamba_ssm.set_backend(asked)
    ops = _doctor_ops(monkeypatch, "cpu")
    for op in ONE_IMPL:
        assert ops[op]["backend"] == "torch", (op, ops[op])
        assert "PyTorch implementation" in ops[op]["reason"]
        if asked in ("ref", "compiled"):
            assert f"mamba_ssm.set_backend={asked} does not change it" in ops[op]["reason"], ops[op]
    for op in TRITON_OPS:
        assert ops[op]["backend"] == "torch" and ops[op]["fix"] is None, (op, ops[op])
        assert "PyTorch implementation" in ops[op]["reason"], (op, ops[op])
    if asked in ("torch", "ref"):
        assert ops["selective_scan"]["backend"] == asked and ops["mamba_inner"]["backend"] == asked
