"""setup.py's preflight and the BuildConfig it resolves from the environment.

torch is described by a BuildTorch (its version fields and arch list) so that every torch flavour can be
tried here; the tools (nvcc, hipcc, gcc, ninja) are real programs: fake toolkits are shell scripts in
a temporary folder, the host compiler is this machine's gcc.
"""

import os
import re
import shutil
import subprocess
import sys

import pytest
from _setup_loader import fake_toolkit

from mamba_ssm._build import commands
from mamba_ssm._build.config import BuildTorch, resolve_config
from mamba_ssm._build.errors import PreflightError
from mamba_ssm._build.settings import BASE_VERSION, classify_commands, default_max_jobs
from mamba_ssm._build.toolkit import locate_cuda, max_gcc_for_nvcc
from mamba_ssm._compat import buildinfo
from mamba_ssm._compat.versions import TorchBuild, parse_cuda_version

ARCH_214 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


def gcc_version():
    out = subprocess.run(["gcc", "-dumpversion"], capture_output=True, text=True).stdout
    return int(re.match(r"\d+", out.strip()).group(0))


def cuda_torch(cuda="13.0", abi=True, home=None, version=None):
    return BuildTorch(
        build=TorchBuild(version or f"2.14.1+cu{cuda.replace('.', '')}", cuda=cuda, cxx11_abi=abi),
        arch_list=list(ARCH_214),
        cuda_home=home,
    )


def cpu_torch(abi=True):
    return BuildTorch(build=TorchBuild("2.13.0+cpu", cxx11_abi=abi))


@pytest.fixture
def toolkit(tmp_path):
    return fake_toolkit(str(tmp_path / "cuda"), release=(13, 0), gcc_limit=gcc_version() + 1)


@pytest.fixture
def env(toolkit):
    # ninja comes from the venv (the ninja package / PATH), gcc from the system
    return {"PATH": os.environ.get("PATH", ""), "CUDA_HOME": toolkit}


def test_cuda_defaults(env, toolkit):
    cfg = resolve_config(env, cuda_torch(home=toolkit))
    assert cfg.kernels == ("cpu", "cuda")
    assert cfg.nvcc == (13, 0) and cfg.cuda_home == toolkit
    assert cfg.arch_source == "default"
    assert cfg.arch_spec.sass == tuple(ARCH_214) and cfg.arch_spec.ptx == ("compute_120",)
    assert "-gencode=arch=compute_120,code=compute_120" in cfg.gpu_flags
    assert ("MAMBA_SSM_WITH_CUDA", None) in cfg.define_macros
    assert all(s.endswith((".cpp", ".cu")) for s in cfg.sources)
    assert any(s.endswith(".cu") for s in cfg.sources)
    # the C++ standard is torch's business: never ours
    assert not [f for f in cfg.cxx_flags + cfg.gpu_flags if "-std=" in f]
    info = cfg.build_info(git_commit="abc")
    assert info.sass_archs == list(ARCH_214) and info.torch_version == "2.14.1+cu130"
    assert info.nvcc_version == "13.0" and info.kernels == ["cpu", "cuda"]
    assert info.python_tag == "cp39-abi3"


@pytest.mark.parametrize(
    "var,value,sass,ptx",
    [
        ("MAMBA_CUDA_ARCHS", "90", ("sm_90",), ()),
        ("MAMBA_CUDA_ARCHS", "80;90", ("sm_80", "sm_90"), ()),
        ("MAMBA_CUDA_ARCHS", "90+PTX", ("sm_90",), ("compute_90",)),
        ("TORCH_CUDA_ARCH_LIST", "8.0;9.0+PTX", ("sm_80", "sm_90"), ("compute_90",)),
        ("TORCH_CUDA_ARCH_LIST", "9.0a", ("sm_90a",), ()),
    ],
)
def test_arch_env(env, toolkit, var, value, sass, ptx):
    env[var] = value
    cfg = resolve_config(env, cuda_torch(home=toolkit))
    assert (cfg.arch_spec.sass, cfg.arch_spec.ptx, cfg.arch_source) == (sass, ptx, var)
    want = [f"-gencode=arch={s.replace('sm_', 'compute_')},code={s}" for s in sass]
    assert [f for f in cfg.gpu_flags if f.startswith("-gencode")][: len(want)] == want


