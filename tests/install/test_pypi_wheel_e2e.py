"""The per-platform PyPI wheel end to end, with real pip and uv (slow).

``python -m build_matrix release --dry-run`` writes the PyPI wheel beside the cells and lists it with
the sdist on a PEP 503 page standing in for PyPI (``DIR/pypi/simple/mamba-ssm/``); that folder is
served on 127.0.0.1 with the rest of the dry run (the Pages index, the Release assets), so a request
for our own index would show in the server's hits.

* pip and ``uv pip install`` take the wheel: nothing is built, the setup hook never runs, nothing is
  fetched from our index, and ``doctor --check`` exits 0 with the CUDA 13 module chosen under this
  torch (2.14.1+cu130);
* ``uv lock`` of a project that depends on torch and mamba-ssm names the wheel with its sha256;
  ``uv sync`` installs from the wheel (opt-in: ``MAMBA_TEST_UV_SYNC=1``; it installs a whole CUDA torch);
* opt-in, ``MAMBA_TEST_PYPI_TORCH_PYTHONS="PY ..."`` (interpreters of venvs with other torches, e.g.
  PyPI's 2.10.0+cu128 and 2.15.0+cu132, or 2.13.0+cpu): the module that fits each torch loads, a CUDA
  module registers its CUDA kernels, and the CPU scan and conv match float64 references.

The dry run: ``MAMBA_E2E_PYPI_DIR`` (a finished ``release --dry-run --out`` folder), else one made here
for the cpu and cu13 modules (sm_90).
"""

from __future__ import annotations

import contextlib
import functools
import glob
import hashlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
from venvs import fresh_venv

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the dev venv is 3.11
    tomllib = None

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "pypi_wheel_child.py")
LOCAL_INDEXES = [p for p in ("/opt/pypi-more/simple", "/opt/pypi/simple") if os.path.isdir(p)]


def run(cmd, env=None, timeout=900, check=True, cwd=None):
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return proc


def uv_bin() -> str:
    found = shutil.which("uv") or os.path.join(sys.prefix, "bin", "uv")
    if not os.path.exists(found):
        pytest.skip("uv is not installed (ci/requirements-dev.txt lists it)")
    return found


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    import torch

    if sys.version_info[:2] != (3, 11) or not (torch.version.cuda or "").startswith("13"):
        pytest.skip("needs the dev venv (Python 3.11, a CUDA 13 torch)")
    given = os.environ.get("MAMBA_E2E_PYPI_DIR")
    if given:
        return given
    out = str(tmp_path_factory.mktemp("pypi-dry-run"))
    run(
        [sys.executable, "-m", "build_matrix", "release", "--dry-run", "--out", out, "--modules", "cpu,cu13"],
        cwd=REPO,
        timeout=3600,
    )
    return out


@pytest.fixture(scope="module")
def stand_in(dry_run):
    project = os.path.join(dry_run, "pypi", "simple", "mamba-ssm")
    wheels = glob.glob(os.path.join(project, "mamba_ssm-*.whl"))
    sdists = glob.glob(os.path.join(project, "mamba_ssm-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, os.listdir(project)
    return wheels[0], sdists[0]


class _StandIn(http.server.SimpleHTTPRequestHandler):
    """A static file server (with the Content-Type pip and uv require of a PEP 503 page) that counts
    the paths asked for in ``hits``."""

    hits: dict[str, int]

    def log_message(self, *args):
        pass

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        self.hits[path] = self.hits.get(path, 0) + 1
        super().do_GET()


@contextlib.contextmanager
def serving(root):
    handler = type("Handler", (_StandIn,), {"hits": {}})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=root))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield type(
            "Served", (), {"url": f"http://127.0.0.1:{httpd.server_address[1]}/", "hits": handler.hits}
        )()
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def server(dry_run):
    with serving(dry_run) as srv:
        yield srv


def version_of(wheel: str) -> str:
    return os.path.basename(wheel).split("-")[1]


