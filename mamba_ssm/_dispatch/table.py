"""The dispatch table: which backends implement each op, in order of preference.

Adding an op is one entry in :data:`TABLE` plus its implementations in the backend objects
(:mod:`mamba_ssm._backends`); its public function calls ``mamba_ssm._dispatch.call("<op>", ...)``
(CONTRIBUTING.md shows the whole change).
"""

from __future__ import annotations

from .._backends.base import Backend

__all__ = ["COMPILED_OPS", "CONV1D_OPS", "OPS", "SHARES", "TABLE", "TRITON_OPS", "Backend"]

#: {op: its backends, most preferred first}. The kernels come first; TORCH, the PyTorch implementation,
#: runs everywhere; REF is listed when the op has a sequential reference of its own (for the others
#: ``ref`` runs TORCH: their PyTorch code is their reference). CAUSAL_CONV1D runs only where
#: MAMBA_SSM_CONV1D asks for it or, under ``auto``, where COMPILED cannot run.
TABLE: dict[str, tuple[str, ...]] = {
    "selective_scan": (Backend.COMPILED, Backend.TORCH, Backend.REF),
    "mamba_inner": (Backend.COMPILED, Backend.TORCH, Backend.REF),
    "selective_state_update": (Backend.TRITON, Backend.TORCH),
    "causal_conv1d": (Backend.COMPILED, Backend.CAUSAL_CONV1D, Backend.TORCH),
    "causal_conv1d_update": (Backend.COMPILED, Backend.CAUSAL_CONV1D, Backend.TORCH),
    "ssd_chunk_scan": (Backend.TRITON, Backend.TORCH),
    "rms_norm": (Backend.TRITON, Backend.TORCH),
    "layer_norm": (Backend.TRITON, Backend.TORCH),
    "mamba3_siso": (Backend.TRITON, Backend.TORCH),
    "mamba3_mimo": (Backend.TRITON, Backend.TORCH),
    "mamba3_step": (Backend.TRITON, Backend.TORCH),
}

#: {call: op}: calls that run on the backend chosen for another op (its decision, warnings and errors
#: are that op's); each backend implements the call under its own name.
SHARES: dict[str, str] = {
    "causal_conv1d_varlen_states": "causal_conv1d",
    # upstream's SSD entry points and stage functions (mamba_ssm.ops.triton.ssd_*)
    "ssd_chunk_scan_fwd": "ssd_chunk_scan",
    "ssd_chunk_scan_bwd": "ssd_chunk_scan",
    "ssd_chunk_cumsum": "ssd_chunk_scan",
    "ssd_chunk_state": "ssd_chunk_scan",
    "ssd_chunk_state_varlen": "ssd_chunk_scan",
    "ssd_state_passing": "ssd_chunk_scan",
    # Mamba-2's gated norms (mamba_ssm.ops.triton.layernorm_gated)
    "gated_rms_norm": "rms_norm",
    "gated_layer_norm": "layer_norm",
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
