"""setup.py's decision for a wheel build: SKIP / FORCE, the resolver hook's outcome, MAMBA_FALLBACK.

The hook is a stand-in passed to ``plan_build`` (tests/build/_fake_hook.py; the real one is
mamba_ssm/_install/setup_hook.py, tested by tests/install), the way setup.py passes the real one. torch
and the CUDA toolkit are the real ones of this machine; the project root is a scratch folder with one tiny
C++ source, so "preflight passes" does not depend on the kernels.
"""

import os
import subprocess
import sys

import pytest
from _fake_hook import FakeHook

from mamba_ssm._build.errors import PreflightError
from mamba_ssm._build.plan import plan_build
from mamba_ssm._build.settings import BASE_VERSION, ROOT

CUDA_HOME = os.environ.get("CUDA_HOME", "/usr/local/cuda-13.0")


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "proj"
    (root / "csrc").mkdir(parents=True)
    (root / "csrc" / "tiny.cpp").write_text("int mamba_tiny() { return 1; }\n")
    return str(root)


@pytest.fixture
def env():
    """The environment given to plan_build (the variables under test are set by each test)."""
    return {"PATH": os.environ["PATH"], "CUDA_HOME": CUDA_HOME, "MAMBA_CUDA_ARCHS": "90"}


@pytest.fixture
def hook():
    return FakeHook()


def needs_toolkit():
    if not os.access(os.path.join(CUDA_HOME, "bin", "nvcc"), os.X_OK):
        pytest.skip(f"no nvcc under CUDA_HOME={CUDA_HOME}")


def test_metadata_commands_plan_nothing(env, project, hook):
    env["CUDA_HOME"] = "/nonexistent"
    assert plan_build("metadata", env, project, hook=hook).mode == "metadata"
    assert hook.calls == []


def test_skip_cuda_build(env, project, hook):
    env.update(MAMBA_SKIP_CUDA_BUILD="TRUE", CUDA_HOME="/nonexistent")
    hook.wheel = "/x.whl"
    plan = plan_build("wheel", env, project, hook=hook)
    assert plan.mode == "python" and plan.config is None
    assert hook.calls == []  # no download attempted
    assert hook.requested_reasons == ["MAMBA_SKIP_CUDA_BUILD=TRUE"]  # the asked-for mode is what is recorded


def test_force_build_skips_resolver(env, project, hook):
    needs_toolkit()
    env["MAMBA_FORCE_BUILD"] = "TRUE"
    plan = plan_build("wheel", env, project, hook=hook)
    assert plan.mode == "source" and plan.config.arch_spec.sass == ("sm_90",)
    assert hook.calls == []


def test_force_build_preflight_failure_is_fatal(env, project, hook):
    env.update(MAMBA_FORCE_BUILD="TRUE", CUDA_HOME="/nonexistent")
    with pytest.raises(PreflightError, match="nvcc not found at /nonexistent/bin/nvcc"):
        plan_build("wheel", env, project, hook=hook)


def test_prebuilt_wheel(env, project, tmp_path, hook):
    whl = tmp_path / "mamba_ssm-2.4.0.dev0+cu13torch2.14cxx11abiTRUE-cp39-abi3-linux_x86_64.whl"
    whl.write_bytes(b"PK")
    hook.wheel = str(whl)
    plan = plan_build("wheel", env, project, hook=hook)
    assert plan.mode == "prebuilt" and plan.prebuilt_wheel == str(whl) and plan.final_mode == "prebuilt"
    assert hook.calls == [{"call": "resolve_prebuilt", "version": BASE_VERSION}]


def test_prebuilt_wheel_missing_file(env, project, tmp_path, hook):
    hook.wheel = str(tmp_path / "gone.whl")
    with pytest.raises(PreflightError, match="gone.whl"):
        plan_build("wheel", env, project, hook=hook)


