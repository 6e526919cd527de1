"""End to end with real pip / uv, a real HTTP server on 127.0.0.1 and the host-cell wheel (slow).

A fresh venv per scenario shares the dev venv's torch through a .pth file (one CUDA torch is 5.4 GiB).
The host wheel is ``MAMBA_E2E_WHEEL``, else the newest ``dist/cells/*cu13torch2.10stable*.whl`` that
``python -m build_matrix build --host`` left, else one built here with ``pip wheel
--no-build-isolation`` (MAMBA_FORCE_BUILD, sm_90; incremental after ci/test.sh's in-place build).
"""

from __future__ import annotations

import csv
import glob
import io
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from helpers import serving  # noqa: E402

from build_matrix.index import build_index, pin_sdist  # noqa: E402

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LABEL = "cu13torch2.10stable"  # the host cell: stable ABI, built with torch 2.14.1+cu130
SHARED_SITE = sysconfig.get_paths()["purelib"]  # the dev venv's site-packages (torch 2.14.1+cu130)
CPU_TORCH_WHEEL = sorted(glob.glob("/opt/wheels/torch-2.13.0+cpu-cp311-*.whl"))


def run(cmd, env=None, timeout=600, check=True, cwd=None):
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def _torch_label_ok():
    import torch

    return torch.__version__.startswith("2.14") and torch.version.cuda and torch.version.cuda.startswith("13")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    if sys.version_info[:2] != (3, 11) or not _torch_label_ok():
        pytest.skip("needs the dev venv (Python 3.11, torch 2.14 + CUDA 13)")
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="module")
def host_wheel(work):
    given = os.environ.get("MAMBA_E2E_WHEEL")
    if given:
        return given
    cells = sorted(
        glob.glob(os.path.join(REPO, "dist", "cells", f"mamba_ssm-*+{LABEL.lower()}-*.whl"))
        + glob.glob(os.path.join(REPO, "build", "main_job", "cells", f"mamba_ssm-*+{LABEL.lower()}-*.whl")),
        key=os.path.getmtime,
    )
    if cells:
        return cells[-1]
    out = os.path.join(REPO, "build", "resolver_e2e_wheel")
    shutil.rmtree(out, ignore_errors=True)
    env = dict(
        os.environ,
        MAMBA_FORCE_BUILD="TRUE",
        MAMBA_CUDA_ARCHS=os.environ.get("MAMBA_CUDA_ARCHS", "90"),
        MAMBA_LOCAL_VERSION=LABEL,
        MAX_JOBS=os.environ.get("MAX_JOBS", "2"),
    )
    env.setdefault("CUDA_HOME", "/usr/local/cuda-13.0")
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", out, REPO],
        env=env,
        timeout=1800,
    )
    return glob.glob(os.path.join(out, "mamba_ssm-*.whl"))[0]


@pytest.fixture(scope="module")
def sdist(work):
    out = work / "sdist"
    run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(out), REPO], timeout=600)
    return glob.glob(str(out / "mamba_ssm-*.tar.gz"))[0]


def cpu_cell_wheel():
    """The matrix's CPU cell (torch 2.13 +cpu) when `python -m build_matrix build` made it, else None."""
    found = sorted(
        glob.glob(os.path.join(REPO, "dist", "cells", "mamba_ssm-*+cputorch2.13cxx11abitrue-*.whl")),
        key=os.path.getmtime,
    )
    return found[-1] if found else None


@pytest.fixture(scope="module")
def server(work, host_wheel, sdist):
    root = work / "index"
    # allow_unrepaired: the fallback host wheel comes from `pip wheel` (linux_x86_64, not auditwheel-repaired)
    manifest = build_index(
        str(root),
        add=[host_wheel] + ([cpu_cell_wheel()] if cpu_cell_wheel() else []),
        move=False,
        allow_unrepaired=True,
    )
    pin_sdist(sdist, manifest)
    with serving(str(root)) as srv:
        yield srv


def venv(path, share_torch=True):
    run([sys.executable, "-m", "venv", str(path)], timeout=300)
    py = os.path.join(path, "bin", "python")
    site = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    if share_torch:
        with open(os.path.join(site, "_shared_torch.pth"), "w") as fh:
            fh.write(SHARED_SITE + "\n")
    return py, site


