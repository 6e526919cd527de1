"""Metadata, sdist and wheel builds of a scratch copy of the project, through real setup.py / pip runs.

* metadata (egg_info, sdist, PEP 517 prepare_metadata) touches neither torch nor nvcc (sentinels);
* the sdist holds every source the build compiles and every header they include;
* MAMBA_SKIP_CUDA_BUILD: a pure-Python wheel without a shared object, even with one in the tree;
* a prebuilt wheel the resolver (the real hook, on a loopback index) found is handed to pip byte for byte;
* MAMBA_FORCE_BUILD under build isolation fails at once, naming --no-build-isolation;
* a source wheel (tiny C++ source) is abi3 for the lowest Python torch supports (torch's Requires-Python),
  its file name, METADATA and build info agree;
* MAMBA_FORCE_CXX11_ABI wins over a -D_GLIBCXX_USE_CXX11_ABI=0 in CFLAGS (nm shows __cxx11).
"""

import base64
import email
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile

import pytest
from _project import REPO, copy_project, sentinel_bin, sentinel_torch

from build_matrix.index import build_index
from mamba_ssm._compat.buildinfo import read_build_info
from mamba_ssm._install.record import read_record

sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "install"))
from helpers import build_info, make_wheel, serving

BASE_VERSION = re.search(
    r'__version__ = "([^"]+)"', open(os.path.join(REPO, "mamba_ssm", "_version.py")).read()
).group(1)
CUDA_HOME = os.environ.get("CUDA_HOME", "/usr/local/cuda-13.0")
CLEAN = (
    "MAMBA_SKIP_CUDA_BUILD",
    "MAMBA_FORCE_BUILD",
    "MAMBA_FALLBACK",
    "MAMBA_LOCAL_VERSION",
    "MAMBA_CUDA_ARCHS",
    "TORCH_CUDA_ARCH_LIST",
    "MAMBA_FORCE_CXX11_ABI",
    "MAMBA_WHEEL_INDEX",
    "MAMBA_PREBUILT_LABEL",
    "HIP_BUILD",
    "CFLAGS",
    "CXXFLAGS",
)


# setup.py records every wheel build's decision; keep the records of these builds out of ~/.cache.
DECISIONS = tempfile.mkdtemp(prefix="mamba-ssm-test-decisions-")


def run(cmd, cwd, env_extra=None, check=True, timeout=600):
    env = {k: v for k, v in os.environ.items() if k not in CLEAN}
    env["MAMBA_SSM_DECISION_DIR"] = DECISIONS
    env.update(env_extra or {})
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def wheel_metadata(path):
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(z.read(name)), z.namelist()


@pytest.fixture
def sentinels(tmp_path):
    log = tmp_path / "sentinel.log"
    bin_dir = sentinel_bin(str(tmp_path / "sbin"), str(log))
    torch_dir = sentinel_torch(str(tmp_path / "spkgs"), str(log))
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": torch_dir, "CUDA_HOME": "/nonexistent"}
    return env, log


def test_metadata_needs_no_torch_nvcc(tmp_path, sentinels):
    proj = copy_project(str(tmp_path / "proj"))
    env, log = sentinels
    env = dict(env, MAMBA_LOCAL_VERSION="cu13torch2.14cxx11abiTRUE")
    run([sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(tmp_path)], proj, env)
    (tmp_path / "di").mkdir()
    run([sys.executable, "setup.py", "-q", "dist_info", "--output-dir", str(tmp_path / "di")], proj, env)
    (dist_info,) = list((tmp_path / "di").glob("*.dist-info"))
    assert (
        email.message_from_string((dist_info / "METADATA").read_text())["Version"]
        == f"{BASE_VERSION}+cu13torch2.14cxx11abitrue"
    )
    pkg_info = email.message_from_string((tmp_path / "mamba_ssm.egg-info" / "PKG-INFO").read_text())
    assert pkg_info["Version"] == f"{BASE_VERSION}+cu13torch2.14cxx11abitrue"
    assert pkg_info["Name"] == "mamba-ssm"
    assert not log.exists(), log.read_text()


def test_pep517_metadata_in_isolation(tmp_path, sentinels):
    """pip's own prepare_metadata_for_build_wheel, in an isolated build env (no torch there)."""
    proj = copy_project(str(tmp_path / "proj"))
    env, log = sentinels
    report = tmp_path / "report.json"
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--no-deps",
            "--ignore-installed",
            "--report",
            str(report),
            proj,
        ],
        str(tmp_path),
        {"PATH": env["PATH"], "CUDA_HOME": "/nonexistent"},
    )
    meta = json.loads(report.read_text())["install"][0]["metadata"]
    assert meta["name"] == "mamba-ssm" and meta["version"] == BASE_VERSION
    assert not log.exists()


