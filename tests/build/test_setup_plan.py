"""setup.py's decision for a wheel build: SKIP / FORCE, the resolver hook's outcome, MAMBA_FALLBACK.

The hook is a small module written here (the real one is mamba_ssm/_install/setup_hook.py, tested by
tests/install); it is reached through MAMBA_SETUP_HOOK, the way setup.py finds an override. torch and
the CUDA toolkit are the real ones of this machine; the project root is a scratch folder with one tiny
C++ source, so "preflight passes" does not depend on the kernels.
"""

import json
import os
import subprocess
import sys

import pytest
from _setup_loader import load_setup

S = load_setup()
FAKE_HOOK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "fake_setup_hook.py")
CUDA_HOME = os.environ.get("CUDA_HOME", "/usr/local/cuda-13.0")


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "proj"
    (root / "csrc").mkdir(parents=True)
    (root / "csrc" / "tiny.cpp").write_text("int mamba_tiny() { return 1; }\n")
    return str(root)


class Env(dict):
    """The environment given to plan_build, mirrored into os.environ (the hook module reads it)."""

    def __init__(self, monkeypatch, values):
        super().__init__()
        self._mp = monkeypatch
        self.update(values)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        self._mp.setenv(key, value)

    def update(self, *args, **kw):
        for k, v in dict(*args, **kw).items():
            self[k] = v


@pytest.fixture
def env(tmp_path, monkeypatch):
    for var in (
        "MAMBA_SKIP_CUDA_BUILD",
        "MAMBA_FORCE_BUILD",
        "MAMBA_FALLBACK",
        "MAMBA_LOCAL_VERSION",
        "FAKE_WHEEL",
        "FAKE_DEFERRED",
        "TORCH_CUDA_ARCH_LIST",
    ):
        monkeypatch.delenv(var, raising=False)
    return Env(
        monkeypatch,
        {
            "PATH": os.environ["PATH"],
            "CUDA_HOME": CUDA_HOME,
            "MAMBA_SETUP_HOOK": FAKE_HOOK,
            "FAKE_LOG": str(tmp_path / "log.jsonl"),
            "MAMBA_CUDA_ARCHS": "90",
        },
    )


def calls(env):
    try:
        with open(env["FAKE_LOG"]) as f:
            return [json.loads(line) for line in f]
    except FileNotFoundError:
        return []


def needs_toolkit():
    if not os.access(os.path.join(CUDA_HOME, "bin", "nvcc"), os.X_OK):
        pytest.skip(f"no nvcc under CUDA_HOME={CUDA_HOME}")


def test_metadata_commands_plan_nothing(env, project):
    env["CUDA_HOME"] = "/nonexistent"
    assert S.plan_build("metadata", env, project).mode == "metadata"
    assert calls(env) == []


def test_skip_cuda_build(env, project):
    env.update(MAMBA_SKIP_CUDA_BUILD="TRUE", CUDA_HOME="/nonexistent", FAKE_WHEEL="/x.whl")
    plan = S.plan_build("wheel", env, project)
    assert plan.mode == "python" and plan.config is None
    assert calls(env) == []  # no download attempted


def test_force_build_skips_resolver(env, project):
    needs_toolkit()
    env["MAMBA_FORCE_BUILD"] = "TRUE"
    plan = S.plan_build("wheel", env, project)
    assert plan.mode == "source" and plan.config.arch_spec.sass == ("sm_90",)
    assert calls(env) == []


def test_force_build_preflight_failure_is_fatal(env, project):
    env.update(MAMBA_FORCE_BUILD="TRUE", CUDA_HOME="/nonexistent")
    with pytest.raises(S.PreflightError, match="nvcc not found at /nonexistent/bin/nvcc"):
        S.plan_build("wheel", env, project)


def test_prebuilt_wheel(env, project, tmp_path):
    whl = tmp_path / "mamba_ssm-2.4.0.dev0+cu13torch2.14cxx11abiTRUE-cp39-abi3-linux_x86_64.whl"
    whl.write_bytes(b"PK")
    env["FAKE_WHEEL"] = str(whl)
    plan = S.plan_build("wheel", env, project)
    assert plan.mode == "prebuilt" and plan.prebuilt_wheel == str(whl) and plan.final_mode == "prebuilt"
    assert calls(env) == [{"call": "resolve_prebuilt", "version": S.BASE_VERSION}]


