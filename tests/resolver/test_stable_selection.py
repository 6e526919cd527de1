"""Selection with stable-ABI wheels (``cu13torch2.10stable``) next to classic ones, and an index that
carries both kinds. Expected wheels are written out by hand from the rule as the issue states it: a
stable wheel serves every torch from its floor on with the same CUDA major (a CPU one any CPU torch);
when a classic exact match and a stable wheel both fit, the stable one is chosen (it keeps working when
torch is upgraded; docs/benchmarks.md has the per-call cost); a torch newer than every cell gets the
stable wheel."""

from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from helpers import build_info, env_dict, make_wheel

from build_matrix.index import build_index
from mamba_ssm._install.environment import Environment
from mamba_ssm._install.manifest import Manifest, WheelEntry
from mamba_ssm._install.selection import select, served_by

V = "2.4.0.dev0"


def stable_info(torch="2.14.1+cu130", cuda="13.0", floor="2.10", **kw):
    info = build_info(torch, cuda, **kw)
    info.update(torch_abi="stable", torch_abi_floor=floor)
    return info


def entry(label, info, platform="manylinux_2_28_x86_64"):
    from packaging.version import Version

    full = str(Version(f"{V}+{label}"))  # PEP 440 lower-cases the label, as setuptools does
    return WheelEntry(
        filename=f"mamba_ssm-{full}-cp39-abi3-{platform}.whl",
        sha256="ab" * 32,
        size=1000,
        variant=label,
        version=full,
        sass_archs=list(info["sass_archs"]),
        ptx_archs=list(info["ptx_archs"]),
        gfx_archs=list(info["gfx_archs"]),
        build_info=info,
    )


def fname(label):
    return f"mamba_ssm-{V}+{label.lower()}-cp39-abi3-manylinux_2_28_x86_64.whl"


CU13_STABLE = "cu13torch2.10stable"
CPU_STABLE = "cputorch2.10stable"
CU13_214 = "cu13torch2.14cxx11abiTRUE"
CU13_29 = "cu13torch2.9cxx11abiTRUE"
WHEELS = [
    entry(CU13_STABLE, stable_info(sass=("sm_80", "sm_90"))),
    entry(CPU_STABLE, stable_info("2.14.1+cpu", None, sass=())),
    entry(CU13_214, build_info("2.14.1+cu130", "13.0", sass=("sm_80", "sm_90"))),
    entry(CU13_29, build_info("2.9.1+cu130", "13.0", sass=("sm_80", "sm_90"))),
]


def run(wheels=WHEELS, **kw):
    return select(Environment.from_dict(env_dict(**kw)), Manifest(wheels=list(wheels)), V)


def rejected(decision, label):
    return dict(decision.rejected)[fname(label)]


def test_stable_wheel_wins_over_the_classic_exact_match():
    d = run(torch="2.14.1+cu130", cuda="13.0")
    assert d.status == "chosen", d.explain()
    assert [c.filename for c in d.candidates] == [fname(CU13_STABLE), fname(CU13_214)]
    assert "has CPU kernels only, and the target's torch is a CUDA 13.0 build" in rejected(d, CPU_STABLE)


@pytest.mark.parametrize(
    "torch,cuda",
    [
        ("2.15.0+cu130", "13.0"),
        ("2.10.0+cu130", "13.0"),
        ("2.16.0", "13.2"),
        ("2.15.0.dev20260301+cu130", "13.0"),
    ],
)
def test_torch_newer_than_any_cell_gets_the_stable_wheel(torch, cuda):
    d = run(torch=torch, cuda=cuda)
    assert d.status == "chosen" and d.chosen.filename == fname(CU13_STABLE), d.explain()
    assert len(d.candidates) == 1


def test_below_the_floor_only_the_classic_wheel():
    d = run(torch="2.9.1+cu130", cuda="13.0")
    assert d.chosen.filename == fname(CU13_29)
    assert "torch >= 2.10" in rejected(d, CU13_STABLE) and "older than that floor" in rejected(d, CU13_STABLE)


def test_cuda12_target_with_only_cuda13_stable_wheels_is_rejected_clearly():
    d = run(torch="2.15.0+cu128", cuda="12.8")
    assert d.status == "no-candidate" and d.chosen is None
    why = rejected(d, CU13_STABLE)
    assert "CUDA 13.0" in why and "CUDA 12.8" in why and "same CUDA major" in why
    assert "CPU kernels only" in rejected(d, CPU_STABLE)
    assert "cu12torch2.10stable" in d.looked_for and "cu12torch2.15cxx11abiTRUE" in d.looked_for
    assert "no wheel of the index fits" in d.explain()


def test_cpu_torch_takes_the_cpu_stable_wheel_of_any_later_release():
    d = run(torch="2.17.0+cpu", cuda=None)
    assert d.chosen.filename == fname(CPU_STABLE), d.explain()
    assert "without CUDA" in rejected(d, CU13_STABLE)


def test_highest_floor_first_among_stable_wheels():
    higher = entry("cu13torch2.12stable", stable_info(floor="2.12", sass=("sm_80", "sm_90")))
    d = run(WHEELS + [higher], torch="2.14.1+cu130", cuda="13.0")
    assert [c.filename for c in d.candidates] == [
        fname("cu13torch2.12stable"),
        fname(CU13_STABLE),
        fname(CU13_214),
    ]
    d = run(WHEELS + [higher], torch="2.11.0+cu130", cuda="13.0")
    assert d.chosen.filename == fname(CU13_STABLE)


def test_served_by_says_what_a_stable_wheel_serves():
    text = served_by(WHEELS[0])
    assert text.startswith("torch >= 2.10 (stable ABI, built with 2.14.1+cu130), CUDA 13.0;")
    assert served_by(WHEELS[2]).startswith("torch 2.14 (built with 2.14.1+cu130), CUDA 13.0, cxx11abi TRUE;")


def test_index_carries_both_kinds(tmp_path):
    """build_matrix index: one PEP 503 root per label, stable and classic alike, and the manifest's
    entries select as above."""
    root = tmp_path / "idx"
    stable = make_wheel(
        str(root), CU13_STABLE, stable_info(sass=("sm_90",)), platform="manylinux_2_28_x86_64"
    )
    classic = make_wheel(str(root), CU13_214, build_info(sass=("sm_90",)), platform="manylinux_2_28_x86_64")
    manifest = build_index(str(root))
    assert {w.variant for w in manifest.wheels} == {CU13_STABLE, CU13_214}
    for w in manifest.wheels:
        assert (root / w.variant / "mamba-ssm" / w.filename).is_file()
    data = json.loads((root / "manifest.json").read_text())
    by_label = {w["variant"]: w for w in data["wheels"]}
    assert by_label[CU13_STABLE]["build_info"]["torch_abi"] == "stable"
    assert by_label[CU13_STABLE]["build_info"]["torch_abi_floor"] == "2.10"
    assert os.path.basename(stable) in {w.filename for w in manifest.wheels}
    assert os.path.basename(classic) in {w.filename for w in manifest.wheels}
    d = select(Environment.from_dict(env_dict(torch="2.15.0+cu130", cuda="13.0")), manifest, V)
    assert d.chosen.variant == CU13_STABLE
