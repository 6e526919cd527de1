"""plan: expansion and validation of build_matrix/matrix.toml against PyTorch's published builds,
the nvcc arch tables and requires-python.  Bad matrices are fabricated by editing a copy."""

import copy
import json
import subprocess
import sys

import pytest

from build_matrix import matrix as mx

REAL_MATRIX = mx.load_toml(mx.MATRIX_PATH)
DATA = mx.load_toml(mx.DATA_PATH)
REQ = mx.read_requires_python()


def plan_of(mutate=None, requires_python=REQ):
    m = copy.deepcopy(REAL_MATRIX)
    if mutate:
        mutate(m)
    return mx.expand(m, DATA, requires_python)


def add_build(series, **build):
    def mutate(m):
        for t in m["torch"]:
            if t["series"] == series:
                t["builds"].append(build)
                return
        raise AssertionError(series)

    return mutate


def test_real_matrix_is_valid_and_covers_the_required_range():
    plan = plan_of()
    assert plan.ok, (plan.errors, [r.__dict__ for r in plan.rejected])
    series = {c.series for c in plan.cells}
    assert {"2.4", "2.14"} <= series
    families = {c.family for c in plan.cells}
    assert {"cu11", "cu12", "cu13", "cpu"} <= families
    assert any(f.startswith("rocm6") for f in families) and any(f.startswith("rocm7") for f in families)
    assert {c.platform for c in plan.cells} == {"x86_64", "aarch64"}
    # torch < 2.7 sets no Py_LIMITED_API (setup.py's 3.9); 2.7 and 2.8 support Python 3.9 (RELEASE.md),
    # 2.9 and later start at 3.10, so their cpp_extension compiles for 3.10
    want = {"2.4": "cp39", "2.5": "cp39", "2.6": "cp39", "2.7": "cp39", "2.8": "cp39"}
    assert all(c.python_tag == want.get(c.series, "cp310") and c.abi_tag == "abi3" for c in plan.cells)
    assert all(c.experimental for c in plan.cells if c.toolkit_kind == "rocm")
    ids = [c.id for c in plan.cells]
    assert len(ids) == len(set(ids))


def test_host_cell():
    """The shared venv's torch 2.14.1+cu130 builds the stable-ABI CUDA 13 cell (the newest series)."""
    cell = plan_of().cell("cu13torch2.10stable-x86_64")
    assert cell.torch_spec == "torch==2.14.1+cu130"
    assert cell.toolkit == "cuda13.0" and cell.toolkit_version == "13.0"
    assert set(cell.serves) == {"cu130", "cu132"}
    assert (cell.torch_abi, cell.torch_abi_floor, cell.torch_abi_env) == ("stable", "2.10", "2.10")
    assert "sm_90" in cell.sass and "sm_103" not in cell.sass
    assert cell.variant_key().wheel_filename("2.4.0") == (
        "mamba_ssm-2.4.0+cu13torch2.10stable-cp310-abi3-manylinux_2_28_x86_64.whl"
    )


def test_host_cell_tag_is_the_limited_api_of_its_torch():
    """The installed torch 2.14.1 names the limited API its extensions are compiled for."""
    cpp_extension = pytest.importorskip("torch.utils.cpp_extension")
    import torch

    if not torch.__version__.startswith("2.14."):
        pytest.skip(f"torch {torch.__version__} is not the host cell's series")
    value = int(cpp_extension.min_supported_cpython, 16)
    cell = plan_of().cell("cu13torch2.10stable-x86_64")
    assert cell.torch_version.startswith("2.14.")
    assert cell.python_tag == f"cp{value >> 24}{(value >> 16) & 0xFF}"


def test_cell_tag_must_be_a_tested_python():
    data = copy.deepcopy(DATA)
    data["releases"]["2.14"]["python"] = ">=3.14,<=3.15"
    plan = mx.expand(copy.deepcopy(REAL_MATRIX), data, REQ)
    cell = next(c for c in plan.cells if c.series == "2.14")
    assert cell.python_tag == "cp314"
    assert any(
        f"cell {cell.id}: tag cp314-abi3 is for Python 3.14, which [python] versions does not test" in e
        for e in plan.errors
    ), plan.errors
    plan = mx.expand(copy.deepcopy(REAL_MATRIX), data, ">=3.9,<3.14")
    assert any(
        "(Python 3.14) is outside pyproject.toml requires-python '>=3.9,<3.14'" in e for e in plan.errors
    )


