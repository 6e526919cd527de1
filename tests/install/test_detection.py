"""Detection of the target environment: GPU/driver parsing, pip build isolation removed, declared
targets. Expected values come from public tool output formats and from the interpreters on disk."""

from __future__ import annotations

import glob
import importlib.metadata
import os
import stat
import subprocess
import sys
import textwrap

import pytest

from mamba_ssm._gpus import detect_gpus, parse_nvidia_smi, parse_rocminfo
from mamba_ssm._install.environment import detect, find_target_python, probe_environ

SMI = "NVIDIA H200, 9.0, 580.95.05, GPU-1111aaaa-0000\nNVIDIA GeForce GTX 1080, 6.1, 580.95.05, GPU-2222bbbb-0000\n"

ROCMINFO = textwrap.dedent("""\
    *******
    Agent 1
    *******
      Name:                    AMD EPYC 7763 64-Core Processor
      Marketing Name:          AMD EPYC 7763 64-Core Processor
      Device Type:             CPU
    *******
    Agent 2
    *******
      Name:                    gfx90a
      Marketing Name:          AMD Instinct MI250X
      Device Type:             GPU
    *******
    Agent 3
    *******
      Name:                    gfx1100
      Marketing Name:          Radeon RX 7900 XTX
      Device Type:             GPU
    """)


def test_parse_nvidia_smi():
    gpus, driver = parse_nvidia_smi(SMI)
    assert driver == "580.95.05"
    assert [(g.name, g.capability, g.capability_tuple) for g in gpus] == [
        ("NVIDIA H200", "9.0", (9, 0)),
        ("NVIDIA GeForce GTX 1080", "6.1", (6, 1)),
    ]


def test_parse_rocminfo_keeps_gpu_agents_only():
    gpus = parse_rocminfo(ROCMINFO)
    assert [(g.vendor, g.gfx, g.name) for g in gpus] == [
        ("amd", "gfx90a", "AMD Instinct MI250X"),
        ("amd", "gfx1100", "Radeon RX 7900 XTX"),
    ]


