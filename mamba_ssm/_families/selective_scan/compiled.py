"""The compiled backend: the selective-scan kernels of ``mamba_ssm._C`` (CPU, CUDA, HIP).

Imported only after :func:`mamba_ssm._loader.load` loaded ``_C`` (the dispatcher does that); importing it
registers, for the ``torch.library`` ops that ``_C`` defines,

* fake (meta) implementations (``torch.library.register_fake``), for ``torch.compile`` / FakeTensor, and
* autograd (``torch.library.register_autograd``): the forward op's backward calls the backward op.

so the C++ binding needs no Python C API (``_C`` is a limited-API, abi3 module).

Ops (schemas are private to ``csrc/binding_registry.h`` and this file):

* ``mamba_ssm::selective_scan_fwd(u, delta, A, B, C, D?, z?, delta_bias?, delta_softplus)``
  -> ``(out, last_state)``
* ``mamba_ssm::selective_scan_bwd(u, delta, A, B, C, D?, z?, delta_bias?, delta_softplus, dout,
  dlast_state?)`` -> ``(du, ddelta, dA, dB, dC, dD, dz, ddelta_bias)``; ``dD`` / ``dz`` /
  ``ddelta_bias`` are empty (shape (0,)) when that input is None.

Math: the selective scan of Mamba (Gu & Dao 2023, arXiv:2312.00752, eq. 2a-2b and Algorithm 2),
zero-order-hold discretisation with the simplified B; see :func:`selective_scan`.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

from mamba_ssm._families.selective_scan.autograd import bwd_fake, fwd_fake, scan_backward, setup_context

__all__ = ["GPU_MAX_D_STATE", "selective_scan", "supports"]

#: The largest d_state the GPU kernels take (their state lives in shared memory).
GPU_MAX_D_STATE = 256

_NS = "mamba_ssm"
_FWD = f"{_NS}::selective_scan_fwd"
_BWD = f"{_NS}::selective_scan_bwd"
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _require_ops() -> None:
    if not hasattr(torch.ops, _NS) or not hasattr(getattr(torch.ops, _NS), "selective_scan_fwd"):
        raise ImportError(
            "mamba_ssm._families.selective_scan.compiled needs the compiled module mamba_ssm._C loaded first "
            "(mamba_ssm._loader.load()); the mamba_ssm::selective_scan_fwd op is not registered"
        )


_require_ops()


torch.library.register_fake(_FWD)(fwd_fake)
torch.library.register_fake(_BWD)(bwd_fake)
torch.library.register_autograd(
    _FWD, scan_backward(torch.ops.mamba_ssm.selective_scan_bwd), setup_context=setup_context
)


def _has_cuda_kernel(op: str = _FWD) -> bool:
    """Whether this _C registers a CUDA/HIP kernel for ``op``."""
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA"))
    except Exception:  # noqa: BLE001 - a private API; assume present when it is gone
        return True


def supports(
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
) -> Optional[str]:
    """Whether the compiled kernels can run this call (the compiled backend's check of ``selective_scan``).

    Args: as :func:`selective_scan` (already validated by ``selective_scan_fn``); ``delta_softplus`` and
    ``return_last_state`` never stop the kernels.

    Returns:
        None when they can, else the reason in one sentence (the dispatcher then uses the PyTorch
        fallback): an unsupported dtype (float64; complex128, or complex A with a ``_C`` built before the
        complex-A kernels), a device other than CPU/CUDA, a CUDA call on a CPU-only build, d_state > 256
        on a GPU, or variable B and C with different group counts. Complex A takes B and C in the forms
        of :func:`mamba_ssm._families.selective_scan.complex.kernel_bc` (``selective_scan_fn`` converts).
    """
    is_complex = A.is_complex()
    if is_complex:  # B, C in the forms selective_scan_complex.kernel_bc makes
        reason = compiled_complex.dtype_reason(u, delta, A, B, C, D, z, delta_bias)
        if reason is not None:
            return reason
    else:
        tensors = {"u": u, "delta": delta, "B": B, "C": C, "z": z}
        for name, t in tensors.items():
            if t is not None and t.dtype not in _DTYPES:
                return f"the compiled kernels take float32/float16/bfloat16 {name}, got {t.dtype}"
        for name, t in (("A", A), ("D", D), ("delta_bias", delta_bias)):
            if t is not None and (t.is_complex() or t.dtype not in _DTYPES):
                return f"the compiled kernels take a real float32/float16/bfloat16 {name}, got {t.dtype}"
    device = u.device
    if device.type not in ("cpu", "cuda"):
        return f"the compiled kernels run on CPU and CUDA/ROCm devices, not {device.type}"
    for name, t in (
        ("delta", delta),
        ("A", A),
        ("B", B),
        ("C", C),
        ("D", D),
        ("z", z),
        ("delta_bias", delta_bias),
    ):
        if t is not None and t.device != device:
            return f"{name} is on {t.device} but u is on {device}"
    groups = [1 if X.dim() == 3 else X.shape[1] for X in (B, C) if X.dim() >= 3]
    if len(groups) == 2 and groups[0] != groups[1]:
        return (
            f"the compiled kernels need variable B and C with the same number of groups "
            f"(got {groups[0]} and {groups[1]})"
        )
    if device.type == "cuda":
        if not _has_cuda_kernel(compiled_complex.FWD if is_complex else _FWD):
            return "this build of mamba_ssm._C has no CUDA kernel (a CPU-only build)"
        if A.shape[-1] > GPU_MAX_D_STATE:
            return f"d_state = {A.shape[-1]} > {GPU_MAX_D_STATE} is not supported by the GPU kernels"
        if u.shape[0] * u.shape[1] > 2**31 - 1:
            return "batch * dim exceeds 2^31 - 1 (one GPU block per channel)"
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
    """Selective scan with the compiled kernels (Mamba, arXiv:2312.00752, eq. 2a-2b, Algorithm 2).

    For each batch b, channel d, time t (h starts at 0; all arithmetic accumulates in fp32)::

        dt   = delta[b,d,t] (+ delta_bias[d], then softplus if delta_softplus)
        h[n] = exp(dt * A[d,n]) * h[n] + dt * B[..,n,t] * u[b,d,t]
        y    = sum_n C[..,n,t] * h[n] + D[d] * u[b,d,t];   out = y * silu(z[b,d,t]) if z is given

    Args:
        u, delta: (batch, dim, seqlen), float32/float16/bfloat16.
        A: (dim, d_state), real (float32 preferred), or complex64: then B, C, the last state and the
            output follow :func:`mamba_ssm._families.selective_scan.compiled_complex.selective_scan`.
        B, C: (dim, d_state) constant, or (batch, d_state, seqlen), or (batch, groups, d_state, seqlen)
            with channel d using group d // (dim // groups).
        D, delta_bias: (dim,) or None. z: (batch, dim, seqlen) or None.
        delta_softplus: apply softplus to delta (+ delta_bias).
        return_last_state: also return the final state.

    Returns:
        out (batch, dim, seqlen) in u's dtype; with ``return_last_state``, ``(out, last_state)`` where
        last_state is (batch, dim, d_state) float32. Every tensor input gets a gradient.

    Raises:
        RuntimeError: from the kernels for shapes they reject (inputs are validated by the caller,
        ``selective_scan_fn``; :func:`supports` says beforehand whether a call can run here).
    """
    if A.is_complex():
        return compiled_complex.selective_scan(
            u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state
        )
    out, last_state = torch.ops.mamba_ssm.selective_scan_fwd(
        u, delta, A, B, C, D, z, delta_bias, bool(delta_softplus)
    )
    return (out, last_state) if return_last_state else out


# The causal conv1d and complex-A scan ops (fake implementations, autograd) when this _C defines them.
from mamba_ssm._families.causal_conv1d import compiled as compiled_conv1d  # noqa: E402,F401
from mamba_ssm._families.selective_scan import compiled_complex  # noqa: E402
