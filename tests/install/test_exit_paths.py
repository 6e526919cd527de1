"""Issue 15: the resolver leaves nothing running behind it, so the build process exits cleanly.

Before the fix, ``resolve()`` started a daemon thread that read the manifest while detection ran and
abandoned it on the "deferred" and detection-error paths; when the interpreter exited while that
thread was inside OpenSSL (``SSL_CTX_load_verify_locations``), the process died with SIGSEGV.

* The setup hook (setup.py's entry, loaded by file path) runs as a subprocess 20 times on each exit
  path, each run and each path bounded in time, and must exit 0 every time with the expected outcome.
  ``SSL_CERT_FILE``/``PIP_CERT`` name a large CA bundle (the system one repeated), as behind a proxy
  with a big corporate bundle: loading it keeps any manifest fetch inside OpenSSL for a second or
  more, which widens the race window the old daemon thread lost at exit (12 of 20 runs crashed with
  it here; 1-2 in 20 with the system bundle alone).
* After ``resolve()`` returns, no thread, child process or file descriptor it opened is left.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from helpers import build_info, env_dict, make_wheel

from build_matrix.index import build_index
from mamba_ssm._install.environment import Environment
from mamba_ssm._install.resolve import resolve

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SETUP = os.path.join(REPO, "setup.py")  # the hook is loaded the way setup.py loads it
HOOK_RUN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "setup_hook_run.py")
RUNS = 20
RUN_TIMEOUT_S = 60
PATH_BUDGET_S = 240
#: The paths on which the old code abandoned its manifest read get the large CA bundle; the others
#: wait for the read anyway, and parsing the bundle there would only cost time.
BIG_CA_PATHS = ("deferred", "detection-error")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Indexes, a CA bundle, and a target interpreter without torch (a venv without pip)."""
    root = tmp_path_factory.mktemp("exit-paths")
    good = root / "good-index"
    make_wheel(str(good), "cu13torch2.14cxx11abiTRUE", build_info(), platform="manylinux_2_28_x86_64")
    build_index(str(good))
    other = root / "other-index"  # a wheel for a torch the test venv does not have
    make_wheel(
        str(other),
        "cu12torch2.13cxx11abiTRUE",
        build_info(torch="2.13.0+cu126", cuda="12.6", nvcc="12.6"),
        platform="manylinux_2_28_x86_64",
    )
    build_index(str(other))
    with (
        open("/etc/ssl/certs/ca-certificates.crt", "rb")
        if os.path.isfile("/etc/ssl/certs/ca-certificates.crt")
        else open(__import__("certifi").where(), "rb") as fh
    ):
        bundle = fh.read()
    big = root / "big-ca-bundle.pem"
    big.write_bytes(bundle * 40)
    bare = root / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    return {
        "good": str(good),
        "other": str(other),
        "big_ca": str(big),
        "bare_python": str(bare / "bin" / "python"),
    }


def _paths(world):
    # name -> (environment additions, expected STATUS)
    return {
        "prebuilt": ({"MAMBA_WHEEL_INDEX": world["good"]}, "prebuilt"),
        "deferred": (
            {
                "MAMBA_WHEEL_INDEX": f"http://127.0.0.1:{_closed_port()}/",
                "MAMBA_TARGET_PYTHON": world["bare_python"],
            },
            "deferred",
        ),
        "detection-error": (
            {
                "MAMBA_WHEEL_INDEX": f"http://127.0.0.1:{_closed_port()}/",
                "MAMBA_TARGET_PYTHON": os.path.join(os.path.dirname(world["big_ca"]), "no-python"),
            },
            "error",
        ),
        "no-candidate": ({"MAMBA_WHEEL_INDEX": world["other"]}, "no-candidate"),
        "index-unreachable": ({"MAMBA_WHEEL_INDEX": f"http://127.0.0.1:{_closed_port()}/"}, "error"),
    }


def _ca(world, path):
    return {"SSL_CERT_FILE": world["big_ca"], "PIP_CERT": world["big_ca"]} if path in BIG_CA_PATHS else {}