def path_without_nvcc(work):
    """PATH minus CUDA folders and this venv; a folder holding an nvcc (here /usr/local/bin has a wrapper)
    is replaced by a shadow folder of links to everything else in it."""
    out = []
    for i, d in enumerate(os.environ["PATH"].split(":")):
        if not d or "cuda" in d or d.startswith(sys.prefix):
            continue
        if os.path.exists(os.path.join(d, "nvcc")):
            shadow = work / f"path-shadow-{i}"
            if not shadow.exists():
                shadow.mkdir()
                for name in os.listdir(d):
                    if name != "nvcc":
                        os.symlink(os.path.join(d, name), shadow / name)
            d = str(shadow)
        out.append(d)
    path = ":".join(out)
    assert shutil.which("nvcc", path=path) is None
    return path


def clean_env(work, index_url, **extra):
    """No compiler, no CUDA toolkit, no nvcc on PATH; the loopback index; a private cache."""
    path = path_without_nvcc(work)
    env = dict(
        os.environ,
        PATH=path,
        CUDA_HOME="/nonexistent",
        CC="false",
        CXX="false",
        MAMBA_WHEEL_INDEX=index_url,
        MAMBA_SSM_CACHE_DIR=str(work / "cache"),
        PIP_NO_CACHE_DIR="1",
    )
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def record_rows(text):
    keep = []
    for row in csv.reader(io.StringIO(text)):
        if not row or row[0].startswith("../") or "__pycache__" in row[0]:
            continue
        # what the installer itself adds to dist-info (pip: INSTALLER, REQUESTED, direct_url.json; uv: those
        # and uv_build.json / uv_cache.json) is not part of the wheel
        if row[0].split("/")[-1] in (
            "INSTALLER",
            "REQUESTED",
            "direct_url.json",
            "uv_build.json",
            "uv_cache.json",
        ):
            continue
        keep.append(tuple(row))
    return sorted(keep)


def wheel_record(wheel):
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/RECORD"))
        return record_rows(zf.read(name).decode())


def installed_record(site):
    paths = glob.glob(os.path.join(site, "mamba_ssm-*.dist-info", "RECORD"))
    assert len(paths) == 1, paths
    with open(paths[0]) as fh:
        return record_rows(fh.read())


def doctor(py, env, cwd):
    proc = run([py, "-m", "mamba_ssm", "doctor", "--json"], env=env, check=False, cwd=cwd, timeout=300)
    return json.loads(proc.stdout)


def decision(py, env, cwd):
    proc = run(
        [
            py,
            "-c",
            "import json; from mamba_ssm._install.decision import read_decision; print(json.dumps(read_decision()))",
        ],
        env=env,
        cwd=cwd,
    )
    return json.loads(proc.stdout)


def split_record(rows):
    """(rows of package files, {dist-info file name: row}) with the dist-info folder name dropped."""
    pkg = sorted(r for r in rows if ".dist-info/" not in r[0])
    meta = {r[0].split("/", 1)[1]: r for r in rows if ".dist-info/" in r[0]}
    return pkg, meta


def check_prebuilt_installed(py, site, env, work, host_wheel):
    """The installed files are the index wheel's, byte for byte (same RECORD rows); only the version
    differs: the sdist's instead of the local label (mamba_ssm/_install/relabel.py says why)."""
    pkg_i, meta_i = split_record(installed_record(site))
    pkg_w, meta_w = split_record(wheel_record(host_wheel))
    assert pkg_i == pkg_w and any(r[0].endswith(".so") for r in pkg_i)
    for name in ("WHEEL", "entry_points.txt", "top_level.txt"):
        if name in meta_w:
            assert meta_i[name][1:] == meta_w[name][1:]
    dist_info = glob.glob(os.path.join(site, "mamba_ssm-*.dist-info"))[0]
    assert os.path.basename(dist_info) == "mamba_ssm-2.4.0.dev0.dist-info"
    with open(os.path.join(dist_info, "mamba_ssm_variant.json")) as fh:
        assert json.load(fh)["index_wheel"] == os.path.basename(host_wheel)
    with zipfile.ZipFile(host_wheel) as zf:
        meta_src = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    with open(os.path.join(dist_info, "METADATA")) as fh:
        meta_dst = fh.read()
    differ = [(a, b) for a, b in zip(meta_src.splitlines(), meta_dst.splitlines()) if a != b]
    assert differ == [("Version: 2.4.0.dev0+" + LABEL.lower(), "Version: 2.4.0.dev0")]
    doc = doctor(py, env, str(work))
    assert doc["compiled_module"]["loaded"] is True, doc["compiled_module"]
    dec = decision(py, env, str(work))
    assert dec["final_mode"] == "prebuilt" and dec["wheel"] == os.path.basename(host_wheel)


