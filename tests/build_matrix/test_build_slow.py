"""The real host cell: Python 3.11 (abi3) x torch 2.14.1+cu130 x nvcc 13.0 x x86_64, the stable-ABI
cell of CUDA 13 (cu13torch2.10stable: floor 2.10, built with the newest series, 2.14), archs reduced to
sm_90, built by `python -m build_matrix build --host` and audited (including the
fresh-venv doctor and compiled CPU kernel check).  A re-run with unchanged sources reuses the wheel."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from build_matrix import audit, build
from build_matrix import matrix as mx

pytestmark = pytest.mark.slow


def test_host_cell_builds_and_audits(tmp_path):
    if (
        not Path("/usr/local/cuda-13.0/bin/nvcc").exists()
        or not (build.SHARED_TORCH_VENV / "bin/python").exists()
    ):
        pytest.skip("needs nvcc 13.0 at /usr/local/cuda-13.0 and the shared torch 2.14.1 venv")
    out_dir = tmp_path / "cells"
    env = dict(os.environ, MAX_JOBS=os.environ.get("MAX_JOBS", "2"))
    proc = subprocess.run(
        [sys.executable, "-m", "build_matrix", "build", "--host", "--archs", "90", "--out", str(out_dir)],
        capture_output=True,
        text=True,
        cwd=mx.REPO_ROOT,
        env=env,
        timeout=3000,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    wheels = list(out_dir.glob("*.whl"))
    assert len(wheels) == 1
    name = wheels[0].name
    # torch 2.14 compiles limited-API extensions for Python 3.10 (Py_LIMITED_API=0x030A0000)
    assert name.startswith("mamba_ssm-2.4.0.dev0+cu13torch2.10stable-cp310-abi3-manylinux_")
    with zipfile.ZipFile(wheels[0]) as zf:
        meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "Version: 2.4.0.dev0+cu13torch2.10stable" in meta
    # the wheel requires the torches its _C serves: every torch from the floor on
    assert "Requires-Dist: torch>=2.10" in meta.splitlines()
    # and what upstream's install brings that its users' scripts import (issue 36)
    assert "Requires-Dist: einops" in meta.splitlines()
    # an independent audit run (with the runtime check) of the produced wheel
    rep = audit.audit_wheel(
        wheels[0],
        mx.load_plan().cell("cu13torch2.10stable-x86_64"),
        archs="90",
        torch_from=build.SHARED_TORCH_VENV,
    )
    assert rep.ok, rep.findings
    assert "stable ABI symbols" in rep.passed and rep.facts["stable_abi"]["torch_cpp_imports"] == 0
    assert rep.facts["sass"] == ["sm_90"] and rep.facts["runtime"]["doctor_loaded"] is True
    assert rep.facts["runtime"]["max_rel_err"] < 1e-4


def test_cu12_cell_builds_with_a_cuda13_torch_and_a_cuda12_toolkit(tmp_path):
    """The CUDA 12 module of the PyPI wheel where no CUDA 12 torch can compile the binding: the stable
    cell cu12torch2.10stable built with the dev venv's torch 2.14.1+cu130 (headers only: the module
    reaches torch through the stable C shim) and the CUDA 12.4 of ci/cuda12_from_debian.sh (sm_90). It
    links libcudart.so.12, its build info records nvcc 12.4, and the audit's runtime check loads it under
    PyPI's torch 2.10.0+cu128, whose CPU scan matches float64."""
    from build_matrix import pypi_wheel
    from mamba_ssm._compat import buildinfo, versions

    host = build.detect_host()
    cuda12 = sorted(v for v in host.nvcc if v.startswith("12."))
    runtime_venv = build.runtime_torch_here(mx.load_plan().cell("cu12torch2.10stable-x86_64"))
    if not cuda12 or not (build.SHARED_TORCH_VENV / "bin/python").exists() or runtime_venv is None:
        pytest.skip(
            "needs a CUDA 12 toolkit (bash ci/cuda12_from_debian.sh), the shared torch 2.14.1+cu130 venv and a "
            f"venv under {build.DEV_HOME} with a CUDA 12 torch >= 2.10 (PyPI's 2.10.0) for the runtime check"
        )
    cell = mx.load_plan().cell("cu12torch2.10stable-x86_64")
    out_dir = tmp_path / "cells"
    env = dict(os.environ, MAX_JOBS=os.environ.get("MAX_JOBS", "2"))
    cmd = [sys.executable, "-m", "build_matrix", "build", "--cell", cell.id, "--archs", "90"]
    cmd += ["--torch-from", str(build.SHARED_TORCH_VENV), "--out", str(out_dir)]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=mx.REPO_ROOT, env=env, timeout=3000)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = out_dir.glob("*.whl")
    assert wheel.name.startswith("mamba_ssm-2.4.0.dev0+cu12torch2.10stable-cp310-abi3-manylinux_")
    with zipfile.ZipFile(wheel) as zf:
        zf.extract(audit.SO_NAME, tmp_path)
    so = tmp_path / audit.SO_NAME
    needed, paths = pypi_wheel.elf_dynamic(so)
    assert [n for n in needed if n.startswith("libcudart")] == ["libcudart.so.12"] and not paths, needed
    info = buildinfo.read_build_info(so)
    assert info.torch_version == "2.14.1+cu130" and info.torch_cuda == "13.0"
    assert info.nvcc_version.split(".")[0] == "12" and info.cuda_runtime_version == info.nvcc_version
    assert (info.torch_abi, info.torch_abi_floor, info.sass_archs) == ("stable", "2.10", ["sm_90"])
    assert buildinfo.incompatibilities(info, versions.TorchBuild("2.10.0+cu128", "12.8")) == []
    assert buildinfo.incompatibilities(info, versions.TorchBuild("2.14.1+cu130", "13.0")) != []
    # an independent audit of the wheel, its runtime check under the CUDA 12 torch
    rep = audit.audit_wheel(
        wheel, cell, archs="90", torch_from=build.SHARED_TORCH_VENV, runtime_from=runtime_venv
    )
    assert rep.ok, rep.findings
    assert rep.facts["sass"] == ["sm_90"] and rep.facts["stable_abi"]["torch_cpp_imports"] == 0
    assert rep.facts["runtime"]["doctor_loaded"] is True and rep.facts["runtime"]["max_rel_err"] < 1e-4
