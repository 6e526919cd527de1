"""Upstream's ``torch.autograd.Function`` classes (``SelectiveScanFn``, ``ChunkStateFn``, ``LayerNormFn``,
...) as real Function subclasses over this package's differentiable implementations.

A class's ``forward(ctx, *args)`` calls :func:`forward`: the implementation runs once without a graph (a
Function's forward runs under no_grad) and the inputs are saved. Its ``backward(ctx, *grads)`` calls
:func:`backward`: the implementation runs again with a graph from the saved inputs and is differentiated
with ``torch.autograd.grad`` (activation recomputation, as gradient checkpointing does: one extra
forward, no stored intermediates). The gradients are therefore exactly those of the implementation,
whatever backend (compiled kernels, Triton, PyTorch) it runs on.

An implementation must be deterministic given its inputs (randomness, such as a dropout mask, is drawn
in the forward and passed in as a tensor).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

__all__ = ["forward", "backward"]


def forward(ctx, impl: Callable, args: Sequence):
    """Run ``impl(*args)`` for a Function's forward and keep what :func:`backward` needs.

    Args:
        ctx: the Function's context. impl: the differentiable implementation. args: the forward's
            arguments after ``ctx``, in its order (so ``ctx.needs_input_grad`` lines up with them).

    Returns:
        ``impl(*args)`` (a tensor or a tuple; None entries allowed).
    """
    tensors, slots = [], []
    for a in args:
        if isinstance(a, torch.Tensor):
            slots.append(len(tensors))
            tensors.append(a)
        else:
            slots.append(None)
    ctx.save_for_backward(*tensors)
    ctx.recompute = (impl, [a if s is None else None for a, s in zip(args, slots)], slots)
    return impl(*args)


def backward(ctx, *grads):
    """The gradients of the forward's arguments (None where none is needed or defined) given the
    gradients of its outputs (None for an output nothing depends on)."""
    impl, plain, slots = ctx.recompute
    saved = ctx.saved_tensors
    args, leaves, where = [], [], []
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
    result = [None] * len(plain)
    if not leaves:
        return tuple(result)
    with torch.enable_grad():
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