def test_mamba_archs_win_over_torch_list(env, toolkit):
    env.update(MAMBA_CUDA_ARCHS="90", TORCH_CUDA_ARCH_LIST="8.0")
    cfg = resolve_config(env, cuda_torch(home=toolkit))
    assert cfg.arch_spec.sass == ("sm_90",) and cfg.arch_source == "MAMBA_CUDA_ARCHS"


@pytest.mark.parametrize(
    "value,match",
    [("70", "sm_70 is not supported by nvcc 13.0"), ("103", "sm_103 with nvcc 13.0"), ("native", "native")],
)
def test_arch_env_rejected(env, toolkit, value, match):
    env["MAMBA_CUDA_ARCHS"] = value
    with pytest.raises(PreflightError, match=match) as e:
        resolve_config(env, cuda_torch(home=toolkit))
    assert "MAMBA_CUDA_ARCHS" in str(e.value)


def test_default_drops_known_bad_sm103(env, toolkit):
    info = cuda_torch(home=toolkit)
    info.arch_list = ["sm_90", "sm_100", "sm_103"]
    cfg = resolve_config(env, info)
    assert cfg.arch_spec.sass == ("sm_90", "sm_100") and cfg.arch_spec.ptx == ("compute_100",)


def test_force_cxx11_abi(env, toolkit):
    cfg = resolve_config(env, cuda_torch(home=toolkit, abi=False))
    assert cfg.cxx11_abi is False and not cfg.force_cxx11_abi
    assert not [f for f in cfg.cxx_flags if "GLIBCXX" in f]
    env["MAMBA_FORCE_CXX11_ABI"] = "TRUE"
    cfg = resolve_config(env, cuda_torch(home=toolkit, abi=False))
    assert cfg.cxx11_abi is True and cfg.force_cxx11_abi
    assert "-D_GLIBCXX_USE_CXX11_ABI=1" in cfg.cxx_flags
    assert "-Xcompiler=-D_GLIBCXX_USE_CXX11_ABI=1" in cfg.gpu_flags
    assert cfg.build_info().cxx11_abi is True


def test_max_jobs_and_nvcc_threads(env, toolkit):
    env.update(MAX_JOBS="3", NVCC_THREADS="2", MAMBA_CUDA_ARCHS="80;90")
    cfg = resolve_config(env, cuda_torch(home=toolkit))
    assert cfg.max_jobs == 3 and cfg.nvcc_threads == 2 and "--threads=2" in cfg.gpu_flags
    env["MAX_JOBS"] = "0"
    with pytest.raises(PreflightError, match="MAX_JOBS='0'"):
        resolve_config(env, cuda_torch(home=toolkit))


def test_default_max_jobs_from_cores_and_memory():
    assert default_max_jobs(cpu_count=16, mem_available_gib=10) == 4
    assert default_max_jobs(cpu_count=2, mem_available_gib=64) == 2
    assert default_max_jobs(cpu_count=8, mem_available_gib=1) == 1
    assert default_max_jobs(cpu_count=4, mem_available_gib=None) == 4


def test_local_version(env, toolkit):
    env["MAMBA_LOCAL_VERSION"] = "cu13torch2.14cxx11abiTRUE"
    cfg = resolve_config(env, cuda_torch(home=toolkit))
    assert cfg.version == BASE_VERSION + "+cu13torch2.14cxx11abitrue"
    assert cfg.build_info().package_version == cfg.version
    env["MAMBA_LOCAL_VERSION"] = "not a label"
    with pytest.raises(PreflightError, match="MAMBA_LOCAL_VERSION='not a label'"):
        resolve_config(env, cuda_torch(home=toolkit))


def test_keep_cuda_build_is_accepted_noop(env, toolkit):
    base = resolve_config(dict(env), cuda_torch(home=toolkit))
    env["MAMBA_KEEP_CUDA_BUILD"] = "TRUE"
    cfg = resolve_config(env, cuda_torch(home=toolkit))
    assert (cfg.sources, cfg.gpu_flags, cfg.cxx_flags) == (base.sources, base.gpu_flags, base.cxx_flags)
    assert any("MAMBA_KEEP_CUDA_BUILD" in n for n in cfg.notes)


