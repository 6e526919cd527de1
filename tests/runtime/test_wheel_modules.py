"""The per-platform wheel's kernel modules (``mamba_ssm/_kernels/{cpu,cu12,cu13}/_C.abi3.so``) at run time.

Each test lays out a package copy as that wheel does and runs ``progs/wheel_module_child.py`` in it (a
fresh process per layout: a dlopen cannot be undone). Which module was dlopened is read from the
modules themselves: the fabricated ones (gcc-built, carrying a build-info record) append their folder
name to a marker file from a constructor; the real ones register the ``mamba_ssm`` operators.

What is simulated: this machine has one torch, 2.14.1+cu130, and no GPU. A torch below the stable
modules' floor (PyPI's 2.9.1+cu128), a ROCm torch (2.9.1+rocm6.4, 2.14.1+rocm6.2) and a CUDA 14 torch are
this torch presented as those builds (``torch.__version__`` / ``torch.version.cuda`` / ``.hip`` rewritten
before mamba_ssm looks, as ``progs/rocm_coverage.py`` does); their GPUs are declared device properties.
The modules the loader must reject under them are fabricated (never dlopened, as the marker proves);
the modules that load are the real ones (slow tier: the CPU-only stable module is built here once, the
CUDA 13 one is the in-place build's ``mamba_ssm/_C.abi3.so``, CPU + sm_90).
"""

import importlib.util
import os
import shutil

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "mamba_ssm_test_loader_support", os.path.join(_HERE, "test_loader_support.py")
)
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)

INSTALL_KERNELS = "python -m mamba_ssm install-kernels"
#: The pinned reinstall README documents: from PyPI it brings back this same wheel, so never the fix here.
REINSTALL = "python -m pip install"
STABLE = {"torch_abi": "stable", "torch_abi_floor": "2.10"}
ROCM_29 = {"version": "2.9.1+rocm6.4", "cuda": None, "hip": "6.4.43482-0f2d60242"}
ROCM_214 = {"version": "2.14.1+rocm6.2", "cuda": None, "hip": "6.2.41133-dd7f95766"}
CUDA_29 = {"version": "2.9.1+cu128", "cuda": "12.8", "hip": None}
CUDA_14 = {"version": "2.17.0+cu140", "cuda": "14.0", "hip": None}


def module_info(folder):
    """The build info of the wheel's module in ``folder`` (stable ABI, floor 2.10), as the wheel states it."""
    if folder == "cpu":
        return S.build_info(
            torch_version="2.10.0+cpu",
            torch_cuda=None,
            nvcc_version=None,
            sass_archs=[],
            ptx_archs=[],
            kernels=["cpu"],
            **STABLE,
        )
    torch, cuda, nvcc = {"cu12": ("2.10.0+cu128", "12.8", "12.9"), "cu13": ("2.14.1+cu130", "13.0", "13.0")}[
        folder
    ]
    return S.build_info(
        torch_version=torch, torch_cuda=cuda, nvcc_version=nvcc, kernels=["cpu", "cuda"], **STABLE
    )


def wheel_copy(tmp_path, fabricated=(), real=None, top_level=False):
    """A package copy with ``_kernels/<folder>/_C.abi3.so`` for each folder: fabricated (``fabricated``)
    or copied from a real module (``real``: folder -> path); ``top_level`` adds a fabricated top-level
    ``_C.abi3.so`` built for this torch. Returns the copy's root."""
    root = S.make_package(tmp_path)
    kernels = root / "mamba_ssm" / "_kernels"
    for folder in fabricated:
        (kernels / folder).mkdir(parents=True)
        S.compile_so(kernels / folder / "_C.abi3.so", module_info(folder), marker_text=f"{folder};")
    for folder, path in (real or {}).items():
        (kernels / folder).mkdir(parents=True)
        shutil.copyfile(path, kernels / folder / "_C.abi3.so")
    if top_level:
        S.compile_so(root / "mamba_ssm" / "_C.abi3.so", S.build_info(), marker_text="top;")
    return root


