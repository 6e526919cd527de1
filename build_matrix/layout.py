"""Where the release tooling keeps its work and what a wheel never bundles: shared by ``build`` and
``audit`` (so neither imports the other's module for them; ``build`` runs ``audit``, one direction only).
"""

from __future__ import annotations

import os
from pathlib import Path

#: The source tree build_matrix belongs to (a checkout or an unpacked sdist).
REPO_ROOT = Path(__file__).resolve().parent.parent
DEV_HOME = Path(os.environ.get("MAMBA_DEV_HOME", Path.home() / ".cache" / "mamba-ssm-dev"))
SHARED_TORCH_VENV = Path(os.environ.get("MAMBA_DEV_TORCH_VENV", DEV_HOME / "torch-2.14.1-cp311"))
CELLS_HOME = DEV_HOME / "cells"

# Never grafted into a wheel: torch's own libraries and the GPU runtimes torch brings (or the driver).
EXCLUDE_LIBS = (
    "libtorch.so",
    "libtorch_cpu.so",
    "libtorch_cuda.so",
    "libtorch_hip.so",
    "libtorch_python.so",
    "libtorch_global_deps.so",
    "libc10.so",
    "libc10_cuda.so",
    "libc10_hip.so",
    "libshm.so",
    "libcudart.so.11.0",
    "libcudart.so.12",
    "libcudart.so.13",
    "libcuda.so.1",
    "libnvrtc.so.12",
    "libnvrtc.so.13",
    "libcublas.so.12",
    "libcublas.so.13",
    "libcublasLt.so.12",
    "libcublasLt.so.13",
    "libamdhip64.so",
    "libamdhip64.so.6",
    "libamdhip64.so.7",
    "libgomp.so.1",
)
# auditwheel --exclude accepts fnmatch patterns (auditwheel >= 6.1); the audit uses the same list.
EXCLUDE_PATTERNS = (
    "libtorch*",
    "libc10*",
    "libshm*",
    "libcudart*",
    "libcuda.so*",
    "libnvrtc*",
    "libcublas*",
    "libcusparse*",
    "libcufft*",
    "libcurand*",
    "libcudnn*",
    "libnccl*",
    "libamdhip64*",
    "libhiprtc*",
    "librocblas*",
    "libMIOpen*",
    "libgomp*",
)
