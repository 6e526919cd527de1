"""In an environment uv made (``uv venv``: no pip inside), every fix we print works with uv.

Real uv venvs, torch shared from the dev venv through a folder of links (tests/venvs.py) that leaves
out the dev venv's pip and uv, so the venv has neither, as ``uv venv`` makes it. mamba-ssm (this
tree's development version, pure Python) is installed into it by ``uv pip install`` from a copy of
the tree, so its dist-info's INSTALLER says ``uv``. Then:

* with uv on PATH, ``python -m mamba_ssm install-kernels --index <loopback>`` installs the index's
  wheel with uv;
* with uv neither on PATH nor importable, it installs nothing, exits 2 and prints the exact ``uv pip
  install --python <venv python> ...`` command, which the test runs (with the dev venv's uv);
* doctor's fix is the uv form of the rebuild, which uv runs (``--dry-run``: it plans mamba-ssm alone).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import zipfile

import pytest
from venvs import share_site_except, site_packages

sys.path.insert(0, os.path.dirname(__file__))
from helpers import one_wheel_index, serving

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _uv():
    try:
        import uv

        return uv.find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def _run(cmd, env, check=True, cwd=None, timeout=600):
    """Run ``cmd`` outside this checkout (``python -m mamba_ssm`` there would import the checkout's)."""
    cwd = cwd or os.path.dirname(os.path.dirname(env["MAMBA_SSM_CACHE_DIR"]))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _copy_tree(dest):
    """The tracked files of this tree (and the untracked ones git does not ignore), without build output."""
    files = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for rel in filter(None, (f.decode() for f in files)):
        src = os.path.join(REPO, rel)
        if not os.path.isfile(src):
            continue
        os.makedirs(os.path.join(dest, os.path.dirname(rel)), exist_ok=True)
        shutil.copy2(src, os.path.join(dest, rel))
    return dest


@pytest.fixture(scope="module")
def uv_world(tmp_path_factory):
    uv = _uv()
    if uv is None or sys.version_info[:2] != (3, 11):
        pytest.skip("needs the dev venv (Python 3.11, torch, uv)")
    import torch

    if not (torch.__version__.startswith("2.14.1") and (torch.version.cuda or "").startswith("13")):
        pytest.skip("the loopback index serves a wheel for torch 2.14.1+cu130")
    work = tmp_path_factory.mktemp("uvenv")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "VIRTUAL_ENV", "MAMBA_"))}
    env.update(MAMBA_SSM_CACHE_DIR=str(work / "state" / "cache"), UV_NO_CONFIG="1", UV_OFFLINE="1")
    (work / "state").mkdir()
    env.pop("UV", None)
    _run([uv, "venv", "-q", "--python", sys.executable, str(work / "venv")], env)
    py = str(work / "venv" / "bin" / "python")
    site = site_packages(py)
    share_site_except(site, work / "shared-site", ("pip", "uv"))
    tree = _copy_tree(work / "src")
    # what `uv pip install <tree>` leaves when the kernels are not built (uv runs setup.py in the venv)
    _run(
        [uv, "pip", "install", "--python", py, "--no-deps", "--no-build-isolation", "--no-cache", str(tree)],
        dict(env, MAMBA_SKIP_CUDA_BUILD="TRUE"),
    )
    (di,) = [n for n in os.listdir(site) if n.startswith("mamba_ssm-") and n.endswith(".dist-info")]
    with open(os.path.join(site, di, "INSTALLER")) as fh:
        assert fh.read().strip() == "uv"
    index, entry = one_wheel_index(work / "index")
    with zipfile.ZipFile(os.path.join(str(index), entry.relpath)) as zf:
        so = zf.read("mamba_ssm/_C.abi3.so")
    with serving(str(index)) as srv:
        yield {
            "work": work,
            "py": py,
            "site": site,
            "env": env,
            "uv": uv,
            "tree": tree,
            "url": srv.url,
            "so": so,
        }