def run_child(root, present=None, fake_gpu=None, scan=False, check=False):
    """Run the child in the copy; returns (its JSON, the marker file's text or None)."""
    import json

    marker = root.parent / "dlopen_marker"
    env = S.child_env(
        root,
        MAMBA_SSM_TEST_DLOPEN_MARKER=marker,
        MAMBA_SSM_TEST_PRESENT_TORCH=None if present is None else json.dumps(present),
        MAMBA_SSM_TEST_FAKE_GPU=fake_gpu,
        MAMBA_SSM_TEST_RUN_SCAN="1" if scan else None,
        MAMBA_SSM_TEST_DOCTOR_CHECK="1" if check else None,
    )
    proc = S.run_prog(root, "wheel_module_child", args=[str(root.parent)], env=env)
    assert proc.returncode == 0, f"child failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    return S.last_json(proc.stdout), marker.read_text() if marker.exists() else None


def assert_scan_matches_float64(root):
    import torch

    saved = torch.load(root.parent / "tensors.pt")
    u, delta, A, B, C, D, z, delta_bias = saved["inputs"]
    ref = S.selective_scan_reference(u, delta, A, B, C, D, z, delta_bias, delta_softplus=True)
    for y in (saved["y1"], saved["y2"]):
        assert y.dtype == torch.float32
        torch.testing.assert_close(y.double(), ref, rtol=1e-4, atol=1e-5)


def problem_with(doctor, reason):
    found = [p for p in doctor["problems"] if p["reason"] == reason]
    assert found, (reason, doctor["problems"])
    return found[0]


# ----------------------------------------------------------------------------- fast: fabricated modules
def test_a_torch_below_the_floor_gets_its_cuda_module_rejected_unloaded_and_install_kernels(tmp_path):
    root = wheel_copy(tmp_path, fabricated=("cpu", "cu12", "cu13"))
    out, marker = run_child(root, present=CUDA_29, scan=True)
    load = out["load"]
    assert marker is None, f"a module was dlopened: {marker}"
    assert (load["kind"], load["loaded"]) == ("incompatible", False)
    assert load["path"] == str(root / "mamba_ssm" / "_kernels" / "cu12" / "_C.abi3.so")
    choice = load["module_choice"]
    assert (choice["folder"], choice["available"], choice["others"]) == (
        "cu12",
        ["cpu", "cu12", "cu13"],
        ["cpu", "cu13"],
    )
    assert choice["reason"] == "torch 2.9.1+cu128 is a CUDA 12.8 build"
    assert "torch >= 2.10" in load["reason"] and "running torch 2.9.1+cu128" in load["reason"]
    assert INSTALL_KERNELS in load["fix"] and REINSTALL not in load["fix"], load["fix"]
    # The ops run on the PyTorch fallback, once warned with the reason and the one command.
    assert out["plan_cpu"]["backend"] == "torch"
    assert_scan_matches_float64(root)
    assert len(out["warnings"]) == 1 and load["reason"] in out["warnings"][0]
    assert INSTALL_KERNELS in out["warnings"][0] and REINSTALL not in out["warnings"][0]
    # doctor: exit 1 with that fix; the install is named as the wheel's, not as a resolver decision.
    doctor = out["doctor"]
    assert out["doctor_code"] == 1 and doctor["status"] == "fallback"
    assert doctor["compiled_module"]["module_choice"] == choice
    assert problem_with(doctor, load["reason"])["fix"] == load["fix"]
    wheel = doctor["install_decision"]["wheel_install"]
    assert wheel.startswith("installed from the wheel (kernel modules cpu, cu12, cu13; chosen: cu12)"), wheel
    assert doctor["install_decision"]["decision"] is None
    text = out["doctor_text"]
    assert (
        "  wheel kernel module: cu12 (of cpu, cu12, cu13): torch 2.9.1+cu128 is a CUDA 12.8 build\n" in text
    )
    assert f"Install: {wheel}\n" in text and "Install decision" not in text and "resolver (" not in text


def test_a_rocm_torch_below_the_floor_gets_the_cpu_module_rejected_and_install_kernels(tmp_path):
    root = wheel_copy(tmp_path, fabricated=("cpu", "cu12", "cu13"))
    out, marker = run_child(root, present=ROCM_29, fake_gpu="rocm", scan=True)
    load = out["load"]
    assert marker is None, f"a module was dlopened: {marker}"
    assert (load["kind"], load["module_choice"]["folder"]) == ("incompatible", "cpu")
    assert (
        "torch 2.9.1+rocm6.4 is a ROCm 6.4 build and the wheel has no ROCm/HIP module"
        in (load["module_choice"]["reason"])
    )
    assert "running torch 2.9.1+rocm6.4, older than that floor" in load["reason"]
    assert INSTALL_KERNELS in load["fix"] and REINSTALL not in load["fix"]
    assert out["compiled_gpu"] == {"reason": load["reason"], "fix": load["fix"]}
    assert_scan_matches_float64(root)
    assert len(out["warnings"]) == 1 and INSTALL_KERNELS in out["warnings"][0]
    doctor = out["doctor"]
    assert out["doctor_code"] == 1
    problem = problem_with(doctor, load["reason"])
    assert problem["fix"] == load["fix"] and problem["devices"] == ["cpu", "cuda:0"]


