"""setup.py's contract with the resolver: ``setup_hook.py`` loaded from the source tree the way setup.py
loads it (``load_private``: no ``import mamba_ssm``, no torch in the build process),
``resolve_prebuilt(version) -> Outcome`` never raising, ``record(outcome, final_mode)`` writing where
``read_record`` (doctor) finds it."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from helpers import build_info, make_wheel

from build_matrix.index import build_index
from mamba_ssm._install.record import read_record

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LABEL = "cu13torch2.14cxx11abiTRUE"


def call_hook(tmp_path, final_mode, **env):
    full = dict(os.environ, MAMBA_SSM_NO_NVML="1", MAMBA_HTTP_RETRIES="0", **env)
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "setup_hook_run.py"),
            os.path.join(REPO, "setup.py"),
            final_mode,
        ],
        env=full,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_prebuilt_by_path_without_torch_in_the_build_process(tmp_path):
    root = tmp_path / "idx"
    make_wheel(str(root), LABEL, build_info(), platform="manylinux_2_28_x86_64")
    build_index(str(root))
    out, log = call_hook(tmp_path, "prebuilt", MAMBA_WHEEL_INDEX=str(root))
    assert out["status"] == "prebuilt" and out["deferred"] is False
    assert os.path.basename(out["wheel_path"]) == "mamba_ssm-2.4.0.dev0-cp39-abi3-manylinux_2_28_x86_64.whl"
    assert out["torch_imported"] is False and out["mamba_ssm_imported"] is False
    rec = read_record(sys.prefix)
    assert rec.path == out["record"] and rec.final_mode == "prebuilt"
    assert rec.wheel == f"mamba_ssm-2.4.0.dev0+{LABEL.lower()}-cp39-abi3-manylinux_2_28_x86_64.whl"
    assert "[mamba-ssm resolver]" in log


def test_keep_label_hands_over_the_index_wheel_itself(tmp_path):
    root = tmp_path / "idx"
    make_wheel(str(root), LABEL, build_info(), platform="manylinux_2_28_x86_64")
    build_index(str(root))
    out, _ = call_hook(tmp_path, "prebuilt", MAMBA_WHEEL_INDEX=str(root), MAMBA_PREBUILT_LABEL="keep")
    assert (
        os.path.basename(out["wheel_path"])
        == f"mamba_ssm-2.4.0.dev0+{LABEL.lower()}-cp39-abi3-manylinux_2_28_x86_64.whl"
    )


def test_unreachable_index_is_an_outcome_not_an_exception(tmp_path):
    out, _ = call_hook(tmp_path, "python", MAMBA_WHEEL_INDEX=str(tmp_path / "nowhere"))
    assert out["wheel_path"] is None and out["deferred"] is False and out["status"] == "error"
    assert "MAMBA_WHEEL_INDEX" in out["message"]
    rec = read_record(sys.prefix)
    assert rec.final_mode == "python" and rec.error_kind == "index-not-found"


def test_no_torch_in_the_target_defers_the_kernels(tmp_path):
    pythons = sorted(glob.glob("/root/.pyenv/versions/3.12*/bin/python3.12"))
    if not pythons:
        pytest.skip("no pyenv Python 3.12 (a target without torch) on this machine")
    out, _ = call_hook(
        tmp_path, "deferred", MAMBA_TARGET_PYTHON=pythons[0], MAMBA_WHEEL_INDEX=str(tmp_path / "nowhere")
    )
    assert out["deferred"] is True and out["wheel_path"] is None and "install-kernels" in out["message"]
    prefix = subprocess.run(
        [pythons[0], "-c", "import sys; print(sys.prefix)"], capture_output=True, text=True
    ).stdout.strip()
    assert read_record(prefix).final_mode == "deferred"
