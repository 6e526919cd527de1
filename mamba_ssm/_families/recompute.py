"""Upstream's ``torch.autograd.Function`` classes (``SelectiveScanFn``, ``ChunkStateFn``, ``LayerNormFn``,
...) as real Function subclasses over this package's differentiable implementations.

A class's ``forward(ctx, *args)`` calls :func:`forward`: the implementation runs once without a graph (a
Function's forward runs under no_grad) and the inputs are saved. Its ``backward(ctx, *grads)`` calls
:func:`backward`: the implementation runs again with a graph from the saved inputs and is differentiated
with ``torch.autograd.grad`` (activation recomputation, as gradient checkpointing does: one extra
forward, no stored intermediates; the forward's autocast state is restored for it). The gradients are therefore exactly those of the implementation,
whatever backend (compiled kernels, Triton, PyTorch) it runs on.

An implementation must be deterministic given its inputs (randomness, such as a dropout mask, is drawn
in the forward and passed in as a tensor).
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, List, Optional, Sequence, TypeVar, overload

import torch

__all__ = ["backward", "forward", "plain"]

_T = TypeVar("_T")


def forward(ctx: Any, impl: Callable[..., Any], args: Sequence[Any]) -> Any:
    """Run ``impl(*args)`` for a Function's forward and keep what :func:`backward` needs.

    Args:
        ctx: the Function's context. impl: the differentiable implementation. args: the forward's
            arguments after ``ctx``, in its order (so ``ctx.needs_input_grad`` lines up with them).

    Returns:
        ``impl(*args)`` (a tensor or a tuple; None entries allowed), views copied by :func:`plain`.
    """
    tensors: List[torch.Tensor] = []
    slots: List[Optional[int]] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            slots.append(len(tensors))
            tensors.append(a)
        else:
            slots.append(None)
    ctx.save_for_backward(*tensors)
    ctx.recompute = (impl, [a if s is None else None for a, s in zip(args, slots)], slots)
    devices = {"cpu"} | {t.device.type for t in tensors}
    ctx.autocast = [
        (d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in sorted(devices) if d != "meta"
    ]
    out = impl(*args)
    if isinstance(out, (tuple, list)):
        return tuple(plain(o) for o in out)
    return plain(out)


@overload
def plain(t: torch.Tensor) -> torch.Tensor: ...
@overload
def plain(t: _T) -> _T: ...
def plain(t: object) -> object:
    """``t`` as a tensor of its own when it is a view (a Function's output that is a view cannot take
    in-place updates; upstream's outputs are plain tensors)."""
    return t.clone() if isinstance(t, torch.Tensor) and t._base is not None else t


def backward(ctx: Any, *grads: Optional[torch.Tensor]) -> tuple[Optional[torch.Tensor], ...]:
    """The gradients of the forward's arguments (None where none is needed or defined) given the
    gradients of its outputs (None for an output nothing depends on)."""
    impl, plain, slots = ctx.recompute
    saved = ctx.saved_tensors
    args: List[Any] = []
    leaves: List[torch.Tensor] = []
    where: List[int] = []
    for i, (value, slot) in enumerate(zip(plain, slots)):
        if slot is None:
            args.append(value)
            continue
        t = saved[slot].detach()
        if ctx.needs_input_grad[i] and (t.is_floating_point() or t.is_complex()):
            t.requires_grad_(True)
            leaves.append(t)
            where.append(i)
        args.append(t)
    result: List[Optional[torch.Tensor]] = [None] * len(plain)
    if not leaves:
        return tuple(result)
    with torch.enable_grad(), contextlib.ExitStack() as stack:
        for device_type, enabled, dtype in ctx.autocast:  # the forward's autocast state
            stack.enter_context(torch.autocast(device_type, dtype=dtype, enabled=enabled))
        out = impl(*args)
    outs = out if isinstance(out, (tuple, list)) else (out,)
    pairs = [
        (o, g)
        for o, g in zip(outs, grads)
        if g is not None and isinstance(o, torch.Tensor) and o.requires_grad
    ]
    if pairs:
        got = torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True)
        for i, g in zip(where, got):
            result[i] = g
    return tuple(result)