def _path_with(work, tools):
    """PATH of /usr/bin:/bin plus a folder holding links to ``tools`` only (name -> path)."""
    folder = work / ("bin-" + "-".join(sorted(tools)) if tools else "bin-none")
    folder.mkdir(exist_ok=True)
    for name, target in tools.items():
        if not (folder / name).exists():
            os.symlink(target, folder / name)
    return f"{folder}:/usr/bin:/bin"


def test_the_venv_has_neither_pip_nor_uv(uv_world):
    env = dict(uv_world["env"], PATH=_path_with(uv_world["work"], {}))
    assert shutil.which("uv", path=env["PATH"]) is None
    probe = "import importlib.util as u; print(u.find_spec('pip'), u.find_spec('uv'))"
    assert _run([uv_world["py"], "-c", probe], env).stdout.split() == ["None", "None"]


def _installed_so(uv_world):
    path = os.path.join(uv_world["site"], "mamba_ssm", "_C.abi3.so")
    if not os.path.exists(path):
        return None
    with open(path, "rb") as fh:
        return fh.read()


def _reinstall_pure_python(uv_world):
    _run(
        [uv_world["uv"], "pip", "install", "--python", uv_world["py"], "--no-deps", "--no-build-isolation"]
        + ["--no-cache", "--reinstall", str(uv_world["tree"])],
        dict(uv_world["env"], MAMBA_SKIP_CUDA_BUILD="TRUE"),
    )
    assert _installed_so(uv_world) is None


def _importable_uv(uv_world, on):
    """With ``on``, the uv package importable in the venv as ``pip install --target T uv`` leaves it
    (``T/uv``, ``T/bin/uv``: where ``uv.find_uv_bin()`` looks), T named by a .pth file; else not."""
    pth = os.path.join(uv_world["site"], "_uv_target.pth")
    if not on:
        if os.path.exists(pth):
            os.unlink(pth)
        return
    import uv

    target = uv_world["work"] / "uv-target"
    if not target.exists():
        (target / "bin").mkdir(parents=True)
        os.symlink(os.path.dirname(uv.__file__), target / "uv")
        os.symlink(uv_world["uv"], target / "bin" / "uv")
    with open(pth, "w") as fh:
        fh.write(f"{target}\n")