def test_sdist_holds_everything_the_build_compiles(tmp_path, sentinels):
    proj = copy_project(str(tmp_path / "proj"))
    env, log = sentinels
    run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path / "dist")], proj, env)
    assert not log.exists()
    (sdist,) = list((tmp_path / "dist").glob("*.tar.gz"))
    with tarfile.open(sdist) as tf:
        names = {m.name.split("/", 1)[1] for m in tf.getmembers() if m.isfile()}
        tf.extractall(tmp_path / "x", filter="data") if sys.version_info >= (3, 12) else tf.extractall(
            tmp_path / "x"
        )
    in_tree = [os.path.relpath(os.path.join(d, f), proj) for d, _, fs in os.walk(proj) for f in fs]
    expected = {p for p in in_tree if p.startswith(("csrc/", "build_matrix/")) and "__pycache__" not in p}
    expected |= {p for p in in_tree if p.startswith("mamba_ssm/") and p.endswith((".py", ".json"))}
    expected |= {"setup.py", "pyproject.toml", "MANIFEST.in", "README.md", "LICENSE", "mamba_ssm/_version.py"}
    expected |= {"mamba_ssm/py.typed"}  # PEP 561: the package's annotations are for its users' type checkers
    missing = sorted(expected - names)
    assert not missing, f"missing from the sdist: {missing}"
    (root,) = list((tmp_path / "x").iterdir())
    pkg_info = email.message_from_string((root / "PKG-INFO").read_text())
    assert pkg_info["License-Expression"] == "Apache-2.0" and pkg_info.get_all("License-File") == ["LICENSE"]
    assert not [n for n in names if n.endswith((".so", ".o", ".pyc"))]
    # every local header a compiled source includes is there (the build-info header is generated)
    for src in (root / "csrc").iterdir():
        for inc in re.findall(r'#\s*include\s+"([^"]+)"', src.read_text(errors="replace")):
            if inc != "mamba_ssm_build_info.h":
                assert (root / "csrc" / inc).is_file(), f"{src.name} includes {inc}, absent from the sdist"


@pytest.fixture(scope="module")
def skip_wheel(tmp_path_factory):
    """The MAMBA_SKIP_CUDA_BUILD wheel of a copy that has a stale _C.abi3.so lying in the tree."""
    tmp = tmp_path_factory.mktemp("skip")
    proj = copy_project(str(tmp / "proj"))
    with open(os.path.join(proj, "mamba_ssm", "_C.abi3.so"), "wb") as f:
        f.write(b"\x7fELF stale in-place build")
    log = tmp / "sentinel.log"
    env = {
        "MAMBA_SKIP_CUDA_BUILD": "TRUE",
        "MAMBA_LOCAL_VERSION": "cu13torch2.14cxx11abiTRUE",
        "MAMBA_SSM_DECISION_DIR": str(tmp / "decisions"),
        "PATH": f"{sentinel_bin(str(tmp / 'sbin'), str(log))}:{os.environ['PATH']}",
        "CUDA_HOME": "/nonexistent",
    }
    run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "-w",
            str(tmp / "out"),
            proj,
        ],
        str(tmp),
        env,
    )
    (whl,) = list((tmp / "out").glob("*.whl"))
    return whl, log


