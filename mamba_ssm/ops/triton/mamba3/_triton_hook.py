"""Where the Triton kernels for Mamba-3 plug in (the one place; the ops call nothing else on the Triton
path): the dispatcher lists ``mamba3_siso``, ``mamba3_mimo`` and ``mamba3_step`` in
:data:`mamba_ssm._dispatch.TRITON_OPS`, so on CUDA/ROCm devices with a usable Triton ``_route.use_triton``
asks :func:`unsupported` and the ops call the entry points below, which run
:mod:`mamba_ssm.ops.triton._kernels.mamba3` (imported only then). Calls the kernels do not take (float64,
headdim or d_state above 256, a MIMO rank that is not a power of two up to 16) and every other device
run :mod:`.mamba3_torch`.

The arguments (keywords, already checked by the public ops; the canonical layout, SISO with R = 1):

    chunked (mamba3_siso_combined, mamba3_mimo): q, k (b, l, R, g, n); v (b, l, h, p); adt, dt, trap
        (b, h, l) (trap before the sigmoid); q_bias, k_bias (h, R, n); angles (b, l, h, a) before tanh;
        pairing "adjacent" (SISO) or "halves" (MIMO); chunk_size; D (h,) | None; z (b, l, h, p) | None;
        mimo_x, mimo_z, mimo_o (h, R, p) | None; norm_weight (h, p) | None, norm_eps; initial_states
        Mamba3States(angle (S, h, a), ssm (S, h, p, n), k (S, R, h, n), v (S, h, p)) | None; seq_idx
        (b, l) | None (negative: padding, output 0 and no state; the ops derive it from cu_seqlens);
        cu_seqlens (S + 1,) int64 | None (batch 1; its last entry may be below l: the rule of
        :mod:`mamba_ssm.ops.backends._packing`); return_final_states.
        Returns out ((b, l, h, p) with mimo_o, else (b, l, R, h, p)) in v's dtype, and with
        return_final_states also Mamba3States (angle, ssm, k in float32, v in v's dtype); differentiable
        with respect to every float input (a torch.autograd.Function).
    step (mamba3_step): q, k (b, R, g, n); v (b, h, p); adt, dt, trap (b, h); q_bias, k_bias (h, R, n);
        angles (b, h, a); states Mamba3States (S = b); pairing, D, z (b, h, p), mimo_x/z/o, norm_weight,
        norm_eps as above. Returns (out ((b, h, p) with mimo_o, else (b, R, h, p)), Mamba3States); pure
        (the module copies the states into its cache).
"""

from __future__ import annotations

__all__ = ["mamba3_mimo", "mamba3_siso_combined", "mamba3_step", "unsupported"]


def _kernels():
    from mamba_ssm.ops.triton import _route  # imports triton: the Triton path only

    return _route.kernels().mamba3


def unsupported(op: str, **arguments) -> str | None:
    """None when the Triton kernel of ``op`` takes this call (``arguments``: the op's checked
    arguments by name), else the reason it does not (that call runs the PyTorch path)."""
    return _kernels().unsupported(op, **arguments)


def mamba3_siso_combined(**arguments):
    """Kernel entry point with the arguments and results of
    :func:`mamba_ssm.ops.triton.mamba3.mamba3_torch.mamba3_chunk_scan_torch` (SISO: R = 1)."""
    return _kernels().chunk_scan(**arguments)


def mamba3_mimo(**arguments):
    """Kernel entry point with the arguments and results of
    :func:`mamba_ssm.ops.triton.mamba3.mamba3_torch.mamba3_chunk_scan_torch` (MIMO)."""
    return _kernels().chunk_scan(**arguments)


def mamba3_step(**arguments):
    """Kernel entry point with the arguments and results of
    :func:`mamba_ssm.ops.triton.mamba3.mamba3_torch.mamba3_step_torch`."""
    return _kernels().step(**arguments)
