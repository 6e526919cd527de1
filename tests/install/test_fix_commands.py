"""Issue 11, item 1: every fix command we print is safe to paste, and is tested by running it.

A venv whose torch (2.14.1, shared from the dev venv through a .pth file) differs from its installed
mamba-ssm's ``_C`` (build info: torch 2.13 + CUDA 12.6) gets the loader's and doctor's fixes, and the
fixes that follow each recorded decision. Every ``pip install`` command among them must pin the
installed version, and, executed with ``pip --dry-run --report`` against a loopback PEP 503 index
that serves the built sdist (plus a torch 2.13.0 and a packaging wheel, as a real index would), must
plan to install mamba-ssm and nothing else. The unpinned ``--force-reinstall`` command these
messages printed before plans torch as well (checked as a control, so the harness can fail).

The index serves no setuptools, so the dry runs add ``--no-build-isolation`` (pip then prepares our
sdist's metadata with the venv's setuptools; the dependency plan is the same). pip's own
configuration on the machine (extra indexes, find-links, constraints) is switched off.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import http.server
import json
import os
import re
import shlex
import subprocess
import sys
import sysconfig
import threading

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from helpers import build_info, make_wheel

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_SITE = sysconfig.get_paths()["purelib"]
VERSION = "2.4.0.dev0"
CUSTOM_INDEX = "https://wheels.example.invalid/mamba/"


def _run(cmd, env, timeout=300, check=True, cwd=None):
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _pip_env(base):
    env = {k: v for k, v in base.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return env


def _fake_wheel(folder, name, version):
    """A minimal valid pure-Python wheel ``name==version`` (stands in for torch / packaging)."""
    import base64
    import hashlib
    import zipfile

    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    rows = [
        f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
        for n, d in files.items()
    ] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(rows) + "\n").encode()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, d in files.items():
            zf.writestr(n, d)
    return os.path.basename(path)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    if not os.path.isdir("/proc") or sys.version_info[:2] != (3, 11):
        pytest.skip("needs the dev venv (Python 3.11 with torch)")
    work = tmp_path_factory.mktemp("fixes")
    env = _pip_env(dict(os.environ, MAMBA_SSM_CACHE_DIR=str(work / "cache")))
    env.pop("MAMBA_WHEEL_INDEX", None)
    # the built sdist, served as a PEP 503 project with a torch and a packaging wheel
    sdist_dir = work / "sdist"
    _run(
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(sdist_dir), REPO],
        env,
        timeout=600,
    )
    sdist = glob.glob(str(sdist_dir / "mamba_ssm-*.tar.gz"))[0]
    simple = work / "index" / "simple"
    for project, files in (
        ("mamba-ssm", [sdist]),
        ("torch", ["torch:2.13.0"]),
        ("packaging", ["packaging:24.0"]),
    ):
        folder = simple / project
        folder.mkdir(parents=True)
        names = []
        for f in files:
            if ":" in f:
                names.append(_fake_wheel(str(folder), *f.split(":")))
            else:
                os.link(f, folder / os.path.basename(f))
                names.append(os.path.basename(f))
        (folder / "index.html").write_text("".join(f'<a href="{n}">{n}</a>\n' for n in names))
    (simple / "index.html").write_text(
        '<a href="mamba-ssm/">mamba-ssm</a><a href="torch/">torch</a><a href="packaging/">packaging</a>'
    )
    # the venv: torch 2.14.1 shared, mamba-ssm installed from the sdist (pure Python), then a _C whose
    # build info says torch 2.13 + CUDA 12.6, as pip's wheel cache can hand over
    _run([sys.executable, "-m", "venv", "--without-pip", str(work / "venv")], env)
    py = str(work / "venv" / "bin" / "python")
    site = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env).stdout.strip()
    with open(os.path.join(site, "_shared_torch.pth"), "w") as fh:
        fh.write(SHARED_SITE + "\n")
    _run(
        [py, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-cache-dir", sdist],
        dict(env, MAMBA_SKIP_CUDA_BUILD="TRUE"),
        timeout=600,
    )
    blob = (
        b"\x7fELF-fake"
        b"MAMBA_SSM_BUILD_INFO_BEGIN"
        + json.dumps(build_info(torch="2.13.0+cu126", cuda="12.6", nvcc="12.6", version=VERSION)).encode()
        + b"MAMBA_SSM_BUILD_INFO_END"
    )
    with open(os.path.join(site, "mamba_ssm", "_C.abi3.so"), "wb") as fh:
        fh.write(blob)
    with _static_server(str(work / "index")) as url:
        yield {"work": work, "py": py, "site": site, "env": env, "simple": url + "simple/"}


@contextlib.contextmanager
def _static_server(root):
    """A PEP 503 static index on 127.0.0.1 (the standard library's file server: text/html pages)."""
    handler = functools.partial(_QuietHandler, directory=root)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _dry_run(world, command, name):
    """Execute ``command`` as printed (``VAR=value ... python -m pip install ...``) in the venv with
    ``--dry-run``; returns the names pip would install."""
    words = shlex.split(command)
    env = dict(world["env"])
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    assert words[:4] == ["python", "-m", "pip", "install"], command
    report = str(world["work"] / f"report-{name}.json")
    args = [world["py"]] + words[1:] + ["--dry-run", "--report", report, "--index-url", world["simple"]]
    if "--no-build-isolation" not in args:
        args.append("--no-build-isolation")
    proc = _run(args, env, check=False, cwd=str(world["work"]))
    assert proc.returncode == 0, (
        f"{command!r} failed under --dry-run:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    )
    with open(report) as fh:
        return sorted(item["metadata"]["name"].lower() for item in json.load(fh)["install"])


def _commands(text):
    """The pip commands a message names (in backticks or single quotes)."""
    return [
        c for c in re.findall(r"`([^`]+)`|'([^']*pip install[^']*)'", text) for c in c if "pip install" in c
    ]


@pytest.fixture(scope="module")
def printed(world):
    """The fix texts, collected in the venv (one process: the loader imports torch)."""
    return json.loads(
        _run(
            [
                world["py"],
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "collect_fix_commands.py"),
                VERSION,
                CUSTOM_INDEX,
            ],
            world["env"],
            cwd=str(world["work"]),
        )
        .stdout.strip()
        .splitlines()[-1]
    )


def test_every_printed_fix_pins_the_version_and_never_changes_torch(world, printed):
    out = printed
    assert "2.13" not in out["incompatible"] and "install-kernels" in out["incompatible"]
    # the first fix for a wheel built for another torch is install-kernels, which installs only our wheel
    assert out["incompatible"].index("install-kernels") < out["incompatible"].index("pip install")
    from mamba_ssm._build.config import _no_isolation_fix

    texts = dict(out, setup_probe_torch=_no_isolation_fix())
    commands = {}
    for key, text in texts.items():
        found = _commands(text) if "`" in text or "'" in text else [text]
        for cmd in found:
            if "pip install" in cmd:
                commands.setdefault(cmd, key)
    assert len(commands) >= 4, commands
    for cmd, key in commands.items():
        assert f"mamba-ssm=={VERSION}" in cmd.split(), (key, cmd)
        assert "--force-reinstall" not in cmd or "--no-deps" in cmd, (key, cmd)
    for i, (cmd, key) in enumerate(sorted(commands.items())):
        planned = _dry_run(world, cmd, f"{i}")
        # a reinstall plans mamba-ssm alone; a plain install finds it already there and plans nothing
        assert planned == (["mamba-ssm"] if "--force-reinstall" in cmd else []), (key, cmd, planned)


def test_the_harness_sees_torch_in_the_old_unpinned_fix(world):
    """Control: the command printed before (no version, no --no-deps) plans torch 2.13.0 from the index."""
    planned = _dry_run(world, "python -m pip install --no-cache-dir --force-reinstall mamba-ssm", "old")
    assert "torch" in planned and "mamba-ssm" in planned


def test_fixes_follow_the_recorded_decision_and_its_index(printed):
    out = printed
    # an install that used another index: install-kernels and the reinstall go there again
    custom = out["prebuilt_custom_index:mismatch"]
    assert (
        f"install-kernels --index {CUSTOM_INDEX}" in custom
        and f"MAMBA_WHEEL_INDEX={CUSTOM_INDEX} python -m pip" in custom
    )
    assert out["prebuilt_custom_index:FIX_REINSTALL"].startswith(f"MAMBA_WHEEL_INDEX={CUSTOM_INDEX} ")
    # no wheel fitted: install-kernels is not the fix (it fails the same way); the source build is
    for key in ("no_candidate:missing", "no_candidate:mismatch"):
        text = out[key]
        assert "fails the same way" in text and "MAMBA_FORCE_BUILD=TRUE python -m pip install" in text, text
        assert not text.startswith("run `python -m mamba_ssm install-kernels")
    # an unreachable index: the plain install-kernels after pointing MAMBA_WHEEL_INDEX elsewhere
    assert "MAMBA_WHEEL_INDEX" in out["unreachable:missing"] and "--index" not in out["unreachable:missing"]
    assert "now that torch is present" in out["deferred:missing"]
    assert "MAMBA_SKIP_CUDA_BUILD=TRUE" in out["skip_requested:missing"]
    assert f"mamba-ssm=={VERSION}" in out["skip_requested:missing"]


def test_install_kernels_uses_the_index_the_install_used(world, tmp_path):
    """With no --index and no MAMBA_WHEEL_INDEX, install-kernels goes to the recorded index, not the
    release index (here a local index with no wheel for this torch: exit 1, no-candidate)."""
    root = tmp_path / "other-index"
    make_wheel(
        str(root),
        "cu12torch2.13cxx11abiTRUE",
        build_info(torch="2.13.0+cu126", cuda="12.6", nvcc="12.6"),
        platform="manylinux_2_28_x86_64",
    )
    from build_matrix.index import build_index

    build_index(str(root))
    script = (
        "import sys; from mamba_ssm._install import record as D; "
        "D.write_record(D.InstallRecord.from_dict({'package_version': sys.argv[1], 'status': 'prebuilt', "
        "'final_mode': 'prebuilt', 'index': sys.argv[2], 'install': D.dist_info_identity().to_dict()}))"
    )
    index = root.as_uri() + "/"
    _run([world["py"], "-c", script, VERSION, index], world["env"], cwd=str(tmp_path))
    proc = _run(
        [world["py"], "-m", "mamba_ssm", "install-kernels", "--dry-run"],
        dict(world["env"], MAMBA_SSM_NO_NVML="1"),
        check=False,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"wheel index {index}: the one this install used" in proc.stderr
    assert "cu12torch2.13cxx11abitrue" in (proc.stdout + proc.stderr).lower()