def test_skip_cuda_build_is_pure_python(skip_wheel):
    whl, log = skip_wheel
    assert whl.name == f"mamba_ssm-{BASE_VERSION}+cu13torch2.14cxx11abitrue-py3-none-any.whl"
    meta, names = wheel_metadata(whl)
    assert meta["Version"] == f"{BASE_VERSION}+cu13torch2.14cxx11abitrue"  # file name and METADATA agree
    assert not [n for n in names if n.endswith((".so", ".pyd"))]
    assert "mamba_ssm/__init__.py" in names and "mamba_ssm/_compat/buildinfo.py" in names
    assert "mamba_ssm/py.typed" in names  # PEP 561 marker: type checkers read the annotations
    # PEP 639: the license expression in METADATA, the LICENSE file under dist-info/licenses/
    assert meta["License-Expression"] == "Apache-2.0" and meta.get_all("License-File") == ["LICENSE"]
    with zipfile.ZipFile(whl) as z:
        (lic,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
        assert z.read(lic) == open(os.path.join(REPO, "LICENSE"), "rb").read()
    assert not [n for n in names if n.startswith(("build_matrix/", "tests/"))]
    assert not log.exists()  # no compiler run


def _license_terms(text):
    """The terms of an Apache License 2.0 text, whitespace-normalised (the appendix, which is how to
    apply the license and not part of it, left out)."""
    body = text.split("END OF TERMS AND CONDITIONS")[0]
    return " ".join(body.split())


def test_license_is_the_apache_2_0_text():
    """LICENSE holds Apache-2.0 (pyproject's license), word for word as another Apache-2.0 project
    ships it: packaging's LICENSE.APACHE (a test-only, independent copy of the text)."""
    import glob

    import packaging

    site = os.path.dirname(os.path.dirname(packaging.__file__))
    found = glob.glob(os.path.join(site, "packaging-*.dist-info", "licenses", "LICENSE.APACHE"))
    if not found:
        pytest.skip("this packaging's dist-info carries no LICENSE.APACHE")
    ours = open(os.path.join(REPO, "LICENSE")).read()
    assert ours.lstrip().startswith("Apache License\n                           Version 2.0, January 2004")
    assert _license_terms(ours) == _license_terms(open(found[0]).read())
    assert 'license = "Apache-2.0"' in open(os.path.join(REPO, "pyproject.toml")).read()


def _index_with(root, label, info):
    """``root`` as a wheel index (build_matrix's layout and manifest) holding one fabricated
    manylinux_2_28 wheel of this version: ``label``, its build info ``info``. Returns the wheel's path."""
    make_wheel(str(root), label, info, platform="manylinux_2_28_x86_64", version=BASE_VERSION)
    (entry,) = build_index(str(root)).wheels
    return root / entry.relpath


def _resolver_env(tmp_path, index_url):
    """The real resolver hook of the copy, on ``index_url``: its cache and its decision records in
    ``tmp_path``, no NVML, no retries."""
    return {
        "MAMBA_WHEEL_INDEX": index_url,
        "MAMBA_SSM_CACHE_DIR": str(tmp_path / "resolver-cache"),
        "MAMBA_SSM_DECISION_DIR": str(tmp_path / "decisions"),
        "MAMBA_SSM_NO_NVML": "1",
        "MAMBA_HTTP_RETRIES": "0",
    }


def _recorded_modes(decisions):
    """The final modes the resolver hook recorded in the folder ``decisions`` (one record per target)."""
    return [json.loads(p.read_text())["final_mode"] for p in sorted(decisions.glob("*.json"))]


def test_prebuilt_wheel_handed_over_unchanged(tmp_path):
    """The resolver finds a wheel for this machine's torch on a loopback index; with
    MAMBA_PREBUILT_LABEL=keep it hands over the index wheel itself, which setup.py gives pip with only
    the install id added to its dist-info."""
    prebuilt = _index_with(tmp_path / "index", "cu13torch2.14cxx11abiTRUE", build_info(version=BASE_VERSION))
    proj = copy_project(str(tmp_path / "proj"))
    with serving(str(tmp_path / "index")) as srv:
        env = dict(_resolver_env(tmp_path, srv.url), MAMBA_PREBUILT_LABEL="keep", CUDA_HOME="/nonexistent")
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-build-isolation",
                "--no-deps",
                "-w",
                str(tmp_path / "out"),
                proj,
            ],
            str(tmp_path),
            env,
        )
    (out,) = list((tmp_path / "out").glob("*.whl"))
    assert out.name == prebuilt.name
    with zipfile.ZipFile(prebuilt) as a, zipfile.ZipFile(out) as b:
        old_names, new_names = set(a.namelist()), set(b.namelist())
        (added,) = [n for n in new_names if n.endswith(".dist-info/mamba_ssm_install.json")]
        assert added.count("/") == 1 and new_names - old_names <= {added}  # the install id, dist-info only
        assert old_names - new_names == set()
        for name in old_names - {added}:  # every package file byte-identical to the index wheel's
            if not name.endswith(".dist-info/RECORD"):
                assert a.read(name) == b.read(name), name
        if added in old_names:  # this fake index wheel was itself built by setup.py: a fresh id replaces it
            assert a.read(added) != b.read(added)
        rows = b.read(added.rsplit("/", 1)[0] + "/RECORD").decode().splitlines()
        data = b.read(added)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert f"{added},sha256={digest},{len(data)}" in rows and rows[-1].endswith("/RECORD,,")
        old_rows = {
            r
            for r in a.read(added.rsplit("/", 1)[0] + "/RECORD").decode().splitlines()
            if not r.startswith(added + ",")
        }
        assert old_rows < set(rows) and len(rows) == len(old_rows) + 1
        assert len(json.loads(data)["install_id"]) == 32
    assert _recorded_modes(tmp_path / "decisions") == ["prebuilt"]
    rec = read_record(sys.prefix, {"MAMBA_SSM_DECISION_DIR": str(tmp_path / "decisions")})
    assert rec.install.to_dict() == json.loads(data)  # the record names the wheel's install id