# ----------------------------------------------------------------------------- CPU-only torch
def test_cpu_torch_builds_cpu_kernel_alone(tmp_path):
    # no CUDA toolkit anywhere: a CPU torch needs none
    env = {"PATH": os.environ["PATH"], "CUDA_HOME": str(tmp_path / "nowhere")}
    cfg = resolve_config(env, cpu_torch())
    assert cfg.kernels == ("cpu",) and cfg.nvcc is None and cfg.arch_spec is None
    assert cfg.sources and all(s.endswith(".cpp") for s in cfg.sources)
    assert ("MAMBA_SSM_WITH_CUDA", None) not in cfg.define_macros
    info = cfg.build_info()
    assert info.kernels == ["cpu"] and info.torch_cuda is None and info.sass_archs == []


@pytest.mark.parametrize("var", ["MAMBA_CUDA_ARCHS", "TORCH_CUDA_ARCH_LIST"])
def test_cpu_torch_with_cuda_build_asked(var):
    env = {"PATH": os.environ["PATH"], var: "90"}
    with pytest.raises(PreflightError, match=f"{var}='90' asks for a CUDA build, but torch 2.13.0\\+cpu"):
        resolve_config(env, cpu_torch())


# ----------------------------------------------------------------------------- preflight failures
def test_nvcc_missing_no_cuda_home():
    env = {"PATH": "/nonexistent"}
    with pytest.raises(PreflightError, match="nvcc was not found"):
        resolve_config(env, cuda_torch(home=None))


def test_cuda_home_wrong(tmp_path):
    home = str(tmp_path / "not-cuda")
    os.makedirs(home)
    env = {"PATH": os.environ["PATH"], "CUDA_HOME": home}
    with pytest.raises(PreflightError, match=f"nvcc not found at {re.escape(home)}/bin/nvcc \\(CUDA_HOME="):
        resolve_config(env, cuda_torch(home=home))


def test_cuda_home_without_runtime(tmp_path, toolkit):
    os.remove(os.path.join(toolkit, "lib64", "libcudart.so"))
    env = {"PATH": os.environ["PATH"], "CUDA_HOME": toolkit}
    with pytest.raises(PreflightError, match="not a CUDA toolkit root"):
        resolve_config(env, cuda_torch(home=toolkit))


def test_nvcc_on_path_is_wrapper_script(tmp_path, toolkit):
    # like this machine's /usr/local/bin/nvcc: `exec <toolkit>/bin/nvcc "$@"`; torch then guesses
    # CUDA_HOME = dirname(dirname(wrapper)), which holds no CUDA runtime
    prefix = tmp_path / "usr-local"
    (prefix / "bin").mkdir(parents=True)
    wrapper = prefix / "bin" / "nvcc"
    wrapper.write_text(f'#!/bin/sh\nexec {toolkit}/bin/nvcc "$@"\n')
    wrapper.chmod(0o755)
    env = {"PATH": f"{prefix}/bin:{os.environ['PATH']}"}
    with pytest.raises(PreflightError) as e:
        resolve_config(env, cuda_torch(home=str(prefix)))
    msg = str(e.value)
    assert "wrapper script" in msg and str(wrapper) in msg and f"CUDA_HOME={toolkit}" in msg
    # with CUDA_HOME set to the root it passes
    env["CUDA_HOME"] = toolkit
    assert resolve_config(env, cuda_torch(home=toolkit)).cuda_home == toolkit


def test_nvcc_major_differs_from_torch(tmp_path):
    home = fake_toolkit(str(tmp_path / "cuda12"), release=(12, 4), gcc_limit=gcc_version() + 1)
    env = {"PATH": os.environ["PATH"], "CUDA_HOME": home}
    with pytest.raises(PreflightError, match=r"nvcc 12.4 .* does not match torch's CUDA 13.0"):
        resolve_config(env, cuda_torch(home=home))
    # a minor difference is fine
    assert resolve_config(env, cuda_torch(cuda="12.6", home=home)).nvcc == (12, 4)