@pytest.mark.parametrize(
    "path", ["prebuilt", "deferred", "detection-error", "no-candidate", "index-unreachable"]
)
def test_the_hook_exits_cleanly_every_time(world, tmp_path, path):
    extra, expected = _paths(world)[path]
    env = dict(
        os.environ,
        MAMBA_SSM_NO_NVML="1",
        MAMBA_HTTP_RETRIES="0",
        MAMBA_SSM_CACHE_DIR=str(tmp_path / "cache"),
        **_ca(world, path),
        **extra,
    )
    if "MAMBA_TARGET_PYTHON" not in extra:
        env.pop("MAMBA_TARGET_PYTHON", None)
    deadline = time.monotonic() + PATH_BUDGET_S
    codes = []
    for _ in range(RUNS):
        if time.monotonic() > deadline:
            break
        proc = subprocess.run(
            [sys.executable, HOOK_RUN, SETUP, "python"],
            env=env,
            cwd=str(tmp_path),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        codes.append(proc.returncode)
        if proc.returncode == 0:
            assert f"STATUS={expected} " in proc.stdout, (proc.stdout, proc.stderr[-2000:])
    crashes = [c for c in codes if c != 0]
    assert len(codes) == RUNS and not crashes, (
        f"{path}: {len(crashes)} of {len(codes)} runs exited non-zero (return codes {crashes}; -11 is SIGSEGV); "
        f"{RUNS - len(codes)} runs not reached within {PATH_BUDGET_S} s"
    )


def _children() -> set:
    me, out = str(os.getpid()), set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me:
                out.add(int(pid))
    return out


def _fds() -> set:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs Linux /proc")
@pytest.mark.parametrize(
    "path", ["prebuilt", "deferred", "detection-error", "no-candidate", "index-unreachable"]
)
def test_resolve_leaves_no_thread_process_or_descriptor(world, tmp_path, path):
    extra, expected = _paths(world)[path]
    environ = dict(
        os.environ,
        MAMBA_SSM_NO_NVML="1",
        MAMBA_HTTP_RETRIES="0",
        MAMBA_SSM_CACHE_DIR=str(tmp_path / "cache"),
        **_ca(world, path),
        **extra,
    )
    declared = None
    if path == "deferred":
        declared = Environment.from_dict(env_dict(torch=None))
    elif path != "detection-error":
        declared = Environment.from_dict(env_dict())
    threads, children, fds = set(threading.enumerate()), _children(), _fds()
    res = resolve(
        "2.4.0.dev0",
        index=extra["MAMBA_WHEEL_INDEX"],
        env=declared,
        environ=environ,
        cache=str(tmp_path / "cache"),
        pinned=None,
    )
    assert res.status == expected, res.message
    left = [t.name for t in threading.enumerate() if t not in threads]
    assert left == [], f"{path}: resolve() returned with its threads still running: {left}"
    assert _children() - children == set(), f"{path}: resolve() left child processes"
    assert _fds() - fds == set(), f"{path}: resolve() left file descriptors open"


def test_detect_kills_its_probe_when_gpu_detection_fails(monkeypatch):
    """The probe subprocess starts before GPU detection; an unexpected error there must not leave it."""
    from mamba_ssm._install import environment

    def broken(environ=None):
        raise RuntimeError("GPU probe exploded")

    monkeypatch.setattr(environment, "detect_gpus", broken)
    before = _children()
    with pytest.raises(RuntimeError, match="GPU probe exploded"):
        environment.detect(python=sys.executable)
    assert _children() - before == set()


def test_a_malformed_probe_result_is_a_detection_error(tmp_path):
    """resolve() promises an outcome, not an exception, for environment faults."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\necho '@@MAMBA_SSM_PROBE_BEGIN@@{not json@@MAMBA_SSM_PROBE_END@@'\n")
    fake.chmod(0o755)
    res = resolve(
        "2.4.0.dev0",
        index=str(tmp_path / "nowhere"),
        environ=dict(os.environ, MAMBA_TARGET_PYTHON=str(fake), MAMBA_SSM_NO_NVML="1"),
    )
    assert res.status == "error" and res.error_kind == "detect"
    assert "malformed probe result" in res.message and str(fake) in res.message


def test_mirror_reports_a_missing_wheel_and_leaves_no_part_file(world, tmp_path, capsys, monkeypatch):
    import json
    import shutil

    from build_matrix.resolver_cli import main as cli

    root = tmp_path / "idx"
    shutil.copytree(world["good"], root)
    for wheel in root.rglob("*.whl"):
        wheel.unlink()  # the manifest lists it, the host lacks it
    env_file = tmp_path / "env.json"
    env_file.write_text(json.dumps(env_dict()))
    monkeypatch.setenv("MAMBA_SSM_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "mirror"
    assert (
        cli(["mirror", "--for", str(env_file), "--to", str(out), "--index", root.as_uri(), "--no-pins"]) == 2
    )
    err = capsys.readouterr().err
    assert (
        "could not download mamba_ssm-2.4.0.dev0+cu13torch2.14cxx11abitrue" in err and "not-found" not in err
    )
    assert not out.exists() or not list(out.rglob("*.part"))
    assert not list((tmp_path / "cache").rglob("*.part"))
