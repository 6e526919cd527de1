"""The PyPI wheel product: matrix.toml ``[pypi]`` validation (bad tables are fabricated by editing a copy
of the real matrix) and ``pypi_wheel.merge`` / ``audit_pypi_wheel`` on small cell wheels whose shared
objects are compiled here (g++ for the CPU module, nvcc 13 with a real sm_90 kernel and the shared CUDA
runtime for the CUDA 13 one), each carrying a real build info. The merged wheel is read back with the
``wheel`` package (every member against its RECORD hash), its modules compared byte for byte with the
cells', its DT_NEEDED read with pyelftools. The real cells are merged by the slow dry-run test
(test_release_dry_run.py)."""

import copy
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.utils import parse_wheel_filename
from wheel.wheelfile import WheelFile

from build_matrix import matrix as mx
from build_matrix import pypi_wheel as pwm
from mamba_ssm._compat import buildinfo

sys.path.insert(0, str(Path(__file__).parent))
from _compiled import compile_so

REAL = mx.load_toml(mx.MATRIX_PATH)
DATA = mx.load_toml(mx.DATA_PATH)
REQ = mx.read_requires_python()
VERSION = "2.4.0.dev0"
REQUIRES = ["torch>=2.10", "packaging"]


def plan_of(mutate=None):
    m = copy.deepcopy(REAL)
    if mutate:
        mutate(m)
    return mx.expand(m, DATA, REQ)


# ------------------------------------------------------------------------------------- the table
def test_real_pypi_table():
    """One wheel per platform, each module fed by the stable cell of its family; the tag is the cells'
    (torch 2.14's lowest Python is 3.10: cp310-abi3), the floor [stable_abi]'s."""
    plan = plan_of()
    assert plan.ok, plan.errors
    assert [w.platform for w in plan.pypi] == REAL["pypi"]["platforms"] == ["x86_64", "aarch64"]
    for w in plan.pypi:
        assert w.tags == f"cp310-abi3-manylinux_2_28_{w.platform}"
        assert w.torch_floor == REAL["stable_abi"]["floor"] == "2.10"
        assert dict(w.modules) == {f: f"{f}torch2.10stable-{w.platform}" for f in ("cpu", "cu12", "cu13")}
        assert w.size_budget_mib == 100
        assert w.filename("2.4.0") == f"mamba_ssm-2.4.0-cp310-abi3-manylinux_2_28_{w.platform}.whl"
    with pytest.raises(mx.MatrixError, match="local label"):
        plan.pypi[0].filename("2.4.0+cu13torch2.10stable")
    with pytest.raises(mx.MatrixError, match="'riscv64'"):
        plan.pypi_wheel("riscv64")


def _set(**kv):
    def mutate(m):
        m["pypi"].update(kv)

    return mutate


def _drop_stable(m):
    del m["stable_abi"]


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (_set(platforms=["x86_64", "riscv64"]), "[pypi] platforms: 'riscv64' is not in [platforms]"),
        (_set(platforms=[]), "[pypi] platforms must be a non-empty list"),
        (
            _set(modules=["cpu", "rocm7.2"]),
            "'rocm7.2' is not cpu or cu<major> (e.g. cu13): the stable-ABI binding",
        ),
        (_set(modules=["cu12", "cu13"]), "[pypi] modules ['cu12', 'cu13'] has no 'cpu'"),
        (_set(modules=["cpu", "cu11"]), "[pypi] modules: 'cu11' has no stable-ABI cell on x86_64"),
        (_set(modules=["cpu", "cpu"]), "names a family twice"),
        (_set(size_budget_mib=0), "[pypi] size_budget_mib must be a positive number of MiB, got 0"),
        (_set(size_budget_mib="100"), "size_budget_mib must be a positive number of MiB, got '100'"),
        (_set(platform="x86_64"), "[pypi] has an unknown key 'platform'"),
        (_drop_stable, "[pypi] needs the stable-ABI cells"),
    ],
)
def test_bad_pypi_table_names_the_value(mutate, needle):
    plan = plan_of(mutate)
    assert any(needle in e for e in plan.errors), plan.errors
    assert not plan.ok


