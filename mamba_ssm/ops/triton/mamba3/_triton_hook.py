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

The arguments (keywords, already checked by the public ops; the canonical layout, SISO with R = 1):

    chunked (mamba3_siso_combined, mamba3_mimo): q, k (b, l, R, g, n); v (b, l, h, p); adt, dt, trap
        (b, h, l) (trap before the sigmoid); q_bias, k_bias (h, R, n); angles (b, l, h, a) before tanh;
        pairing "adjacent" (SISO) or "halves" (MIMO); chunk_size; D (h,) | None; z (b, l, h, p) | None;
        mimo_x, mimo_z, mimo_o (h, R, p) | None; norm_weight (h, p) | None, norm_eps; initial_states
        Mamba3States(angle (S, h, a), ssm (S, h, p, n), k (S, R, h, n), v (S, h, p)) | None; seq_idx
        (b, l) | None; cu_seqlens (S + 1,) | None (batch 1); return_final_states.
        Returns out ((b, l, h, p) with mimo_o, else (b, l, R, h, p)) in v's dtype, and with
        return_final_states also Mamba3States (angle, ssm, k in float32, v in v's dtype); differentiable
        with respect to every float input (a torch.autograd.Function).
    step (mamba3_step): q, k (b, R, g, n); v (b, h, p); adt, dt, trap (b, h); q_bias, k_bias (h, R, n);
        angles (b, h, a); states Mamba3States (S = b); pairing, D, z (b, h, p), mimo_x/z/o, norm_weight,
        norm_eps as above. Returns (out ((b, h, p) with mimo_o, else (b, R, h, p)), Mamba3States); pure
        (the module copies the states into its cache).
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