def test_skip_and_force_builds_record_their_decision(tmp_path, skip_wheel):
    """MAMBA_SKIP_CUDA_BUILD / MAMBA_FORCE_BUILD bypass the resolver, yet the decision is recorded
    with the install id the wheel carries (so doctor can tell this install's record from an older one)."""
    whl, _ = skip_wheel
    rec = read_record(sys.prefix, {"MAMBA_SSM_DECISION_DIR": str(skip_wheel[0].parent.parent / "decisions")})
    assert rec is not None, "the MAMBA_SKIP_CUDA_BUILD wheel build recorded nothing"
    assert rec.final_mode == "python" and rec.status == "requested"
    assert "MAMBA_SKIP_CUDA_BUILD=TRUE" in rec.message
    with zipfile.ZipFile(whl) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/mamba_ssm_install.json")]
        assert json.loads(z.read(name)) == rec.install.to_dict()
        assert any(
            r.startswith(name + ",sha256=")
            for r in z.read(name.rsplit("/", 1)[0] + "/RECORD").decode().splitlines()
        )

    decisions = tmp_path / "force-decisions"
    proj = copy_project(str(tmp_path / "proj"), tiny_csrc=True)
    p = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "out"), proj],
        str(tmp_path),
        {"MAMBA_FORCE_BUILD": "TRUE", "MAMBA_SSM_DECISION_DIR": str(decisions)},
        check=False,
    )
    assert (
        p.returncode != 0
    )  # torch is absent under build isolation: the build fails, and says so in the record
    (path,) = list(decisions.glob("*.json"))
    rec = json.loads(path.read_text())
    assert rec["final_mode"] == "error" and "MAMBA_FORCE_BUILD=TRUE" in rec["message"]


def test_force_build_under_isolation_fails_at_once(tmp_path):
    proj = copy_project(str(tmp_path / "proj"), tiny_csrc=True)
    p = run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "out"), proj],
        str(tmp_path),
        {"MAMBA_FORCE_BUILD": "TRUE"},
        check=False,
    )
    assert p.returncode != 0
    out = p.stdout + p.stderr
    assert "MAMBA_FORCE_BUILD=TRUE needs torch" in out and "--no-build-isolation" in out
    assert not list((tmp_path / "out").glob("*.whl")) if (tmp_path / "out").exists() else True


def torch_python_tag():
    """``cpXY`` of the lowest Python torch declares (its Requires-Python), at least cp39 (ours).
    torch >= 2.7 compiles limited-API extensions for exactly that Python."""
    import importlib.metadata

    low = re.search(r">=\s*3\.(\d+)", importlib.metadata.metadata("torch")["Requires-Python"] or "")
    return f"cp3{max(9, int(low.group(1)) if low else 9)}"


def _needs_toolkit():
    if not os.access(os.path.join(CUDA_HOME, "bin", "nvcc"), os.X_OK):
        pytest.skip(f"no nvcc under CUDA_HOME={CUDA_HOME}")
    pytest.importorskip("torch")


def test_source_wheel_after_resolver_found_nothing(tmp_path):
    """auto fallback with a passing preflight: an abi3 wheel whose build info matches its name; its
    Python tag is torch's lowest Python (torch 2.14: Requires-Python >=3.10, Py_LIMITED_API 3.10)."""
    _needs_toolkit()
    import torch

    tag = torch_python_tag()

    proj = copy_project(str(tmp_path / "proj"), tiny_csrc=True)
    # the index serves only another torch and CUDA: nothing fits this machine's torch
    other = build_info(torch="2.9.1+cu126", cuda="12.6", nvcc="12.6", version=BASE_VERSION)
    _index_with(tmp_path / "index", "cu12torch2.9cxx11abiTRUE", other)
    with serving(str(tmp_path / "index")) as srv:
        env = dict(
            _resolver_env(tmp_path, srv.url),
            MAMBA_LOCAL_VERSION="cu13torch2.14",
            MAMBA_CUDA_ARCHS="90",
            CUDA_HOME=CUDA_HOME,
            MAX_JOBS="1",
        )
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--no-build-isolation",
                "--no-deps",
                "-w",
                str(tmp_path / "out"),
                proj,
            ],
            str(tmp_path),
            env,
        )
    (whl,) = list((tmp_path / "out").glob("*.whl"))
    assert whl.name.startswith(f"mamba_ssm-{BASE_VERSION}+cu13torch2.14-{tag}-abi3-")
    meta, names = wheel_metadata(whl)
    assert meta["Version"] == f"{BASE_VERSION}+cu13torch2.14"
    assert "mamba_ssm/_C.abi3.so" in names
    with zipfile.ZipFile(whl) as z:
        (tmp_path / "_C.abi3.so").write_bytes(z.read("mamba_ssm/_C.abi3.so"))
    info = read_build_info(tmp_path / "_C.abi3.so")
    assert info.package_version == meta["Version"]
    assert info.torch_version == torch.__version__ and info.torch_cuda == torch.version.cuda
    assert info.sass_archs == ["sm_90"] and info.ptx_archs == [] and info.python_tag == f"{tag}-abi3"
    assert info.kernels == (["cpu", "cuda"] if torch.version.cuda else ["cpu"])
    assert _recorded_modes(tmp_path / "decisions") == ["source"]
    rec = read_record(sys.prefix, {"MAMBA_SSM_DECISION_DIR": str(tmp_path / "decisions")})
    assert rec.status == "no-candidate"  # the resolver ran and found nothing, then the fallback built