def test_stable_module_for_another_cuda_major(tmp_path):
    """MAMBA_STABLE_CUDA_MAJOR=12: a stable-ABI build with nvcc 12.4 and a CUDA 13.0 torch's headers
    passes the preflight; its build info says nvcc 12.4, which PyPI's torch 2.10.0+cu128 loads and
    2.14.1+cu130 does not. Unset, or for a classic build, or naming another major than nvcc's: refused."""
    home = fake_toolkit(str(tmp_path / "cuda12"), release=(12, 4), gcc_limit=gcc_version() + 1)
    env = {"PATH": os.environ["PATH"], "CUDA_HOME": home, "MAMBA_STABLE_CUDA_MAJOR": "12"}
    cfg = resolve_config(env, cuda_torch(home=home))
    assert (cfg.torch_abi, cfg.nvcc, cfg.torch.cuda) == ("stable", (12, 4), "13.0")
    assert any("libcudart.so.12" in n and "CUDA 13.0 torch" in n for n in cfg.notes), cfg.notes
    info = cfg.build_info()
    assert (info.torch_cuda, info.nvcc_version) == ("13.0", "12.4")
    assert buildinfo.incompatibilities(info, TorchBuild("2.10.0+cu128", "12.8", cxx11_abi=True)) == []
    assert buildinfo.incompatibilities(info, TorchBuild("2.14.1+cu130", "13.0", cxx11_abi=True)) != []
    with pytest.raises(PreflightError, match=r"applies to a stable-ABI build only"):
        resolve_config(dict(env, MAMBA_TORCH_STABLE_ABI="0"), cuda_torch(home=home))
    with pytest.raises(PreflightError, match=r"MAMBA_STABLE_CUDA_MAJOR=13 but nvcc .* is CUDA 12.4"):
        resolve_config(dict(env, MAMBA_STABLE_CUDA_MAJOR="13"), cuda_torch(home=home))
    with pytest.raises(PreflightError, match=r"MAMBA_STABLE_CUDA_MAJOR='twelve' is not a CUDA major"):
        resolve_config(dict(env, MAMBA_STABLE_CUDA_MAJOR="twelve"), cuda_torch(home=home))


def test_torch_cuda_check_replaced_for_a_stable_build_only(tmp_path, monkeypatch):
    """torch's cpp_extension refuses an nvcc of another CUDA major than its own. During a stable-ABI build
    for another major (``commands.torch_cuda_check``) the same call proceeds, and fails when CUDA_HOME's
    nvcc is not the one the preflight resolved; a classic build's call still fails with torch's error;
    afterwards torch's function is back."""
    import dataclasses

    torch = pytest.importorskip("torch")
    from torch.torch_version import TorchVersion
    from torch.utils import cpp_extension

    if not torch.version.cuda:
        pytest.skip(f"torch {torch.__version__} has no CUDA: its check returns before comparing majors")
    other = (12, 4) if parse_cuda_version(torch.version.cuda)[0] != 12 else (13, 0)
    home = fake_toolkit(str(tmp_path / "other"), release=other, gcc_limit=gcc_version() + 1)
    env = {"PATH": os.environ["PATH"], "CUDA_HOME": home, "MAMBA_STABLE_CUDA_MAJOR": str(other[0])}
    cfg = resolve_config(env, cuda_torch(cuda=torch.version.cuda, home=home))
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", home)
    original = cpp_extension._check_cuda_version
    gcc = TorchVersion(str(gcc_version()))

    with commands.torch_cuda_check(cfg):
        cpp_extension._check_cuda_version("gcc", gcc)  # proceeds
    assert cpp_extension._check_cuda_version is original

    classic = dataclasses.replace(cfg, torch_abi="classic", torch_abi_floor=None)
    with pytest.raises(RuntimeError) as e, commands.torch_cuda_check(classic):
        cpp_extension._check_cuda_version("gcc", gcc)
    assert e.value.args[0] == cpp_extension.CUDA_MISMATCH_MESSAGE
    assert e.value.args[1:] == (f"{other[0]}.{other[1]}", torch.version.cuda)

    elsewhere = fake_toolkit(str(tmp_path / "minor"), release=(other[0], other[1] + 1), gcc_limit=99)
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", elsewhere)
    stale = r"CUDA_HOME=.*minor, CUDA \d+\.\d+, but the preflight resolved"
    with pytest.raises(RuntimeError, match=stale), commands.torch_cuda_check(cfg):
        cpp_extension._check_cuda_version("gcc", gcc)
    assert cpp_extension._check_cuda_version is original


