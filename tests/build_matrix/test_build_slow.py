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
