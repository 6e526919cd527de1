"""One stable-ABI mamba_ssm._C, two torches: the CPU-only module built against torch 2.13.0+cpu imports
under torch 2.14.1 (this environment), registers every op and passes the CPU kernel tests (every op vs
the float64 references), torch.library.opcheck and torch.compile(fullgraph=True) of a Mamba block there;
and the reverse: a CPU-only stable module built with torch 2.14.1's headers passes the same tests under
torch 2.13.0+cpu.

Opt-in (not run by default, as it needs PyPI's torch, gigabytes with its CUDA libraries):
MAMBA_TEST_PYPI_TORCH_PYTHONS="/venv210/bin/python /venv212/bin/python" also runs the module built with
2.13.0+cpu under each of those Pythons' torch (e.g. PyPI's 2.10.0, the floor, and 2.12.0, a CUDA 13 torch
other than 2.14; the result recorded in docs/benchmarks.md).

torch 2.13.0+cpu comes from this machine's disk (pip's configured find-links, --no-index: nothing is
downloaded). It is installed once into $MAMBA_DEV_HOME/torch-2.13.0-cpu-nodeps-cp311 (--no-deps; its pure-Python
dependencies, pytest and the build tools come from this environment through a .pth file, after the
venv's own site-packages, so the venv's torch wins). Each module is built from a copy of the checkout.
"""

import json
import os
import subprocess
import sys
import sysconfig

import pytest
from _project import copy_project

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEV_HOME = os.environ.get("MAMBA_DEV_HOME", os.path.join(os.path.expanduser("~"), ".cache", "mamba-ssm-dev"))
OTHER_TORCH = "2.13.0"
# The CPU kernel tests (every op against the float64 references: the forward grid, gradients at one
# sequence length that spans chunk boundaries, the dtypes and ISAs, conv1d forward / backward / update /
# varlen), and the binding's contract (every op and schema, opcheck, torch.compile of a Mamba block). Left
# out: the other gradient lengths, long sequences and the generic-ISA rerun of the conv suite, which test
# the kernels, not the binding.
KERNEL_TESTS = [
    "tests/kernels/test_cpu_kernel.py",
    "tests/kernels/test_conv1d_cpu.py",
    "tests/kernels/test_binding_contract.py",
]
FORWARD_SELECTION = (
    "(not test_gradients or -65-) and not test_long_sequences and not test_generic_isa_build_matches"
)
# The reverse direction: the binding (its contract, opcheck, the decode-step ops) and the forward grid.
REVERSE_SELECTION = "test_binding_contract or test_forward_full_grid or opcheck or update or varlen"


def _run(cmd, cwd, env=None, timeout=3000):
    return subprocess.run(cmd, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def other_python():
    """The Python of a venv holding torch 2.13.0+cpu from local disk (made once, then reused)."""
    major, minor = sys.version_info[:2]
    # not tests/install/test_e2e_install.py's torch-2.13.0-cpu-cp311 (that one carries its dependencies)
    venv = os.path.join(DEV_HOME, f"torch-{OTHER_TORCH}-cpu-nodeps-cp{major}{minor}")
    py = os.path.join(venv, "bin", "python")
    probe = "import torch; print(torch.__version__)"
    if not os.path.exists(py) or _run([py, "-c", probe], "/").stdout.strip() != f"{OTHER_TORCH}+cpu":
        base = _run([sys.executable, "-c", "import sys; print(sys._base_executable)"], "/").stdout.strip()
        made = _run([base, "-m", "venv", "--clear", "--without-pip", venv], "/")
        assert made.returncode == 0, made.stderr
        site = _run(
            [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], "/"
        ).stdout.strip()
        with open(os.path.join(site, "_mamba_shared_env.pth"), "w") as fh:
            fh.write(sysconfig.get_paths()["purelib"] + "\n")
        pip = _run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--no-index",
                "--no-deps",
                "--target",
                site,
                f"torch=={OTHER_TORCH}",
            ],
            "/",
            timeout=1800,
        )
        assert pip.returncode == 0, (
            f"torch {OTHER_TORCH} is not installable from this machine's disk (pip --no-index: its configured "
            f"find-links):\n{pip.stdout[-1500:]}\n{pip.stderr[-1500:]}"
        )
    version = _run([py, "-c", probe], "/")
    assert version.stdout.strip() == f"{OTHER_TORCH}+cpu", version.stdout + version.stderr
    return py


HERE = os.path.dirname(os.path.abspath(__file__))
# Scripts run by path with the copied checkout as the working directory.
BUILD_CPU_ONLY = os.path.join(os.path.dirname(os.path.dirname(HERE)), "benchmarks", "build_cpu_only.py")


