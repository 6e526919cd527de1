"""The advice matches the install it is for (issue 36, item 4): a development version is sent to its
rebuild, never to an index that cannot have it; a CPU torch is never told about CUDA_HOME; a failed
attempt is never announced as a recorded install; a source fallback that worked keeps no stale
"What to do"."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from helpers import build_info, env_dict, make_wheel

from mamba_ssm._install.environment import Environment

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _tree_version():
    with open(os.path.join(REPO, "mamba_ssm", "_version.py")) as fh:
        return re.search(r'^__version__ = "([^"]+)"$', fh.read(), re.MULTILINE).group(1)


def _docs_in_place_build():
    """docs/build.md's in-place build line, without the variables naming this machine's toolkit/archs."""
    with open(os.path.join(REPO, "docs", "build.md")) as fh:
        lines = fh.read().split("```")[1].splitlines()
    line = next(lines[i + 1] for i, l in enumerate(lines) if l.startswith("#") and "in place" in l)
    words = shlex.split(line)
    while words[0].split("=", 1)[0] in ("CUDA_HOME", "MAMBA_CUDA_ARCHS"):
        words.pop(0)
    return words


def test_install_kernels_for_a_dev_version_names_the_rebuild_not_an_unreachable_index(tmp_path):
    if ".dev" not in _tree_version():
        pytest.skip("this tree is a release")
    env = {k: v for k, v in os.environ.items() if k != "MAMBA_WHEEL_INDEX"}
    env["MAMBA_SSM_CACHE_DIR"] = str(tmp_path / "cache")
    env["CUDA_HOME"] = "/usr/local/cuda-13.0"  # torch's guess needs no help: no CUDA_HOME in the command
    proc = subprocess.run(
        [sys.executable, "-m", "mamba_ssm", "install-kernels", "--dry-run"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out  # no fitting wheel, not an error
    assert "cannot resolve" not in out and "Could not read the wheel index" not in out
    assert f"mamba-ssm {_tree_version()} is a development version, which no published wheel index has" in out
    (first, *_) = re.findall(r"`([^`]+)`", out)
    assert shlex.split(first) == ["cd", REPO, "&&", *_docs_in_place_build()]
    assert not os.path.exists(tmp_path / "cache" / "wheels")  # nothing was looked for


def test_a_failed_preflight_is_announced_as_a_failed_attempt(tmp_path):
    """setup.py's preflight fails (an arch nvcc cannot target) after the hook recorded the attempt: its
    line says the attempt failed and installed nothing, never "install recorded"."""
    if not os.access("/usr/local/cuda-13.0/bin/nvcc", os.X_OK):
        pytest.skip("needs nvcc 13.0 (the preflight checks the archs against it)")
    env = dict(
        os.environ,
        MAMBA_FORCE_BUILD="TRUE",
        MAMBA_CUDA_ARCHS="95",
        CUDA_HOME="/usr/local/cuda-13.0",
        MAMBA_SSM_DECISION_DIR=str(tmp_path / "decisions"),
    )
    proc = subprocess.run(
        [sys.executable, "setup.py", "bdist_wheel"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0 and "MAMBA_CUDA_ARCHS='95'" in proc.stderr, proc.stderr
    assert "install recorded" not in proc.stderr and "decision recorded" not in proc.stderr
    (line,) = [l for l in proc.stderr.splitlines() if "recorded in" in l]
    assert "this failed attempt (nothing installed) is recorded in " + str(tmp_path / "decisions") in line
    assert os.listdir(tmp_path / "decisions")


def _fake_nvcc_wrapper(tmp_path, monkeypatch):
    """A toolkit root and PATH's only nvcc a wrapper script in another prefix (CUDA_HOME/CUDA_PATH
    unset): torch would guess the toolkit wrongly, so a CUDA build names it. Returns the root."""
    root = tmp_path / "toolkits" / "cuda-13.0"
    for sub in ("bin", "include", "lib64"):
        (root / sub).mkdir(parents=True)
    shutil.copy("/bin/true", root / "bin" / "nvcc")
    (root / "include" / "cuda_runtime.h").write_text("")
    (root / "lib64" / "libcudart.so").write_text("")
    bindir = tmp_path / "usr-local-bin"
    bindir.mkdir()
    (bindir / "nvcc").write_text(f'#!/bin/sh\nexec "{root}/bin/nvcc" "$@"\n')
    (bindir / "nvcc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    return str(root)


def _no_candidate(tmp_path, torch, cuda, version="2.4.0"):
    """The resolver's no-candidate resolution for a declared torch against an index of one cu13 wheel."""
    from build_matrix.index import build_index
    from mamba_ssm._install.resolve import resolve

    index = tmp_path / f"index-{torch}"
    make_wheel(
        str(index), "cu13torch2.14cxx11abiTRUE", build_info(version=version), "manylinux_2_28_x86_64", version
    )
    build_index(str(index))
    env = Environment.from_dict(env_dict(torch=torch, cuda=cuda))
    res = resolve(version, index=str(index), env=env, pinned=None, fetch=False)
    assert str(res.status) == "no-candidate", res.message
    return res


@pytest.mark.parametrize(("torch", "cuda"), [("2.13.0+cpu", None), ("2.14.1+cu126", "12.6")])
def test_a_cpu_torch_is_never_told_about_cuda_home(tmp_path, monkeypatch, torch, cuda):
    root = _fake_nvcc_wrapper(tmp_path, monkeypatch)
    res = _no_candidate(tmp_path, torch, cuda)
    (build,) = [c for c in re.findall(r"`([^`]+)`", res.message) if "MAMBA_FORCE_BUILD" in c]
    words = shlex.split(build)
    if cuda is None:
        assert "CUDA_HOME" not in res.message and words[0] == "MAMBA_FORCE_BUILD=TRUE"
    else:  # a CUDA torch: the wrapper's toolkit is named
        assert words[:2] == [f"CUDA_HOME={root}", "MAMBA_FORCE_BUILD=TRUE"]
    assert words[-1] == "mamba-ssm==2.4.0" and "--no-deps" in words


def test_a_source_fallback_that_worked_keeps_no_stale_what_to_do(tmp_path, monkeypatch):
    """No prebuilt wheel fitted and the auto fallback built the kernels: the record keeps what the
    resolver found, not its advice for an install without kernels."""
    from mamba_ssm._install import setup_hook
    from mamba_ssm._install.record import InstallMode, read_record

    monkeypatch.setenv("MAMBA_SSM_DECISION_DIR", str(tmp_path / "decisions"))
    monkeypatch.setattr(setup_hook, "_say", lambda text: None)
    res = _no_candidate(tmp_path, "2.13.0+cpu", None)
    assert "What to do:" in res.message
    outcome = setup_hook.Outcome(None, False, res.message, res.status, res.record(), str(tmp_path / "venv"))
    setup_hook.record(outcome, InstallMode.SOURCE, install_id="e" * 32)
    rec = read_record(str(tmp_path / "venv"))
    assert rec.final_mode is InstallMode.SOURCE
    assert rec.message.startswith("No prebuilt mamba-ssm wheel fits.") and "What to do" not in rec.message
    assert rec.message.endswith(
        "went on with a source build of the kernels (the fallback), so nothing is left to do."
    )
    # a fallback to the pure-Python package keeps the advice: the kernels are still missing
    setup_hook.record(outcome, InstallMode.PYTHON, install_id="f" * 32)
    assert "What to do:" in read_record(str(tmp_path / "venv")).message
