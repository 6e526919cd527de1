"""mamba_ssm._compat.buildinfo: the JSON record, reading it from a compiled object, the rule."""

import json
import re
import shutil
import subprocess

import pytest

from mamba_ssm._compat.buildinfo import (
    BuildInfo,
    BuildInfoError,
    describe_torch_abi,
    incompatibilities,
    read_build_info,
    render_header,
)
from mamba_ssm._compat.versions import TorchBuild


def _info(**kw):
    base = dict(
        package_version="2.4.0.dev0",
        torch_version="2.14.1+cu130",
        torch_cuda="13.0",
        nvcc_version="13.0",
        cxx11_abi=True,
        sass_archs=["sm_90"],
        ptx_archs=["compute_90"],
        kernels=["cpu", "cuda"],
        git_commit="0123abcd",
    )
    base.update(kw)
    return BuildInfo(**base)


def test_json_roundtrip_and_keys():
    info = _info()
    data = json.loads(info.to_json())
    assert set(data) == {
        "package_version",
        "torch_version",
        "torch_cuda",
        "torch_hip",
        "nvcc_version",
        "hipcc_version",
        "cxx11_abi",
        "sass_archs",
        "ptx_archs",
        "gfx_archs",
        "python_tag",
        "platform",
        "git_commit",
        "kernels",
        "schema",
        "torch_abi",
        "torch_abi_floor",
    }
    assert data["schema"] == 1 and data["python_tag"] == "cp39-abi3"
    assert BuildInfo.from_json(info.to_json()) == info


def test_from_json_ignores_unknown_keys():
    data = json.loads(_info().to_json())
    data["added_in_schema_2"] = 5
    assert BuildInfo.from_json(json.dumps(data)) == _info()


@pytest.mark.parametrize(
    "text,match",
    [
        ("{", "not valid JSON"),
        ("[1]", "JSON object"),
        ('{"torch_version": "2.6.0"}', "package_version"),
        ('{"package_version": "1", "torch_version": "x y"}', "PEP 440"),
        ('{"package_version": "1", "torch_version": "2.6.0", "sass_archs": "sm_90"}', "sass_archs"),
        ('{"package_version": "1", "torch_version": "2.6.0", "cxx11_abi": 1}', "cxx11_abi"),
    ],
)
def test_from_json_rejects(text, match):
    with pytest.raises(BuildInfoError, match=match):
        BuildInfo.from_json(text)


def test_read_from_raw_bytes(tmp_path):
    info = _info()
    blob = (
        b"\x7fELF junk MAMBA_SSM_BUILD_INFO_BEGIN not-json "
        + b"MAMBA_SSM_BUILD_INFO_BEGIN"
        + info.to_json().encode()
        + b"MAMBA_SSM_BUILD_INFO_END\x00 tail"
    )
    p = tmp_path / "_C.abi3.so"
    p.write_bytes(blob)
    assert read_build_info(p) == info


def test_read_absent_names_path(tmp_path):
    p = tmp_path / "other.so"
    p.write_bytes(b"\x7fELF nothing here")
    with pytest.raises(BuildInfoError, match="other.so"):
        read_build_info(p)
    e = tmp_path / "empty.so"
    e.write_bytes(b"")
    with pytest.raises(BuildInfoError, match="empty.so"):
        read_build_info(e)
    with pytest.raises(BuildInfoError, match="missing.so"):
        read_build_info(tmp_path / "missing.so")


def test_read_corrupt_names_path(tmp_path):
    p = tmp_path / "bad.so"
    p.write_bytes(b'MAMBA_SSM_BUILD_INFO_BEGIN{"package_version": MAMBA_SSM_BUILD_INFO_END')
    with pytest.raises(BuildInfoError, match="bad.so.*corrupt"):
        read_build_info(p)