def test_abi_belongs_to_the_build_not_the_release():
    plan = plan_of()
    c124 = plan.cell("cu12torch2.6cxx11abiFALSE-x86_64")
    c126 = plan.cell("cu12torch2.6cxx11abiTRUE-x86_64")
    assert c124.serves == ("cu124",) and c126.serves == ("cu126",)
    assert not any(c.cxx11abi is False for c in plan.cells if tuple(map(int, c.series.split("."))) >= (2, 7))


@pytest.mark.parametrize(
    "series,build,reason",
    [
        ("2.8", dict(accelerator="cu118", cxx11abi=True), "PyTorch 2.8 shipped no +cu118 build"),
        ("2.7", dict(accelerator="cu126", cxx11abi=False), "cxx11 ABI (TRUE) since 2.7"),
        ("2.6", dict(accelerator="cu126", cxx11abi=False), "published with cxx11abi=TRUE"),
        ("2.6", dict(accelerator="cu124", cxx11abi=True), "published with cxx11abi=FALSE"),
        ("2.5", dict(accelerator="rocm7.1", cxx11abi=False), "shipped no +rocm7.1"),
        (
            "2.6",
            dict(accelerator="cu126", cxx11abi=True, platforms=["aarch64"]),
            "shipped no +cu126 build for aarch64",
        ),
        ("2.6", dict(accelerator="cuda12", cxx11abi=True), "none of cu<major><minor>"),
        ("2.6", dict(accelerator="cu126", cxx11abi=True, platforms=["ppc64le"]), "not in [platforms]"),
    ],
)
def test_impossible_builds_are_rejected_with_the_reason(series, build, reason):
    plan = plan_of(add_build(series, **build))
    assert not plan.ok
    assert len(plan.rejected) == 1, plan.rejected
    assert reason in plan.rejected[0].reason
    assert f"torch {series}" in plan.rejected[0].what


def test_unknown_torch_release():
    def mutate(m):
        m["torch"].append(
            {"series": "2.3", "version": "2.3.1", "builds": [{"accelerator": "cu121", "cxx11abi": False}]}
        )

    plan = plan_of(mutate)
    assert "torch 2.3 is not in build_matrix/data/torch_builds.toml" in plan.rejected[0].reason

    def wrong_patch(m):
        m["torch"][0]["version"] = "2.4.7"

    plan = plan_of(wrong_patch)
    assert any("2.4.7 is not a release of the 2.4 series" in r.reason for r in plan.rejected)


def _toolkit(m, tid):
    return next(t for t in m["toolkit"] if t["id"] == tid)


def test_arch_not_supported_by_the_toolkit():
    plan = plan_of(lambda m: _toolkit(m, "cuda11.8")["sass"].append("sm_100"))
    assert any("sm_100 is not supported by nvcc 11.8" in e for e in plan.errors), plan.errors
    plan = plan_of(lambda m: _toolkit(m, "cuda13.0")["sass"].append("sm_70"))
    assert any("sm_70 is not supported by nvcc 13.0" in e for e in plan.errors), plan.errors


def test_known_bad_pair():
    plan = plan_of(lambda m: _toolkit(m, "cuda13.0")["sass"].append("sm_103"))
    assert sum("known-bad pair" in e and "sm_103" in e for e in plan.errors) >= 1
    # the same arch with nvcc 12.8 is fine
    plan = plan_of(
        lambda m: (
            _toolkit(m, "cuda12.8").__setitem__("version", "12.9")
            or _toolkit(m, "cuda12.8")["sass"].append("sm_103")
        )
    )
    assert plan.errors == []


def test_two_toolkits_for_one_cell():
    def mutate(m):
        _toolkit(m, "cuda12.8")["serves"].remove("cu128")
        m["toolkit"].append(
            {
                "id": "cuda12.9",
                "kind": "cuda",
                "version": "12.9",
                "serves": ["cu128"],
                "sass": ["sm_90"],
                "platforms": ["x86_64", "aarch64"],
            }
        )

    plan = plan_of(mutate)
    assert any(
        "need different toolkits" in r.reason and r.what == "cu12torch2.8cxx11abiTRUE-x86_64"
        for r in plan.rejected
    )


@pytest.mark.parametrize(
    "versions,requires,needle",
    [
        (["3.8", "3.9", "3.10", "3.11", "3.12", "3.13"], ">=3.9", "Python 3.8 is listed"),
        (["3.9", "3.11", "3.12", "3.13"], ">=3.9", "admits Python 3.10 but matrix.toml does not test it"),
        (["3.10", "3.11", "3.12", "3.13"], ">=3.9", "admits Python 3.9"),
        (["3.10", "3.11", "3.12", "3.13"], ">=3.10", "wheel_python_tag 'cp39' must be the lowest"),
    ],
)
def test_python_against_requires_python_both_ways(versions, requires, needle):
    plan = plan_of(lambda m: m["python"].__setitem__("versions", versions), requires_python=requires)
    assert any(needle in e for e in plan.errors), plan.errors


