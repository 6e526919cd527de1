"""Issue 11, item 6: any failure probing torch under MAMBA_FALLBACK=auto|source falls back as documented.

A broken torch (here: a ``torch`` package without ``torch.utils``, one whose import raises, one whose
own dependency is missing) made setup.py raise ModuleNotFoundError. Now ``auto`` gives the pure-Python
package with the reason, and ``source`` a PreflightError (setup.py's one-paragraph exit) naming it.
Each case runs in a fresh interpreter with the fake torch first on sys.path.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import zipfile

import pytest
from venvs import fresh_venv

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FAKES = {
    # no torch.utils (the finding)
    "no-utils": {
        "__init__.py": "__version__ = '2.14.1+cu130'\n",
        "version.py": "__version__ = '2.14.1+cu130'\ncuda = '13.0'\nhip = None\n",
    },
    # importing torch fails inside it (a shared library that is gone)
    "raises": {"__init__.py": "raise OSError('libtorch_cuda.so: cannot open shared object file')\n"},
    # one of torch's own imports is missing (ImportError for another module than torch)
    "dependency": {"__init__.py": "import sympy_that_is_not_installed\n"},
}


def fake_torch(root, kind):
    pkg = root / "torch"
    pkg.mkdir(parents=True)
    for name, text in FAKES[kind].items():
        (pkg / name).write_text(text)
    return str(root)


@pytest.mark.parametrize(
    "kind,needle",
    [
        ("no-utils", "No module named 'torch.utils'"),
        ("raises", "OSError: libtorch_cuda.so: cannot open shared object file"),
        ("dependency", "No module named 'sympy_that_is_not_installed'"),
    ],
)
def test_a_broken_torch_falls_back_with_the_reason(tmp_path, kind, needle):
    path = fake_torch(tmp_path / "site", kind)
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "fallback_under_torch.py"),
            path,
            REPO,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    mode, reason = out["auto"]
    assert mode == "python" and "the source build cannot run here" in reason and needle in reason, reason
    assert "is broken or incomplete" in reason and "reinstall the torch you use" in reason
    kind_s, text = out["source"]
    assert kind_s == "PreflightError" and needle in text, out["source"]


@pytest.mark.slow
def test_pip_wheel_with_a_broken_torch_builds_the_pure_python_package(tmp_path):
    """End to end through pip (no build isolation, so the broken torch is the one setup.py sees)."""
    path = fake_torch(tmp_path / "site", "no-utils")
    env = dict(
        os.environ,
        PYTHONPATH=path,
        MAMBA_FALLBACK="auto",
        MAMBA_WHEEL_INDEX=str(tmp_path / "no-index"),
        MAMBA_SSM_CACHE_DIR=str(tmp_path / "cache"),
        MAMBA_SSM_NO_NVML="1",
        PIP_NO_CACHE_DIR="1",
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-v",
            "--no-build-isolation",
            "--no-deps",
            "-w",
            str(tmp_path / "out"),
            REPO,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    log = proc.stdout + proc.stderr
    assert "No module named 'torch.utils'" in log and "ModuleNotFoundError:" not in log.replace(
        "(ModuleNotFoundError:", ""
    )
    wheels = glob.glob(str(tmp_path / "out" / "mamba_ssm-*.whl"))
    assert len(wheels) == 1
    with zipfile.ZipFile(wheels[0]) as zf:
        assert not any(n.startswith("mamba_ssm/_C") for n in zf.namelist())


def _isolated_site(tmp_path):
    """A folder holding only what pip's isolated env would: setuptools and packaging."""
    import importlib

    site = tmp_path / "isolated"
    site.mkdir()
    import importlib.metadata

    for name in ("packaging", "setuptools", "_distutils_hack"):
        mod = importlib.import_module(name)
        os.symlink(os.path.dirname(mod.__file__), site / name)
    for dist in ("packaging", "setuptools"):  # their dist-info too: setuptools reads its version there
        info = importlib.metadata.distribution(dist).locate_file(
            f"{dist}-{importlib.metadata.version(dist)}.dist-info"
        )
        os.symlink(str(info), site / os.path.basename(str(info)))
    return str(site)


def test_the_source_fallback_imports_the_target_torch_under_isolation(tmp_path):
    torch = pytest.importorskip("torch")
    target = {
        "torch_path": os.path.dirname(torch.__file__),
        "torch_version": torch.__version__,
        "python_version": "%d.%d.%d" % sys.version_info[:3],
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-S",
            os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "target_torch_isolated.py"),
            _isolated_site(tmp_path),
            REPO,
            json.dumps(target),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["before"] is False  # no torch in the "build env"
    assert out["torch"] == torch.__file__ and out["version"] == torch.__version__
    assert out["note"].startswith(f"against the target's torch {torch.__version__} (")


def test_another_python_version_cannot_use_the_target_torch(tmp_path):
    from mamba_ssm._build import plan as P
    from mamba_ssm._install.setup_hook import Target

    other = "3.%d.0" % (sys.version_info[1] + 1)
    with pytest.raises(P.PreflightError, match=f"the target's Python {other} is not this build's"):
        P.use_target_torch(Target(torch_path=str(tmp_path / "site" / "torch"), python_version=other))
    assert P.use_target_torch(None) == "" and P.use_target_torch(Target(python_version=other)) == ""


