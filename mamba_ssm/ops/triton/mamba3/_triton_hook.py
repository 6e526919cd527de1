"""Where Triton kernels for Mamba-3 plug in (the one place; the ops call nothing else on the Triton path).

Today there are none: the dispatcher lists ``mamba3_siso``, ``mamba3_mimo`` and ``mamba3_step`` among
the ops with a PyTorch implementation only (:data:`mamba_ssm._dispatch.OPS`, not in ``TRITON_OPS``), so
``_route.use_triton`` answers False before it asks :func:`unsupported`, and every device runs
:mod:`.mamba3_torch`. To add kernels:

1. put them in ``mamba_ssm.ops.triton._kernels`` (imported only on the Triton path) and make the three
   entry points below call them, with the same arguments and results as the PyTorch path;
2. make :func:`unsupported` return None for the calls they take (a reason string for the others: those
   run the PyTorch path, warned once per op);
3. add the three op names to ``TRITON_OPS`` in :mod:`mamba_ssm._dispatch`.
"""

from __future__ import annotations

__all__ = ["NO_KERNEL", "mamba3_mimo", "mamba3_siso_combined", "mamba3_step", "unsupported"]

#: Why a Mamba-3 call does not run on Triton kernels.
NO_KERNEL = "Mamba-3 has no Triton kernel yet; the PyTorch path runs"


def unsupported(op: str, **arguments) -> str | None:
    """None when the Triton kernel of ``op`` takes this call (``arguments``: the op's checked
    arguments by name), else the reason it does not. Today: always :data:`NO_KERNEL`."""
    return NO_KERNEL


def _missing(op: str):
    raise NotImplementedError(f"{op}: {NO_KERNEL} (mamba_ssm.ops.triton.mamba3._triton_hook)")


def mamba3_siso_combined(**arguments):
    """Kernel entry point with the arguments and results of
    :func:`mamba_ssm.ops.triton.mamba3.mamba3_torch.mamba3_chunk_scan_torch` (SISO: R = 1)."""
    _missing("mamba3_siso_combined")


def mamba3_mimo(**arguments):
    """Kernel entry point with the arguments and results of
    :func:`mamba_ssm.ops.triton.mamba3.mamba3_torch.mamba3_chunk_scan_torch` (MIMO)."""
    _missing("mamba3_mimo")


def mamba3_step(**arguments):
    """Kernel entry point with the arguments and results of
    :func:`mamba_ssm.ops.triton.mamba3.mamba3_torch.mamba3_step_torch`."""
    _missing("mamba3_step")