def _tool(folder, name, text):
    path = os.path.join(folder, name)
    with open(path, "w") as fh:
        fh.write("#!/bin/sh\ncat <<'EOF'\n" + text + "EOF\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)


def test_detect_gpus_via_nvidia_smi_and_cuda_visible_devices(tmp_path):
    _tool(str(tmp_path), "nvidia-smi", SMI)
    env = {"PATH": str(tmp_path), "MAMBA_SSM_NO_NVML": "1"}
    gpus, driver, how = detect_gpus(env)
    assert [g.capability for g in gpus] == ["9.0", "6.1"] and driver == "580.95.05" and "nvidia-smi" in how
    gpus, _, how = detect_gpus(dict(env, CUDA_VISIBLE_DEVICES="1"))
    assert [g.capability for g in gpus] == ["6.1"] and "CUDA_VISIBLE_DEVICES" in how
    gpus, _, _ = detect_gpus(dict(env, CUDA_VISIBLE_DEVICES="GPU-1111"))
    assert [g.name for g in gpus] == ["NVIDIA H200"]
    gpus, _, _ = detect_gpus(dict(env, CUDA_VISIBLE_DEVICES=""))
    assert gpus == []


def test_detect_gpus_via_rocminfo(tmp_path):
    _tool(str(tmp_path), "rocminfo", ROCMINFO)
    gpus, driver, how = detect_gpus({"PATH": str(tmp_path), "MAMBA_SSM_NO_NVML": "1"})
    assert [g.gfx for g in gpus] == ["gfx90a", "gfx1100"] and driver is None and "rocminfo: 2" in how


def test_no_gpu_tools_means_no_gpus(tmp_path):
    gpus, driver, how = detect_gpus({"PATH": str(tmp_path), "MAMBA_SSM_NO_NVML": "1"})
    assert gpus == [] and driver is None and "no nvidia-smi" in how


def test_probe_environ_removes_pip_isolation_only():
    env = {
        "PYTHONPATH": "/tmp/pip-build-env-abc/site:/home/me/lib",
        "PYTHONNOUSERSITE": "1",
        "PATH": "/tmp/pip-build-env-abc/overlay/bin:/usr/bin",
    }
    out = probe_environ(env)
    assert out["PYTHONPATH"] == "/home/me/lib" and "PYTHONNOUSERSITE" not in out and out["PATH"] == "/usr/bin"
    mine = probe_environ({"PYTHONNOUSERSITE": "1", "PATH": "/usr/bin"})  # set by the user, not by pip
    assert mine["PYTHONNOUSERSITE"] == "1"
    uv = probe_environ(
        {
            "UV": "/usr/bin/uv",
            "VIRTUAL_ENV": "/tmp/.tmpX/builds-v0/.tmpY",
            "PATH": "/tmp/.tmpX/builds-v0/.tmpY/bin:/usr/bin",
        }
    )
    assert "VIRTUAL_ENV" not in uv and uv["PATH"] == "/usr/bin"


def test_explicit_target_python_wins():
    assert find_target_python({"MAMBA_TARGET_PYTHON": "/opt/py/bin/python"}) == (
        "/opt/py/bin/python",
        "MAMBA_TARGET_PYTHON",
    )


def test_detect_sees_through_simulated_pip_isolation(tmp_path):
    """pip's build env puts a sitecustomize on PYTHONPATH that drops the target's site-packages;
    detection must still find the target's torch."""
    site = tmp_path / "pip-build-env-test" / "site"
    site.mkdir(parents=True)
    (site / "sitecustomize.py").write_text(
        "import sys\nsys.path[:] = [p for p in sys.path if 'site-packages' not in p]\n"
    )
    env = dict(os.environ, PYTHONPATH=str(site), PYTHONNOUSERSITE="1", MAMBA_SSM_NO_NVML="1")
    hidden = subprocess.run([sys.executable, "-c", "import torch"], env=env, capture_output=True)
    assert hidden.returncode != 0  # the simulation really hides torch
    found = detect(python=sys.executable, environ=env)
    # Independent source: torch/version.py as a file (its __version__ carries the local label).
    dist = importlib.metadata.distribution("torch")
    text = (dist.locate_file("torch/version.py")).read_text()
    expected = text.split("__version__ = ", 1)[1].split("\n", 1)[0].strip("'\"")
    assert found.torch is not None and found.torch.version == expected and found.torch.error is None
    assert found.torch.cxx11_abi in (True, False)
    assert found.prefix == os.path.realpath(sys.prefix)
    major, minor = sys.version_info[:2]
    assert f"cp{major}{minor}-cp{major}{minor}-linux_x86_64" in found.tags or found.machine != "x86_64"


def test_detect_a_python_without_torch():
    candidates = sorted(glob.glob("/root/.pyenv/versions/3.12*/bin/python3.12"))
    if not candidates:
        pytest.skip("no pyenv Python 3.12 on this machine")
    env = detect(python=candidates[0], environ={"PATH": "/usr/bin", "MAMBA_SSM_NO_NVML": "1"})
    assert env.torch is None and env.python_version.startswith("3.12.")
    assert any(t.startswith("cp312-cp312-") for t in env.tags)


def test_fast_probe_agrees_with_importing_torch():
    fast = detect(python=sys.executable, environ=dict(os.environ, MAMBA_SSM_NO_NVML="1"))
    slow = detect(
        python=sys.executable, environ=dict(os.environ, MAMBA_SSM_NO_NVML="1", MAMBA_PROBE_IMPORT_TORCH="1")
    )
    assert fast.torch.source.startswith("torch/version.py") and slow.torch.source == "import torch"
    for field in ("version", "cuda", "hip", "cxx11_abi", "git_version"):
        assert getattr(fast.torch, field) == getattr(slow.torch, field), field


def _fake_torch(root, version, cuda, abi_symbols, import_abi):
    pkg = root / "torch"
    (pkg / "lib").mkdir(parents=True)
    (pkg / "version.py").write_text(
        f"__version__ = {version!r}\ncuda = {cuda!r}\nhip = None\ngit_version = 'abc'\n"
    )
    (pkg / "lib" / "libc10.so").write_bytes(
        b"\x7fELF" + (b"_ZNSt7__cxx1112basic_string" if abi_symbols else b"_ZNSs4_Rep") + b"\0" * 64
    )
    (pkg / "__init__.py").write_text(
        "import os\n"
        "if os.environ.get('FAKE_TORCH_FORBID_IMPORT'): raise RuntimeError('torch was imported')\n"
        f"__version__ = {version!r}\nfrom . import version\n"
        f"class _C:\n    _GLIBCXX_USE_CXX11_ABI = {import_abi!r}\n"
    )
    return str(root)


def test_old_abi_torch_falls_back_to_importing_torch(tmp_path):
    path = _fake_torch(tmp_path, "2.5.1+cu124", "12.4", abi_symbols=False, import_abi=False)
    env = detect(python=sys.executable, environ=dict(os.environ, PYTHONPATH=path, MAMBA_SSM_NO_NVML="1"))
    assert env.torch.source == "import torch" and env.torch.cxx11_abi is False
    assert env.torch.version == "2.5.1+cu124" and env.torch.cuda == "12.4"


def test_new_abi_torch_is_read_without_importing_it(tmp_path):
    path = _fake_torch(tmp_path, "2.6.0+cu126", "12.6", abi_symbols=True, import_abi=True)
    env = detect(
        python=sys.executable,
        environ=dict(os.environ, PYTHONPATH=path, MAMBA_SSM_NO_NVML="1", FAKE_TORCH_FORBID_IMPORT="1"),
    )
    assert env.torch.source.startswith("torch/version.py") and env.torch.cxx11_abi is True
    assert env.torch.error is None and env.torch.version == "2.6.0+cu126"
