"""The Mamba-3 ops' call forms on the Triton kernels: the checked arguments by keyword (the canonical
layout of :mod:`mamba_ssm.ops.triton.mamba3._args`), the kernels imported only on the Triton path.

Calls the kernels do not take (float64, headdim or d_state above 256, a MIMO rank that is not a power of
two up to 16) are named by the ``*_unsupported`` checks; every other device runs the PyTorch
implementation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (torch is imported only where a call needs it)
    from torch import Tensor

    from mamba_ssm._families.mamba3.states import Mamba3States

__all__ = [
    "triton_chunk_scan",
    "triton_mimo_unsupported",
    "triton_siso_unsupported",
    "triton_step",
    "triton_step_unsupported",
]


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


def triton_chunk_scan(**arguments: Any) -> Tensor | tuple[Tensor, Mamba3States]:
    """The chunked scan (SISO or MIMO) on the Triton kernels, with the arguments and results of the
    PyTorch ``mamba3_chunk_scan_torch``: out, or (out, the final states) with ``return_final_states``."""
    from mamba_ssm._families.mamba3 import triton_kernels as mamba3

    result: Tensor | tuple[Tensor, Mamba3States] = mamba3.chunk_scan(**arguments)
    return result


def triton_step(**arguments: Any) -> tuple[Tensor, Mamba3States]:
    """One decode step on the Triton kernels, with the arguments and results of ``mamba3_step_torch``:
    (out, the new states)."""
    from mamba_ssm._families.mamba3 import triton_kernels as mamba3

    result: tuple[Tensor, Mamba3States] = mamba3.step(**arguments)
    return result