def test_prebuilt_wheel_missing_file(env, project, tmp_path):
    env["FAKE_WHEEL"] = str(tmp_path / "gone.whl")
    with pytest.raises(S.PreflightError, match="gone.whl"):
        S.plan_build("wheel", env, project)


def test_local_version_passed_to_resolver(env, project, tmp_path):
    whl = tmp_path / "w.whl"
    whl.write_bytes(b"PK")
    env.update(FAKE_WHEEL=str(whl), MAMBA_LOCAL_VERSION="post")
    S.plan_build("wheel", env, project)
    assert calls(env)[0]["version"] == S.BASE_VERSION + "+post"


def test_deferred_gives_pure_python(env, project):
    env["FAKE_DEFERRED"] = "1"
    plan = S.plan_build("wheel", env, project)
    assert (plan.mode, plan.final_mode) == ("python", "deferred")


def test_fallback_auto_preflight_passes(env, project):
    needs_toolkit()
    plan = S.plan_build("wheel", env, project)
    assert plan.mode == "source" and plan.config.sources == ["csrc/tiny.cpp"]


def test_fallback_auto_preflight_fails(env, project):
    env["CUDA_HOME"] = "/nonexistent"
    plan = S.plan_build("wheel", env, project)
    assert plan.mode == "python" and "nvcc not found" in plan.reason


def test_fallback_python(env, project):
    env["MAMBA_FALLBACK"] = "python"
    assert S.plan_build("wheel", env, project).mode == "python"


def test_fallback_source_preflight_fails(env, project):
    env.update(MAMBA_FALLBACK="source", CUDA_HOME="/nonexistent")
    with pytest.raises(S.PreflightError, match="nvcc not found"):
        S.plan_build("wheel", env, project)


def test_fallback_error_records_and_explains(env, project):
    env["MAMBA_FALLBACK"] = "ERROR"
    with pytest.raises(S.PreflightError) as e:
        S.plan_build("wheel", env, project)
    assert "nothing in the index" in str(e.value) and "MAMBA_FALLBACK=source" in str(e.value)
    assert calls(env)[-1] == {"call": "record", "final_mode": "error"}


def test_fallback_bad_value(env, project):
    env["MAMBA_FALLBACK"] = "sometimes"
    with pytest.raises(S.PreflightError, match="MAMBA_FALLBACK='sometimes'"):
        S.plan_build("wheel", env, project)


def test_hook_override_missing(env, project):
    env["MAMBA_SETUP_HOOK"] = "/nonexistent/hook.py"
    with pytest.raises(S.PreflightError, match="MAMBA_SETUP_HOOK"):
        S.plan_build("wheel", env, project)


def test_editable_never_downloads(env, project):
    env["CUDA_HOME"] = "/nonexistent"
    plan = S.plan_build("editable", env, project)
    assert plan.mode == "python" and calls(env) == []


def test_real_hook_is_loaded_by_path():
    """The repository's own setup_hook.py loads (through setup.py's load_private) without importing
    mamba_ssm (no torch)."""
    path = os.path.join(S.ROOT, "mamba_ssm", "_install", "setup_hook.py")
    if not os.path.isfile(path):
        pytest.skip("mamba_ssm/_install/setup_hook.py not in this checkout yet")
    out = subprocess.run(
        [
            sys.executable,
            "-I",
            os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "setup_hook_by_path.py"),
            os.path.join(S.ROOT, "setup.py"),
        ],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_force_and_skip_together_warn_and_skip_wins(env, project, capsys):
    env.update(MAMBA_SKIP_CUDA_BUILD="TRUE", MAMBA_FORCE_BUILD="TRUE", CUDA_HOME="/nonexistent")
    plan = S.plan_build("wheel", env, project)
    assert plan.mode == "python" and plan.config is None
    err = capsys.readouterr().err
    assert "warning" in err and "MAMBA_FORCE_BUILD=TRUE" in err and "MAMBA_SKIP_CUDA_BUILD=TRUE" in err
    assert "MAMBA_SKIP_CUDA_BUILD wins" in err and "MAMBA_SKIP_CUDA_BUILD wins" in plan.reason
    capsys.readouterr()
    env.pop("MAMBA_FORCE_BUILD")
    os.environ.pop("MAMBA_FORCE_BUILD", None)
    S.plan_build("wheel", env, project)
    assert "warning" not in capsys.readouterr().err  # SKIP alone: no warning
