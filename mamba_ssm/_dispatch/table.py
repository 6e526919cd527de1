"""The dispatch table: which backends implement each op, in order of preference.

Adding an op is one line in :data:`TABLE` (the op's public function then asks
``mamba_ssm._dispatch.backend_for("<op>", tensor.device)``; CONTRIBUTING.md shows the whole change).
"""

from __future__ import annotations

from .._compat.textenum import TextEnum

__all__ = ["COMPILED_OPS", "CONV1D_OPS", "OPS", "TABLE", "TRITON_OPS", "Backend"]


class Backend(TextEnum):
    """What runs an op."""

    COMPILED = "compiled"  # the kernels of mamba_ssm._C (mamba_ssm.ops.backends.compiled*)
    TRITON = "triton"  # the Triton kernels (mamba_ssm.ops.triton._kernels), on CUDA/ROCm devices
    CAUSAL_CONV1D = "causal-conv1d"  # the causal-conv1d package's CUDA kernels (conv ops only)
    TORCH = "torch"  # the PyTorch implementation: every device
    REF = "ref"  # a separate sequential reference (slow; for checking)


#: {op: its backends, most preferred first}. The kernels come first; TORCH, the PyTorch implementation,
#: runs everywhere; REF is listed when the op has a sequential reference of its own (for the others
#: ``ref`` runs TORCH: their PyTorch code is their reference). CAUSAL_CONV1D runs only where
#: MAMBA_SSM_CONV1D asks for it or, under ``auto``, where COMPILED cannot run.
TABLE: dict[str, tuple[Backend, ...]] = {
    "selective_scan": (Backend.COMPILED, Backend.TORCH, Backend.REF),
    "mamba_inner": (Backend.COMPILED, Backend.TORCH, Backend.REF),
    "selective_state_update": (Backend.TRITON, Backend.TORCH),
    "causal_conv1d": (Backend.COMPILED, Backend.CAUSAL_CONV1D, Backend.TORCH),
    "causal_conv1d_update": (Backend.COMPILED, Backend.CAUSAL_CONV1D, Backend.TORCH),
    "ssd_chunk_scan": (Backend.TRITON, Backend.TORCH),
    "rms_norm": (Backend.TRITON, Backend.TORCH),
    "layer_norm": (Backend.TRITON, Backend.TORCH),
    # Mamba-3 (mamba_ssm.ops.triton.mamba3, mamba_ssm.ops.tilelang.mamba3): the Triton kernels through
    # mamba_ssm.ops.triton.mamba3._triton_hook.
    "mamba3_siso": (Backend.TRITON, Backend.TORCH),
    "mamba3_mimo": (Backend.TRITON, Backend.TORCH),
    "mamba3_step": (Backend.TRITON, Backend.TORCH),
}

#: The ops the dispatch knows, in the table's order (doctor reports them in it).
OPS = tuple(TABLE)
#: The ops with kernels in mamba_ssm._C.
COMPILED_OPS = frozenset(op for op, backends in TABLE.items() if Backend.COMPILED in backends)
#: The compiled ops the causal-conv1d package can also run; doctor reports them but judges the install
#: by the other compiled ops.
CONV1D_OPS = frozenset(op for op, backends in TABLE.items() if Backend.CAUSAL_CONV1D in backends)
#: The ops with Triton kernels: used on CUDA/ROCm devices.
TRITON_OPS = frozenset(op for op, backends in TABLE.items() if Backend.TRITON in backends)
