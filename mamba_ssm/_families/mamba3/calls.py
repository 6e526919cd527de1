"""The Triton backend's checks of the Mamba-3 ops: the checked arguments by keyword (the canonical layout
of :mod:`mamba_ssm.ops.triton.mamba3._args`), the kernels imported only on the Triton path (the backend
runs :func:`~mamba_ssm._families.mamba3.triton_kernels.chunk_scan` and ``step`` themselves).

Calls the kernels do not take (float64, headdim or d_state above 256, a MIMO rank that is not a power of
two up to 16) are named by the ``*_unsupported`` checks; every other device runs the PyTorch
implementation.
"""

from __future__ import annotations

from typing import Any

__all__ = ["triton_mimo_unsupported", "triton_siso_unsupported", "triton_step_unsupported"]


def _unsupported(op: str, arguments: dict[str, Any]) -> str | None:
    from mamba_ssm._families.mamba3 import triton_kernels as mamba3

    reason: str | None = mamba3.unsupported(op, **arguments)
    return reason


def triton_siso_unsupported(**arguments: Any) -> str | None:
    """None when the Triton kernel takes this ``mamba3_siso`` call, else why not."""
    return _unsupported("mamba3_siso", arguments)


def triton_mimo_unsupported(**arguments: Any) -> str | None:
    """None when the Triton kernel takes this ``mamba3_mimo`` call, else why not."""
    return _unsupported("mamba3_mimo", arguments)


def triton_step_unsupported(**arguments: Any) -> str | None:
    """None when the Triton kernel takes this ``mamba3_step`` call, else why not."""
    return _unsupported("mamba3_step", arguments)
