"""mamba_ssm._compat.archs: arch-list syntax, nvcc tables, gencode flags, GPU coverage."""

import os
import re
import shutil
import subprocess

import pytest

from mamba_ssm._compat.archs import (
    ArchSpec,
    arch_list_assignment,
    coverage,
    default_arch_spec,
    default_gfx_archs,
    gencode_flags,
    known_bad,
    nvcc_supported_archs,
    parse_arch_list,
    parse_gfx_list,
    to_arch_list,
    to_torch_arch_list,
    unsupported_archs,
)

CUDA_HOME = os.environ.get("CUDA_HOME", "/usr/local/cuda-13.0")


@pytest.mark.parametrize(
    "text,sass,ptx",
    [
        ("8.0;9.0+PTX", ("sm_80", "sm_90"), ("compute_90",)),
        ("90", ("sm_90",), ()),
        ("80;90", ("sm_80", "sm_90"), ()),
        ("90+PTX", ("sm_90",), ("compute_90",)),
        ("80 90", ("sm_80", "sm_90"), ()),
        ("sm_90a", ("sm_90a",), ()),
        ("9.0a", ("sm_90a",), ()),
        ("compute_90", (), ("compute_90",)),
        ("12.0;10.0;9.0", ("sm_90", "sm_100", "sm_120"), ()),
        ("121,100f", ("sm_100f", "sm_121"), ()),
        ("Hopper", ("sm_90",), ("compute_90",)),
        ("Ampere", ("sm_80", "sm_86"), ("compute_86",)),
        ("90;9.0;sm_90", ("sm_90",), ()),
    ],
)
def test_parse_arch_list(text, sass, ptx):
    assert parse_arch_list(text) == ArchSpec(sass, ptx)


@pytest.mark.parametrize("bad", ["native", "all", "all-major", "", "9", "hopper2", "sm_x"])
def test_parse_arch_list_rejects(bad):
    with pytest.raises(ValueError):
        parse_arch_list(bad)


def test_parse_arch_list_error_names_token():
    with pytest.raises(ValueError, match="'native'"):
        parse_arch_list("80;native")


def test_to_torch_arch_list_roundtrip():
    spec = parse_arch_list("8.0;9.0+PTX")
    assert to_torch_arch_list(spec) == "8.0;9.0+PTX"
    assert parse_arch_list(to_torch_arch_list(spec)) == spec


def _documented_mamba_archs():
    """The MAMBA_CUDA_ARCHS values docs/build.md gives as examples (its settings table)."""
    doc = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(__file__))), "docs", "build.md")
    with open(doc) as fh:
        (row,) = [line for line in fh if line.startswith("| `MAMBA_CUDA_ARCHS` |")]
    return re.findall(r"`([^`]+)`", row.split("|")[2])


def test_mamba_arch_list_is_written_as_the_docs_write_it():
    documented = _documented_mamba_archs()
    assert documented == ["90", "80;90", "90+PTX", "sm_90a", "compute_90"]
    for text in documented:
        spec = parse_arch_list(text)
        assert parse_arch_list(to_arch_list(spec)) == spec
        if not text.startswith("sm_"):  # sm_90a is accepted; the short form is 90a
            assert to_arch_list(spec) == text
    assert to_arch_list(parse_arch_list("sm_90a")) == "90a"
    assert to_arch_list(parse_arch_list("8.0;9.0+PTX;12.1")) == "80;90+PTX;121"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("typed", ["90", "80;90+PTX", "80;90"])
def test_arch_assignment_pastes_into_a_shell_as_typed(typed):
    """What a shell sets from the printed assignment is the value the user typed."""
    line = arch_list_assignment(parse_arch_list(typed))
    if ";" not in typed:
        assert line == f"MAMBA_CUDA_ARCHS={typed}"
    got = subprocess.run(
        ["bash", "-c", f'{line}; printf %s "$MAMBA_CUDA_ARCHS"'], capture_output=True, text=True, check=True
    ).stdout
    assert got == typed


