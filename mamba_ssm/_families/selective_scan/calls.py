"""The selective scan's call form on each backend: ``(u, delta, A, B, C, D, z, delta_bias,
delta_softplus, return_last_state)``, checked by ``selective_scan_fn`` (with a complex A, B and C
already in the one form every backend takes: ``complex.kernel_bc``). The compiled backend checks and runs
the compiled face (:mod:`.compiled`) directly: its functions take this form."""

from __future__ import annotations

from typing import Callable

from torch import Tensor

__all__ = ["torch_selective_scan", "triton_state_update_unsupported"]


def torch_selective_scan(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    z: Tensor | None = None,
    delta_bias: Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """The chunked PyTorch scan (the complex-state one for a complex A)."""
    from mamba_ssm._families.selective_scan import torch_complex as torch_scan_complex
    from mamba_ssm._families.selective_scan import torch_impl as torch_scan

    # (torch_scan's scans are not annotated; they return out, or (out, last_state))
    scan: Callable[..., Tensor | tuple[Tensor, Tensor]] = (
        torch_scan_complex.selective_scan if A.is_complex() else torch_scan.selective_scan
    )
    return scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state)


def triton_state_update_unsupported(
    state_h: Tensor,
    x_h: Tensor,
    dt_h: Tensor,
    A_h: Tensor,
    B_h: Tensor,
    C_h: Tensor,
    D_h: Tensor | None = None,
    z_h: Tensor | None = None,
    db_h: Tensor | None = None,
    dt_softplus: bool = False,
    state_batch_indices: Tensor | None = None,
) -> str | None:
    """None when the Triton decode-step kernel takes this (head-shaped) call, else why not."""
    del dt_softplus, state_batch_indices
    from mamba_ssm._families.selective_scan import state_update_triton as state_update

    reason: str | None = state_update.unsupported(state_h, x_h, dt_h, A_h, B_h, C_h, D_h, z_h, db_h)
    return reason
