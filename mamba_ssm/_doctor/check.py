"""``doctor --check``: run selective_scan_fn forward and backward on a device through the backend the
dispatch chooses, and compare the output with the package's float64 sequential reference
(:func:`mamba_ssm.ops.selective_scan_interface.selective_scan_ref`, Gu & Dao 2023, Algorithm 2)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from .._dispatch import Backend

__all__ = ["CheckResult", "check_device"]

#: The problem size: small enough for a second on any device, with every input present.
BATCH, DIM, D_STATE, SEQLEN = 2, 8, 4, 37
RTOL = 1e-4


@dataclass(frozen=True)
class CheckResult:
    """``--check``: selective_scan forward and backward on a device against the float64 reference."""

    device: str
    backend: Backend | None = None
    ok: bool = False
    max_abs_err: float | None = None
    tolerance: float | None = None
    error: str | None = None


def check_device(device: str) -> CheckResult:
    """Forward and backward of an fp32 selective scan on ``device`` (batch 2, dim 8, d_state 4,
    seqlen 37, with D, z and delta_bias, softplus on delta) against the float64 reference; the
    gradients of u, delta, A, B and C must exist and be finite. Never raises: a failing kernel is what
    this check is for."""
    import torch

    from mamba_ssm import _dispatch
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, selective_scan_ref

    backend: Backend | None = None
    try:
        chosen = _dispatch.plan("selective_scan", device).backend
        backend = None if chosen is None else Backend(chosen)
        g = torch.Generator().manual_seed(0)
        b, d, n, length = BATCH, DIM, D_STATE, SEQLEN
        tensors = [
            torch.randn(b, d, length, generator=g),
            torch.rand(b, d, length, generator=g) * 0.5,
            -torch.rand(d, n, generator=g) - 0.5,
            torch.randn(b, n, length, generator=g),
            torch.randn(b, n, length, generator=g),
            torch.randn(d, generator=g),
            torch.randn(b, d, length, generator=g),
            torch.rand(d, generator=g) * 0.1,
        ]
        u, delta, A, B, C, D, z, delta_bias = (t.to(device).requires_grad_(True) for t in tensors)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = selective_scan_fn(u, delta, A, B, C, D, z, delta_bias, delta_softplus=True)
            torch.autograd.backward(y.sum())
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        grads_finite = all(
            t.grad is not None and bool(torch.isfinite(t.grad).all()) for t in (u, delta, A, B, C)
        )
        u64, delta64, A64, B64, C64, D64, z64, bias64 = (
            t.detach().double().cpu() for t in (u, delta, A, B, C, D, z, delta_bias)
        )
        ref = selective_scan_ref(u64, delta64, A64, B64, C64, D64, z64, bias64, delta_softplus=True)
        err = float((y.detach().double().cpu() - ref).abs().max())
        tol = RTOL * max(1.0, float(ref.abs().max()))
        return CheckResult(
            device,
            backend,
            ok=bool(err <= tol and grads_finite),
            max_abs_err=err,
            tolerance=tol,
            error=None if grads_finite else "non-finite or missing gradients",
        )
    except Exception as exc:  # noqa: BLE001 - a failing kernel is what this check is for
        return CheckResult(device, backend, error=f"{type(exc).__name__}: {exc}")