@pytest.mark.parametrize(
    "gpus,user,expect",
    [
        (
            [{"vendor": "nvidia", "capability": "8.0"}, {"vendor": "nvidia", "capability": "8.6"}],
            {},
            ({"MAMBA_CUDA_ARCHS": "8.0;8.6"}, False),
        ),
        ([{"vendor": "amd", "gfx": "gfx90a"}], {}, ({"PYTORCH_ROCM_ARCH": "gfx90a"}, False)),
        ([], {}, ({}, True)),  # the CPU kernel alone
        (
            [{"vendor": "nvidia", "capability": "8.0"}],
            {"TORCH_CUDA_ARCH_LIST": "9.0"},
            ({}, False),
        ),  # the user's
    ],
)
def test_auto_builds_only_for_the_visible_gpu(gpus, user, expect):
    from mamba_ssm._build import plan as P
    from mamba_ssm._gpus import Gpu
    from mamba_ssm._install.setup_hook import Target

    target = Target(python_version="3.11.7", gpus=tuple(Gpu(**g) for g in gpus))
    env, cpu_only, note = P.auto_targets(dict(user), target)
    added = {k: v for k, v in env.items() if k not in user}
    assert (added, cpu_only) == expect, note
    assert P.auto_targets({}, None) == ({}, False, "")


def test_cpu_only_config_with_a_cuda_torch_needs_no_nvcc():
    torch = pytest.importorskip("torch")
    if not torch.version.cuda:
        pytest.skip("needs a CUDA torch")
    from mamba_ssm._build.config import resolve_config

    env = dict(os.environ, CUDA_HOME="/nonexistent")
    env.pop("MAMBA_CUDA_ARCHS", None)
    env.pop("TORCH_CUDA_ARCH_LIST", None)
    cfg = resolve_config(env, cpu_only=True)
    assert cfg.kernels == ("cpu",) and cfg.nvcc is None and not any(s.endswith(".cu") for s in cfg.sources)


def test_the_install_time_build_is_recorded_and_shown():
    from mamba_ssm import _doctor
    from mamba_ssm._build import commands as C
    from mamba_ssm._build.plan import BuildMode, BuildPlan
    from mamba_ssm._install.record import InstallMode, InstallRecord

    plan = BuildPlan(
        BuildMode.PYTHON, reason="MAMBA_FALLBACK=auto: the source build cannot run here: no C++ compiler"
    )
    note = C.build_note(plan, 2.04)
    rec = InstallRecord(final_mode=InstallMode.PYTHON, message="no wheel", build=note)
    assert rec.to_dict()["build"] == {
        "mode": "python",
        "reason": plan.reason,
        "seconds": 2.0,
        "kernels": [],
        "failed": False,
    }
    lines = _doctor.render_record(rec)
    assert any(
        line.startswith("  install-time build: python (kernels: none; 2.0 s): MAMBA_FALLBACK=auto")
        for line in lines
    ), lines


@pytest.mark.slow
def test_pip_with_build_isolation_builds_the_cpu_kernel_against_the_target_torch(tmp_path):
    """The finding: under pip's default build isolation MAMBA_FALLBACK=auto never built (no torch in the
    isolated env). A venv with torch (shared through a .pth file), no GPU, no index: pip builds the
    sdist in isolation; the kernels are compiled against the venv's torch (CPU kernel alone)."""
    torch = pytest.importorskip("torch")
    sdist_dir = tmp_path / "sdist"
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(sdist_dir), REPO],
        check=True,
        capture_output=True,
        timeout=600,
    )
    sdist = glob.glob(str(sdist_dir / "mamba_ssm-*.tar.gz"))[0]
    py, site = fresh_venv(tmp_path / "venv")
    env = dict(
        os.environ,
        MAMBA_FALLBACK="auto",
        MAMBA_WHEEL_INDEX=str(tmp_path / "no-index"),
        MAMBA_SSM_CACHE_DIR=str(tmp_path / "cache"),
        MAMBA_SSM_NO_NVML="1",
        PIP_NO_CACHE_DIR="1",
        CUDA_HOME="/nonexistent",
        MAX_JOBS="1",
        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
    )
    for k in ("VIRTUAL_ENV", "PYTHONPATH", "MAMBA_CUDA_ARCHS", "TORCH_CUDA_ARCH_LIST"):
        env.pop(k, None)
    proc = subprocess.run(
        [py, "-m", "pip", "install", "-v", "--no-deps", sdist],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=str(tmp_path),
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "against the target's torch" in log and "the CPU kernel alone" in log, log[-4000:]
    assert glob.glob(os.path.join(site, "mamba_ssm", "_C*.so"))
    rec = json.loads(
        subprocess.run(
            [py, "-c", "from mamba_ssm._install.record import read_record; print(read_record().to_json())"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            cwd=str(tmp_path),
        ).stdout
    )
    assert (
        rec["final_mode"] == "source" and rec["build"]["kernels"] == ["cpu"] and rec["build"]["seconds"] > 0
    )
    assert torch.__version__ in rec["build"]["reason"]