def test_plan_cli_shows_the_pypi_wheels():
    out = subprocess.run(
        [sys.executable, "-m", "build_matrix", "plan", "--format", "json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    pypi = json.loads(out)["pypi"]
    assert [(w["platform"], w["modules"]["cu13"]) for w in pypi] == [
        ("x86_64", "cu13torch2.10stable-x86_64"),
        ("aarch64", "cu13torch2.10stable-aarch64"),
    ]


# ------------------------------------------------------------------------------------- the merge
def _so(tmp: Path, cell: mx.Cell) -> Path:
    """A shared object with the build info a real build of ``cell`` embeds (for a CUDA cell: an sm_90
    kernel, linked to the shared CUDA runtime as torch's cpp_extension links it)."""
    cuda = cell.toolkit_kind == "cuda"
    info = buildinfo.BuildInfo(
        package_version=VERSION,
        torch_version=f"{cell.torch_version}+{cell.build_against}",
        torch_cuda="13.0" if cuda else None,
        nvcc_version="13.0" if cuda else None,
        sass_archs=["sm_90"] if cuda else [],
        python_tag="cp310-abi3",
        platform="linux-x86_64",
        kernels=["cpu", "cuda"] if cuda else ["cpu"],
        torch_abi="stable",
        torch_abi_floor="2.10",
    )
    return compile_so(tmp, info, ["arch=compute_90,code=sm_90"] if cuda else None, cudart_shared=True)


def cell_wheel(out: Path, cell: mx.Cell, so: Path, platform_tag: str, requires=REQUIRES, extra=None) -> Path:
    """A cell wheel as setup.py + auditwheel repair write it (RECORD by the ``wheel`` package)."""
    version = f"{VERSION}+{cell.label.lower()}"
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"mamba_ssm-{version}-cp310-abi3-{platform_tag}.whl"
    dist = f"mamba_ssm-{version}.dist-info"
    meta = "Metadata-Version: 2.4\nName: mamba-ssm\nVersion: " + version + "\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires) + "\nThe description.\n"
    files = {
        "mamba_ssm/__init__.py": b"__version__ = '2.4.0.dev0'\n",
        "mamba_ssm/_version.py": b'__version__ = "2.4.0.dev0"\n',
        "mamba_ssm/_C.abi3.so": so.read_bytes(),
        f"{dist}/METADATA": meta.encode(),
        f"{dist}/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: cp310-abi3-{platform_tag}\n"
        ).encode(),
        f"{dist}/mamba_ssm_install.json": json.dumps({"install_id": cell.label}).encode(),
    }
    files.update(extra or {})
    with WheelFile(path, "w") as wf:
        for name, data in files.items():
            zi = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            zi.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            wf.writestr(zi, data)
    return path


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The plan, the x86_64 [pypi] wheel, the CPU and CUDA 13 modules compiled here and auditwheel's tag."""
    tmp = tmp_path_factory.mktemp("pypi")
    plan = mx.load_plan()
    pw = plan.pypi_wheel("x86_64")
    sos = {fam: _so(tmp / fam, plan.cell(pw.cell_of(fam))) for fam in ("cpu", "cu13")}
    probe = cell_wheel(  # both modules in one wheel: the tag their symbol versions allow together
        tmp / "probe",
        plan.cell(pw.cell_of("cpu")),
        sos["cpu"],
        "linux_x86_64",
        extra={"x/_C.so": sos["cu13"].read_bytes()},
    )
    show = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", "--json", str(probe)],
        capture_output=True,
        text=True,
        check=True,
    )
    return plan, pw, sos, json.loads(show.stdout)["sym_tag"], tmp


