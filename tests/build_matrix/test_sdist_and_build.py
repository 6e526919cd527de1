"""sdist-check (contents; the full rebuild from the sdist is the slow path) and build's refusals."""

import os
import re
import subprocess
import sys

import pytest

from build_matrix import build, sdist_check
from build_matrix import matrix as mx

ROOT = mx.REPO_ROOT


def test_sdist_carries_every_compiled_source(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "build_matrix", "sdist-check", "--no-build", "--out", str(tmp_path / "w")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    unpacked = next((tmp_path / "w" / "unpacked").iterdir())
    csrc = sorted(p.name for p in (ROOT / "csrc").iterdir() if p.is_file())
    assert csrc and sorted(p.name for p in (unpacked / "csrc").iterdir()) == csrc
    assert (unpacked / "setup.py").is_file() and (unpacked / "mamba_ssm/_compat/variant.py").is_file()
    # build_matrix emit runs from an unpacked sdist too: its templates and action pins are inside
    templates = [p.relative_to(ROOT) for p in (ROOT / "build_matrix/templates").rglob("*") if p.is_file()]
    assert templates and [t for t in templates if not (unpacked / t).is_file()] == []


def test_missing_source_is_named(tmp_path):
    sdist = sdist_check.build_sdist(tmp_path / "b")
    unpacked = sdist_check.unpack(sdist, tmp_path / "u")
    victim = next(f for f in sdist_check.required_files() if f.endswith(".cu") or f.endswith(".cpp"))
    (unpacked / victim).unlink()
    assert sdist_check.missing_files(unpacked, sdist_check.required_files()) == [victim]


def _build(*args):
    return subprocess.run(
        [sys.executable, "-m", "build_matrix", "build", *args, "--plan-only"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_refuses_cells_this_machine_cannot_build():
    host = build.detect_host()
    if "12.8" not in host.nvcc:
        out = _build("--cell", "cu12torch2.10stable-x86_64")
        assert out.returncode == 2 and "is built with nvcc 12.8" in out.stderr
    out = _build("--cell", "cu11torch2.6cxx11abiFALSE-x86_64", "--toolkit", "pypi")
    assert out.returncode == 2 and "carry no nvcc (only CUDA 13.x comes from PyPI)" in out.stderr
    out = _build("--cell", "rocm7.2torch2.13cxx11abiTRUE-x86_64")
    assert out.returncode == 2 and "needs hipcc from ROCm 7.2.0 and a ROCm torch" in out.stderr
    out = _build("--cell", "cputorch2.10stable-aarch64")
    if host.machine != "aarch64":
        assert out.returncode == 2 and "is for aarch64" in out.stderr
    out = _build("--cell", "cu13torch2.10stable-x86_64", "--python", "3.7")
    assert out.returncode == 2 and "Python 3.7 is not in matrix.toml [python] versions" in out.stderr
    out = _build("--cell", "cu13torch2.10stable-x86_64", "--python", "3.9")
    assert out.returncode == 2 and "torch 2.14 supports Python >=3.10,<=3.15" in out.stderr
    out = _build("--cell", "nonsense-x86_64")
    assert out.returncode == 2 and "no cell 'nonsense-x86_64'" in out.stderr


def test_refuses_a_torch_build_pypi_does_not_serve(tmp_path, monkeypatch):
    plan = mx.load_plan()
    data = mx.load_data()
    cell = plan.cell("cu12torch2.10stable-x86_64")  # +cu126: not PyPI's default for 2.14
    monkeypatch.setattr(build, "_find_links", lambda: [tmp_path])
    with pytest.raises(build.Refused, match=r"PyPI serves only \+cu130 for torch 2.14"):
        build.torch_source(cell, "3.11", data)
    # the same build lying in a find-links directory is accepted
    (tmp_path / "torch-2.14.1+cu126-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"")
    assert build.torch_source(cell, "3.11", data) == "torch==2.14.1+cu126"
    assert build.torch_source(plan.cell("cu13torch2.10stable-x86_64"), "3.12", data) == "torch==2.14.1"


def test_host_cell_is_the_shared_torch():
    venv = build.SHARED_TORCH_VENV
    if not (venv / "bin" / "python").exists():
        pytest.skip(f"no shared torch venv at {venv}")
    version_py = next(venv.glob("lib/python3*/site-packages/torch/version.py")).read_text()
    if "__version__ = '2.14.1+cu130'" not in version_py:
        pytest.skip("the shared venv is not torch 2.14.1+cu130")
    assert build.host_cell_id(mx.load_plan()) == "cu13torch2.10stable-x86_64"


def test_source_hash_changes_with_sources(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    h1 = build.source_hash(["a.txt"], tmp_path)
    (tmp_path / "a.txt").write_text("y")
    assert build.source_hash(["a.txt"], tmp_path) != h1


@pytest.mark.parametrize("typed", ["90", "80;90+PTX"])
def test_build_shows_the_archs_as_the_variable_takes_them(typed):
    """The main job's `build --host --archs 90` shows MAMBA_CUDA_ARCHS=90 (not torch's 9.0), quoted for a
    shell when it holds ';': a shell pasting it sets what the user typed."""
    out = _build("--host", "--archs", typed)
    if out.returncode == 2:
        pytest.skip(f"this machine cannot build the host cell: {out.stderr.strip()}")
    assert out.returncode == 0, out.stdout + out.stderr
    (line,) = [l for l in out.stdout.splitlines() if "would build with" in l]
    (shown,) = re.findall(r"MAMBA_CUDA_ARCHS=('[^']*'|[^,\s]+)", line)
    assert shown == (f"'{typed}'" if ";" in typed else typed), line
    pasted = subprocess.run(
        ["bash", "-c", f'MAMBA_CUDA_ARCHS={shown}; printf %s "$MAMBA_CUDA_ARCHS"'],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert pasted == typed


def test_cell_copy_rebuilds_what_changed_and_packs_no_stale_python(tmp_path):
    """The cell's source copy keeps dest/build between builds. A file whose content differs from the
    copy (here the _version.py a release dry run rewrote) must come out newer than what the previous
    build made from it, whatever its source's mtime, and build/lib may keep only extension modules."""
    rel = "mamba_ssm/_version.py"
    src = ROOT / rel
    dest = tmp_path / "src"
    build._copy_sources([rel], dest)
    (dest / rel).write_text('__version__ = "9.9.9.dev1"\n')  # as a release dry run leaves it
    built = src.stat().st_mtime + 1  # the previous build ran after the source was written
    obj = dest / "build" / "temp.linux-x86_64-cpython-311" / "csrc" / "binding.o"
    lib = dest / "build" / "lib.linux-x86_64-cpython-311" / "mamba_ssm"
    for path in (obj, lib / "_version.py", lib / "removed_module.py", lib / "_C.abi3.so"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("from an earlier build")
        os.utime(path, (built, built))

    build._copy_sources([rel], dest)

    assert (dest / rel).read_bytes() == src.read_bytes()
    assert (dest / rel).stat().st_mtime > built, "a changed file kept its source's older mtime"
    assert sorted(p.name for p in lib.iterdir()) == ["_C.abi3.so"]
    assert obj.is_file()
