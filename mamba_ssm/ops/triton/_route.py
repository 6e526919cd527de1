"""Whether a call of a public op in ``mamba_ssm.ops.triton`` runs on the Triton kernels (light: imports
only the dispatcher; the kernels and triton are imported when the answer is yes)."""

from __future__ import annotations

from typing import Callable, Optional

from mamba_ssm import _dispatch

__all__ = ["kernels", "use_triton"]


def use_triton(op: str, tensor, why_not: Callable[[], Optional[str]]) -> bool:
    """True when ``op`` on ``tensor``'s device runs on the Triton kernels for this call.

    ``_dispatch.backend_for`` decides per op and device (CUDA/ROCm with triton >= 3.0, and not
    ``MAMBA_SSM_BACKEND=torch|ref``); ``why_not()`` then names an argument the kernel does not take
    (float64, dropout, ...), which sends this call to the PyTorch path through
    ``_dispatch.fallback_for_call`` (a warning once per op; RuntimeError when ``triton`` was forced).
    """
    if _dispatch.backend_for(op, tensor.device) != _dispatch.Backend.TRITON:
        return False
    reason = why_not()
    if reason is not None:
        _dispatch.fallback_for_call(op, tensor.device, reason)
        return False
    return True


def kernels():
    """The package mamba_ssm._families.triton_kernels (imports triton; call only on the Triton path)."""
    import mamba_ssm._families.triton_kernels as package

    return package