def test_local_version_passed_to_resolver(env, project, tmp_path, hook):
    whl = tmp_path / "w.whl"
    whl.write_bytes(b"PK")
    hook.wheel = str(whl)
    env["MAMBA_LOCAL_VERSION"] = "post"
    plan_build("wheel", env, project, hook=hook)
    assert hook.calls[0]["version"] == BASE_VERSION + "+post"


def test_deferred_gives_pure_python(env, project, hook):
    hook.deferred = True
    plan = plan_build("wheel", env, project, hook=hook)
    assert (plan.mode, plan.final_mode) == ("python", "deferred")


def test_fallback_auto_preflight_passes(env, project, hook):
    needs_toolkit()
    plan = plan_build("wheel", env, project, hook=hook)
    assert plan.mode == "source" and plan.config.sources == ["csrc/tiny.cpp"]


def test_fallback_auto_preflight_fails(env, project, hook):
    env["CUDA_HOME"] = "/nonexistent"
    plan = plan_build("wheel", env, project, hook=hook)
    assert plan.mode == "python" and "nvcc not found" in plan.reason


def test_fallback_python(env, project, hook):
    env["MAMBA_FALLBACK"] = "python"
    assert plan_build("wheel", env, project, hook=hook).mode == "python"


def test_fallback_source_preflight_fails(env, project, hook):
    env.update(MAMBA_FALLBACK="source", CUDA_HOME="/nonexistent")
    with pytest.raises(PreflightError, match="nvcc not found"):
        plan_build("wheel", env, project, hook=hook)


def test_fallback_error_records_and_explains(env, project, hook):
    env["MAMBA_FALLBACK"] = "ERROR"
    with pytest.raises(PreflightError) as e:
        plan_build("wheel", env, project, hook=hook)
    assert "nothing in the index" in str(e.value) and "MAMBA_FALLBACK=source" in str(e.value)
    assert hook.calls[-1] == {"call": "record", "final_mode": "error"}


def test_fallback_bad_value(env, project, hook):
    env["MAMBA_FALLBACK"] = "sometimes"
    with pytest.raises(PreflightError, match="MAMBA_FALLBACK='sometimes'"):
        plan_build("wheel", env, project, hook=hook)


def test_editable_never_downloads(env, project, hook):
    env["CUDA_HOME"] = "/nonexistent"
    plan = plan_build("editable", env, project, hook=hook)
    assert plan.mode == "python" and hook.calls == []


def test_real_hook_is_loaded_by_path():
    """The repository's own setup_hook.py loads (through setup.py's load_private) without importing
    mamba_ssm (no torch)."""
    path = os.path.join(ROOT, "mamba_ssm", "_install", "setup_hook.py")
    if not os.path.isfile(path):
        pytest.skip("mamba_ssm/_install/setup_hook.py not in this checkout yet")
    out = subprocess.run(
        [
            sys.executable,
            "-I",
            os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "setup_hook_by_path.py"),
            os.path.join(ROOT, "setup.py"),
        ],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_force_and_skip_together_warn_and_skip_wins(env, project, hook, capsys):
    env.update(MAMBA_SKIP_CUDA_BUILD="TRUE", MAMBA_FORCE_BUILD="TRUE", CUDA_HOME="/nonexistent")
    plan = plan_build("wheel", env, project, hook=hook)
    assert plan.mode == "python" and plan.config is None
    err = capsys.readouterr().err
    assert "warning" in err and "MAMBA_FORCE_BUILD=TRUE" in err and "MAMBA_SKIP_CUDA_BUILD=TRUE" in err
    assert "MAMBA_SKIP_CUDA_BUILD wins" in err and "MAMBA_SKIP_CUDA_BUILD wins" in plan.reason
    capsys.readouterr()
    env.pop("MAMBA_FORCE_BUILD")
    plan_build("wheel", env, project, hook=hook)
    assert "warning" not in capsys.readouterr().err  # SKIP alone: no warning
