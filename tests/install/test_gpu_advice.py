"""Issue 11, item 3: GPU-aware fallback advice, and "nearest" ranked by how many rules a wheel fails.

Facts used (NVIDIA's CUDA Toolkit release notes): CUDA 13.0's nvcc targets sm_75 and newer (Maxwell,
Pascal and Volta dropped), CUDA 12.x's sm_50 and newer, CUDA 11.x's sm_35 and newer. A Tesla P100 is
sm_60, a GTX 780 sm_35, a Tesla K10 sm_30.
"""

from __future__ import annotations

import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from helpers import build_info, env_dict

from mamba_ssm._compat.archs import gpu_unservable
from mamba_ssm._install.environment import Environment
from mamba_ssm._install.manifest import Manifest, WheelEntry
from mamba_ssm._install.selection import select

V = "2.4.0.dev0"


def entry(label, info, platform="manylinux_2_28_x86_64"):
    name = f"mamba_ssm-{V}+{label.lower()}-cp39-abi3-{platform}.whl"
    return WheelEntry(
        filename=name,
        sha256="a" * 64,
        size=1000,
        variant=label,
        version=f"{V}+{label.lower()}",
        sass_archs=list(info.get("sass_archs") or []),
        ptx_archs=list(info.get("ptx_archs") or []),
        build_info=info,
    )


def gpu_env(capability, name, torch="2.14.1+cu130", cuda="13.0", driver="580.65.06"):
    return Environment.from_dict(
        env_dict(
            torch=torch,
            cuda=cuda,
            driver=driver,
            gpus=[{"vendor": "nvidia", "name": name, "capability": capability}],
        )
    )


@pytest.mark.parametrize(
    "cap,cuda,fix",
    [
        ("6.0", "13.0", "CUDA 12"),  # P100 under a cu13 torch: cu12 still targets sm_60
        ("3.5", "12.6", "CUDA 11"),  # GTX 780 under a cu12 torch: cu11 still targets sm_35
        ("3.0", "12.6", None),  # K10: no toolkit of torch 2.x targets sm_30
    ],
)
def test_a_gpu_older_than_every_arch_of_the_torchs_cuda(cap, cuda, fix):
    text = gpu_unservable(cap, cuda)
    oldest = {"13.0": "sm_75", "12.6": "sm_50"}[cuda]
    assert (
        f"(sm_{cap.replace('.', '')}) is older than every architecture CUDA {cuda} can build for (oldest {oldest})"
        in text
    )
    assert "PyTorch fallback" in text and "prebuilt or built from source" in text
    if fix:
        assert f"a torch built for {fix}" in text and f"cu{fix.split()[1]} wheel" in text
    else:
        assert "No CUDA toolkit that torch 2.x supports targets it" in text


@pytest.mark.parametrize("cap,cuda", [("7.5", "13.0"), ("5.0", "12.6"), ("9.0", "13.0"), ("6.0", None)])
def test_a_gpu_the_toolkit_can_target_is_servable(cap, cuda):
    assert gpu_unservable(cap, cuda) is None


def test_no_candidate_for_an_old_gpu_says_what_runs_and_the_real_fix():
    """The finding: a P100 with a cu13 torch. The wheel is rejected rightly, but the advice was a source
    build for archs that cannot run on it either."""
    from mamba_ssm._install import resolve as R

    wheel = entry(
        "cu13torch2.14cxx11abiTRUE", build_info(sass=("sm_75", "sm_80", "sm_90"), ptx=("compute_90",))
    )
    d = select(gpu_env("6.0", "Tesla P100-PCIE-16GB"), Manifest(wheels=[wheel]), V)
    assert d.status == "no-candidate" and len(d.gpu_unservable) == 1
    assert d.gpu_unservable[0].startswith("Tesla P100-PCIE-16GB: the GPU (sm_60) is older")
    assert d.summary().gpu_unservable == d.gpu_unservable
    # resolve()'s paragraph for this decision: no source-build command, the backend and the real fix
    res = R.Resolution(R.ResolutionStatus.NO_CANDIDATE, "", V, selection=d)
    assert res.record().gpu_unservable == d.gpu_unservable
    msg = _resolve_message(d)
    assert "MAMBA_FORCE_BUILD" not in msg and "PyTorch fallback" in msg and "torch built for CUDA 12" in msg


