"""Table tests of selection on public torch version strings (issue 5). Expected wheels are written
out by hand from the public strings, not computed by the code under test."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from helpers import build_info, env_dict

from mamba_ssm._install.environment import Environment
from mamba_ssm._install.manifest import Manifest, Pin, WheelEntry
from mamba_ssm._install.selection import select

V = "2.4.0.dev0"


def entry(label, info, platform="manylinux_2_28_x86_64", version=V, sha="ab" * 32):
    from packaging.version import Version

    full = str(Version(f"{version}+{label}"))
    return WheelEntry(
        filename=f"mamba_ssm-{full}-cp39-abi3-{platform}.whl",
        sha256=sha,
        size=1000,
        variant=label,
        version=full,
        sass_archs=list(info["sass_archs"]) if info else [],
        ptx_archs=list(info["ptx_archs"]) if info else [],
        gfx_archs=list(info["gfx_archs"]) if info else [],
        build_info=info,
    )


def fname(label, platform="manylinux_2_28_x86_64", version=V):
    return f"mamba_ssm-{version}+{label.lower()}-cp39-abi3-{platform}.whl"


# A release-like index: torch 2.4..2.6 and 2.13/2.14 builds, CUDA 11/12/13, ROCm 6.1/6.2, CPU.
WHEELS = [
    entry(
        "cu12torch2.5cxx11abiFALSE",
        build_info(
            "2.5.1+cu124",
            "12.4",
            abi=False,
            nvcc="12.4",
            sass=("sm_75", "sm_80", "sm_90"),
            ptx=("compute_90",),
        ),
    ),
    entry(
        "cu11torch2.5cxx11abiFALSE",
        build_info("2.5.1+cu118", "11.8", abi=False, nvcc="11.8", sass=("sm_75", "sm_80", "sm_90")),
    ),
    entry(
        "cu12torch2.6cxx11abiTRUE",
        build_info("2.6.0+cu126", "12.6", abi=True, nvcc="12.6", sass=("sm_75", "sm_80", "sm_90")),
    ),
    entry(
        "cu12torch2.6cxx11abiFALSE",
        build_info("2.6.0+cu124", "12.4", abi=False, nvcc="12.4", sass=("sm_75", "sm_80", "sm_90")),
    ),
    entry("cu11torch2.3cxx11abiFALSE", build_info("2.3.0+cu118", "11.8", abi=False, nvcc="11.8")),
    entry(
        "rocm6.1torch2.4cxx11abiFALSE",
        build_info(
            "2.4.0+rocm6.1", None, hip="6.1.40091-a8dbc0c19", abi=False, sass=(), gfx=("gfx90a", "gfx942")
        ),
    ),
    entry(
        "rocm6.2torch2.5cxx11abiFALSE",
        build_info(
            "2.5.1+rocm6.2", None, hip="6.2.41133-dd7f95766", abi=False, sass=(), gfx=("gfx90a", "gfx942")
        ),
    ),
    entry("cputorch2.13cxx11abiTRUE", build_info("2.13.0+cpu", None, abi=True, sass=())),
    entry(
        "cu13torch2.14cxx11abiTRUE",
        build_info(
            "2.14.1+cu130",
            "13.0",
            abi=True,
            nvcc="13.0",
            sass=("sm_75", "sm_80", "sm_90", "sm_100", "sm_120"),
            ptx=("compute_120",),
        ),
    ),
    entry(
        "cu13torch2.14cxx11abiTRUE",
        build_info("2.14.1+cu130", "13.0", abi=True, nvcc="13.0", sass=("sm_90",)),
        platform="manylinux_2_28_aarch64",
    ),
]
MANIFEST = Manifest(wheels=WHEELS)


def run(**kw):
    return select(Environment.from_dict(env_dict(**kw)), MANIFEST, V)


def rejected(decision, filename):
    return dict(decision.rejected)[filename]


CASES = [
    # (torch.__version__, torch.version.cuda, torch.version.hip, cxx11 ABI) -> expected wheel
    (("2.5.1+cu124", "12.4", None, False), fname("cu12torch2.5cxx11abiFALSE")),
    (("2.6.0+cu126", "12.6", None, True), fname("cu12torch2.6cxx11abiTRUE")),
    (("2.6.0+cu124", "12.4", None, False), fname("cu12torch2.6cxx11abiFALSE")),
    (("2.4.0+rocm6.1", None, "6.1.40091-a8dbc0c19", False), fname("rocm6.1torch2.4cxx11abiFALSE")),
    (("2.5.1+rocm6.2", None, "6.2.41133-dd7f95766", False), fname("rocm6.2torch2.5cxx11abiFALSE")),
    (("2.13.0+cpu", None, None, True), fname("cputorch2.13cxx11abiTRUE")),
    (("2.14.1+cu130", "13.0", None, True), fname("cu13torch2.14cxx11abiTRUE")),
    (("2.14.0", "13.0", None, True), fname("cu13torch2.14cxx11abiTRUE")),  # PyPI's default build has no label
]


@pytest.mark.parametrize("torch,expected", CASES, ids=[c[0][0] for c in CASES])
def test_public_torch_strings_choose_their_wheel(torch, expected):
    version, cuda, hip, abi = torch
    d = run(torch=version, cuda=cuda, hip=hip, abi=abi)
    assert d.status == "chosen", d.explain()
    assert d.chosen.filename == expected


def test_abi_decides_between_two_builds_of_one_torch_release():
    d = run(torch="2.6.0+cu126", cuda="12.6", abi=True)
    assert "_GLIBCXX_USE_CXX11_ABI=0" in rejected(d, fname("cu12torch2.6cxx11abiFALSE"))
    d = run(torch="2.6.0+cu124", cuda="12.4", abi=False)
    assert "_GLIBCXX_USE_CXX11_ABI=1" in rejected(d, fname("cu12torch2.6cxx11abiTRUE"))


def test_cuda_major_must_match():
    d = run(torch="2.5.1+cu118", cuda="11.8", abi=False)
    assert d.chosen.filename == fname("cu11torch2.5cxx11abiFALSE")
    assert "CUDA major" in rejected(d, fname("cu12torch2.5cxx11abiFALSE"))


def test_nightly_gets_no_release_wheel():
    d = run(torch="2.3.0.dev20240304+cu118", cuda="11.8", abi=False)
    assert d.status == "no-candidate" and d.chosen is None
    reason = rejected(d, fname("cu11torch2.3cxx11abiFALSE"))
    assert "2.3.0.dev20240304+cu118" in reason and "exact" in reason


def test_nightly_takes_a_wheel_built_for_exactly_that_nightly():
    label = "cu11torch2.3.0.dev20240304.local.cu118cxx11abiFALSE"
    nightly = entry(label, build_info("2.3.0.dev20240304+cu118", "11.8", abi=False, nvcc="11.8"))
    env = Environment.from_dict(env_dict(torch="2.3.0.dev20240304+cu118", cuda="11.8", abi=False))
    d = select(env, Manifest(wheels=WHEELS + [nightly]), V)
    assert d.chosen is nightly


def test_hip_version_string_means_rocm_major_minor():
    d = run(torch="2.5.1+rocm6.2", cuda=None, hip="6.2.41133-dd7f95766", abi=False)
    assert "rocm6.2torch2.5" in d.looked_for
    d = run(torch="2.4.0+rocm6.1", cuda=None, hip="6.1.40091-a8dbc0c19", abi=False)
    assert "ROCm" in rejected(d, fname("rocm6.2torch2.5cxx11abiFALSE"))


def test_cpu_torch_never_gets_a_cuda_wheel_even_with_a_gpu():
    d = run(
        torch="2.13.0+cpu",
        cuda=None,
        abi=True,
        gpus=[{"vendor": "nvidia", "capability": "9.0"}],
        driver="580.65.06",
    )
    assert d.chosen.filename == fname("cputorch2.13cxx11abiTRUE")
    assert all("cu" not in c.variant[:2] for c in d.candidates)


def test_aarch64_never_gets_x86_64():
    d = run(platforms=("manylinux_2_28_aarch64", "linux_aarch64"))
    assert d.chosen.filename == fname("cu13torch2.14cxx11abiTRUE", "manylinux_2_28_aarch64")
    assert "aarch64" in rejected(d, fname("cu13torch2.14cxx11abiTRUE"))
    assert all("x86_64" not in c.filename for c in d.candidates)


def test_musllinux_never_gets_manylinux():
    d = run(platforms=("musllinux_1_2_x86_64", "linux_x86_64"))
    assert d.status == "no-candidate"
    assert "musllinux" in rejected(d, fname("cu13torch2.14cxx11abiTRUE"))


def test_old_glibc_rejects_a_newer_manylinux_tag():
    d = run(platforms=("manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64"))
    assert d.status == "no-candidate"
    assert "manylinux_2_28_x86_64" in rejected(d, fname("cu13torch2.14cxx11abiTRUE"))


def test_gpu_61_against_sass_from_sm75_without_older_ptx_is_rejected():
    d = run(
        torch="2.5.1+cu124",
        cuda="12.4",
        abi=False,
        gpus=[{"vendor": "nvidia", "name": "GeForce GTX 1080", "capability": "6.1"}],
        driver="550.54.14",
    )
    assert d.status == "no-candidate"
    reason = rejected(d, fname("cu12torch2.5cxx11abiFALSE"))
    assert "6.1" in reason and "not covered" in reason


def test_every_visible_gpu_must_be_covered():
    d = run(
        torch="2.6.0+cu126",
        cuda="12.6",
        gpus=[{"vendor": "nvidia", "capability": "9.0"}, {"vendor": "nvidia", "capability": "6.0"}],
        driver="560.28.03",
    )
    assert d.status == "no-candidate"
    assert "6.0" in rejected(d, fname("cu12torch2.6cxx11abiTRUE"))


def test_driver_below_the_cuda_major_minimum_is_rejected():
    d = run(
        torch="2.6.0+cu126", cuda="12.6", gpus=[{"vendor": "nvidia", "capability": "9.0"}], driver="520.61.05"
    )
    assert d.status == "no-candidate"
    assert "525.60.13" in rejected(d, fname("cu12torch2.6cxx11abiTRUE"))
    d = run(gpus=[{"vendor": "nvidia", "capability": "9.0"}], driver="575.51.03")
    assert "580" in rejected(d, fname("cu13torch2.14cxx11abiTRUE"))
    d = run(gpus=[{"vendor": "nvidia", "capability": "9.0"}], driver="580.65.06")
    assert d.chosen.filename == fname("cu13torch2.14cxx11abiTRUE")


def test_ptx_jit_needs_the_driver_of_the_toolkit_that_made_the_ptx():
    ptx_only = entry(
        "cu12torch2.7cxx11abiTRUE",
        build_info("2.7.1+cu128", "12.8", nvcc="12.8", sass=("sm_80", "sm_90"), ptx=("compute_90",)),
    )
    man = Manifest(wheels=[ptx_only])
    gpu = [{"vendor": "nvidia", "name": "B200", "capability": "10.0"}]
    # 565.57.01 >= 525.60.13 (CUDA 12 minimum) but < 570.26 (CUDA 12.8's driver): sm_100 needs JIT.
    env = Environment.from_dict(env_dict(torch="2.7.1+cu128", cuda="12.8", gpus=gpu, driver="565.57.01"))
    d = select(env, man, V)
    assert d.status == "no-candidate" and "570.26" in d.rejected[0][1] and "PTX" in d.rejected[0][1]
    env.driver_version = "570.86.10"
    assert select(env, man, V).chosen is ptx_only


def test_rocm_gfx_target_must_be_built():
    d = run(
        torch="2.5.1+rocm6.2",
        cuda=None,
        hip="6.2.41133-dd7f95766",
        abi=False,
        gpus=[{"vendor": "amd", "name": "RX 7900", "gfx": "gfx1100"}],
    )
    assert d.status == "no-candidate"
    assert "gfx1100" in rejected(d, fname("rocm6.2torch2.5cxx11abiFALSE"))
    d = run(
        torch="2.5.1+rocm6.2",
        cuda=None,
        hip="6.2.41133-dd7f95766",
        abi=False,
        gpus=[{"vendor": "amd", "name": "MI250", "gfx": "gfx90a:sramecc+:xnack-"}],
    )
    assert d.chosen.filename == fname("rocm6.2torch2.5cxx11abiFALSE")


def test_wheel_version_must_equal_the_sdist_version():
    old = entry("cu13torch2.14cxx11abiTRUE", build_info(), version="2.3.0")
    d = select(Environment.from_dict(env_dict()), Manifest(wheels=[old]), V)
    assert d.status == "no-candidate" and "2.3.0" in d.rejected[0][1] and V in d.rejected[0][1]
    # the local label of the sdist version is ignored
    assert select(Environment.from_dict(env_dict()), Manifest(wheels=WHEELS), V + "+local").status == "chosen"


def test_python_tag_must_be_supported():
    cp312 = entry("cu13torch2.14cxx11abiTRUE", build_info())
    cp312.filename = cp312.filename.replace("cp39-abi3", "cp312-cp312")
    d = select(Environment.from_dict(env_dict(python=(3, 11))), Manifest(wheels=[cp312]), V)
    assert d.status == "no-candidate" and "cp312-cp312" in d.rejected[0][1]


def test_pinned_hash_mismatch_and_unpinned_wheels_are_rejected():
    env = Environment.from_dict(env_dict())
    target = fname("cu13torch2.14cxx11abiTRUE")
    d = select(env, MANIFEST, V, pinned={target: Pin("cd" * 32)})
    assert d.status == "no-candidate" and "pinned" in rejected(d, target)
    d = select(env, MANIFEST, V, pinned={target: Pin("ab" * 32)})
    assert d.chosen.filename == target
    d = select(env, MANIFEST, V, pinned={})
    assert "not among the wheels" in rejected(d, target)


def test_no_torch_is_its_own_status():
    d = run(torch=None)
    assert d.status == "no-torch" and d.chosen is None and d.candidates == ()


def test_ranking_prefers_the_exact_torch_build_then_the_best_tag():
    a = entry("cu13torch2.14cxx11abiTRUE", build_info("2.14.0+cu130"), platform="manylinux_2_28_x86_64")
    b = entry("cu13torch2.14cxx11abiTRUE", build_info("2.14.1+cu130"), platform="linux_x86_64")
    c = entry("cu13torch2.14cxx11abiTRUE", build_info("2.14.1+cu130"), platform="manylinux_2_34_x86_64")
    env = Environment.from_dict(
        env_dict(
            platforms=(
                "manylinux_2_36_x86_64",
                "manylinux_2_34_x86_64",
                "manylinux_2_28_x86_64",
                "linux_x86_64",
            )
        )
    )
    d = select(env, Manifest(wheels=[a, b, c]), V)
    assert [w.filename for w in d.candidates] == [c.filename, b.filename, a.filename]


def test_explanation_names_what_was_looked_for_and_the_nearest_rejections():
    d = run(
        torch="2.6.0+cu126", cuda="12.6", gpus=[{"vendor": "nvidia", "capability": "9.0"}], driver="520.61.05"
    )
    text = d.explain()
    assert "cu12torch2.6cxx11abiTRUE" in text and "525.60.13" in text and "Nearest" in text


def test_environment_json_round_trip_and_platform_tags():
    env = Environment.from_dict(
        env_dict(gpus=[{"vendor": "nvidia", "capability": "9.0", "name": "H200"}], driver="580.65.06")
    )
    again = Environment.from_json(env.to_json())
    assert again == env
    declared = Environment.from_dict(
        {
            "python_version": "3.12.1",
            "platform_tags": ["manylinux_2_28_aarch64"],
            "torch": {"version": "2.14.1+cu130", "cuda": "13.0", "cxx11_abi": True},
        }
    )
    assert (
        "cp312-cp312-manylinux_2_28_aarch64" in declared.tags
        and "cp39-abi3-manylinux_2_28_aarch64" in declared.tags
    )
    with pytest.raises(ValueError, match="python_version"):
        Environment.from_dict({"tags": []})
    with pytest.raises(ValueError, match="bogus"):
        Environment.from_dict(dict(env_dict(), bogus=1))


def test_ngc_torch_needs_the_wheel_built_for_exactly_that_container_build():
    ngc = "2.6.0a0+ecf3bae40a.nv25.01"
    exact = entry(
        "cu12torch2.6.0a0.local.ecf3bae40a.nv25.1cxx11abiTRUE",
        build_info(ngc, "12.8", abi=True, nvcc="12.8", sass=("sm_80", "sm_90")),
    )
    env = Environment.from_dict(env_dict(torch=ngc, cuda="12.8", abi=True))
    d = select(env, Manifest(wheels=WHEELS + [exact]), V)
    assert d.chosen is exact
    assert "exact" in rejected(d, fname("cu12torch2.6cxx11abiTRUE"))  # the release 2.6 wheel does not do


def test_arch_specific_sass_runs_only_on_that_exact_gpu():
    sm90a = entry("cu13torch2.14cxx11abiTRUE", build_info(sass=("sm_90a",)))
    man = Manifest(wheels=[sm90a])
    h100 = Environment.from_dict(
        env_dict(gpus=[{"vendor": "nvidia", "capability": "9.0"}], driver="580.65.06")
    )
    assert select(h100, man, V).chosen is sm90a
    b200 = Environment.from_dict(
        env_dict(gpus=[{"vendor": "nvidia", "capability": "10.0"}], driver="580.65.06")
    )
    d = select(b200, man, V)
    assert d.status == "no-candidate" and "10.0" in d.rejected[0][1]
