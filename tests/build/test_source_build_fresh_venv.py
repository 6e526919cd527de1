"""README's "Building from source" commands, run as written in fresh venvs (issue 26, item 6).

The finding: ``python3.11 -m venv v; v/bin/pip install torch; v/bin/pip install --no-build-isolation .``
failed at metadata with "`project.license` must be valid exactly by one definition": a
``--no-build-isolation`` build uses the venv's own setuptools, 65.5 on Python 3.11 (older than the SPDX
license string), none at all on Python 3.12+. README now installs the build requirements first, and
setup.py stops with that fix when they were skipped.

What runs: the README block's lines, each through bash in the venv (its ``bin`` first on PATH, as an
activated venv has it), with two values replaced: ``CUDA_HOME`` by this machine's toolkit and
``MAMBA_CUDA_ARCHS`` by ci/test.sh's arch list, so the build reuses the in-place build's objects (ninja)
instead of compiling every kernel again. The venv of this interpreter shares torch through a .pth file
(the tests' helper) and builds, installs and loads ``mamba_ssm._C``; the other supported Pythons found
here (pyenv; no torch for them, so pip skips dependencies) must get past metadata to setup.py's
"needs torch" preflight.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
from venvs import fresh_venv

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CI_ARCHS = "90"  # ci/test.sh's MAMBA_CUDA_ARCHS default: the in-place build's objects are reused

pytestmark = pytest.mark.slow

LICENSE_ERROR = "must be valid exactly by one definition"


def readme_commands() -> list[str]:
    """The lines of README's first code block under "## Building from source"."""
    with open(os.path.join(REPO, "README.md")) as fh:
        text = fh.read()
    section = text.split("## Building from source", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.DOTALL)
    assert block, "README's 'Building from source' section has no bash block"
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def cuda_home() -> str:
    for candidate in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if candidate and os.path.exists(os.path.join(candidate, "bin", "nvcc")):
            return candidate
    pytest.skip("no CUDA toolkit (CUDA_HOME) for the documented CUDA build")


def for_here(line: str, home: str) -> str:
    """The README line with this machine's CUDA_HOME and CI's arch list; fails when README changed
    so that neither is found (update this test with it)."""
    line, n_home = re.subn(r"CUDA_HOME=\S+", f"CUDA_HOME={home}", line)
    line, n_archs = re.subn(r'MAMBA_CUDA_ARCHS=("[^"]*"|\S+)', f'MAMBA_CUDA_ARCHS="{CI_ARCHS}"', line)
    assert n_home == 1 and n_archs == 1, f"README's build command changed: {line}"
    return line


def path_without(tool: str, tmp_path) -> str:
    """This PATH with every folder that holds ``tool`` replaced by a folder of links to everything else in
    it (a machine without ``tool``), and without this interpreter's venv's bin."""
    here_bin = os.path.dirname(sys.executable)
    folders = []
    for i, folder in enumerate(os.environ["PATH"].split(os.pathsep)):
        if not folder or os.path.realpath(folder) == os.path.realpath(here_bin):
            continue
        if os.path.exists(os.path.join(folder, tool)):
            shadow = tmp_path / f"path-{i}"
            shadow.mkdir()
            for name in os.listdir(folder):
                if name != tool:
                    os.symlink(os.path.join(folder, name), shadow / name)
            folder = str(shadow)
        folders.append(folder)
    return os.pathsep.join(folders)


def venv_env(venv: str, tmp_path, path: str | None = None) -> dict[str, str]:
    env = dict(
        os.environ,
        PATH=os.path.join(venv, "bin") + os.pathsep + (path or os.environ["PATH"]),
        VIRTUAL_ENV=venv,
        MAMBA_SSM_CACHE_DIR=str(tmp_path / "cache"),
        MAMBA_SSM_NO_NVML="1",
        MAMBA_WHEEL_INDEX=str(tmp_path / "no-index"),
    )
    for key in (
        "PYTHONPATH",
        "PYTHONHOME",
        "TORCH_CUDA_ARCH_LIST",
        "MAMBA_CUDA_ARCHS",
        "MAMBA_SKIP_CUDA_BUILD",
    ):
        env.pop(key, None)
    env.setdefault("MAX_JOBS", "1")
    return env