def _cells(env, out, **over):
    plan, pw, sos, tag, _tmp = env
    wheels = {}
    for fam in ("cpu", "cu13"):
        kw = over.get(fam, {})
        wheels[fam] = cell_wheel(out, plan.cell(pw.cell_of(fam)), kw.pop("so", sos[fam]), tag, **kw)
    return wheels


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_merge_puts_each_cell_module_under_kernels(env, tmp_path):
    plan, pw, sos, tag, _ = env
    cells = _cells(env, tmp_path / "cells")
    index = b'{"index_url": "http://127.0.0.1:8000/pages/v2.4.0.dev0/", "version": "2.4.0.dev0"}\n'
    wheel = pwm.merge(pw, plan, cells, tmp_path / "out", index, allow_missing=["cu12"], exact_tag=False)

    name, version, build, tags = parse_wheel_filename(wheel.name)
    assert (str(name), str(version), build) == ("mamba-ssm", VERSION, ())
    assert [str(t) for t in tags] == [f"cp310-abi3-{tag}"]
    with WheelFile(wheel) as wf:  # raises on any member whose bytes do not match its RECORD hash
        files = {n: wf.read(n) for n in wf.namelist() if not n.endswith("/")}
    assert _sha(files["mamba_ssm/_kernels/cpu/_C.abi3.so"]) == _sha(sos["cpu"].read_bytes())
    assert _sha(files["mamba_ssm/_kernels/cu13/_C.abi3.so"]) == _sha(sos["cu13"].read_bytes())
    assert not [n for n in files if n.startswith("mamba_ssm/_C")]
    assert not [n for n in files if n.startswith("mamba_ssm/_kernels/") and n.endswith(".py")]
    assert files["mamba_ssm/_install/release_index.json"] == index
    dist = f"mamba_ssm-{VERSION}.dist-info"
    assert sorted(n for n in files if n.startswith(dist)) == [
        f"{dist}/{f}" for f in ("METADATA", "RECORD", "WHEEL")
    ]
    meta = files[f"{dist}/METADATA"].decode()
    assert f"\nVersion: {VERSION}\n" in meta and "Requires-Dist: torch>=2.10\n" in meta
    assert meta.endswith("\nThe description.\n")
    with zipfile.ZipFile(wheel) as zf:
        assert zf.getinfo("mamba_ssm/_kernels/cu13/_C.abi3.so").external_attr >> 16 == 0o755

    import dataclasses

    rep = pwm.audit_pypi_wheel(
        wheel, dataclasses.replace(pw, platform_tag=tag), plan, "90", allow_missing=["cu12"]
    )
    assert rep.ok, rep.findings
    assert rep.facts["modules"]["cu13"]["sass"] == ["sm_90"]
    assert "libcudart.so.13" in rep.facts["modules"]["cu13"]["needed"]
    assert not [n for n in rep.facts["modules"]["cpu"]["needed"] if "cuda" in n]
    # the [platforms] tag is required unless the caller allows the cells' own
    if tag != pw.platform_tag:
        with pytest.raises(
            pwm.MergeError, match=f"cell cputorch2.10stable-x86_64 is cp310-abi3-{pw.platform_tag}"
        ):
            pwm.merge(pw, plan, cells, tmp_path / "strict", index, allow_missing=["cu12"])


def test_merge_refuses_what_cannot_be_one_wheel(env, tmp_path):
    plan, pw, sos, tag, _ = env
    index = b"{}\n"

    def merge(cells, **kw):
        return pwm.merge(pw, plan, cells, tmp_path / "out", index, exact_tag=False, **kw)

    good = _cells(env, tmp_path / "good")
    with pytest.raises(
        pwm.MergeError, match="python -m build_matrix build --cell cu12torch2.10stable-x86_64"
    ):
        merge(good)
    grafted = _cells(env, tmp_path / "g", cu13={"extra": {"mamba_ssm.libs/libfoo-1a2b3c4d.so": b"\x7fELF"}})
    with pytest.raises(pwm.MergeError, match="mamba_ssm.libs/libfoo-1a2b3c4d.so"):
        merge(grafted, allow_missing=["cu12"])
    other_src = _cells(env, tmp_path / "s", cu13={"extra": {"mamba_ssm/__init__.py": b"# another tree\n"}})
    with pytest.raises(pwm.MergeError, match=r"differ in \['mamba_ssm/__init__.py'\]"):
        merge(other_src, allow_missing=["cu12"])
    classic_req = _cells(
        env,
        tmp_path / "r",
        cpu={"requires": ["torch==2.14.*", "packaging"]},
        cu13={"requires": ["torch==2.14.*", "packaging"]},
    )
    with pytest.raises(
        pwm.MergeError, match=r"torch is \['torch==2.14.\*'\], the stable-ABI floor says \['torch>=2.10'\]"
    ):
        merge(classic_req, allow_missing=["cu12"])
    differ_req = _cells(env, tmp_path / "d", cu13={"requires": ["torch>=2.10", "packaging", "einops"]})
    with pytest.raises(pwm.MergeError, match="Requires-Dist differ"):
        merge(differ_req, allow_missing=["cu12"])
    # a classic cell's wheel in the CPU module's place
    classic = plan.cell("cputorch2.9cxx11abiTRUE-x86_64")
    wrong = {"cpu": cell_wheel(tmp_path / "c", classic, sos["cpu"], tag), "cu13": good["cu13"]}
    with pytest.raises(
        pwm.MergeError, match="local label 'cputorch2.9cxx11abitrue', cell cputorch2.10stable-x86_64"
    ):
        merge(wrong, allow_missing=["cu12"])
    # a cell wheel whose RECORD does not match its bytes
    bad = tmp_path / "bad" / good["cu13"].name
    bad.parent.mkdir()
    with zipfile.ZipFile(good["cu13"]) as zin, zipfile.ZipFile(bad, "w") as zout:
        for i in zin.infolist():
            data = zin.read(i.filename)
            zout.writestr(i, b"# changed\n" if i.filename == "mamba_ssm/_version.py" else data)
    with pytest.raises(pwm.MergeError, match="is not a valid wheel"):
        merge({"cpu": good["cpu"], "cu13": bad}, allow_missing=["cu12"])