def test_gencode_flags():
    assert gencode_flags(parse_arch_list("80;90+PTX")) == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_90,code=sm_90",
        "-gencode=arch=compute_90,code=compute_90",
    ]
    assert gencode_flags(parse_arch_list("sm_90a")) == ["-gencode=arch=compute_90a,code=sm_90a"]


def test_nvcc_tables_public():
    # CUDA 11.8 release notes: sm_35 ... sm_90.
    t118 = nvcc_supported_archs((11, 8))
    assert t118[0] == "sm_35" and t118[-1] == "sm_90" and "sm_89" in t118
    # 12.0 dropped Kepler, 12.4 has Hopper + sm_90a, no Blackwell.
    t124 = nvcc_supported_archs((12, 4), variants=True)
    assert "sm_37" not in t124 and "sm_50" in t124 and "sm_90a" in t124 and "sm_100" not in t124
    # 12.8 added Blackwell sm_100/sm_101/sm_120; 12.9 sm_103/sm_121 and family targets.
    t128 = nvcc_supported_archs((12, 8))
    assert {"sm_100", "sm_101", "sm_120"} <= set(t128) and "sm_103" not in t128
    t129 = nvcc_supported_archs((12, 9), variants=True)
    assert {"sm_103", "sm_121", "sm_100f", "sm_120a"} <= set(t129)
    # 13.0 dropped everything before Turing.
    t130 = nvcc_supported_archs((13, 0))
    assert t130[0] == "sm_75" and "sm_72" not in t130 and "sm_101" not in t130 and "sm_110" in t130


def test_nvcc_table_matches_local_nvcc_13():
    nvcc = os.path.join(CUDA_HOME, "bin", "nvcc")
    if not os.access(nvcc, os.X_OK):
        pytest.skip(f"no nvcc at {nvcc}")
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    from mamba_ssm._compat.versions import parse_nvcc_version

    ver = parse_nvcc_version(out)
    listed = subprocess.run([nvcc, "--list-gpu-code"], capture_output=True, text=True).stdout.split()
    assert set(nvcc_supported_archs(ver)) == set(listed)
    arch = subprocess.run([nvcc, "--help"], capture_output=True, text=True).stdout
    for v in nvcc_supported_archs(ver, variants=True):
        assert f"'{v}'" in arch, v


def test_nvcc_too_old():
    with pytest.raises(ValueError, match="10.2"):
        nvcc_supported_archs((10, 2))


def test_known_bad_sm103_nvcc13():
    assert known_bad("sm_103", (13, 0)) is not None
    assert "sm_103" in known_bad("sm_103", (13, 1))
    assert known_bad("sm_103", (12, 9)) is None
    assert known_bad("sm_100", (13, 0)) is None
    assert unsupported_archs(parse_arch_list("103"), (13, 0))


def test_unsupported_archs_named():
    probs = unsupported_archs(parse_arch_list("70;90"), (13, 0))
    assert len(probs) == 1 and "sm_70" in probs[0] and "13.0" in probs[0]
    assert unsupported_archs(parse_arch_list("90+PTX"), (13, 0)) == []


def test_default_arch_spec_torch_2_14_nvcc_13():
    torch_list = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    spec = default_arch_spec(torch_list, (13, 0))
    assert spec.sass == tuple(torch_list)
    assert spec.ptx == ("compute_120",)


def test_default_arch_spec_drops_unsupported_and_known_bad():
    torch_list = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_90", "sm_103", "compute_90"]
    spec = default_arch_spec(torch_list, (13, 0))
    assert spec == ArchSpec(("sm_75", "sm_80", "sm_90"), ("compute_90",))
    # nvcc 12.4 keeps the older ones and cannot do sm_103.
    spec124 = default_arch_spec(torch_list, (12, 4))
    assert spec124 == ArchSpec(("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_90"), ("compute_90",))


def test_default_arch_spec_empty():
    with pytest.raises(ValueError, match="MAMBA_CUDA_ARCHS"):
        default_arch_spec(["sm_50"], (13, 0))