def test_pip_with_build_isolation_installs_the_index_wheel_unchanged(work, server, sdist, host_wheel):
    py, site = venv(work / "iso")
    env = clean_env(work, server.url)
    proc = run([py, "-m", "pip", "install", "-v", sdist], env=env)
    assert "[mamba-ssm resolver]" in proc.stdout + proc.stderr
    check_prebuilt_installed(py, site, env, work, host_wheel)


def test_pip_without_build_isolation(work, server, sdist, host_wheel):
    py, site = venv(work / "noiso")
    env = clean_env(work, server.url)
    run([py, "-m", "pip", "install", "-q", "setuptools>=70", "wheel", "packaging>=24"], env=env)
    run([py, "-m", "pip", "install", "--no-build-isolation", sdist], env=env)
    check_prebuilt_installed(py, site, env, work, host_wheel)


def test_uv_finds_the_target_outside_its_build_venv(work, server, sdist, host_wheel):
    uv = shutil.which("uv") or os.path.join(sys.prefix, "bin", "uv")
    if not os.path.exists(uv):
        pytest.skip("uv is not installed (ci/requirements-dev.txt lists it)")
    py, site = venv(work / "uv")
    env = clean_env(work, server.url, UV_CACHE_DIR=str(work / "uv-cache"))
    # --no-deps: uv does not count torch reached through a .pth file as installed.
    proc = run([uv, "pip", "install", "--python", py, "--no-deps", "-v", sdist], env=env)
    assert "uv's --python" in proc.stderr  # the resolver found the target through the uv process
    check_prebuilt_installed(py, site, env, work, host_wheel)
    # the target named by VIRTUAL_ENV in uv's environment (no --python)
    venv_env = dict(
        env, VIRTUAL_ENV=os.path.dirname(os.path.dirname(py)), MAMBA_SSM_CACHE_DIR=str(work / "cache-uv2")
    )
    proc = run(
        [uv, "pip", "install", "--reinstall", "--no-cache", "--no-deps", "-v", sdist],
        env=venv_env,
        cwd=str(work),
    )
    assert "VIRTUAL_ENV=" in proc.stderr and "of the uv process" in proc.stderr
    check_prebuilt_installed(py, site, venv_env, work, host_wheel)


