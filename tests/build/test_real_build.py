"""The one real build: mamba_ssm/_C.abi3.so as ci/test.sh leaves it (built in place from csrc/ for the
CPU kernel + MAMBA_CUDA_ARCHS, default 90, against the torch of this environment).

What the build resolved (its embedded build info) is checked against what the toolchain produced:
cuobjdump's list of SASS/PTX, nm's C++ symbols, and a real torch.ops.load_library in a subprocess.
"""

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys

import pytest

from mamba_ssm._compat.buildinfo import incompatibilities, read_build_info
from mamba_ssm._compat.versions import TorchBuild

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SO = os.path.join(REPO, "mamba_ssm", "_C.abi3.so")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.path.isfile(SO), reason=f"{SO} not built: run `bash ci/test.sh` (it builds in place)"
    ),
]


def cuobjdump():
    cand = os.path.join(
        os.path.dirname(os.path.dirname(sys.executable)),
        "lib",
        f"python{sys.version_info[0]}.{sys.version_info[1]}",
        "site-packages",
        "triton",
        "backends",
        "nvidia",
        "bin",
        "cuobjdump",
    )
    if os.access(cand, os.X_OK):
        return cand
    return shutil.which("cuobjdump")


@pytest.fixture(scope="module")
def info():
    return read_build_info(SO)


def test_built_for_this_torch(info):
    torch = pytest.importorskip("torch")
    runtime = TorchBuild.from_torch(torch)
    assert info.torch_version == torch.__version__
    assert info.torch_cuda == torch.version.cuda and info.torch_hip == torch.version.hip
    assert info.cxx11_abi == bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    assert incompatibilities(info, runtime) == []
    # torch >= 2.7 compiles limited-API extensions for its own lowest Python (its Requires-Python)
    low = re.search(r">=\s*3\.(\d+)", importlib.metadata.metadata("torch")["Requires-Python"] or "")
    assert info.python_tag == f"cp3{max(9, int(low.group(1)) if low else 9)}-abi3" and info.schema == 1
    assert "cpu" in info.kernels
    if torch.version.cuda:
        assert "cuda" in info.kernels and info.nvcc_version is not None


def test_archs_resolved_equal_cuobjdump(info):
    tool = cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found (it ships in the triton package)")
    if "cuda" not in info.kernels:
        pytest.skip("not a CUDA build")
    elf = subprocess.run([tool, "--list-elf", SO], capture_output=True, text=True).stdout
    ptx = subprocess.run([tool, "--list-ptx", SO], capture_output=True, text=True).stdout
    sass_found = sorted(set(re.findall(r"\.(sm_\d+[af]?)\.cubin", elf)))
    ptx_found = sorted({"compute_" + m[3:] for m in re.findall(r"\.(sm_\d+[af]?)\.ptx", ptx)})
    assert sass_found == sorted(info.sass_archs)
    assert ptx_found == sorted(info.ptx_archs)
    expected = os.environ.get("MAMBA_CUDA_ARCHS")
    if expected:  # ci/test.sh passes its arch list on; the build must have used exactly it
        from mamba_ssm._compat.archs import parse_arch_list

        spec = parse_arch_list(expected)
        assert (tuple(info.sass_archs), tuple(info.ptx_archs)) == (spec.sass, spec.ptx)


def test_abi_in_symbols(info):
    if not shutil.which("nm"):
        pytest.skip("no nm")
    syms = subprocess.run(["nm", "-C", "-D", SO], capture_output=True, text=True, check=True).stdout
    string_syms = [l for l in syms.splitlines() if "basic_string" in l]
    assert string_syms, "no std::string in the library's dynamic symbols"
    has_new = any("std::__cxx11::basic_string" in l for l in string_syms)
    assert has_new == info.cxx11_abi


def test_limited_api_tag_and_no_libpython():
    needed = subprocess.run(["readelf", "-d", SO], capture_output=True, text=True).stdout
    assert "libpython" not in needed and "libtorch_python" not in needed


def test_library_loads_into_torch():
    """dlopen through torch: every symbol resolves against this torch (the loader's job at runtime)."""
    pytest.importorskip("torch")
    code = f"import torch; torch.ops.load_library({SO!r}); print('loaded')"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert p.returncode == 0 and "loaded" in p.stdout, p.stderr[-2000:]
