"""mamba_ssm._compat.versions against public version strings (pytorch.org wheels, NGC, ROCm, nvcc)."""

import pytest

from mamba_ssm._compat.versions import (
    TorchBuild,
    cuda_from_local_label,
    parse_hipcc_version,
    parse_nvcc_version,
    parse_rocm_version,
)

# `nvcc --version` as printed by the public CUDA 11.8, 12.4 and 13.0 toolkits.
NVCC_11_8 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2022 NVIDIA Corporation
Built on Wed_Sep_21_10:33:58_PDT_2022
Cuda compilation tools, release 11.8, V11.8.89
Build cuda_11.8.r11.8/compiler.31833905_0
"""
NVCC_12_4 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2024 NVIDIA Corporation
Built on Tue_Feb_27_16:19:38_PST_2024
Cuda compilation tools, release 12.4, V12.4.99
Build cuda_12.4.r12.4/compiler.33961263_0
"""
NVCC_13_0 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""


@pytest.mark.parametrize("text,expected", [(NVCC_11_8, (11, 8)), (NVCC_12_4, (12, 4)), (NVCC_13_0, (13, 0))])
def test_parse_nvcc_version(text, expected):
    assert parse_nvcc_version(text) == expected


def test_parse_nvcc_version_garbage_names_text():
    with pytest.raises(ValueError, match="hello from a wrapper"):
        parse_nvcc_version("hello from a wrapper")


@pytest.mark.parametrize(
    "text,expected",
    [
        ("6.2.41133-dd7f95766", (6, 2)),
        ("6.0.32830-d62f6a171", (6, 0)),
        ("5.7.31921-d1770ee1b", (5, 7)),
        ("6.1", (6, 1)),
        ("rocm6.1", (6, 1)),
        ("HIP version: 5.2.21153-0", (5, 2)),
        ("6.2.4-120", (6, 2)),
    ],
)
def test_parse_rocm_version(text, expected):
    assert parse_rocm_version(text) == expected


@pytest.mark.parametrize("bad", ["", "six", "6", None])
def test_parse_rocm_version_rejects(bad):
    with pytest.raises(ValueError, match="ROCm"):
        parse_rocm_version(bad)


def test_parse_hipcc_version():
    text = "HIP version: 5.2.21153-0\nclang version 15.0.0\nTarget: x86_64-pc-linux-gnu\n"
    assert parse_hipcc_version(text) == (5, 2)
    with pytest.raises(ValueError, match="HIP version"):
        parse_hipcc_version("clang version 15.0.0")


@pytest.mark.parametrize(
    "label,cuda", [("cu124", "12.4"), ("cu118", "11.8"), ("cu130", "13.0"), ("cpu", None), (None, None)]
)
def test_cuda_from_local_label(label, cuda):
    assert cuda_from_local_label(label) == cuda


def test_release_torch():
    t = TorchBuild("2.5.1+cu124", cuda="12.4", cxx11_abi=False)
    assert t.release == (2, 5, 1)
    assert t.major_minor == "2.5"
    assert t.local == "cu124"
    assert not t.is_nightly and not t.is_ngc and not t.is_prerelease and not t.is_source_build
    assert not t.needs_exact_match
    assert t.accelerator == "cu12"


def test_accelerator_from_label_when_fields_absent():
    assert TorchBuild("2.6.0+cu126").accelerator == "cu12"
    assert TorchBuild("2.4.0+rocm6.1").accelerator == "rocm6.1"
    assert TorchBuild("2.13.0+cpu").accelerator == "cpu"
    assert TorchBuild("2.6.0").accelerator == "cpu"
    assert TorchBuild("2.9.0+cu130").cuda_major == 13


def test_nightly():
    t = TorchBuild("2.3.0.dev20240304+cu118", cuda="11.8")
    assert t.is_nightly and t.is_prerelease and t.needs_exact_match
    assert t.major_minor == "2.3"
    assert t.accelerator == "cu11"


@pytest.mark.parametrize(
    "version,cuda,mm",
    [("2.6.0a0+ecf3bae40a.nv25.01", "12.8", "2.6"), ("2.3.0a0+6ddf5cf85e.nv24.04", "12.4", "2.3")],
)
def test_ngc(version, cuda, mm):
    t = TorchBuild(version, cuda=cuda)
    assert t.is_ngc and t.needs_exact_match
    assert t.major_minor == mm
    assert t.accelerator == "cu12"


def test_rocm_torch():
    t = TorchBuild("2.4.0+rocm6.1", hip="6.1.40091-a8dbc0c19")
    assert t.accelerator == "rocm6.1"
    assert t.cuda_major is None
    assert TorchBuild("2.5.0+rocm6.2", hip="6.2.41133-dd7f95766").rocm_version == "6.2"


def test_source_build():
    t = TorchBuild("2.5.0a0+git32f585d")
    assert t.is_source_build and t.needs_exact_match


def test_release_candidate_needs_exact():
    assert TorchBuild("2.7.0rc1").needs_exact_match
    assert not TorchBuild("2.7.0").needs_exact_match


def test_invalid_version_named():
    with pytest.raises(ValueError, match="not-a-version"):
        TorchBuild("not-a-version")


def test_from_torch_of_this_environment():
    torch = pytest.importorskip("torch")
    t = TorchBuild.from_torch()
    assert t.version == torch.__version__
    assert t.cuda == torch.version.cuda
    assert t.cxx11_abi == bool(torch._C._GLIBCXX_USE_CXX11_ABI)