def test_a_rocm_torch_from_the_floor_loads_the_cpu_module_and_its_gpu_is_sent_to_install_kernels(tmp_path):
    root = wheel_copy(tmp_path, fabricated=("cpu", "cu12", "cu13"))
    out, marker = run_child(root, present=ROCM_214, fake_gpu="rocm")
    assert marker == "cpu;"  # exactly one module dlopened, the CPU one
    load = out["load"]
    assert load["loaded"] and load["module_choice"]["folder"] == "cpu"
    assert out["coverage"]["cuda:0"] == "this build of mamba_ssm._C has no ROCm/HIP kernel (kernels: cpu)"
    fix = out["compiled_gpu"]["fix"]
    assert INSTALL_KERNELS in fix and "HIP_BUILD" not in fix and REINSTALL not in fix, fix
    assert "chosen: cpu" in out["doctor"]["install_decision"]["wheel_install"]


def test_a_cuda_major_without_a_module_loads_the_cpu_module_with_the_reason(tmp_path):
    root = wheel_copy(tmp_path, fabricated=("cpu", "cu12", "cu13"))
    out, marker = run_child(root, present=CUDA_14, fake_gpu="cuda")
    assert marker == "cpu;"
    choice = out["load"]["module_choice"]
    assert (out["load"]["loaded"], choice["folder"], choice["wanted"]) == (True, "cpu", "cu14")
    assert (
        "torch 2.17.0+cu140 is a CUDA 14.0 build, and this install has no cu14 module (it has cpu, cu12, cu13)"
        in (choice["reason"])
    )
    assert "no CUDA kernel" in out["coverage"]["cuda:0"]
    fix = out["compiled_gpu"]["fix"]
    assert INSTALL_KERNELS in fix and "MAMBA_FORCE_BUILD" not in fix and REINSTALL not in fix, fix


def test_a_top_level_module_wins_over_the_wheel_modules(tmp_path):
    root = wheel_copy(tmp_path, fabricated=("cpu", "cu13"), top_level=True)
    out, marker = run_child(root)
    assert marker == "top;"
    load = out["load"]
    assert (load["loaded"], load["path"], load["module_choice"]) == (
        True,
        str(root / "mamba_ssm" / "_C.abi3.so"),
        None,
    )
    assert out["doctor"]["install_decision"]["wheel_install"] is None
    assert (
        "wheel kernel module" not in out["doctor_text"]
        and "installed from the wheel" not in out["doctor_text"]
    )


def test_no_module_for_this_torch_loads_nothing_and_says_which_are_there(tmp_path):
    import torch

    if not (torch.version.cuda or "").startswith("13."):
        pytest.skip(f"written for a CUDA 13 torch; this is {torch.__version__}")
    root = wheel_copy(tmp_path, fabricated=("cu12",))
    out, marker = run_child(root)
    assert marker is None
    load = out["load"]
    assert (load["kind"], load["found"], load["module_choice"]["folder"]) == ("missing", False, None)
    assert (
        f"is a CUDA {torch.version.cuda} build, and this install has neither a cu13 nor a cpu module (it has cu12)"
        in (load["reason"])
    )
    assert INSTALL_KERNELS in load["fix"] and REINSTALL not in load["fix"]
    assert out["doctor_code"] == 1 and "chosen: none" in out["doctor"]["install_decision"]["wheel_install"]


# ----------------------------------------------------------------------------- slow: the real modules
REAL_OPS = {"selective_scan_fwd", "selective_scan_bwd", "causal_conv1d_fwd", "build_info", "cpu_isa"}


