"""``install-kernels`` over an install of the per-platform PyPI wheel, under a torch that wheel cannot serve
(slow: a venv, real pip, a real HTTP server on 127.0.0.1).

The per-platform wheel (``mamba_ssm-<v>-cp310-abi3-manylinux_2_28_x86_64.whl``) carries no top-level
``_C``, only ``_kernels/{cpu,cu12,cu13}/_C.abi3.so`` (stable ABI, torch >= 2.10) and its release's
``_install/release_index.json``. Installed with ``--no-deps`` next to a torch below 2.10 or a ROCm
torch (pip cannot stop that), the loader rejects the module it chooses and names one fix,
``python -m mamba_ssm install-kernels``. This test runs that command as printed and checks what it
leaves: the classic (CUDA 12) or ROCm cell wheel of the release's index installed over the PyPI wheel by
pip, none of the PyPI wheel's kernel modules left to shadow it, and the loader taking the cell's top-level
``_C``.

What is simulated: the torch is a stand-in package (``torch/version.py`` of PyPI's 2.9.1+cu128 or
2.9.1+rocm6.4, a ``lib/libc10.so`` with the C++11-ABI names the resolver's probe looks for, and the
attributes the loader reads); the wheels' compiled modules are byte blobs carrying build-info records
(nothing is dlopened: the stand-in torch's ``ops.load_library`` records the path it is given). The
package's Python files in both wheels are this checkout's, and pip, the index, the download and the
resolver are real.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import urllib.parse
import zipfile

import pytest
from venvs import fresh_venv

sys.path.insert(0, os.path.dirname(__file__))
from helpers import build_info, serving

from build_matrix.index import build_index

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLATFORM = "manylinux_2_28_x86_64"
TORCHES = {
    # PyPI's / download.pytorch.org's builds: torch.__version__, torch.version.cuda, torch.version.hip
    "cuda": ("2.9.1+cu128", "12.8", None),
    "rocm": ("2.9.1+rocm6.4", None, "6.4.43482-0f2d60242"),
}
#: The classic cells the release's index holds for them, and the folder the loader chooses first.
CELLS = {"cuda": ("cu12torch2.9cxx11abiTRUE", "cu12"), "rocm": ("rocm6.4torch2.9cxx11abiTRUE", "cpu")}


def _version():
    import re

    with open(os.path.join(REPO, "mamba_ssm", "_version.py")) as fh:
        return re.search(r'^__version__ = "([^"]+)"$', fh.read(), re.MULTILINE).group(1)


V = _version()


def package_files():
    """The checkout's ``mamba_ssm`` Python files (tracked or new, not ignored), as a wheel would hold them."""
    out = subprocess.run(
        ["git", "-C", REPO, "ls-files", "-co", "--exclude-standard", "-z", "mamba_ssm"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    files = {}
    for rel in sorted(p for p in out.split("\0") if p.endswith(".py")):
        path = os.path.join(REPO, rel)
        if os.path.isfile(path):
            with open(path, "rb") as fh:
                files[rel] = fh.read()
    return files


def blob(info):
    return (
        b"\x7fELF-fake"
        + os.urandom(64)
        + b"MAMBA_SSM_BUILD_INFO_BEGIN"
        + json.dumps(info).encode()
        + (b"MAMBA_SSM_BUILD_INFO_END")
    )


def write_wheel(folder, version, tag, files, requires=()):
    """A wheel ``mamba_ssm-<version>-<tag>.whl`` holding ``files`` plus its dist-info; returns its path."""
    dist = f"mamba_ssm-{version}.dist-info"
    files = dict(files)
    files[f"{dist}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: mamba-ssm\nVersion: {version}\nRequires-Python: >=3.9\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires)
    ).encode()
    files[f"{dist}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: false\nTag: {tag}\n".encode()
    )
    lines = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    files[f"{dist}/RECORD"] = ("\n".join([*lines, f"{dist}/RECORD,,"]) + "\n").encode()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"mamba_ssm-{version}-{tag}.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def stable(torch, cuda, kernels):
    info = build_info(torch, cuda, sass=("sm_90",) if cuda else (), version=V)
    info.update(kernels=kernels, torch_abi="stable", torch_abi_floor="2.10", python_tag="cp310-abi3")
    return info


def stand_in_torch(site, version, cuda, hip):
    """A ``torch`` package in ``site`` that is the build ``version`` as far as the resolver's probe and the
    loader can tell; ``torch.ops.load_library`` only records the path it is given."""
    pkg = os.path.join(site, "torch")
    os.makedirs(os.path.join(pkg, "lib"))
    with open(os.path.join(pkg, "version.py"), "w") as fh:
        fh.write(f"__version__ = {version!r}\ncuda = {cuda!r}\nhip = {hip!r}\ngit_version = 'stand-in'\n")
    with open(os.path.join(pkg, "lib", "libc10.so"), "wb") as fh:
        fh.write(b"\0stand-in: _ZNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE\0")
    with open(os.path.join(pkg, "__init__.py"), "w") as fh:
        fh.write(
            "import types\n"
            "from . import version\n"
            "__version__ = version.__version__\n"
            "_C = types.SimpleNamespace(_GLIBCXX_USE_CXX11_ABI=True)\n"
            "ops = types.SimpleNamespace(loaded_libraries=set())\n"
            "ops.load_library = ops.loaded_libraries.add\n"
        )


LOADER = (
    "import json; from mamba_ssm import _loader; r = _loader.load(); "
    "print(json.dumps(dict(r.to_dict(), modules=_loader.find_wheel_modules())))"
)


def run(cmd, env, cwd, check=True):
    proc = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


@pytest.mark.parametrize("kind", sorted(TORCHES))
def test_install_kernels_replaces_the_pypi_wheel_with_the_cell_for_this_torch(tmp_path, kind):
    version, cuda, hip = TORCHES[kind]
    label, first_choice = CELLS[kind]
    py_files = package_files()
    # The release's index: the classic CUDA 12 and ROCm cells for torch 2.9, and its stable CUDA 13 cell.
    cells = tmp_path / "cells"
    cell_infos = {
        "cu12torch2.9cxx11abiTRUE": build_info("2.9.1+cu128", "12.8", sass=("sm_80", "sm_90"), version=V),
        "rocm6.4torch2.9cxx11abiTRUE": build_info(
            "2.9.1+rocm6.4", None, hip="6.4.43482-0f2d60242", sass=(), gfx=("gfx90a",), version=V
        ),
        "cu13torch2.10stable": stable("2.14.1+cu130", "13.0", ["cpu", "cuda"]),
    }
    cell_paths = {}
    for lab, info in cell_infos.items():
        data = blob(info)
        files = dict(py_files, **{"mamba_ssm/_C.abi3.so": data})
        cell_paths[lab] = (
            write_wheel(str(cells), f"{V}+{lab.lower()}", f"cp39-abi3-{PLATFORM}", files),
            data,
        )
    root = tmp_path / "srv"
    index, assets = root / "index", root / "assets"
    build_index(str(index), add=[p for p, _ in cell_paths.values()], move=False)
    assets.mkdir()
    for path, _ in cell_paths.values():
        shutil.copy(path, assets)
    with serving(str(root)) as srv:
        # The per-platform PyPI wheel: three kernel modules, its release's index, no top-level _C.
        release = {"index_url": srv.url + "index/", "wheels_url": srv.url + "assets/", "version": V}
        modules = {
            "cpu": stable("2.10.0+cpu", None, ["cpu"]),
            "cu12": stable("2.10.0+cu128", "12.8", ["cpu", "cuda"]),
            "cu13": stable("2.14.1+cu130", "13.0", ["cpu", "cuda"]),
        }
        files = dict(py_files)
        files.update({f"mamba_ssm/_kernels/{f}/_C.abi3.so": blob(i) for f, i in modules.items()})
        files["mamba_ssm/_install/release_index.json"] = json.dumps(release).encode()
        pypi_wheel = write_wheel(
            str(tmp_path / "pypi"), V, f"cp310-abi3-{PLATFORM}", files, requires=("torch>=2.10",)
        )
        py, site = fresh_venv(tmp_path / "venv", with_pip=False)
        stand_in_torch(site, version, cuda, hip)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MAMBA_", "PIP_", "UV_"))}
        env.pop("PYTHONPATH", None)
        env.pop("VIRTUAL_ENV", None)
        env.update(
            MAMBA_SSM_CACHE_DIR=str(tmp_path / "cache"),
            MAMBA_SSM_DECISION_DIR=str(tmp_path / "decisions"),
            PIP_NO_CACHE_DIR="1",
            PYTHONDONTWRITEBYTECODE="1",
        )
        cwd = str(tmp_path)  # not the checkout: the venv's mamba_ssm is imported
        run([py, "-m", "pip", "install", "--no-deps", "--no-index", pypi_wheel], env, cwd)
        pkg = os.path.join(site, "mamba_ssm")
        assert not [n for n in os.listdir(pkg) if n.startswith("_C")]

        before = json.loads(run([py, "-c", LOADER], env, cwd).stdout.splitlines()[-1])
        assert sorted(before["modules"]) == ["cpu", "cu12", "cu13"]
        assert (before["kind"], before["module_choice"]["folder"]) == ("incompatible", first_choice)
        assert f"running torch {version}, older than that floor" in before["reason"]
        assert "python -m mamba_ssm install-kernels" in before["fix"] and "pip install" not in before["fix"]

        # The fix, as printed (no --index, no MAMBA_WHEEL_INDEX: the wheel's release_index.json names it).
        done = run([py, "-m", "mamba_ssm", "install-kernels"], env, cwd)
        cell, data = cell_paths[label]
        assert srv.hits.get("/assets/" + urllib.parse.quote(os.path.basename(cell))) == 1, (
            srv.hits,
            done.stderr[-2000:],
        )

    # Nothing of the PyPI wheel's kernel modules is left to shadow the cell's _C, and pip's metadata
    # names the cell alone.
    left = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(pkg, "_kernels")) for f in fs]
    assert left == [], left
    assert not os.path.exists(os.path.join(pkg, "_install", "release_index.json"))
    with open(os.path.join(pkg, "_C.abi3.so"), "rb") as fh:
        assert fh.read() == data
    dists = sorted(n for n in os.listdir(site) if n.startswith("mamba_ssm-") and n.endswith(".dist-info"))
    assert dists == [f"mamba_ssm-{V}+{label.lower()}.dist-info"], dists
    with open(os.path.join(site, dists[0], "RECORD")) as fh:
        assert "mamba_ssm/_kernels/" not in fh.read()
    after = json.loads(run([py, "-c", LOADER], env, cwd).stdout.splitlines()[-1])
    assert (after["loaded"], after["path"], after["module_choice"]) == (
        True,
        os.path.join(pkg, "_C.abi3.so"),
        None,
    )
    assert after["build_info"]["torch_version"] == version
