"""Triton kernels for the ops in :data:`mamba_ssm._dispatch.TRITON_OPS`: the SSD chunked scan
(:mod:`mamba_ssm._families.ssd.triton_kernels`), the decode-step state update
(:mod:`mamba_ssm._families.selective_scan.state_update_triton`), the norms
(:mod:`mamba_ssm._families.norms.triton_kernels`) and Mamba-3's chunked scan and decode step
(:mod:`mamba_ssm._families.mamba3.triton_kernels`, on the SSD core), gathered in one module.

Importing this module imports ``triton``: the Triton backend's check imports it
(:func:`mamba_ssm._backends.triton.triton_unavailable`), before any of these kernels runs, never at
``import mamba_ssm``. Written for Triton >= 3.0 (what torch 2.4 brings; the language features
used: ``tl.dot(..., input_precision=...)``, ``tl.cumsum``, masked loads/stores, runtime-bounded loops);
no autotuning: block sizes and warp counts come from the shapes, so a first call compiles each kernel
once in seconds. ``tests/ops/triton/compile_check.py`` compiles every launch for sm_80 / sm_90 / gfx942
without a GPU; it passes with triton 3.0.0 and 3.8.0. (The kernel modules do not use
``from __future__ import annotations``: triton 3.0's interpreter would not see ``tl.constexpr`` then.) Every kernel accumulates in float32 whatever the input dtype (float16, bfloat16,
float32; float64 inputs take the PyTorch path).

The kernels also run on CPU tensors under Triton's interpreter (``TRITON_INTERPRET=1`` set before
triton is imported): that is how CI tests them on a machine without a GPU.
"""

from __future__ import annotations

import triton  # noqa: F401  (the dispatcher's check: this package imports only with a working triton)

from mamba_ssm._families.mamba3 import triton_kernels as mamba3
from mamba_ssm._families.norms import triton_kernels as norms
from mamba_ssm._families.selective_scan import state_update_triton as state_update
from mamba_ssm._families.ssd import triton_kernels as ssd
from mamba_ssm._families.triton_common import KERNEL_DTYPES

__all__ = ["KERNEL_DTYPES", "mamba3", "norms", "ssd", "state_update"]
