"""What doctor reports per op is what the ops run, for every backend asked for.

* selective_scan / mamba_inner follow the backend asked for (compiled kernels, PyTorch fallback or the
  sequential reference).
* The other ops have one PyTorch implementation and no compiled kernel: doctor says "torch" and, when
  ``ref``/``compiled`` is asked for, that the request does not change them.
* causal_conv1d / causal_conv1d_update run mamba_ssm._C's kernels where they can (``auto``/``compiled``),
  ahead of the causal-conv1d package; the package's kernels run on CUDA when MAMBA_SSM_CONV1D=causal_conv1d
  asks for them, or (``auto``) when _C cannot run there; ``torch``/``ref`` keep them on PyTorch. The ops
  and doctor answer this through the same function. (A stand-in ``causal_conv1d`` module plays the
  package; a CUDA device's coverage is stubbed, so no GPU is needed to ask about one.)
"""

from __future__ import annotations

import sys
import types

import pytest
import torch

import mamba_ssm
from mamba_ssm import _dispatch, _doctor
from mamba_ssm._doctor.report import GpuEntry, GpuReport
from mamba_ssm._families.causal_conv1d import package as backends
from mamba_ssm.ops import causal_conv1d as cc

CONV_OPS = ("causal_conv1d", "causal_conv1d_update")
# These have a Triton kernel for CUDA/ROCm devices (tests/ops/triton); on a CPU their PyTorch implementation runs.
TRITON_OPS = ("selective_state_update", "ssd_chunk_scan", "rms_norm", "layer_norm")


@pytest.fixture
def fake_package(monkeypatch):
    calls = []
    mod = types.ModuleType("causal_conv1d")
    mod.causal_conv1d_fn = lambda *a, **k: calls.append("fn")
    mod.causal_conv1d_update = lambda *a, **k: calls.append("update")
    monkeypatch.setitem(sys.modules, "causal_conv1d", mod)
    monkeypatch.setattr(backends, "_package", None)  # look the package up again
    return calls


@pytest.fixture(autouse=True)
def _restore_backend():
    prev = mamba_ssm.set_backend(None)
    yield
    mamba_ssm.set_backend(prev)


def _doctor_ops(monkeypatch, device="cuda:0"):
    """doctor's per-op report for ``device`` (a stand-in GPU when it is a CUDA device)."""
    gpus = GpuReport()
    if device.startswith("cuda"):
        gpu = GpuEntry(
            index=0,
            device=device,
            name="stand-in",
            compute_capability="9.0",
            arch="sm_90",
            total_memory_mib=1,
        )
        gpus = GpuReport(available=True, count=1, devices=(gpu,))
    report = _doctor.collect(gpus=gpus).to_dict()
    (entry,) = [e for e in report["devices"] if e["device"] == device]
    return entry["ops"]


def _compiled_loaded():
    from mamba_ssm import _loader

    result = _loader.load()
    if not result.loaded:
        pytest.skip(f"mamba_ssm._C is not loaded: {result.reason}")
    from mamba_ssm._families.causal_conv1d import compiled as compiled_conv1d

    if not compiled_conv1d.available():
        pytest.skip("this mamba_ssm._C has no causal conv1d kernels")


@pytest.fixture
def covered_gpu(monkeypatch):
    """cuda:0 counts as covered by the loaded _C (a stand-in for a GPU the build has kernels for)."""
    from mamba_ssm import _devices

    _compiled_loaded()
    real = _devices.device_coverage
    monkeypatch.setattr(
        _devices, "device_coverage", lambda device: None if str(device).startswith("cuda") else real(device)
    )
    monkeypatch.setattr("mamba_ssm._families.causal_conv1d.compiled._has_cuda_kernel", lambda: True)


@pytest.mark.parametrize(
    "asked,expect", [("auto", "compiled"), ("compiled", "compiled"), ("torch", "torch"), ("ref", "torch")]
)
def test_compiled_conv_preferred_over_the_package(monkeypatch, fake_package, covered_gpu, asked, expect):
    mamba_ssm.set_backend(asked)
    assert cc.implementation(torch.device("cuda", 0)) == expect
    assert cc.implementation("cpu") == expect
    ops = _doctor_ops(monkeypatch)
    for op in CONV_OPS:
        assert ops[op]["backend"] == expect, (op, ops[op])
    if expect == "compiled":
        assert "preferred over the installed causal-conv1d package" in ops["causal_conv1d"]["reason"]
        assert "MAMBA_SSM_CONV1D=causal_conv1d selects it" in ops["causal_conv1d"]["reason"]
    else:
        assert "installed but not used" in ops["causal_conv1d"]["reason"]
        assert f"the {asked} backend was asked for" in ops["causal_conv1d"]["reason"]


def test_env_asks_for_the_package_on_cuda(monkeypatch, fake_package, covered_gpu):
    monkeypatch.setenv("MAMBA_SSM_CONV1D", "causal_conv1d")
    assert cc.implementation("cuda:0") == "causal-conv1d"
    assert cc.implementation("cpu") == "compiled"  # the package has no CPU kernels
    ops = _doctor_ops(monkeypatch)
    assert [ops[op]["backend"] for op in CONV_OPS] == ["causal-conv1d", "causal-conv1d"]
    assert "MAMBA_SSM_CONV1D=causal_conv1d" in ops["causal_conv1d"]["reason"]
    assert _dispatch.backend_for("causal_conv1d", "cuda:0") == "causal-conv1d"  # the ops' (cached) answer