def bash(line: str, env: dict[str, str], timeout: int = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", line], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )


def venv_setuptools(py: str) -> str | None:
    proc = subprocess.run(
        [py, "-c", "import setuptools; print(setuptools.__version__)"], capture_output=True, text=True
    )
    return proc.stdout.strip() if proc.returncode == 0 else None


def test_readme_source_build_in_a_fresh_venv_of_this_python(tmp_path):
    """This interpreter's Python, torch shared but no ninja (neither the Python package nor on PATH, as on a
    fresh machine): the build command alone stops at setup.py's setuptools preflight naming the fix (never
    the license error); README's lines in order build, install and load the kernels (issue 36: the recipe
    lacked ninja, and the build stopped at the ninja preflight)."""
    pytest.importorskip("torch")
    requirements, build = readme_commands()
    home = cuda_home()
    build = for_here(build, home)
    venv = str(tmp_path / "venv")
    py, site = fresh_venv(venv, hide=("ninja",))
    env = venv_env(venv, tmp_path, path_without("ninja", tmp_path))
    assert shutil.which("ninja", path=env["PATH"]) is None
    hidden = subprocess.run([py, "-c", "import ninja"], env=env, capture_output=True, timeout=300)
    assert hidden.returncode != 0, "the fresh venv must not see the dev venv's ninja"

    old = venv_setuptools(py)
    if old is not None and int(old.split(".")[0]) < 77:  # Python <= 3.11: ensurepip's setuptools
        proc = bash(build, env, timeout=900)
        log = proc.stdout + proc.stderr
        assert proc.returncode != 0, log[-3000:]
        assert f"setuptools {old} is older than 77" in log, log[-3000:]
        assert "pip install 'setuptools>=77' wheel 'packaging>=22'" in log, log[-3000:]
        assert LICENSE_ERROR not in log, log[-3000:]

    proc = bash(requirements, env, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    proc = bash(build, env)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-5000:]
    assert LICENSE_ERROR not in log
    assert glob.glob(os.path.join(site, "mamba_ssm", "_C*.so")), log[-3000:]
    loaded = subprocess.run(
        [py, "-c", "import json; from mamba_ssm import _loader; print(json.dumps(_loader.load().to_dict()))"],
        env=env,
        cwd=str(tmp_path),  # not the checkout: the installed package
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    result = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert result["loaded"], result
    assert result["path"].startswith(site), result
    assert "cuda" in result["build_info"]["kernels"] and result["build_info"]["sass_archs"] == ["sm_90"]
    requires = subprocess.run(
        [py, "-c", "from importlib.metadata import requires; print(requires('mamba-ssm'))"],
        env=env,
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "einops" in requires.stdout, requires  # the source build's wheel requires it too (issue 36)


def other_pythons() -> list[str]:
    """Supported CPython versions other than this one that this machine has (pyenv)."""
    found = []
    here = f"{sys.version_info[0]}.{sys.version_info[1]}"
    for minor in range(9, 14):
        version = f"3.{minor}"
        if version == here:
            continue
        candidates = sorted(
            glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python{version}"))
        )
        exe = candidates[-1] if candidates else shutil.which(f"python{version}")
        if exe:
            found.append(exe)
    return found


@pytest.mark.parametrize(
    "base_python", other_pythons() or [None], ids=lambda p: os.path.basename(p or "none")
)
def test_readme_source_build_gets_past_metadata_on_every_python(base_python, tmp_path):
    """Every other supported Python here (no torch for them): after README's first line the build gets
    through metadata to setup.py's torch preflight; without it, a venv with an old setuptools stops at
    setup.py's setuptools preflight, never the license error."""
    if base_python is None:
        pytest.skip("no other CPython 3.9-3.13 on this machine")
    requirements, build = readme_commands()
    build = for_here(build, os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    venv = str(tmp_path / "venv")
    py, _ = fresh_venv(venv, base_python, shared=False)
    # README installs torch first; there is none for this Python here, and pip would download its
    # gigabytes to resolve the dependency, so pip skips dependencies (metadata and build run as written).
    env = dict(venv_env(venv, tmp_path), PIP_NO_DEPS="1")

    old = venv_setuptools(py)
    proc = bash(build, env, timeout=900)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log[-3000:]
    assert LICENSE_ERROR not in log, log[-3000:]
    if old is None:  # Python 3.12+: pip cannot even load the backend
        assert "No module named 'setuptools'" in log, log[-3000:]
    elif int(old.split(".")[0]) < 77:
        assert f"setuptools {old} is older than 77" in log, log[-3000:]

    proc = bash(requirements, env, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    proc = bash(build, env, timeout=900)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log[-3000:]  # no torch for this Python here
    assert LICENSE_ERROR not in log, log[-3000:]
    assert "No module named 'setuptools'" not in log and "No module named 'packaging'" not in log, log[-3000:]
    assert "needs torch in the build environment" in log, log[-3000:]