@pytest.fixture(scope="module")
def real_modules(tmp_path_factory):
    """{"cpu": the CPU-only stable module built here with this torch, "cu13": the in-place build's CPU +
    CUDA 13 stable module} (the build is the project's own: tests/build's helper, benchmarks/build_cpu_only.py)."""
    import torch

    from mamba_ssm._compat.buildinfo import read_build_info

    cu13 = os.path.join(S.REPO_ROOT, "mamba_ssm", "_C.abi3.so")
    if not os.path.isfile(cu13):
        pytest.skip("no in-place build mamba_ssm/_C.abi3.so (ci/test.sh makes it)")
    info = read_build_info(cu13)
    if not (info.is_stable_abi and "cuda" in info.kernels and (info.torch_cuda or "").startswith("13.")):
        pytest.skip(f"the in-place build is not a CPU + CUDA 13 stable module: {info}")
    if not (torch.version.cuda or "").startswith("13."):
        pytest.skip(f"needs a CUDA 13 torch; this is {torch.__version__}")
    build = os.path.join(S.REPO_ROOT, "tests", "build")
    helpers = {}
    for name in ("_project", "test_stable_abi_two_torches"):
        spec = importlib.util.spec_from_file_location(
            f"mamba_ssm_test_{name}", os.path.join(build, name + ".py")
        )
        helpers[name] = importlib.util.module_from_spec(spec)
        import sys

        sys.path.insert(0, build)  # test_stable_abi_two_torches imports _project
        try:
            spec.loader.exec_module(helpers[name])
        finally:
            sys.path.remove(build)
    proj = helpers["_project"].copy_project(str(tmp_path_factory.mktemp("cpu_module") / "proj"))
    import sys

    cpu = helpers["test_stable_abi_two_torches"]._build_cpu_stable(sys.executable, proj)
    built = read_build_info(cpu)
    assert (built.kernels, built.torch_abi, built.torch_abi_floor) == (["cpu"], "stable", "2.10")
    return {"cpu": cpu, "cu13": cu13}


@pytest.mark.slow
def test_cu13_is_chosen_loaded_and_its_cpu_scan_matches_float64(tmp_path, real_modules):
    root = wheel_copy(tmp_path, real=real_modules)
    out, _ = run_child(root, scan=True, check=True)
    load = out["load"]
    assert load["loaded"] and load["path"] == str(root / "mamba_ssm" / "_kernels" / "cu13" / "_C.abi3.so")
    assert (load["module_choice"]["folder"], load["module_choice"]["others"]) == ("cu13", ["cpu"])
    assert load["build_info"]["kernels"] == ["cpu", "cuda"]
    assert set(out["registered"]) >= REAL_OPS, out["registered"]
    assert out["plan_cpu"]["backend"] == "compiled" and out["warnings"] == []
    assert_scan_matches_float64(root)
    doctor = out["doctor"]
    checks = {c["device"]: c for c in doctor["checks"]}
    assert checks["cpu"]["ok"] and checks["cpu"]["backend"] == "compiled", checks
    if not doctor["gpus"]["devices"]:  # on a GPU machine its coverage decides the rest
        assert out["doctor_code"] == 0, doctor["problems"]
    assert "wheel kernel module: cu13 (of cpu, cu13): torch " in out["doctor_text"]


@pytest.mark.slow
def test_only_the_cpu_module_is_chosen_under_a_cuda_torch_with_the_reason(tmp_path, real_modules):
    import torch

    root = wheel_copy(tmp_path, real={"cpu": real_modules["cpu"]})
    out, _ = run_child(root, fake_gpu="cuda", scan=True)
    load = out["load"]
    assert load["loaded"] and load["module_choice"]["folder"] == "cpu"
    assert load["module_choice"]["reason"].startswith(
        f"torch {torch.__version__} is a CUDA {torch.version.cuda} build, and this install has no cu13 module "
        "(it has cpu), so the CPU module is loaded"
    )
    assert set(out["registered"]) >= REAL_OPS
    assert out["plan_cpu"]["backend"] == "compiled" and out["warnings"] == []
    assert_scan_matches_float64(root)
    assert "CPU-only build" in out["coverage"]["cuda:0"]
    assert INSTALL_KERNELS in out["compiled_gpu"]["fix"]


@pytest.mark.slow
def test_a_rocm_torch_runs_the_real_cpu_module(tmp_path, real_modules):
    root = wheel_copy(tmp_path, real=real_modules)
    out, _ = run_child(root, present=ROCM_214, fake_gpu="rocm", scan=True)
    load = out["load"]
    assert load["loaded"] and load["module_choice"]["folder"] == "cpu"
    assert set(out["registered"]) >= REAL_OPS
    assert out["plan_cpu"]["backend"] == "compiled" and out["warnings"] == []
    assert_scan_matches_float64(root)
    assert INSTALL_KERNELS in out["compiled_gpu"]["fix"]