def clean_env(tmp_path, **extra):
    """Only the stand-in index: no pip config (this machine's adds local indexes and a torch cap), a
    private resolver cache, no nvcc and no compiler, so a build would fail loudly."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, MAMBA_SSM_CACHE_DIR=str(tmp_path / "mamba-cache"))
    env.update(CC="false", CXX="false", CUDA_HOME="/nonexistent", PIP_NO_CACHE_DIR="1", UV_NO_CONFIG="1")
    for name in ("VIRTUAL_ENV", "PYTHONPATH", "MAMBA_WHEEL_INDEX", "PIP_CONSTRAINT", "UV_CONSTRAINT"):
        env.pop(name, None)
    env.update(extra)
    return env


def only_the_stand_in_was_asked(server, wheel):
    """Every request went to the PyPI stand-in's page and its wheel: none to our index (pages/, the
    Release assets), none for the sdist."""
    asked = sorted(server.hits)
    assert asked, "nothing was requested"
    assert all(p.startswith("/pypi/simple/") for p in asked), asked
    assert not any(p.endswith(".tar.gz") for p in asked), asked
    assert any(p.endswith(os.path.basename(wheel)) for p in asked), asked


def doctor(py, env):
    check = run([py, "-m", "mamba_ssm", "doctor", "--check"], env=env, check=False, cwd="/")
    report = json.loads(
        run([py, "-m", "mamba_ssm", "doctor", "--json"], env=env, check=False, cwd="/").stdout
    )
    return check, report


def assert_cu13_chosen(report):
    module = report["compiled_module"]
    assert module["loaded"], module
    assert module["module_choice"]["folder"] == "cu13", module["module_choice"]
    assert "/_kernels/cu13/" in module["path"], module["path"]
    assert "CUDA 13" in module["module_choice"]["reason"], module["module_choice"]


def test_the_wheel_is_the_pypi_product(stand_in):
    """What PyPI would receive: cp310-abi3, no local label, torch>=2.10, the modules in _kernels/."""
    import zipfile

    wheel, _ = stand_in
    name = os.path.basename(wheel)
    assert "+" not in version_of(wheel)
    assert "-cp310-abi3-" in name and name.endswith("_x86_64.whl"), name
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "Requires-Dist: torch>=2.10" in meta.splitlines(), meta
    assert {"mamba_ssm/_kernels/cpu/_C.abi3.so", "mamba_ssm/_kernels/cu13/_C.abi3.so"} <= set(names)
    assert not [n for n in names if n.startswith("mamba_ssm/_C")], "a top-level _C would win over _kernels/"


def torch_venv(path, env):
    """A venv seeing the dev venv's torch 2.14.1+cu130 (and packaging, einops) through a .pth file, as
    one where torch was installed: the setuptools that ``venv`` seeds (older than torch's
    ``setuptools>=77`` requirement) is removed, so the shared one counts."""
    py, site = fresh_venv(path)
    run([py, "-m", "pip", "uninstall", "-y", "-q", "setuptools"], env=env)
    return py, site


def test_pip_installs_the_wheel_and_doctor_checks(tmp_path, server, stand_in):
    wheel, _ = stand_in
    env = clean_env(tmp_path)
    py, site = torch_venv(tmp_path / "venv", env)
    server.hits.clear()
    start = time.monotonic()
    proc = run(
        [
            py,
            "-m",
            "pip",
            "install",
            "--index-url",
            server.url + "pypi/simple/",
            f"mamba-ssm=={version_of(wheel)}",
        ],
        env=env,
    )
    took = time.monotonic() - start
    said = proc.stdout + proc.stderr
    assert os.path.basename(wheel) in said, said
    assert "Building wheel" not in said and "setup.py" not in said, said
    only_the_stand_in_was_asked(server, wheel)
    assert os.path.isfile(os.path.join(site, "mamba_ssm", "_kernels", "cu13", "_C.abi3.so"))
    # no setup hook ran: nothing was recorded in the resolver's cache
    assert not glob.glob(str(tmp_path / "mamba-cache" / "**" / "*.json"), recursive=True)
    check, report = doctor(py, env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert_cu13_chosen(report)
    print(f"\npip install mamba-ssm from the stand-in: {took:.1f} s")
    assert took < 120, f"pip install took {took:.0f} s"


def test_uv_pip_installs_the_wheel(tmp_path, server, stand_in):
    uv = uv_bin()
    wheel, _ = stand_in
    py, site = fresh_venv(tmp_path / "venv")
    env = clean_env(tmp_path, UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    server.hits.clear()
    # --no-deps: uv does not count torch reached through the venv's .pth file as installed (the full
    # resolution with torch is test_uv_lock_names_the_wheel / test_uv_sync_installs_the_wheel)
    proc = run(
        [uv, "pip", "install", "--python", py, "--no-deps", "--index-url", server.url + "pypi/simple/"]
        + ["-v", f"mamba-ssm=={version_of(wheel)}"],
        env=env,
    )
    said = proc.stdout + proc.stderr
    assert "Building" not in said and "build backend" not in said, said
    only_the_stand_in_was_asked(server, wheel)
    assert os.path.isfile(os.path.join(site, "mamba_ssm", "_kernels", "cu13", "_C.abi3.so"))
    check, report = doctor(py, env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert_cu13_chosen(report)


def user_project(path, index_url, version):
    """A user's project: torch and mamba-ssm, Linux x86_64 only; torch and its dependencies from this
    machine's local indexes (then PyPI), mamba-ssm from the stand-in only."""
    os.makedirs(path, exist_ok=True)
    indexes = "".join(
        f'[[tool.uv.index]]\nname = "local-{i}"\nurl = "file://{p}"\n\n' for i, p in enumerate(LOCAL_INDEXES)
    )
    text = (
        '[project]\nname = "mamba-user"\nversion = "0.1"\nrequires-python = ">=3.11,<3.12"\n'
        f'dependencies = ["torch==2.14.1", "mamba-ssm=={version}"]\n\n'
        "[tool.uv]\nenvironments = [\"sys_platform == 'linux' and platform_machine == 'x86_64'\"]\n\n"
        f'[[tool.uv.index]]\nname = "stand-in"\nurl = "{index_url}"\nexplicit = true\n\n'
        + indexes
        + '[tool.uv.sources]\nmamba-ssm = { index = "stand-in" }\n'
    )
    with open(os.path.join(path, "pyproject.toml"), "w") as fh:
        fh.write(text)
    return path