def _build_cpu_stable(python, proj):
    """Build the CPU-only stable-ABI _C in ``proj`` with ``python``'s torch; returns the .so path."""
    env = dict(os.environ, MAX_JOBS=os.environ.get("MAX_JOBS", "1"))
    for name in ("MAMBA_TORCH_STABLE_ABI", "MAMBA_CUDA_ARCHS", "TORCH_CUDA_ARCH_LIST"):
        env.pop(name, None)  # the default: stable with floor 2.10 for torch >= 2.10
    out = _run([python, BUILD_CPU_ONLY], proj, env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    so = os.path.join(proj, "mamba_ssm", "_C.abi3.so")
    assert os.path.isfile(so)
    return so


def _check_module(so, built_with):
    from build_matrix import stable_abi
    from mamba_ssm._compat.buildinfo import read_build_info

    info = read_build_info(so)
    assert info.torch_version == built_with and info.kernels == ["cpu"]
    assert (info.torch_abi, info.torch_abi_floor) == ("stable", "2.10")
    assert stable_abi.check(so, "2.10") == []  # no libtorch C++ symbol; only shim calls torch 2.10 exports
    return info


LOAD = os.path.join(HERE, "stable_abi_state.py")


def _kernel_tests_under(python, proj, runtime, selection):
    loaded = _run([python, LOAD], proj)
    state = json.loads(loaded.stdout.strip().splitlines()[-1])
    assert state["loaded"] and state["torch"] == runtime, (state, loaded.stderr[-2000:])
    assert {
        "selective_scan_fwd",
        "selective_scan_bwd",
        "causal_conv1d_fwd",
        "causal_conv1d_bwd",
        "causal_conv1d_update",
        "causal_conv1d_varlen_states",
        "build_info",
        "cpu_isa",
    } <= set(state["ops"])
    env = dict(os.environ, MAMBA_SSM_BACKEND="auto")
    cmd = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "-k", selection, *KERNEL_TESTS]
    tests = _run(cmd, proj, env)
    summary = tests.stdout.strip().splitlines()[-1] if tests.stdout.strip() else ""
    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    assert " passed" in summary and "skipped" not in summary, tests.stdout[-3000:]
    return state, summary


def test_built_with_213_runs_under_214(tmp_path, other_python):
    torch = pytest.importorskip("torch")
    proj = copy_project(str(tmp_path / "proj"))
    so = _build_cpu_stable(other_python, proj)
    _check_module(so, f"{OTHER_TORCH}+cpu")
    state, summary = _kernel_tests_under(sys.executable, proj, torch.__version__, FORWARD_SELECTION)
    assert state["abi"] == f"stable ABI, torch >= 2.10 (built with {OTHER_TORCH})"
    print(f"\nbuilt with torch {OTHER_TORCH}+cpu, run under {torch.__version__}: {summary}")


def test_built_with_214_runs_under_213(tmp_path, other_python):
    torch = pytest.importorskip("torch")
    proj = copy_project(str(tmp_path / "proj"))
    so = _build_cpu_stable(sys.executable, proj)  # torch 2.14.1's headers (a CUDA torch; CPU kernels only)
    _check_module(so, torch.__version__)
    _, summary = _kernel_tests_under(other_python, proj, f"{OTHER_TORCH}+cpu", REVERSE_SELECTION)
    print(f"\nbuilt with torch {torch.__version__} (CPU kernels), run under {OTHER_TORCH}+cpu: {summary}")


PYPI_PYTHONS = os.environ.get("MAMBA_TEST_PYPI_TORCH_PYTHONS", "").split()


@pytest.mark.skipif(
    not PYPI_PYTHONS, reason="opt-in: MAMBA_TEST_PYPI_TORCH_PYTHONS names the Pythons of PyPI torches"
)
@pytest.mark.parametrize("python", PYPI_PYTHONS or ["-"])
def test_built_with_213_runs_under_pypi_torch(tmp_path, other_python, python):
    proj = copy_project(str(tmp_path / "proj"))
    so = _build_cpu_stable(other_python, proj)
    _check_module(so, f"{OTHER_TORCH}+cpu")
    runtime = _run([python, "-c", "import torch; print(torch.__version__)"], "/").stdout.strip()
    _, summary = _kernel_tests_under(python, proj, runtime, FORWARD_SELECTION)
    print(f"\nbuilt with torch {OTHER_TORCH}+cpu, run under {runtime} ({python}): {summary}")
