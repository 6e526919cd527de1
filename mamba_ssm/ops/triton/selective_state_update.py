"""One decode step of the selective scan from a cached state, updating the state in place, with
upstream's import path and arguments (``mamba_ssm.ops.triton.selective_state_update``). PyTorch
implementation, computed in float32 (float64 for float64 inputs); Triton is not needed.

Math (arXiv:2312.00752, Algorithm 2, one timestep; Mamba-2 heads from arXiv:2405.21060):

    dt'   = softplus(dt + dt_bias)            (softplus only with dt_softplus=True)
    state = exp(dt' * A) * state + dt' * B * x
    out   = (state . C) + D * x, then * silu(z) when z is given
"""

from __future__ import annotations

from typing import Optional, overload

import torch
import torch.nn.functional as F

from mamba_ssm import _dispatch
from mamba_ssm._families.packing import check_rows

__all__ = ["selective_state_update", "selective_state_update_ref"]


def _shape(x: torch.Tensor) -> tuple[int, ...]:
    return tuple(x.shape)


def selective_state_update(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    state_batch_indices: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Advance ``state`` by one token and return the output for that token.

    Shapes (without heads / with heads, as upstream):
        state: (batch, dim, dstate) / (batch, nheads, dim, dstate), updated in place
        x, dt, z: (batch, dim) / (batch, nheads, dim)
        A: (dim, dstate) / (nheads, dim, dstate)
        B, C: (batch, dstate) / (batch, ngroups, dstate) with ngroups dividing nheads
        D, dt_bias: (dim,) / (nheads, dim)
        state_batch_indices: (batch,) int rows of ``state`` to use (its first dim may be larger). A
            negative index marks a padded request: its output is 0 and it changes no row of ``state``.

    Repeated rows: entries of ``state_batch_indices`` naming the same row are applied one after
    another in batch order, as successive tokens of one sequence: each reads the row as the previous
    such entry left it, its output comes from its own updated state, and the row ends as the last one
    left it (the same as calling this once per entry, in order). Every backend gives this result
    (checked against a float64 sequential reference): serving stacks can point several requests (a
    shared padding row, several draft tokens of one sequence) at one row without a race.

    On CUDA/ROCm devices with triton >= 3.0 a Triton kernel runs
    (``mamba_ssm._families.selective_scan.state_update_triton``); elsewhere (and for float64) the PyTorch code here.
    Cost of the repeated-row rule: the Triton kernel finds each row's group on the device (one scan of
    the index vector per program; no host synchronisation, safe to capture in a CUDA graph). The
    PyTorch path runs one vectorised round per repeat of the most repeated row; it reads that count
    from the index tensor once per call with ``state_batch_indices`` (free on a CPU; one device sync
    when this path runs on a GPU, i.e. for float64 or ``MAMBA_SSM_BACKEND=torch``), and while a CUDA
    graph is being captured it reads nothing and runs ``batch`` rounds.

    Returns:
        out with x's shape and dtype.

    Raises:
        TypeError / ValueError: a non-tensor or non-float argument, shapes that disagree, an index of
            ``state_batch_indices`` that is not a row of ``state`` (checked on the PyTorch path, and in
            front of the Triton kernel for CPU tensors; a GPU kernel's path is not synchronised for it).
    """
    t: Optional[torch.Tensor]  # (the argument each check below looks at)
    for name, t in (("state", state), ("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"selective_state_update: {name} must be a torch.Tensor, got {type(t).__name__}")
        if not t.is_floating_point():
            raise TypeError(f"selective_state_update: {name} has dtype {t.dtype}; expected a float dtype")
    heads = state.dim() == 4
    if not heads:
        if state.dim() != 3:
            raise ValueError(
                f"selective_state_update: state must be (batch, dim, dstate) or (batch, nheads, "
                f"dim, dstate), got {_shape(state)}"
            )
        state_h = state.unsqueeze(1)
        x_h, dt_h, A_h = x.unsqueeze(1), dt.unsqueeze(1), A.unsqueeze(0)
        B_h, C_h = B.unsqueeze(1), C.unsqueeze(1)
        D_h = D.unsqueeze(0) if D is not None else None
        z_h = z.unsqueeze(1) if z is not None else None
        db_h = dt_bias.unsqueeze(0) if dt_bias is not None else None
    else:
        state_h, x_h, dt_h, A_h, B_h, C_h, D_h, z_h, db_h = state, x, dt, A, B, C, D, z, dt_bias
    _, nheads, dim, dstate = state_h.shape
    if state_batch_indices is None:
        batch = state_h.shape[0]
    else:
        if state_batch_indices.dim() != 1 or state_batch_indices.is_floating_point():
            raise ValueError(
                f"selective_state_update: state_batch_indices must be (batch,) integers, got "
                f"{_shape(state_batch_indices)} {state_batch_indices.dtype}"
            )
        if state_batch_indices.device.type == "cpu":  # (a GPU's indices: on the PyTorch path below)
            check_rows("selective_state_update", "state_batch_indices", state_batch_indices, state_h.shape[0])
        batch = state_batch_indices.shape[0]
    expect = (batch, nheads, dim)
    for name, t in (("x", x_h), ("dt", dt_h), ("z", z_h)):
        if t is not None and _shape(t) != expect:
            raise ValueError(
                f"selective_state_update: {name} must have shape {expect if heads else expect[::2]}"
                f" to match state {_shape(state)}, got {_shape(t if heads else t.squeeze(1))}"
            )
    if _shape(A_h) != (nheads, dim, dstate):
        raise ValueError(
            f"selective_state_update: A must have shape "
            f"{(nheads, dim, dstate) if heads else (dim, dstate)}, got {_shape(A)}"
        )
    for name, t in (("B", B_h), ("C", C_h)):
        if t.dim() != 3 or t.shape[0] != batch or t.shape[2] != dstate or nheads % t.shape[1]:
            raise ValueError(
                f"selective_state_update: {name} must have shape "
                f"{'(batch, ngroups, dstate)' if heads else '(batch, dstate)'} = ({batch}, "
                f"{'ngroups, ' if heads else ''}{dstate}), got {_shape(t if heads else t.squeeze(1))}"
            )
    for name, t in (("D", D_h), ("dt_bias", db_h)):
        if t is not None and _shape(t) != (nheads, dim):
            # Mamba-2 passes per-head D / dt_bias expanded with stride 0; accept (nheads,) too.
            if heads and _shape(t) == (nheads,):
                continue
            raise ValueError(
                f"selective_state_update: {name} must have shape "
                f"{(nheads, dim) if heads else (dim,)}, got {_shape(t)}"
            )
    out: torch.Tensor = _dispatch.call(
        "selective_state_update",
        state_h,
        x_h,
        dt_h,
        A_h,
        B_h,
        C_h,
        D_h,
        z_h,
        db_h,
        dt_softplus,
        state_batch_indices,
    )
    return out if heads else out.squeeze(1)


def selective_state_update_ref(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
) -> torch.Tensor:
    """A plain PyTorch reference of one decode step, written from the recurrence and sharing no code with
    :func:`selective_state_update` (the op's tests compare the two, as upstream's do).

    Math (arXiv:2312.00752, Algorithm 2, one timestep): with dt' = softplus(dt + dt_bias) (or dt + dt_bias),
    ``state <- exp(dt' A) * state + dt' B x``, ``out = sum_n state[..., n] C[n] + D x``, then
    ``* silu(z)``; computed in float32 (float64 when an input is float64).

    Args (as :func:`selective_state_update`, without ``state_batch_indices``):
        state: (batch, dim, dstate) or (batch, nheads, dim, dstate), updated in place.
        x, dt, z: (batch, dim) / (batch, nheads, dim). A: (dim, dstate) / (nheads, dim, dstate).
        B, C: (batch, dstate) / (batch, ngroups, dstate), ngroups dividing nheads.
        D, dt_bias: (dim,) / (nheads, dim) (or (nheads,) with heads).

    Returns:
        out with x's shape and dtype.
    """
    heads = state.dim() == 4
    wide = torch.float64 if torch.float64 in (state.dtype, x.dtype, A.dtype) else torch.float32

    @overload
    def lift(t: torch.Tensor, dims: int) -> torch.Tensor: ...
    @overload
    def lift(t: None, dims: int) -> None: ...
    def lift(t: Optional[torch.Tensor], dims: int) -> Optional[torch.Tensor]:
        # add the head axis of a head-less call, in the compute dtype
        return None if t is None else (t.to(wide) if heads else t.to(wide).unsqueeze(dims))

    h = lift(state, 1)
    xs, step, zs = lift(x, 1), lift(dt, 1), lift(z, 1)
    a, bm, cm = lift(A, 0), lift(B, 1), lift(C, 1)
    d, bias = lift(D, 0), lift(dt_bias, 0)
    nheads = h.shape[1]
    if bias is not None:
        step = step + (bias if bias.dim() == 2 else bias[:, None])
    if dt_softplus:
        step = F.softplus(step)
    per_head = nheads // bm.shape[1]
    bm = bm.repeat_interleave(per_head, dim=1)  # (batch, nheads, dstate)
    cm = cm.repeat_interleave(per_head, dim=1)
    h = torch.exp(step[..., None] * a) * h + (step * xs)[..., None] * bm[:, :, None, :]
    state.copy_(h if heads else h.squeeze(1))
    out = (h * cm[:, :, None, :]).sum(-1)
    if d is not None:
        out = out + xs * (d if d.dim() == 2 else d[:, None])
    if zs is not None:
        out = out * zs * torch.sigmoid(zs)
    out = out.to(x.dtype)
    return out if heads else out.squeeze(1)
