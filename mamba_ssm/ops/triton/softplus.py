"""Upstream's ``mamba_ssm.ops.triton.softplus``: ``softplus``, a Triton device function for kernels written
against upstream's helpers, ``log(1 + exp(dt))`` (the caller guards large inputs, as upstream's kernels do
with ``tl.where(dt <= 20.0, softplus(dt), dt)``), and ``TRITON3`` (triton >= 3.0 is installed).

Importing this module imports triton (it defines a ``triton.jit`` function), as upstream's does; the rest
of ``mamba_ssm`` never imports triton at import time.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mamba_ssm.ops.triton._helpers import triton_at_least

__all__ = ["TRITON3", "softplus"]

#: Whether the installed triton is 3.0 or later.
TRITON3 = triton_at_least(3, 0)


@triton.jit  # type: ignore[untyped-decorator]  # triton ships no type information
def softplus(dt: tl.tensor) -> tl.tensor:
    """log(1 + exp(dt)) (no overflow guard: callers keep dt <= 20 on this path)."""
    return tl.log(tl.exp(dt) + 1.0)