def test_audit_catches_a_module_of_the_wrong_cuda_major(env, tmp_path):
    """The CUDA 13 module in the CUDA 12 module's place: its own DT_NEEDED (libcudart.so.13) and its
    build info (nvcc 13.0, torch +cu130) say so."""
    import dataclasses

    plan, pw, sos, tag, _ = env
    cells = _cells(env, tmp_path / "cells")
    cu12 = plan.cell(pw.cell_of("cu12"))
    cells["cu12"] = cell_wheel(tmp_path / "c12", cu12, sos["cu13"], tag)
    wheel = pwm.merge(pw, plan, cells, tmp_path / "out", b"{}\n", exact_tag=False)
    rep = pwm.audit_pypi_wheel(wheel, dataclasses.replace(pw, platform_tag=tag), plan, "90")
    text = "\n".join(rep.findings)
    assert "cu12: DT_NEEDED: links ['libcudart.so.13'], toolkit cuda12.8 means ['libcudart.so.12']" in text
    assert "cu12: build info: nvcc_version '13.0' is not from toolkit cuda12.8" in text
    assert "cu13:" not in text and "cpu:" not in text


# ------------------------------------------------- which torch may build a stable cell (the modules)
def test_a_stable_cell_builds_against_any_torch_it_serves_from_build_min(tmp_path, monkeypatch):
    """The CPU module builds against torch 2.13.0+cpu (a find-links wheel) when the cell's own
    2.14.1+cpu is not reachable; 2.10.0 and 2.11.0 lack the stable headers the binding uses
    ([stable_abi] build_min 2.13); a CUDA torch of another major builds a stable CUDA cell (its module
    reaches torch only through the stable C shim) but is never installed for it, a CPU torch never
    builds it; a classic cell takes only its own torch."""
    from build_matrix import build

    plan = mx.load_plan()
    data = mx.load_data()
    cpu, cu12, cu13 = (plan.cell(f"{f}torch2.10stable-x86_64") for f in ("cpu", "cu12", "cu13"))
    assert REAL["stable_abi"]["build_min"] == cpu.torch_abi_build_min == "2.13"
    assert cpu.torch_mismatch("2.13.0+cpu") is None and cpu.torch_mismatch("2.14.1+cpu") is None
    assert "older than 2.13" in cpu.torch_mismatch("2.11.0+cpu")
    assert "older than 2.13" in cu12.torch_mismatch("2.10.0+cu128")
    assert cu12.torch_mismatch("2.14.1+cu130") is None  # the dev venv's torch, headers only
    assert "serves +cu126, +cu128" in cu12.torch_mismatch("2.14.1+cpu")
    assert cu12.serves_torch("2.10.0+cu128") and not cu12.serves_torch("2.14.1+cu130")
    assert cu13.torch_mismatch("2.15.0+cu132") is None  # a later release of the same major
    classic = plan.cell("cu13torch2.9cxx11abiTRUE-x86_64")
    assert "classic cell builds against its own torch only" in classic.torch_mismatch("2.9.0+cu130")

    monkeypatch.setattr(build, "_find_links", lambda: [tmp_path])
    with pytest.raises(build.Refused, match=r"torch 2.14.1\+cpu for Python 3.11 is not available here"):
        build.torch_source(cpu, "3.11", data)
    (tmp_path / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    assert build.torch_source(cpu, "3.11", data) == "torch==2.13.0+cpu"
    # PyPI's CUDA 12 torch (2.10.0, +cu128) is below build_min: the CUDA 12 cell is refused, not misbuilt
    with pytest.raises(build.Refused, match=r"2.14.1\+cu126"):
        build.torch_source(cu12, "3.11", data)


def test_merge_is_reproducible(env, tmp_path):
    """The same cells give the same bytes (RECORD's time stamp is the newest member's, not the clock's)."""
    import time

    plan, pw, _sos, _tag, _ = env
    cells = _cells(env, tmp_path / "cells")
    first = pwm.merge(pw, plan, cells, tmp_path / "a", b"{}\n", allow_missing=["cu12"], exact_tag=False)
    time.sleep(2.1)  # zip time stamps have a 2-second resolution
    second = pwm.merge(pw, plan, cells, tmp_path / "b", b"{}\n", allow_missing=["cu12"], exact_tag=False)
    assert first.read_bytes() == second.read_bytes()