def test_header_compiles_into_object_and_reads_back(tmp_path):
    """render_header's literal, compiled by a real C compiler, yields the same JSON from the object."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        pytest.skip("no C compiler")
    info = _info(git_commit=None, platform='weird "quoted" \\ platform?? é')
    (tmp_path / "mamba_ssm_build_info.h").write_text(render_header(info))
    (tmp_path / "b.c").write_text(
        '#include "mamba_ssm_build_info.h"\n'
        'const char mamba_ssm_build_info[] = "MAMBA_SSM_BUILD_INFO_BEGIN" MAMBA_SSM_BUILD_INFO_JSON '
        '"MAMBA_SSM_BUILD_INFO_END";\n'
    )
    so = tmp_path / "b.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(so), str(tmp_path / "b.c")], check=True, cwd=tmp_path)
    assert read_build_info(so) == info


# ---------------------------------------------------------------------------- the compatibility rule
RT_214 = TorchBuild("2.14.1+cu130", cuda="13.0", cxx11_abi=True)


def test_same_build_compatible():
    assert incompatibilities(_info(), RT_214) == []


def test_patch_release_compatible():
    assert incompatibilities(_info(), TorchBuild("2.14.0+cu130", cuda="13.0", cxx11_abi=True)) == []


def test_cuda_minor_compatible():
    info = _info(torch_version="2.6.0+cu124", torch_cuda="12.4")
    assert incompatibilities(info, TorchBuild("2.6.0+cu126", cuda="12.6", cxx11_abi=True)) == []


def test_minor_version_mismatch():
    (msg,) = incompatibilities(_info(), TorchBuild("2.13.0+cu130", cuda="13.0", cxx11_abi=True))
    assert "2.14" in msg and "2.13" in msg


def test_abi_mismatch():
    (msg,) = incompatibilities(_info(cxx11_abi=False), RT_214)
    assert "_GLIBCXX_USE_CXX11_ABI=0" in msg and "_GLIBCXX_USE_CXX11_ABI=1" in msg


def test_abi_unknown_runtime_skipped():
    assert incompatibilities(_info(cxx11_abi=False), TorchBuild("2.14.1+cu130", cuda="13.0")) == []


def test_cuda_major_mismatch():
    info = _info(torch_version="2.6.0+cu124", torch_cuda="12.4")
    (msg,) = incompatibilities(info, TorchBuild("2.6.0+cu118", cuda="11.8", cxx11_abi=True))
    assert "12.4" in msg and "11.8" in msg


def test_cpu_vs_cuda():
    cpu = _info(torch_version="2.13.0+cpu", torch_cuda=None, sass_archs=[], ptx_archs=[], kernels=["cpu"])
    assert incompatibilities(cpu, TorchBuild("2.13.0+cpu", cxx11_abi=True)) == []
    (msg,) = incompatibilities(cpu, TorchBuild("2.13.0+cu126", cuda="12.6", cxx11_abi=True))
    assert "without CUDA" in msg and "12.6" in msg


def test_rocm_minor_mismatch():
    info = _info(torch_version="2.4.0+rocm6.1", torch_cuda=None, torch_hip="6.1.40091-a8dbc0c19")
    assert (
        incompatibilities(info, TorchBuild("2.4.1+rocm6.1", hip="6.1.40093-bd86f1708", cxx11_abi=True)) == []
    )
    (msg,) = incompatibilities(info, TorchBuild("2.4.0+rocm6.2", hip="6.2.41133-dd7f95766", cxx11_abi=True))
    assert "6.1" in msg and "6.2" in msg


def test_nightly_needs_exact_version():
    info = _info(torch_version="2.3.0.dev20240304+cu118", torch_cuda="11.8")
    same = TorchBuild("2.3.0.dev20240304+cu118", cuda="11.8", cxx11_abi=True)
    assert incompatibilities(info, same) == []
    (msg,) = incompatibilities(info, TorchBuild("2.3.0.dev20240305+cu118", cuda="11.8", cxx11_abi=True))
    assert "2.3.0.dev20240304+cu118" in msg and "2.3.0.dev20240305+cu118" in msg


def test_ngc_needs_exact_version_both_ways():
    ngc = TorchBuild("2.6.0a0+ecf3bae40a.nv25.01", cuda="12.8", cxx11_abi=True)
    release_build = _info(torch_version="2.6.0+cu126", torch_cuda="12.6")
    assert incompatibilities(release_build, ngc)  # a release build into an NGC torch
    ngc_build = _info(torch_version="2.6.0a0+ecf3bae40a.nv25.01", torch_cuda="12.8")
    assert incompatibilities(ngc_build, TorchBuild("2.6.0+cu126", cuda="12.6", cxx11_abi=True))
    assert incompatibilities(ngc_build, ngc) == []
    other_ngc = TorchBuild("2.3.0a0+6ddf5cf85e.nv24.04", cuda="12.4", cxx11_abi=True)
    assert incompatibilities(ngc_build, other_ngc)


def test_several_reasons_listed():
    probs = incompatibilities(_info(cxx11_abi=False), TorchBuild("2.6.0+cu124", cuda="12.4", cxx11_abi=True))
    assert len(probs) == 3


# ------------------------------------------------------------------------------------ stable ABI
def _stable(**kw):
    return _info(torch_abi="stable", torch_abi_floor="2.10", **kw)


def test_older_build_info_is_classic():
    data = json.loads(_info().to_json())
    del data["torch_abi"], data["torch_abi_floor"]
    info = BuildInfo.from_json(json.dumps(data))
    assert (info.torch_abi, info.torch_abi_floor, info.is_stable_abi) == ("classic", None, False)


@pytest.mark.parametrize(
    "patch,match",
    [
        ({"torch_abi": "stabel"}, "'torch_abi' must be one of classic, stable, got 'stabel'"),
        (
            {"torch_abi": "stable", "torch_abi_floor": None},
            "stable-ABI build: 'torch_abi_floor' stable-ABI floor None",
        ),
        ({"torch_abi": "stable", "torch_abi_floor": "2.10.0"}, "'2.10.0' is not MAJOR.MINOR"),
        (
            {"torch_abi": "classic", "torch_abi_floor": "2.10"},
            "'torch_abi_floor' is '2.10' but torch_abi is classic",
        ),
    ],
)
def test_from_json_rejects_bad_abi(patch, match):
    data = json.loads(_info().to_json())
    data.update(patch)
    with pytest.raises(BuildInfoError, match=re.escape(match)):
        BuildInfo.from_json(json.dumps(data))


@pytest.mark.parametrize(
    "runtime",
    [
        "2.10.0+cu130",
        "2.12.0+cu130",
        "2.14.1+cu132",
        "2.15.0+cu130",
        "2.16.0.dev20260301+cu130",
        "3.0.0+cu131",
    ],
)
def test_stable_serves_every_torch_from_floor_with_same_cuda_major(runtime):
    cuda = "13." + runtime.split("+cu13")[1][0]
    assert incompatibilities(_stable(), TorchBuild(runtime, cuda, None, True)) == []
    assert incompatibilities(_stable(), TorchBuild(runtime, cuda, None, False)) == []  # no C++ ABI axis


def test_stable_below_floor_refused():
    probs = incompatibilities(_stable(), TorchBuild("2.9.1+cu130", "13.0", None, True))
    assert len(probs) == 1 and "torch >= 2.10" in probs[0] and "2.9.1" in probs[0]
    probs = incompatibilities(
        _info(torch_abi="stable", torch_abi_floor="2.12"), TorchBuild("2.11.0+cu130", "13.0")
    )
    assert len(probs) == 1 and "older than that floor" in probs[0]


def test_stable_cuda_major_must_match():
    probs = incompatibilities(_stable(), TorchBuild("2.15.0+cu128", "12.8", None, True))
    assert (
        len(probs) == 1
        and "CUDA 13.0" in probs[0]
        and "CUDA 12.8" in probs[0]
        and "same CUDA major" in probs[0]
    )
    probs = incompatibilities(_stable(), TorchBuild("2.14.1+cpu", None, None, True))
    assert len(probs) == 1 and "without CUDA" in probs[0]


def test_stable_cuda_module_follows_its_nvcc_not_the_torch_that_compiled_it():
    """The CUDA 12 module of the PyPI wheel, compiled with torch 2.14.1+cu130's headers and nvcc 12.4 (it
    links libcudart.so.12): PyPI's torch 2.10.0+cu128 and 2.11.0+cu126 load it, torch 2.14.1+cu130 and
    2.15.0+cu132 (PyPI's) and a CPU torch do not. A classic build keeps torch's CUDA."""
    cu12 = _stable(torch_version="2.14.1+cu130", torch_cuda="13.0", nvcc_version="12.4")
    assert cu12.cuda_runtime_version == "12.4"
    assert incompatibilities(cu12, TorchBuild("2.10.0+cu128", "12.8", None, True)) == []
    assert incompatibilities(cu12, TorchBuild("2.11.0+cu126", "12.6", None, True)) == []
    for rt in (TorchBuild("2.14.1+cu130", "13.0", None, True), TorchBuild("2.15.0+cu132", "13.2")):
        probs = incompatibilities(cu12, rt)
        assert len(probs) == 1, probs
        assert "CUDA 12.4 (libcudart.so.12)" in probs[0] and f"runs CUDA {rt.cuda}" in probs[0]
    assert "without CUDA" in incompatibilities(cu12, TorchBuild("2.14.1+cpu"))[0]
    # the record as JSON (what the module embeds) reads back to the same rule
    again = BuildInfo.from_json(cu12.to_json())
    assert incompatibilities(again, TorchBuild("2.10.0+cu128", "12.8")) == []
    # a classic build with the same fields is judged by torch's CUDA: it links torch's CUDA libraries
    classic = _info(torch_cuda="13.0", nvcc_version="12.4")
    assert classic.cuda_runtime_version == "13.0"
    assert any(
        "CUDA major must match" in p for p in incompatibilities(classic, TorchBuild("2.14.0+cu128", "12.8"))
    )


def test_stable_record_without_nvcc_version_reads_torch_cuda():
    """An older record (no ``nvcc_version``; the preflight then kept nvcc's major = torch's) is judged by
    ``torch_cuda``; an unreadable nvcc version loads under no CUDA torch."""
    old = BuildInfo.from_json(
        json.dumps({k: v for k, v in json.loads(_stable().to_json()).items() if k != "nvcc_version"})
    )
    assert old.nvcc_version is None and old.cuda_runtime_version == "13.0"
    assert incompatibilities(old, TorchBuild("2.15.0+cu132", "13.2")) == []
    assert incompatibilities(old, TorchBuild("2.10.0+cu128", "12.8")) != []
    odd = _stable(nvcc_version="V?")
    assert "an unreadable CUDA version" in incompatibilities(odd, TorchBuild("2.14.1+cu130", "13.0"))[0]


def test_stable_cpu_only_build_runs_under_any_torch():
    cpu = _stable(
        torch_version="2.13.0+cpu",
        torch_cuda=None,
        nvcc_version=None,
        sass_archs=[],
        ptx_archs=[],
        kernels=["cpu"],
    )
    for rt in (
        TorchBuild("2.14.1+cu130", "13.0"),
        TorchBuild("2.12.0+cu126", "12.6"),
        TorchBuild("2.13.0+cpu"),
        TorchBuild("2.13.0+rocm7.2", hip="7.2.0-x"),
    ):
        assert incompatibilities(cpu, rt) == [], rt
    assert incompatibilities(cpu, TorchBuild("2.9.1+cpu")) != []
    # the classic rule is unchanged: a CPU build of another minor, or under a CUDA torch, is refused
    classic = _info(torch_version="2.13.0+cpu", torch_cuda=None, kernels=["cpu"])
    assert incompatibilities(classic, TorchBuild("2.14.1+cpu")) and incompatibilities(
        classic, TorchBuild("2.13.0+cu130", "13.0")
    )


def test_stable_hip_needs_same_rocm_minor():
    hip = _stable(
        torch_version="2.13.0+rocm7.2", torch_cuda=None, torch_hip="7.2.1-x", kernels=["cpu", "hip"]
    )
    assert incompatibilities(hip, TorchBuild("2.14.0+rocm7.2", hip="7.2.0-y")) == []
    probs = incompatibilities(hip, TorchBuild("2.14.0+rocm7.3", hip="7.3.0-y"))
    assert len(probs) == 1 and "ROCm 7.2" in probs[0] and "ROCm 7.3" in probs[0]


def test_describe_torch_abi():
    assert (
        _stable(torch_version="2.13.0+cpu").describe_abi() == "stable ABI, torch >= 2.10 (built with 2.13.0)"
    )
    assert _info().describe_abi() == "classic ABI, torch 2.14 only (built with 2.14.1+cu130, cxx11abi TRUE)"
    assert (
        describe_torch_abi("stable", "2.12", "2.14.1+cu130", None)
        == "stable ABI, torch >= 2.12 (built with 2.14.1)"
    )