def test_bad_conv1d_choice_is_an_error_naming_it(monkeypatch):
    monkeypatch.setenv("MAMBA_SSM_CONV1D", "fastest")
    with pytest.raises(
        ValueError, match=r"MAMBA_SSM_CONV1D='fastest' is not a choice; use auto .* or causal_conv1d"
    ):
        cc.implementation("cpu")


def test_package_runs_when_the_compiled_kernels_cannot(monkeypatch, fake_package):
    """auto on a GPU the loaded _C does not cover (here: none present): the package's kernels, with why."""
    from mamba_ssm import _devices

    monkeypatch.setattr(
        _devices, "device_coverage", lambda device: "no such GPU" if str(device).startswith("cuda") else None
    )
    impl, why = cc.explain("cuda:0")
    assert impl == "causal-conv1d" and "cannot run here" in why
    mamba_ssm.set_backend("compiled")  # forced: our kernels or an error, never the package
    assert cc.implementation("cuda:0") == "torch"


def test_conv_ops_without_the_package_are_compiled_or_torch(monkeypatch):
    monkeypatch.setitem(sys.modules, "causal_conv1d", None)  # import fails
    monkeypatch.setattr(backends, "_package", None)
    _compiled_loaded()
    from mamba_ssm import _devices

    monkeypatch.setattr(
        _devices, "device_coverage", lambda device: "no such GPU" if str(device).startswith("cuda") else None
    )
    assert cc.implementation("cuda:0") == "torch" and cc.implementation("cpu") == "compiled"
    ops = _doctor_ops(monkeypatch)
    assert [ops[op]["backend"] for op in CONV_OPS] == ["torch", "torch"]
    assert "no such GPU" in ops["causal_conv1d"]["reason"]


def test_conv_op_calls_run_what_implementation_says(monkeypatch):
    """On CPU the public ops run the compiled kernels under auto and the PyTorch code under torch: the
    values agree with a float64 direct sum either way (and float64 inputs take the PyTorch path)."""
    _compiled_loaded()
    from mamba_ssm._families.causal_conv1d import compiled as compiled_conv1d

    calls = []
    real = compiled_conv1d.conv1d
    monkeypatch.setattr(compiled_conv1d, "conv1d", lambda *a: calls.append("kernel") or real(*a))
    g = torch.Generator().manual_seed(4)
    x, w, b = torch.randn(2, 3, 9, generator=g), torch.randn(3, 4, generator=g), torch.randn(3, generator=g)
    xp = torch.nn.functional.pad(x.double(), (3, 0))
    ref = torch.nn.functional.silu(
        torch.stack([(xp[..., t : t + 4] * w.double()).sum(-1) for t in range(9)], -1) + b.double()[:, None]
    )
    for asked, expect_calls in (("auto", ["kernel"]), ("torch", []), ("ref", [])):
        mamba_ssm.set_backend(asked)
        calls.clear()
        out = cc.causal_conv1d_fn(x, w, b, activation="silu")
        torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
        assert calls == expect_calls, asked
    from mamba_ssm import _dispatch

    _dispatch._reset_for_tests()  # the per-call fallback warning is given once per process
    calls.clear()
    with pytest.warns(_dispatch.MambaFallbackWarning, match="float64"):
        out64 = cc.causal_conv1d_fn(x.double(), w.double(), b.double(), activation="silu")
    assert calls == [] and out64.dtype == torch.float64
    torch.testing.assert_close(out64, ref)


@pytest.mark.parametrize("asked", ["torch", "ref"])
def test_forced_torch_or_ref_never_calls_the_package(fake_package, asked):
    """The conv op on CPU never reaches the package; on CUDA it asks implementation() (checked above).
    Here: with the package present and torch/ref asked for, a CPU call gives the PyTorch result."""
    mamba_ssm.set_backend(asked)
    g = torch.Generator().manual_seed(3)
    x, w, b = torch.randn(2, 3, 9, generator=g), torch.randn(3, 4, generator=g), torch.randn(3, generator=g)
    out = cc.causal_conv1d_fn(x, w, b, activation="silu")
    xp = torch.nn.functional.pad(x.double(), (3, 0))
    ref = torch.stack([(xp[..., t : t + 4] * w.double()).sum(-1) for t in range(9)], -1) + b.double()[:, None]
    torch.testing.assert_close(out.double(), torch.nn.functional.silu(ref), rtol=1e-5, atol=1e-6)
    assert fake_package == []


@pytest.mark.parametrize("asked", ["auto", "torch", "ref", "compiled"])
def test_doctor_says_what_the_single_implementation_ops_run(monkeypatch, asked):
    mamba_ssm.set_backend(asked)
    ops = _doctor_ops(monkeypatch, "cpu")
    for op in TRITON_OPS:
        assert ops[op]["backend"] == "torch" and ops[op]["fix"] is None, (op, ops[op])
        assert "PyTorch implementation" in ops[op]["reason"], (op, ops[op])
    if asked in ("torch", "ref"):
        assert ops["selective_scan"]["backend"] == asked and ops["mamba_inner"]["backend"] == asked
        assert ops["causal_conv1d"]["backend"] == "torch"  # its PyTorch code is its reference
