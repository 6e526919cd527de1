"""Fixtures of the Triton kernel tests.

Triton's interpreter (which runs the kernels on CPU tensors) must be switched on before ``triton`` is
imported: Triton's own library functions (``tl.cumsum``'s combine function, ...) are decorated at its
import. So this conftest sets ``TRITON_INTERPRET=1`` when pytest loads it, before any test imports
triton (nothing imports triton at ``import torch`` / ``import mamba_ssm`` or at the collection of the
other test directories), unless ``MAMBA_TRITON_GPU_TESTS=1`` asks for the kernels compiled for a GPU
(benchmarks/gpu_check.sh runs test_triton_gpu.py that way, in its own process).

The interpreter of triton 3.0 cannot take loop bounds passed as kernel arguments (the kernels use them);
run these tests with a newer one (the dev venv's torch 2.14 brings 3.8). Compiling for a GPU works from
3.0 on: compile_check.py passes with triton 3.0.0 for sm_80 and sm_90.

``interpreted``: mamba_ssm._families.triton_kernels on the interpreter (skips, saying why, if triton was
imported before this conftest). ``gpu_kernels``: the same modules compiled for the GPU (skips without
a CUDA/ROCm device, or when this process runs the interpreter).
"""

import importlib
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

GPU_RUN = os.environ.get("MAMBA_TRITON_GPU_TESTS", "") == "1"
TRITON_IMPORTED_BEFORE = "triton" in sys.modules
if not GPU_RUN and not TRITON_IMPORTED_BEFORE:
    os.environ["TRITON_INTERPRET"] = "1"
INTERPRETING = os.environ.get("TRITON_INTERPRET", "") == "1"


def _kernel_modules(interpret: bool):
    pytest.importorskip("triton", reason="triton is not installed (the Triton kernels need it)")
    from triton.runtime.jit import JITFunction

    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:  # pragma: no cover - every triton >= 3.0 has it
        InterpretedFunction = ()
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if interpret else "0"
    try:
        import mamba_ssm._families.triton_kernels as pkg

        mods = (pkg.norms, pkg.state_update, pkg.ssd, pkg.mamba3)  # ssd before mamba3 (its core)
        for mod in mods:
            kernels = [v for v in vars(mod).values() if isinstance(v, (JITFunction, InterpretedFunction))]
            if any(isinstance(k, InterpretedFunction) != interpret for k in kernels):
                importlib.reload(mod)
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old
    return pkg


@pytest.fixture(scope="session")
def interpreted():
    """mamba_ssm._families.triton_kernels with its kernels on Triton's interpreter (CPU tensors)."""
    if not INTERPRETING:
        pytest.skip(
            "Triton's interpreter is off in this process (triton was imported before "
            "tests/ops/triton/conftest.py could set TRITON_INTERPRET=1, or MAMBA_TRITON_GPU_TESTS=1): "
            "run `pytest tests/ops/triton` in a process of its own"
        )
    return _kernel_modules(interpret=True)


@pytest.fixture(scope="session")
def gpu_kernels():
    """mamba_ssm._families.triton_kernels compiled for the GPU; skips without a CUDA device."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA/ROCm GPU")
    if INTERPRETING:
        pytest.skip(
            "this process runs Triton's interpreter (TRITON_INTERPRET=1); run the GPU tests with "
            "MAMBA_TRITON_GPU_TESTS=1 (benchmarks/gpu_check.sh does)"
        )
    return _kernel_modules(interpret=False)