def test_nvcc_unreadable_version(tmp_path, toolkit):
    with open(os.path.join(toolkit, "bin", "nvcc"), "w") as f:
        f.write("#!/bin/sh\necho 'hello from a broken nvcc'\n")
    env = {"PATH": os.environ["PATH"], "CUDA_HOME": toolkit}
    with pytest.raises(PreflightError, match="hello from a broken nvcc"):
        resolve_config(env, cuda_torch(home=toolkit))


def test_host_compiler_newer_than_nvcc_supports(tmp_path):
    gcc = gcc_version()
    home = fake_toolkit(str(tmp_path / "cuda"), release=(13, 0), gcc_limit=gcc - 1)
    env = {"PATH": os.environ["PATH"], "CUDA_HOME": home, "CC": "gcc"}
    with pytest.raises(PreflightError) as e:
        resolve_config(env, cuda_torch(home=home))
    assert f"GCC {gcc}" in str(e.value) and f"GCC <= {gcc - 1}" in str(e.value)
    env["NVCC_APPEND_FLAGS"] = "-allow-unsupported-compiler"
    assert resolve_config(env, cuda_torch(home=home)).nvcc == (13, 0)


def test_max_gcc_from_real_toolkit():
    home = os.environ.get("CUDA_HOME", "/usr/local/cuda-13.0")
    if not os.path.isfile(os.path.join(home, "include", "crt", "host_config.h")):
        pytest.skip(f"no CUDA toolkit at {home}")
    # CUDA 13.0's host_config.h rejects GCC > 15 (CUDA 13.0 installation guide: GCC up to 15)
    nvcc_out = subprocess.run(
        [os.path.join(home, "bin", "nvcc"), "--version"], capture_output=True, text=True
    ).stdout
    if "release 13.0" in nvcc_out:
        assert max_gcc_for_nvcc(home, (13, 0)) == 15


def test_ninja_missing(env, toolkit, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ninja", None)  # `import ninja` fails
    (tmp_path / "emptybin").mkdir()
    env["PATH"] = str(tmp_path / "emptybin")  # ninja is checked first, before any other tool
    assert shutil.which("ninja", path=env["PATH"]) is None
    with pytest.raises(PreflightError, match="ninja is not installed.*pip install ninja"):
        resolve_config(env, cuda_torch(home=toolkit))


# ----------------------------------------------------------------------------- HIP / ROCm
def fake_rocm(root, hip_version="6.2.41133-dd7f95766", bf16_header=None):
    os.makedirs(os.path.join(root, "bin"), exist_ok=True)
    hipcc = os.path.join(root, "bin", "hipcc")
    with open(hipcc, "w") as f:
        f.write(f"#!/bin/sh\necho 'HIP version: {hip_version}'\necho 'AMD clang version 18.0.0'\n")
    os.chmod(hipcc, 0o755)
    if bf16_header is not None:
        d = os.path.join(root, "include", "hip", "amd_detail")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "amd_hip_bf16.h"), "w") as f:
            f.write(bf16_header)
    return root


def rocm_torch(hip="6.2.41133-dd7f95766", version="2.5.1+rocm6.2"):
    return BuildTorch(build=TorchBuild(version, hip=hip, cxx11_abi=False))


def test_hip_build_requested_with_cuda_torch(env, toolkit):
    env["HIP_BUILD"] = "1"
    with pytest.raises(PreflightError, match="HIP_BUILD=1 but torch 2.14.1\\+cu130 is not a ROCm build"):
        resolve_config(env, cuda_torch(home=toolkit))


def test_hip_without_hipcc(tmp_path):
    (tmp_path / "emptybin").mkdir()
    env = {"PATH": str(tmp_path / "emptybin"), "ROCM_PATH": str(tmp_path / "rocm"), "HIP_BUILD": "1"}
    if shutil.which("hipcc", path=env["PATH"]):
        pytest.skip("a real hipcc is on PATH")
    with pytest.raises(PreflightError, match="hipcc was not found.*ROCM_PATH"):
        resolve_config(env, rocm_torch())