def test_exclude_and_skip():
    plan = plan_of(lambda m: m["exclude"].append({"family": "rocm*", "reason": "no ROCm this time"}))
    assert plan.ok
    assert not any(c.family.startswith("rocm") for c in plan.cells)
    assert all(e.reason == "no ROCm this time" for e in plan.excluded) and plan.excluded
    assert any("rocm6.1" in s.what for s in plan.skipped)


def test_filters():
    plan = plan_of()
    cells = plan.filtered(["series=2.9", "kind=cpu"])
    assert {c.id for c in cells} == {"cputorch2.9cxx11abiTRUE-x86_64", "cputorch2.9cxx11abiTRUE-aarch64"}
    assert {c.id for c in plan.filtered(["cu13torch2.9*"])} == {
        "cu13torch2.9cxx11abiTRUE-x86_64",
        "cu13torch2.9cxx11abiTRUE-aarch64",
    }
    assert {c.id for c in plan.filtered(["torch_abi=stable", "kind=cpu"])} == {
        "cputorch2.10stable-x86_64",
        "cputorch2.10stable-aarch64",
    }
    with pytest.raises(mx.MatrixError, match="no field 'colour'"):
        plan.filtered(["colour=red"])
    with pytest.raises(mx.MatrixError, match="no cell 'cu13torch9.9"):
        plan.cell("cu13torch9.9cxx11abiTRUE-x86_64")


def test_plan_cli(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "build_matrix", "plan", "--format", "json"],
        capture_output=True,
        text=True,
        cwd=mx.REPO_ROOT,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["count"] == len(data["cells"]) == len(plan_of().cells)
    gh = subprocess.run(
        [sys.executable, "-m", "build_matrix", "plan", "--format", "github", "--filter", "series=2.14"],
        capture_output=True,
        text=True,
        cwd=mx.REPO_ROOT,
    )
    assert {c["id"] for c in json.loads(gh.stdout)["include"]} == {
        c.id for c in plan_of().cells if c.series == "2.14"
    }
    # a bad matrix: non-zero exit, the reason on the terminal
    m = mx.MATRIX_PATH.read_text().replace(
        '{ accelerator = "cu126", cxx11abi = true },\n  { accelerator = "cu128", cxx11abi = true, '
        'platforms = ["x86_64", "aarch64"] },\n  { accelerator = "cu129"',
        '{ accelerator = "cu118", cxx11abi = true },\n  { accelerator = "cu129"',
        1,
    )
    bad = tmp_path / "matrix.toml"
    bad.write_text(m)
    out = subprocess.run(
        [sys.executable, "-m", "build_matrix", "plan", "--matrix", str(bad)],
        capture_output=True,
        text=True,
        cwd=mx.REPO_ROOT,
    )
    assert out.returncode == 1
    assert "rejected: torch 2.8 (2.8.0) +cu118" in out.stdout and "shipped no +cu118" in out.stdout