def test_fresh_env_defers_kernels_then_install_kernels_adds_them(work, server, sdist, host_wheel):
    py, site = venv(work / "fresh", share_torch=False)
    env = clean_env(work, server.url)
    # torch is not in the target while pip builds our sdist (as when one command installs both)
    run([py, "-m", "pip", "install", "--no-deps", sdist], env=env)
    assert not glob.glob(os.path.join(site, "mamba_ssm", "_C*.so"))
    dec = decision(py, dict(env, PYTHONPATH=SHARED_SITE), str(work))
    assert dec["final_mode"] == "deferred" and "install-kernels" in dec["message"]
    with open(os.path.join(site, "_shared_torch.pth"), "w") as fh:  # torch arrives
        fh.write(SHARED_SITE + "\n")
    before = doctor(py, env, str(work))  # torch present, kernels still deferred: doctor points to the fix
    assert before["compiled_module"]["found"] is False and "install-kernels" in json.dumps(before["problems"])
    proc = run([py, "-m", "mamba_ssm", "install-kernels"], env=env, cwd=str(work), check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert glob.glob(os.path.join(site, "mamba_ssm", "_C*.so"))
    assert doctor(py, env, str(work))["compiled_module"]["loaded"] is True
    assert decision(py, env, str(work))["final_mode"] == "install-kernels"


def _cpu_torch_site():
    """A shared venv with torch 2.13.0+cpu (from this machine's disk), made once."""
    home = os.environ.get("MAMBA_DEV_HOME", os.path.expanduser("~/.cache/mamba-ssm-dev"))
    # the CPU cell's venv of `python -m build_matrix build` has exactly this torch: share it when present
    cell = os.path.join(home, "cells", "cputorch2.13cxx11abiTRUE-x86_64-py311", "venv", "bin", "python")
    probe = "import torch, sysconfig; assert torch.__version__ == '2.13.0+cpu'; print(sysconfig.get_paths()['purelib'])"
    if os.path.exists(cell):
        proc = run([cell, "-c", probe], check=False)
        if proc.returncode == 0:
            return proc.stdout.strip()
    path = os.path.join(home, "torch-2.13.0-cpu-cp311")
    py = os.path.join(path, "bin", "python")
    if not os.path.exists(py) or run([py, "-c", "import torch"], check=False).returncode != 0:
        shutil.rmtree(path, ignore_errors=True)
        run([sys.executable, "-m", "venv", path])
        run([py, "-m", "pip", "install", "-q", CPU_TORCH_WHEEL[0], "packaging"], timeout=1200)
    return run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()


def test_stale_pip_cache_is_caught_and_doctor_names_the_fix(work, server, sdist, host_wheel):
    if not CPU_TORCH_WHEEL:
        pytest.skip("torch 2.13.0+cpu is not on this machine's disk (/opt/wheels)")
    cache = str(work / "pip-cache")
    py_a, _ = venv(work / "cacheA")
    env = clean_env(work, server.url, PIP_CACHE_DIR=cache)
    env.pop("PIP_NO_CACHE_DIR")
    # By name from a find-links folder, as from an index: pip looks its wheel cache up by the sdist's
    # link and name only (a direct path to the sdist has no name yet and skips the lookup).
    by_name = ["--no-deps", "--find-links", os.path.dirname(sdist), "mamba-ssm==2.4.0.dev0"]
    run([py_a, "-m", "pip", "install"] + by_name, env=env)  # pip caches the built (prebuilt cu13) wheel
    cpu_site = _cpu_torch_site()
    py_b, site_b = venv(work / "cacheB", share_torch=False)
    with open(os.path.join(site_b, "_shared_torch.pth"), "w") as fh:
        fh.write(cpu_site + "\n")
    log = run([py_b, "-m", "pip", "install"] + by_name, env=env).stdout
    # pip's cache served A's wheel (no error); its python tag is the build's abi3 floor (cp39, cp310, ...)
    assert re.search(r"Using cached mamba_ssm-2\.4\.0\.dev0-cp3\d+-abi3", log), log[-2000:]
    assert glob.glob(os.path.join(site_b, "mamba_ssm", "_C*.so"))  # built for torch 2.14.1+cu130
    doc = doctor(py_b, env, str(work))
    cm = doc["compiled_module"]
    assert cm["loaded"] is False and any("2.13" in r for r in cm["incompatibilities"]), cm
    text = json.dumps(doc)
    assert "--no-cache-dir" in text or "install-kernels" in text
    if cpu_cell_wheel():
        # the fix doctor names: install-kernels resolves again for this torch and installs the +cpu wheel
        proc = run([py_b, "-m", "mamba_ssm", "install-kernels"], env=env, cwd=str(work), check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        doc = doctor(py_b, env, str(work))
        assert doc["compiled_module"]["loaded"] is True
        assert doc["compiled_module"]["build_info"]["torch_version"].startswith("2.13")
        assert decision(py_b, env, str(work))["wheel"] == os.path.basename(cpu_cell_wheel())
    else:
        # no +cpu wheel on this index: the resolver says so and the pure-Python package is used
        fix_env = dict(env, MAMBA_FALLBACK="python")
        run(
            [py_b, "-m", "pip", "install", "--no-deps", "--no-cache-dir", "--force-reinstall", sdist],
            env=fix_env,
        )
        dec = decision(py_b, env, str(work))
        assert dec["status"] == "no-candidate" and dec["final_mode"] == "python"
        assert "cputorch2.13cxx11abiTRUE" in dec["message"]
        assert doctor(py_b, env, str(work))["compiled_module"]["found"] is False
