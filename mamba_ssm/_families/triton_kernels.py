"""Triton kernels for the ops in :data:`mamba_ssm._dispatch.TRITON_OPS`: the SSD chunked scan
(:mod:`.ssd`), the decode-step state update (:mod:`.state_update`), the norms (:mod:`.norms`) and
Mamba-3's chunked scan and decode step (:mod:`.mamba3`, on the SSD core).

Importing this package imports ``triton``: it is imported only by the dispatcher's Triton check
(:func:`mamba_ssm._dispatch.backends.triton_unavailable`) and by the public functions once that check passed,
never at ``import mamba_ssm``. Written for Triton >= 3.0 (what torch 2.4 brings; the language features
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

from . import mamba3, norms, ssd, state_update
from ._common import KERNEL_DTYPES

__all__ = ["KERNEL_DTYPES", "mamba3", "norms", "ssd", "state_update"]
