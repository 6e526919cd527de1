"""The compiled complex-A selective-scan kernels of ``mamba_ssm._C`` (CPU, CUDA, HIP): fake
implementations, autograd and the Python face :mod:`mamba_ssm._families.selective_scan.compiled` routes complex-A
calls to.

Imported by :mod:`mamba_ssm._families.selective_scan.compiled` (after ``_C`` is loaded). A ``_C`` without the complex
ops (built before them) leaves :func:`available` False, and :func:`dtype_reason` says so.

Ops (schemas in ``csrc/binding_registry.h``, op templates in ``csrc/binding_complex_ops.h``; math and layouts in
``csrc/scan_complex.h``):

* ``mamba_ssm::selective_scan_complex_fwd(u, delta, A, B, C, D?, z?, delta_bias?, delta_softplus)``
  -> ``(out, last_state)``, last_state complex64
* ``mamba_ssm::selective_scan_complex_bwd(u, delta, A, B, C, D?, z?, delta_bias?, delta_softplus, dout,
  dlast_state?)`` -> ``(du, ddelta, dA, dB, dC, dD, dz, ddelta_bias)`` (dD / dz / ddelta_bias empty
  when that input is None)

A is complex64 (dim, d_state); B and C are each complex64 (dim, d_state) (constant) or real (batch,
d_state, 2 * seqlen) / (batch, groups, d_state, 2 * seqlen) holding (re, im) interleaved along time
(variable; upstream mamba-ssm's layout). :func:`mamba_ssm._families.selective_scan.complex.kernel_bc` brings
the other forms selective_scan_fn accepts into these.

Math: the selective scan of Mamba (arXiv:2312.00752, Algorithm 2) with a complex diagonal A (S4D,
arXiv:2206.11893): ``h_t = exp(dt A) h_{t-1} + dt u_t B_t``, ``y_t = 2 Re(sum_n C_t h_t) + D u_t``.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

from mamba_ssm._families.selective_scan.autograd import bwd_fake, fwd_fake, scan_backward, setup_context

__all__ = ["available", "dtype_reason", "selective_scan"]

FWD = "mamba_ssm::selective_scan_complex_fwd"
BWD = "mamba_ssm::selective_scan_complex_bwd"
_REAL = (torch.float32, torch.float16, torch.bfloat16)


def available() -> bool:
    """Whether the loaded ``mamba_ssm._C`` defines the complex-A ops."""
    ops = getattr(torch.ops, "mamba_ssm", None)
    return ops is not None and hasattr(ops, "selective_scan_complex_fwd")


_AVAILABLE = available()

if _AVAILABLE:  # the real ops' fakes and autograd formula serve these too (same arguments)
    torch.library.register_fake(FWD)(fwd_fake)
    torch.library.register_fake(BWD)(bwd_fake)
    torch.library.register_autograd(
        FWD, scan_backward(torch.ops.mamba_ssm.selective_scan_complex_bwd), setup_context=setup_context
    )


def dtype_reason(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    delta_bias: Optional[torch.Tensor] = None,
) -> Optional[str]:
    """Why the complex kernels cannot take these dtypes or B/C forms, or None.

    Expects the forms :func:`mamba_ssm._families.selective_scan.complex.kernel_bc` produces: complex constant
    B/C, real interleaved variable B/C."""
    if not _AVAILABLE:
        return (
            "this mamba_ssm._C was built without the complex-A kernels (an older build); rebuild or "
            "reinstall mamba-ssm to get them"
        )
    if A.dtype != torch.complex64:
        return f"the compiled kernels take complex64 A, got {A.dtype}"
    for name, t in (("u", u), ("delta", delta), ("z", z), ("D", D), ("delta_bias", delta_bias)):
        if t is not None and t.dtype not in _REAL:
            return f"the compiled kernels take float32/float16/bfloat16 {name}, got {t.dtype}"
    for name, X in (("B", B), ("C", C)):
        if X.dim() == 2 and X.dtype != torch.complex64:
            return f"the compiled kernels take a complex64 constant {name} with complex A, got {X.dtype}"
        if X.dim() >= 3 and X.dtype not in _REAL:
            return (
                f"the compiled kernels take a variable {name} as float32/float16/bfloat16 (re, im) pairs "
                f"with complex A, got {X.dtype}"
            )
    return None


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    delta_bias: Optional[torch.Tensor] = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
) -> Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Complex-A selective scan with the compiled kernels (see the module docstring for the math).

    Args:
        u, delta: (batch, dim, seqlen), float32/float16/bfloat16. A: (dim, d_state) complex64.
        B, C: complex64 (dim, d_state), or real (batch, d_state, 2 * seqlen) / (batch, groups, d_state,
            2 * seqlen) with (re, im) interleaved along time.
        D, delta_bias: (dim,) or None. z: (batch, dim, seqlen) or None.
        delta_softplus: softplus on delta (+ delta_bias). return_last_state: also return the last state.

    Returns:
        out (batch, dim, seqlen) in u's dtype; with ``return_last_state`` also the last state (batch, dim,
        d_state) complex64. Every tensor input gets a gradient (complex ones in PyTorch's convention).

    Raises:
        RuntimeError: from the kernels for inputs they reject (``compiled.supports`` says beforehand).
    """
    out, last_state = torch.ops.mamba_ssm.selective_scan_complex_fwd(
        u, delta, A, B, C, D, z, delta_bias, bool(delta_softplus)
    )
    return (out, last_state) if return_last_state else out
