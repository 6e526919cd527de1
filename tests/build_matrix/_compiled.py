"""Small real shared objects for the audit and merge tests: a build-info record (what every ``_C``
embeds) and, optionally, a CUDA kernel compiled by nvcc 13.0 for the given targets."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mamba_ssm._compat import buildinfo

NVCC = Path("/usr/local/cuda-13.0/bin/nvcc")

SRC = r"""
#include "mamba_ssm_build_info.h"
extern "C" {
__attribute__((used)) static const char kInfo[] =
    "MAMBA_SSM_BUILD_INFO_BEGIN" MAMBA_SSM_BUILD_INFO_JSON "MAMBA_SSM_BUILD_INFO_END";
const char* mamba_ssm_build_info(void) { return kInfo; }
}
"""
KERNEL = r"""
__global__ void scale(float* x, float a, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] *= a; }
extern "C" void launch(float* x, float a, int n) { scale<<<(n + 255) / 256, 256>>>(x, a, n); }
"""


def compile_so(tmp: Path, info, gencode=None, cudart_shared: bool = False) -> Path:
    """``tmp/_C.abi3.so`` carrying ``info`` (and, with ``gencode``, a CUDA kernel for those targets;
    ``cudart_shared``: linked to the shared CUDA runtime, as torch's cpp_extension links it)."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "mamba_ssm_build_info.h").write_text(buildinfo.render_header(info))
    so = tmp / "_C.abi3.so"
    if gencode:
        if not NVCC.exists():
            pytest.skip(f"{NVCC} not present (CUDA 13.0 toolkit)")
        (tmp / "c.cu").write_text(SRC + KERNEL)
        cmd = [str(NVCC), "-shared"] + (["-cudart", "shared"] if cudart_shared else [])
        cmd += ["-Xcompiler", "-fPIC", "-I", str(tmp), "-o", str(so), str(tmp / "c.cu")]
        for g in gencode:
            cmd += ["-gencode", g]
    else:
        (tmp / "c.cpp").write_text(SRC)
        cmd = ["g++", "-shared", "-fPIC", "-I", str(tmp), "-o", str(so), str(tmp / "c.cpp")]
    subprocess.run(cmd, check=True, capture_output=True)
    return so