def test_rocm_detected_from_torch(tmp_path):
    root = fake_rocm(str(tmp_path / "rocm"))
    env = {"PATH": os.environ["PATH"], "ROCM_PATH": root}
    cfg = resolve_config(env, rocm_torch())  # HIP_BUILD not needed: torch.version.hip says ROCm
    assert cfg.kernels == ("cpu", "hip") and cfg.hipcc == (6, 2) and cfg.rocm_home == root
    assert "native" not in cfg.gfx_archs and "gfx942" in cfg.gfx_archs
    assert ("MAMBA_SSM_HIP", None) in cfg.define_macros
    assert "--offload-arch=gfx90a" in cfg.gpu_flags
    info = cfg.build_info()
    assert info.torch_hip == "6.2.41133-dd7f95766" and info.hipcc_version == "6.2"
    assert info.gfx_archs == list(cfg.gfx_archs) and info.kernels == ["cpu", "hip"]


@pytest.mark.parametrize("var", ["PYTORCH_ROCM_ARCH", "HIP_ARCHITECTURES"])
def test_rocm_arch_env(tmp_path, var):
    root = fake_rocm(str(tmp_path / "rocm"))
    env = {"PATH": os.environ["PATH"], "ROCM_PATH": root, var: "gfx90a;gfx1100"}
    cfg = resolve_config(env, rocm_torch())
    assert cfg.gfx_archs == ("gfx90a", "gfx1100") and cfg.gfx_source == var
    env[var] = "native"
    with pytest.raises(PreflightError, match="native"):
        resolve_config(env, rocm_torch())


# amd_hip_bf16.h of ROCm 6.0 as quoted in ROCm/hip issue 3403 (functions without static/inline), and the
# fixed form (every function through the *_STATIC__ macros).
BF16_60 = """#define __BF16_DEVICE__ __device__
#define __BF16_HOST_DEVICE__ __host__ __BF16_DEVICE__
#define __BF16_DEVICE_STATIC__ __BF16_DEVICE__ static inline
#define __BF16_HOST_DEVICE_STATIC__ __BF16_HOST_DEVICE__ static inline
__device__ __hip_bfloat16 __low2bfloat16(const __hip_bfloat162 a) { return a.x; }
"""
BF16_FIXED = """#define __BF16_DEVICE__ __device__
#define __BF16_HOST_DEVICE__ __host__ __BF16_DEVICE__
#define __BF16_DEVICE_STATIC__ __BF16_DEVICE__ static inline
#define __BF16_HOST_DEVICE_STATIC__ __BF16_HOST_DEVICE__ static inline
__BF16_DEVICE_STATIC__ __hip_bfloat16 __low2bfloat16(const __hip_bfloat162 a) { return a.x; }
"""


def test_rocm60_bf16_header_needs_patch(tmp_path):
    root = fake_rocm(str(tmp_path / "rocm"), hip_version="6.0.32830-d62f6a171", bf16_header=BF16_60)
    env = {"PATH": os.environ["PATH"], "ROCM_PATH": root}
    torch60 = rocm_torch(hip="6.0.32830-d62f6a171", version="2.3.1+rocm6.0")
    with pytest.raises(PreflightError, match="amd_hip_bf16.h.*static inline.*ROCm 6.1"):
        resolve_config(env, torch60)
    fake_rocm(root, hip_version="6.0.32830-d62f6a171", bf16_header=BF16_FIXED)
    assert resolve_config(env, torch60).hipcc == (6, 0)


def test_bf16_check_only_on_rocm60(tmp_path):
    root = fake_rocm(str(tmp_path / "rocm"), hip_version="6.1.40091-a8dbc0c19", bf16_header=BF16_60)
    env = {"PATH": os.environ["PATH"], "ROCM_PATH": root}
    assert resolve_config(env, rocm_torch(hip="6.1.40091-a8dbc0c19", version="2.4.0+rocm6.1")).hipcc == (
        6,
        1,
    )


def test_no_sources(tmp_path, env, toolkit):
    (tmp_path / "proj" / "csrc").mkdir(parents=True)
    with pytest.raises(PreflightError, match="no C\\+\\+ sources"):
        resolve_config(env, cuda_torch(home=toolkit), root=str(tmp_path / "proj"))


def test_commands_classified():
    assert classify_commands(["egg_info"]) == "metadata"
    assert classify_commands(["dist_info", "--output-dir", "x"]) == "metadata"
    assert classify_commands(["sdist"]) == "metadata"
    assert classify_commands(["--version"]) == "metadata"
    assert classify_commands(["bdist_wheel", "--dist-dir", "d"]) == "wheel"
    assert classify_commands(["build_ext", "--inplace"]) == "source"
    assert classify_commands(["editable_wheel", "--dist-dir", "d"]) == "editable"