def locked_mamba(project):
    with open(os.path.join(project, "uv.lock"), "rb") as fh:
        lock = tomllib.load(fh)
    return next(p for p in lock["package"] if p["name"] == "mamba-ssm")


@pytest.fixture(scope="module")
def locked(tmp_path_factory, server, stand_in):
    if tomllib is None or not LOCAL_INDEXES:
        pytest.skip("needs Python >= 3.11 and this machine's local torch index (/opt/pypi-more)")
    uv = uv_bin()
    wheel, _ = stand_in
    tmp = tmp_path_factory.mktemp("uv-project")
    project = user_project(str(tmp / "proj"), server.url + "pypi/simple/", version_of(wheel))
    env = clean_env(tmp, UV_CACHE_DIR=os.path.join(os.path.dirname(sys.prefix), "uv-cache"))
    run([uv, "lock", "--directory", project], env=env, timeout=1200)
    return uv, project, env


def test_uv_lock_names_the_wheel(locked, stand_in):
    _, project, _ = locked
    wheel, _ = stand_in
    entry = locked_mamba(project)
    digest = hashlib.sha256(open(wheel, "rb").read()).hexdigest()
    wheels = entry.get("wheels", [])
    assert [w["url"].rsplit("/", 1)[1] for w in wheels] == [os.path.basename(wheel)], entry
    assert wheels[0]["hash"] == f"sha256:{digest}", entry
    assert entry["source"]["registry"].endswith("/pypi/simple/"), entry


@pytest.mark.skipif(
    os.environ.get("MAMBA_TEST_UV_SYNC") != "1", reason="opt-in: MAMBA_TEST_UV_SYNC=1 (installs a CUDA torch)"
)
def test_uv_sync_installs_the_wheel(locked, server, stand_in):
    uv, project, env = locked
    wheel, _ = stand_in
    venv = os.path.join(project, ".venv")
    server.hits.clear()
    proc = run([uv, "sync", "--frozen", "--directory", project, "-v"], env=env, timeout=1800)
    said = proc.stdout + proc.stderr
    assert "Building mamba-ssm" not in said and "build backend" not in said, said
    only_the_stand_in_was_asked(server, wheel)
    py = os.path.join(venv, "bin", "python")
    check, report = doctor(py, env)
    assert check.returncode == 0, check.stdout + check.stderr
    assert_cu13_chosen(report)


PYPI_PYTHONS = os.environ.get("MAMBA_TEST_PYPI_TORCH_PYTHONS", "").split()


@pytest.mark.skipif(
    not PYPI_PYTHONS, reason="opt-in: MAMBA_TEST_PYPI_TORCH_PYTHONS names the Pythons of other torches' venvs"
)
@pytest.mark.parametrize("python", PYPI_PYTHONS or ["-"])
def test_the_fitting_module_runs_under_other_torches(tmp_path, python, stand_in):
    """Under each torch the module of its kind loads (CUDA X -> cuX, CPU -> cpu; the cpu module where the
    wheel has no module for that CUDA major); a CUDA module has its CUDA kernels registered; the
    compiled CPU scan and conv match float64."""
    wheel = os.environ.get("MAMBA_E2E_PYPI_WHEEL") or stand_in[0]
    target = str(tmp_path / "target")
    run([sys.executable, "-m", "pip", "install", "--no-deps", "--target", target, wheel, "einops"])
    probe = "import torch; print(torch.__version__); print(torch.version.cuda or '')"
    version, cuda = (run([python, "-c", probe], cwd="/").stdout.splitlines() + [""])[:2]
    want = f"cu{cuda.split('.')[0]}" if cuda else "cpu"
    present = os.path.isdir(os.path.join(target, "mamba_ssm", "_kernels", want))
    if not present:  # e.g. a dry run without the cu12 module: the CPU kernels still run
        print(f"\n{os.path.basename(wheel)} has no {want} module: the cpu module is expected")
    env = dict(os.environ, PYTHONPATH=target, MAMBA_SSM_NO_FALLBACK_WARNING="1")
    env.pop("MAMBA_SSM_BACKEND", None)
    got = json.loads(run([python, CHILD, TESTS], env=env, cwd="/").stdout.strip().splitlines()[-1])
    print(f"\n{version}: {json.dumps(got)}")
    assert got["mamba_ssm_file"].startswith(target), got
    assert got["loaded"], got
    assert got["folder"] == (want if present else "cpu"), got
    assert got["cpu_kernels"] == {"selective_scan_fwd": True, "causal_conv1d_fwd": True}, got
    assert all(got["cuda_kernels"].values()) == bool(cuda and present), got
    if not present:
        assert f"no {want} module" in got["choice_reason"], got
    if cuda and present:
        assert got["build_cuda"].split(".")[0] == cuda.split(".")[0], got
    assert got["scan_max_err"] < 1e-4 and got["scan_state_max_err"] < 1e-4, got
    assert got["conv_max_err"] < 1e-4, got