def _resolve_message(decision):
    """The message resolve() composes for a no-candidate decision (run through resolve itself)."""
    import json
    import tempfile

    from mamba_ssm._install.resolve import resolve

    with tempfile.TemporaryDirectory() as root:
        manifest = Manifest(
            wheels=[
                entry(
                    "cu13torch2.14cxx11abiTRUE",
                    build_info(sass=("sm_75", "sm_80", "sm_90"), ptx=("compute_90",)),
                )
            ]
        )
        with open(os.path.join(root, "manifest.json"), "w") as fh:
            fh.write(manifest.to_json())
        res = resolve(
            V,
            index=root,
            env=gpu_env("6.0", "Tesla P100-PCIE-16GB"),
            environ={},
            pinned=None,
            cache=os.path.join(root, "cache"),
        )
    assert res.status == "no-candidate", res.message
    assert json.dumps(res.record().to_dict()["gpu_unservable"]) == json.dumps(list(decision.gpu_unservable))
    return res.message


def test_nearest_lists_the_wheel_rejected_only_for_the_gpu_first():
    """Ranked by the rules failed, GPU-only rejections first, not by name."""
    gpu_only = entry("cu13torch2.14cxx11abiTRUE", build_info(sass=("sm_90",)))  # fails: coverage
    one_rule = entry("cu13torch2.13cxx11abiTRUE", build_info(torch="2.13.0+cu130"))  # fails: torch minor
    two_rules = entry("cu12torch2.13cxx11abiTRUE", build_info(torch="2.13.0+cu126", cuda="12.6", nvcc="12.6"))
    d = select(gpu_env("8.0", "NVIDIA A100"), Manifest(wheels=[two_rules, one_rule, gpu_only]), V)
    assert d.status == "no-candidate"
    assert [f for f, _ in d.rejected] == [gpu_only.filename, one_rule.filename, two_rules.filename], (
        d.rejected
    )
    assert "NVIDIA A100" in d.rejected[0][1]
    assert d.explain().index(gpu_only.filename) < d.explain().index(one_rule.filename)


def _outcome(unservable):
    from mamba_ssm._install.record import InstallRecord, ResolutionStatus
    from mamba_ssm._install.setup_hook import Outcome

    rec = InstallRecord(status=ResolutionStatus.NO_CANDIDATE, gpu_unservable=tuple(unservable))
    return Outcome(None, False, "no wheel fits", ResolutionStatus.NO_CANDIDATE, rec)


def test_setup_auto_fallback_plans_no_build_the_gpu_cannot_run():
    from mamba_ssm._build import plan

    text = gpu_unservable("6.0", "13.0")
    p = plan._fallback({"MAMBA_FALLBACK": "auto"}, "no wheel fits", outcome=_outcome([f"Tesla P100: {text}"]))
    assert p.mode == "python" and "no source build" in p.reason and "PyTorch fallback" in p.reason
    # an outcome that names no such GPU, or none at all, plans the usual auto fallback
    for other in (_outcome([]), None):
        q = plan._fallback({"MAMBA_FALLBACK": "auto", "CUDA_HOME": "/nonexistent"}, "", outcome=other)
        assert "no source build" not in q.reason


def test_the_runtime_fix_for_an_old_gpu_is_not_a_build_it_cannot_run(monkeypatch):
    torch = pytest.importorskip("torch")
    if not (torch.version.cuda or "").startswith("13."):
        pytest.skip("needs a CUDA 13 torch (the dev venv's)")
    from mamba_ssm import _devices
    from mamba_ssm._backends import compiled as backends

    gpu = _devices.DeviceKey("cuda", 0)
    monkeypatch.setattr(_devices, "device_arch", lambda device: "6.0")
    fix = backends._coverage_fix(gpu)
    assert "MAMBA_CUDA_ARCHS" not in fix and "PyTorch fallback" in fix and "CUDA 12" in fix
    monkeypatch.setattr(_devices, "device_arch", lambda device: "8.0")
    # docs/build.md's syntax for compute capability 8.0, before the build (pip's, or in place in a checkout)
    assert re.search(
        r"MAMBA_CUDA_ARCHS=80 (MAMBA_FORCE_BUILD=TRUE python -m pip install |python setup.py build_ext)",
        backends._coverage_fix(gpu),
    ), backends._coverage_fix(gpu)