def _nm(path):
    return subprocess.run(["nm", "-C", str(path)], capture_output=True, text=True, check=True).stdout


def test_force_cxx11_abi_in_symbols(tmp_path):
    """CFLAGS=-D_GLIBCXX_USE_CXX11_ABI=0 gives the old std::string; MAMBA_FORCE_CXX11_ABI=TRUE wins."""
    _needs_toolkit()
    if not shutil.which("nm"):
        pytest.skip("no nm")
    results = {}
    for forced in (False, True):
        proj = copy_project(str(tmp_path / f"proj{int(forced)}"), tiny_csrc=True)
        env = {
            "MAMBA_CUDA_ARCHS": "90",
            "CUDA_HOME": CUDA_HOME,
            "MAX_JOBS": "1",
            "CFLAGS": "-D_GLIBCXX_USE_CXX11_ABI=0",
        }
        if forced:
            env["MAMBA_FORCE_CXX11_ABI"] = "TRUE"
        run([sys.executable, "setup.py", "build_ext", "--inplace"], proj, env)
        so = os.path.join(proj, "mamba_ssm", "_C.abi3.so")
        line = next(l for l in _nm(so).splitlines() if "mamba_tiny_name" in l)
        results[forced] = (line, read_build_info(so).cxx11_abi)
    assert "std::__cxx11::basic_string" not in results[False][0]
    assert "std::__cxx11::basic_string" in results[True][0] and results[True][1] is True


def _cpu_torch_python():
    """A Python with a CPU-only torch (MAMBA_TEST_CPU_TORCH_PYTHON, or the dev cache's torch 2.13 CPU venv)."""
    cands = [
        os.environ.get("MAMBA_TEST_CPU_TORCH_PYTHON"),
        os.path.expanduser("~/.cache/mamba-ssm-dev/torch-2.13.0-cpu-cp311/bin/python"),
    ]
    for py in cands:
        if py and os.access(py, os.X_OK):
            p = subprocess.run(
                [py, "-c", "import torch, setuptools, packaging; print(torch.version.cuda)"],
                capture_output=True,
                text=True,
            )
            if p.returncode == 0 and p.stdout.strip().endswith("None"):
                return py
    return None


def test_cpu_only_torch_builds_cpu_kernel_alone(tmp_path):
    """A real CPU-only torch: no CUDA toolkit is looked at, the library holds the CPU kernel only."""
    py = _cpu_torch_python()
    if py is None:
        pytest.skip("no CPU-only torch venv (set MAMBA_TEST_CPU_TORCH_PYTHON)")
    proj = copy_project(str(tmp_path / "proj"), tiny_csrc=True)
    log = tmp_path / "sentinel.log"
    sbin = sentinel_bin(str(tmp_path / "sbin"), str(log))
    # ninja may come from this venv's bin/ (the ninja package) when the CPU venv lacks it
    env = {
        "PATH": f"{sbin}:{os.path.dirname(py)}:{os.environ['PATH']}",
        "CUDA_HOME": "/nonexistent",
        "MAX_JOBS": "1",
        "MAMBA_FORCE_BUILD": "TRUE",
    }
    run([py, "setup.py", "build_ext", "--inplace"], proj, env)
    info = read_build_info(os.path.join(proj, "mamba_ssm", "_C.abi3.so"))
    torch_version = subprocess.run(
        [py, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True
    ).stdout.strip()
    assert info.kernels == ["cpu"] and info.torch_cuda is None and info.nvcc_version is None
    assert info.sass_archs == [] and info.torch_version == torch_version
    assert not log.exists()  # nvcc never run