@pytest.mark.parametrize("where", ["on PATH", "importable"])
def test_install_kernels_uses_uv(uv_world, where):
    _reinstall_pure_python(uv_world)
    on_path = where == "on PATH"
    env = dict(uv_world["env"], PATH=_path_with(uv_world["work"], {"uv": uv_world["uv"]} if on_path else {}))
    _importable_uv(uv_world, not on_path)
    try:
        proc = _run(
            [uv_world["py"], "-m", "mamba_ssm", "install-kernels", "--index", uv_world["url"]],
            env,
            check=False,
        )
    finally:
        _importable_uv(uv_world, False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "neither pip nor uv" not in proc.stderr
    (ran,) = [l for l in proc.stderr.splitlines() if " pip install --python " in l]
    words = shlex.split(ran.removeprefix("[install-kernels] "))
    assert os.path.basename(words[0]) == "uv" and words[1:5] == ["pip", "install", "--python", uv_world["py"]]
    assert "--no-deps" in words
    assert _installed_so(uv_world) == uv_world["so"]
    names = [
        n for n in os.listdir(uv_world["site"]) if n.startswith("mamba_ssm-") and n.endswith(".dist-info")
    ]
    (di,) = names
    assert "+cu13torch2.14cxx11abitrue" in di
    with open(os.path.join(uv_world["site"], di, "INSTALLER")) as fh:
        assert fh.read().strip() == "uv"


def test_without_uv_install_kernels_prints_the_uv_command_that_works(uv_world):
    _reinstall_pure_python(uv_world)
    env = dict(uv_world["env"], PATH=_path_with(uv_world["work"], {}))
    proc = _run(
        [uv_world["py"], "-m", "mamba_ssm", "install-kernels", "--index", uv_world["url"]], env, check=False
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert _installed_so(uv_world) is None  # nothing installed
    (command,) = re.findall(r"`(uv pip install [^`]+)`", proc.stdout)
    words = shlex.split(command)
    assert words[:5] == ["uv", "pip", "install", "--python", uv_world["py"]]
    assert "--no-deps" in words and words[-1].endswith(".whl") and os.path.isfile(words[-1])
    # the command as printed, with uv on PATH (the user's uv)
    ran = _run(["bash", "-c", command], dict(env, PATH=_path_with(uv_world["work"], {"uv": uv_world["uv"]})))
    assert "mamba-ssm" in ran.stderr
    assert _installed_so(uv_world) == uv_world["so"]


def test_doctor_fix_in_a_uv_venv_is_the_uv_rebuild_and_uv_runs_it(uv_world):
    _reinstall_pure_python(uv_world)
    env = dict(uv_world["env"], PATH=_path_with(uv_world["work"], {"uv": uv_world["uv"]}))
    proc = _run([uv_world["py"], "-m", "mamba_ssm", "doctor", "--json"], env, check=False)
    report = json.loads(proc.stdout)
    fixes = " ".join(p["fix"] or "" for p in report["problems"])
    assert "python -m pip" not in fixes and "pip install" in fixes, fixes
    commands = [c for c in re.findall(r"`([^`]+)`", fixes) if "uv pip install" in c]
    assert commands, fixes
    for command in commands:
        words = shlex.split(command, comments=True)
        assert words[:2] == ["cd", str(uv_world["tree"])], command  # installed from that folder
        i = words.index("uv")
        assert words[i : i + 5] == ["uv", "pip", "install", "--python", uv_world["py"]]
        assert "--no-deps" in words and "--no-build-isolation" in words and words[-1] == "."
        # uv plans it: mamba-ssm from that folder, nothing else (torch untouched)
        dry = _run(["bash", "-c", command + " --dry-run"], env)
        planned = re.findall(r"^ [+-] (\S+)", dry.stderr, re.MULTILINE)
        assert planned and {p.split("==")[0] for p in planned} == {"mamba-ssm"}, dry.stderr


def test_setup_py_names_the_build_requirements_in_uv_form_and_uv_installs_them(uv_world, tmp_path):
    """A --no-build-isolation build run by uv (uv sets UV) in a venv whose setuptools is older than 77
    (Python 3.11's ensurepip): setup.py's fix is the uv command for that interpreter, which works."""
    py = os.path.join(str(tmp_path / "old"), "bin", "python")
    _run([sys.executable, "-m", "venv", str(tmp_path / "old")], uv_world["env"])
    old = _run([py, "-c", "import setuptools; print(setuptools.__version__)"], uv_world["env"]).stdout.strip()
    if int(old.split(".")[0]) >= 77:
        pytest.skip(f"this Python's venv brings setuptools {old}")
    env = dict(uv_world["env"], UV=uv_world["uv"], PATH=_path_with(uv_world["work"], {"uv": uv_world["uv"]}))
    proc = _run([py, "setup.py", "--version"], env, check=False, cwd=str(uv_world["tree"]))
    assert proc.returncode != 0 and f"setuptools {old} is older than 77" in proc.stderr, proc.stderr
    (command,) = re.findall(r"Fix: (uv pip install .*), then build again", proc.stderr)
    assert shlex.split(command) == [
        "uv",
        "pip",
        "install",
        "--python",
        py,
        "setuptools>=77",
        "wheel",
        "packaging>=22",
    ]
    # the command as printed; the user's index is this machine's local PyPI mirror
    env.pop("UV_OFFLINE")
    _run(["bash", "-c", command], dict(env, UV_INDEX_URL="file:///opt/pypi/simple"))
    proc = _run([py, "setup.py", "--version"], env, check=False, cwd=str(uv_world["tree"]))
    assert proc.returncode == 0 and re.match(r"^\d+\.\d+", proc.stdout.strip().splitlines()[-1]), proc.stderr