@pytest.mark.parametrize(
    "cap,sass,ptx,ok",
    [
        ((9, 0), ["sm_90"], [], True),  # H100/H200
        ((8, 6), ["sm_80"], [], True),  # A10 runs sm_80 SASS (same major, higher minor)
        ((8, 0), ["sm_86"], [], False),  # not the other way round
        ((9, 0), ["sm_80"], [], False),  # SASS does not cross majors
        ((9, 0), ["sm_80"], ["compute_80"], True),  # PTX JITs forward
        ((12, 0), [], ["compute_90"], True),
        ((8, 9), [], ["compute_90"], False),  # PTX never runs backwards
        ((9, 0), ["sm_90a"], [], True),
        ((10, 0), ["sm_90a"], [], False),  # arch-specific: exactly 9.0
        ((10, 3), ["sm_100a"], [], False),
        ((10, 3), ["sm_100f"], [], True),  # family: same major, minor >= 0
        ((10, 0), ["sm_103f"], [], False),
        ((12, 0), ["sm_100f"], [], False),
        ((12, 0), [], ["compute_100a"], False),
        ((10, 0), [], ["compute_100a"], True),
        ((7, 5), [], [], False),
    ],
)
def test_coverage(cap, sass, ptx, ok):
    reason = coverage(cap, sass, ptx)
    if ok:
        assert reason is None
    else:
        assert reason is not None and f"{cap[0]}.{cap[1]}" in reason


def test_coverage_accepts_string_capability():
    assert coverage("9.0", ["sm_90"], []) is None


def test_gfx_lists():
    assert parse_gfx_list("gfx90a;gfx942") == ("gfx90a", "gfx942")
    assert parse_gfx_list("gfx90a, gfx1100 gfx90a") == ("gfx90a", "gfx1100")
    assert parse_gfx_list("gfx90a:xnack-") == ("gfx90a:xnack-",)
    with pytest.raises(ValueError, match="native"):
        parse_gfx_list("native")
    assert "native" not in default_gfx_archs((6, 2))
    assert "gfx942" in default_gfx_archs((6, 2)) and "gfx942" not in default_gfx_archs((5, 7))
    for g in default_gfx_archs((6, 4)):
        parse_gfx_list(g)


def test_cuobjdump_sees_gencode_targets(tmp_path):
    """gencode_flags really produce the SASS/PTX named (compiled with the local nvcc, listed by cuobjdump)."""
    nvcc = os.path.join(CUDA_HOME, "bin", "nvcc")
    cuobjdump = _cuobjdump()
    if not os.access(nvcc, os.X_OK) or not cuobjdump:
        pytest.skip("needs nvcc (CUDA_HOME) and cuobjdump (triton)")
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* x) { x[threadIdx.x] *= 2.f; }\n")
    spec = parse_arch_list("80;90+PTX")
    obj = tmp_path / "k.o"
    subprocess.run([nvcc, "-c", str(src), "-o", str(obj)] + gencode_flags(spec), check=True)
    elf = subprocess.run([cuobjdump, "--list-elf", str(obj)], capture_output=True, text=True).stdout
    ptx = subprocess.run([cuobjdump, "--list-ptx", str(obj)], capture_output=True, text=True).stdout
    assert sorted(set(_sms(elf))) == ["sm_80", "sm_90"]
    assert sorted(set(_sms(ptx))) == ["sm_90"]


def _sms(text):
    import re

    return re.findall(r"\.(sm_\d+[af]?)\.", text)


def _cuobjdump():
    import sys

    cand = os.path.join(
        os.path.dirname(sys.executable),
        "..",
        "lib",
        f"python{sys.version_info[0]}.{sys.version_info[1]}",
        "site-packages",
        "triton",
        "backends",
        "nvidia",
        "bin",
        "cuobjdump",
    )
    if os.access(cand, os.X_OK):
        return os.path.abspath(cand)
    return shutil.which("cuobjdump")