def test_real_debian_hipcc():
    """Debian's hipcc (ROCm 5.2) found on PATH; its `HIP version: 5.2.21153-0` read tolerantly."""
    hipcc = shutil.which("hipcc")
    if not hipcc:
        pytest.skip("no hipcc on PATH (apt-get install hipcc)")
    env = {"PATH": os.environ["PATH"], "HIP_BUILD": "1"}
    cfg = resolve_config(env, rocm_torch(hip="5.2.21153-0", version="1.13.1+rocm5.2"))
    dpkg = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "hipcc"], capture_output=True, text=True)
    if dpkg.returncode == 0:  # the package manager's version is the independent truth
        assert cfg.hipcc == tuple(int(x) for x in dpkg.stdout.split(".")[:2])
    else:
        assert cfg.hipcc[0] >= 5
    assert cfg.gfx_archs == ("gfx90a", "gfx1100")  # ROCm 5.x: no gfx942 by default


def test_debug_info_off_unless_asked(env, toolkit):
    cfg = resolve_config(env, cuda_torch(home=toolkit))
    assert "-g0" in cfg.cxx_flags and "-lineinfo" not in cfg.gpu_flags
    env["MAMBA_DEBUG_BUILD"] = "TRUE"
    cfg = resolve_config(env, cuda_torch(home=toolkit))
    assert "-g" in cfg.cxx_flags and "-g0" not in cfg.cxx_flags and "-lineinfo" in cfg.gpu_flags


def test_cuda_home_fixes_name_the_toolkit_found(tmp_path):
    """CUDA_HOME pointing nowhere, unset, or at a non-root: each fix names a toolkit that exists
    (the newest cuda-X.Y under the search roots, or the target of an nvcc wrapper on PATH), never a
    version that is not installed."""
    roots = tmp_path / "usr-local"
    fake_toolkit(str(roots / "cuda-12.1"), release=(12, 1))
    newest = fake_toolkit(str(roots / "cuda-13.0"), release=(13, 0))
    os.makedirs(roots / "cuda-13.1" / "bin")  # not a toolkit: skipped
    cases = [
        ({"PATH": "/nonexistent", "CUDA_HOME": "/nonexistent"}, "/nonexistent", "nvcc not found at"),
        ({"PATH": "/nonexistent"}, None, "nvcc was not found"),
    ]
    for env, torch_home, what in cases:
        with pytest.raises(PreflightError) as e:
            locate_cuda(torch_home, env, search_roots=(str(roots),))
        msg = str(e.value)
        assert what in msg and f"CUDA_HOME={newest} (found here)" in msg, msg
        assert "cuda-12.4" not in msg
    # nothing installed: a placeholder, not an invented version
    with pytest.raises(PreflightError) as e:
        locate_cuda(
            "/nonexistent",
            {"PATH": "/nonexistent", "CUDA_HOME": "/nonexistent"},
            search_roots=(str(tmp_path / "empty"),),
        )
    assert "CUDA_HOME=/usr/local/cuda-X.Y (the toolkit root" in str(e.value)
    # a wrapper nvcc on PATH points at the toolkit in use: that one is named first
    other = fake_toolkit(str(tmp_path / "opt" / "cuda"), release=(12, 8))
    (tmp_path / "bin").mkdir()
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.write_text(f'#!/bin/sh\nexec {other}/bin/nvcc "$@"\n')
    wrapper.chmod(0o755)
    with pytest.raises(PreflightError) as e:
        locate_cuda(
            "/nonexistent",
            {"PATH": str(tmp_path / "bin"), "CUDA_HOME": "/nonexistent"},
            search_roots=(str(roots),),
        )
    assert f"CUDA_HOME={other} (found here)" in str(e.value)
    # CUDA_HOME at a folder with bin/nvcc but no runtime: the fix names another, complete toolkit
    broken = fake_toolkit(str(tmp_path / "broken"), release=(13, 0))
    os.remove(os.path.join(broken, "lib64", "libcudart.so"))
    with pytest.raises(PreflightError) as e:
        locate_cuda(broken, {"PATH": "/nonexistent", "CUDA_HOME": broken}, search_roots=(str(roots),))
    assert "not a CUDA toolkit" in str(e.value) and f"CUDA_HOME={newest} (found here)" in str(e.value)