def _plan_table(*args):
    out = subprocess.run(
        [sys.executable, "-m", "build_matrix", "plan", *args],
        capture_output=True,
        text=True,
        cwd=mx.REPO_ROOT,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_plan_table_columns_line_up_on_every_row():
    """Each column starts where its header starts, on experimental (ROCm '(exp.)') rows too."""
    lines = _plan_table()
    header = lines[0]
    starts = [header.index(name) for name in ("torch", "serves", "toolkit", "archs", "image")]
    cells = plan_of().cells
    rows = lines[1 : 1 + len(cells)]
    assert any("(exp.)" in r for r in rows)
    for row, cell in zip(rows, cells):
        for start, value in zip(
            starts,
            (
                cell.torch_spec.replace("torch==", ""),
                ",".join(cell.serves),
                cell.toolkit,
                ",".join(cell.sass + cell.ptx + cell.gfx) or "-",
                cell.image,
            ),
        ):
            assert (row[start - 2 : start] == "  " and row[start:].startswith(value + " ")) or row[
                start:
            ] == value, (row, value)


def test_plan_skipped_and_excluded_lines_follow_the_filter():
    plan = plan_of()
    rocm61 = [s for s in plan.skipped if "rocm6.1" in s.what]
    assert rocm61 and rocm61[0].fields["series"] == "2.4"  # the real matrix skips torch 2.4 +rocm6.1
    lines = _plan_table("--filter", "series=2.14", "--filter", "family=cu13")
    assert not any(line.startswith(("skipped:", "excluded:")) for line in lines), lines
    assert lines[-1].startswith("2 cells (of ") and ", 0 skipped, 0 excluded;" in lines[-1]
    lines = _plan_table("--filter", "series=2.4")
    assert any(line.startswith("skipped: torch 2.4 (2.4.1) +rocm6.1") for line in lines)
    skipped, excluded = plan.filtered_notes(["kind=rocm"])
    assert rocm61[0] in skipped and excluded == []
    assert plan.filtered_notes(["kind=cuda"])[0] == [] and plan.filtered_notes(["rocm6.1*"])[0] == rocm61
    ex = plan_of(lambda m: m["exclude"].append({"family": "rocm*", "reason": "no ROCm this time"}))
    skipped, excluded = ex.filtered_notes(["series=2.8"])
    assert [e.what for e in excluded] == ["rocm6.4torch2.8cxx11abiTRUE-x86_64"] and skipped == []
    assert ex.filtered_notes(["family=cu13"]) == ([], [])
    assert plan.filtered_notes([]) == (plan.skipped, plan.excluded)


def test_plan_and_audit_arguments_have_help():
    from build_matrix.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    for command, dest in (("plan", "format"), ("audit", "wheel")):
        action = next(a for a in sub.choices[command]._actions if a.dest == dest)
        assert action.help and len(action.help) > 20, (command, dest)


# ------------------------------------------------------------------------------------ stable ABI
def _served(plan):
    """{(series, accelerator, platform): [cell ids]} over every cell (a stable cell serves its series)."""
    out = {}
    for c in plan.cells:
        for series in c.serves_series or (c.series,):
            for acc in c.serves:
                out.setdefault((series, acc, c.platform), []).append(c.id)
    return out


def test_stable_cells_replace_per_series_cells_from_the_floor():
    """Every CUDA / CPU torch build matrix.toml lists from the floor on is served by exactly one cell, a
    stable-ABI one of its CUDA major (or CPU); below the floor, and for ROCm, the classic cells stay."""
    plan = plan_of()
    floor = REAL_MATRIX["stable_abi"]["floor"]
    served = _served(plan)
    listed = 0
    for t in REAL_MATRIX["torch"]:
        for b in t["builds"]:
            if b.get("skip"):
                continue
            for platform in b.get("platforms", ["x86_64"]):
                ids = served.get((t["series"], b["accelerator"], platform))
                assert ids and len(ids) == 1, (t["series"], b, platform, ids)
                stable = mx.Version(t["series"]) >= mx.Version(floor) and not b["accelerator"].startswith(
                    "rocm"
                )
                assert ids[0].endswith(
                    ("stable-" + platform)
                    if stable
                    else ("cxx11abiTRUE-" + platform, "cxx11abiFALSE-" + platform)
                ), ids
                if stable:
                    fam = mx.accelerator_family(b["accelerator"])
                    assert ids[0] == f"{fam}torch{floor}stable-{platform}"
                    listed += 1
    assert listed > 0
    stable = [c for c in plan.cells if c.torch_abi == "stable"]
    # one per (family, platform); each built against the newest series that ships its family
    assert len({(c.family, c.platform) for c in stable}) == len(stable)
    for c in stable:
        assert c.series == c.serves_series[-1] and c.torch_abi_floor == floor
        assert c.serves_series[0] == floor
    assert not [
        c
        for c in plan.cells
        if c.torch_abi == "classic" and c.toolkit_kind != "rocm" and mx.Version(c.series) >= mx.Version(floor)
    ]


def test_without_stable_section_every_series_has_its_cells():
    """The classic expansion (before the stable ABI) is what [stable_abi] replaces: more cells."""
    classic = plan_of(lambda m: (m.pop("stable_abi"), m.pop("pypi")))  # [pypi] merges stable cells
    plan = plan_of()
    assert classic.ok and all(c.torch_abi == "classic" for c in classic.cells)
    assert len(plan.cells) < len(classic.cells)
    floor = mx.Version(REAL_MATRIX["stable_abi"]["floor"])
    above = [c for c in classic.cells if mx.Version(c.series) >= floor]
    kept = [c for c in plan.cells if mx.Version(c.series) >= floor or c.torch_abi == "stable"]
    assert len(classic.cells) - len(above) == len(plan.cells) - len(kept)


@pytest.mark.parametrize(
    "section,needle",
    [
        ({"floor": "2.9"}, "below 2.10"),
        ({"floor": "two"}, "is not MAJOR.MINOR"),
        ({"floor": "2.10", "kinds": ["tpu"]}, "kinds ['tpu']"),
    ],
)
def test_bad_stable_section(section, needle):
    plan = plan_of(lambda m: m.__setitem__("stable_abi", section))
    assert any(needle in e for e in plan.errors), plan.errors
