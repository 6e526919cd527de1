"""The per-platform wheel's module choice (mamba_ssm._compat.kernel_modules) against public torch builds.

Each case is a torch as PyPI / download.pytorch.org ship it: ``torch.__version__`` with the
``torch.version.cuda`` / ``.hip`` that build reports. The expected folder is written out from the rule
the wheel's layout states (a CUDA X.Y torch takes ``cuX``; a CPU or ROCm torch ``cpu``; a CUDA major
without a module ``cpu``), never computed by the code under test.
"""

from __future__ import annotations

import pytest

from mamba_ssm._compat.buildinfo import BuildInfo, incompatibilities
from mamba_ssm._compat.kernel_modules import ModuleChoice, choose_module
from mamba_ssm._compat.versions import TorchBuild

ALL = {
    "cu13": "/site/mamba_ssm/_kernels/cu13/_C.abi3.so",
    "cpu": "/site/mamba_ssm/_kernels/cpu/_C.abi3.so",
    "cu12": "/site/mamba_ssm/_kernels/cu12/_C.abi3.so",
}
ROCM_HIP = "6.4.43482-0f2d60242"


@pytest.mark.parametrize(
    ("version", "cuda", "hip", "folder", "says"),
    [
        ("2.11.0+cu128", "12.8", None, "cu12", "torch 2.11.0+cu128 is a CUDA 12.8 build"),
        ("2.11.0", "12.8", None, "cu12", "torch 2.11.0 is a CUDA 12.8 build"),  # PyPI's default: no label
        ("2.10.0+cu126", "12.6", None, "cu12", "CUDA 12.6"),
        ("2.15.0+cu132", "13.2", None, "cu13", "torch 2.15.0+cu132 is a CUDA 13.2 build"),
        ("2.14.1+cu130", "13.0", None, "cu13", "CUDA 13.0"),
        ("2.13.0+cpu", None, None, "cpu", "torch 2.13.0+cpu is a CPU-only build"),
        ("2.9.1+rocm6.4", None, ROCM_HIP, "cpu", "torch 2.9.1+rocm6.4 is a ROCm 6.4 build"),
        ("2.11.0+rocm7.1", None, "7.1.25424-4179531dcd", "cpu", "ROCm 7.1"),
        ("2.9.1+cu128", "12.8", None, "cu12", "CUDA 12.8"),  # below the floor: the build info says no
        ("2.11.0+cu128", None, None, "cu12", "CUDA 12.8"),  # torch.version.cuda unknown: the label says
    ],
)
def test_the_torch_build_picks_its_module(version, cuda, hip, folder, says):
    choice = choose_module(TorchBuild(version, cuda, hip), ALL)
    assert (choice.folder, choice.path) == (folder, ALL[folder])
    assert says in choice.reason
    assert choice.available == ("cpu", "cu12", "cu13")
    assert choice.others == tuple(f for f in ("cpu", "cu12", "cu13") if f != folder)
    assert choice.wanted == folder


def test_a_rocm_torch_is_told_why_it_gets_the_cpu_module():
    choice = choose_module(TorchBuild("2.9.1+rocm6.4", None, ROCM_HIP), ALL)
    assert "no ROCm/HIP module" in choice.reason
    assert "CPU kernels run" in choice.reason and "Triton or the PyTorch fallback" in choice.reason


def test_a_cuda_major_without_a_module_gets_the_cpu_module_with_the_reason():
    # A future torch built for CUDA 14 (the wheel has cpu, cu12, cu13).
    choice = choose_module(TorchBuild("2.17.0+cu140", "14.0", None), ALL)
    assert (choice.folder, choice.wanted) == ("cpu", "cu14")
    assert "CUDA 14.0 build" in choice.reason
    assert "no cu14 module (it has cpu, cu12, cu13)" in choice.reason


def test_only_the_cpu_module_serves_a_cuda_torch():
    only_cpu = {"cpu": ALL["cpu"]}
    choice = choose_module(TorchBuild("2.14.1+cu130", "13.0", None), only_cpu)
    assert (choice.folder, choice.wanted, choice.available, choice.others) == ("cpu", "cu13", ("cpu",), ())
    assert "no cu13 module (it has cpu)" in choice.reason


@pytest.mark.parametrize(
    ("version", "cuda", "says"),
    [
        ("2.13.0+cpu", None, "has no cpu module (it has cu12, cu13)"),
        ("2.17.0+cu140", "14.0", "has neither a cu14 nor a cpu module (it has cu12, cu13)"),
    ],
)
def test_no_module_fits(version, cuda, says):
    gpu_only = {"cu13": ALL["cu13"], "cu12": ALL["cu12"]}
    choice = choose_module(TorchBuild(version, cuda, None), gpu_only)
    assert choice == ModuleChoice(None, None, choice.reason, ("cu12", "cu13"), choice.wanted)
    assert says in choice.reason


def test_an_empty_kernels_folder_fits_nothing():
    choice = choose_module(TorchBuild("2.14.1+cu130", "13.0", None), {})
    assert (choice.folder, choice.path, choice.available) == (None, None, ())


def _stable(torch_version, cuda, kernels):
    return BuildInfo(
        package_version="2.4.0",
        torch_version=torch_version,
        torch_cuda=cuda,
        kernels=kernels,
        torch_abi="stable",
        torch_abi_floor="2.10",
    )


# The three modules as the wheel's build infos state them (CPU-only; CUDA 12.9 nvcc; CUDA 13.0 nvcc).
BUILDS = {
    "cpu": _stable("2.10.0+cpu", None, ["cpu"]),
    "cu12": _stable("2.10.0+cu128", "12.8", ["cpu", "cuda"]),
    "cu13": _stable("2.14.1+cu130", "13.0", ["cpu", "cuda"]),
}


@pytest.mark.parametrize(
    ("version", "cuda", "hip", "loads"),
    [
        ("2.11.0+cu128", "12.8", None, True),
        ("2.15.0+cu132", "13.2", None, True),
        ("2.13.0+cpu", None, None, True),
        ("2.11.0+rocm7.1", None, "7.1.25424-4179531dcd", True),  # CPU kernels under a ROCm torch
        ("2.17.0+cu140", "14.0", None, True),  # the CPU module under a CUDA 14 torch
        ("2.9.1+cu128", "12.8", None, False),  # below the stable floor 2.10
        ("2.9.1+rocm6.4", None, ROCM_HIP, False),
    ],
)
def test_the_chosen_module_passes_the_build_info_check_exactly_from_the_floor_on(version, cuda, hip, loads):
    runtime = TorchBuild(version, cuda, hip, True)
    choice = choose_module(runtime, ALL)
    problems = incompatibilities(BUILDS[choice.folder], runtime)
    assert (problems == []) is loads, problems
    if not loads:
        assert len(problems) == 1 and "older than that floor" in problems[0], problems
