"""Collectives along the first dimension for tensor / sequence parallelism, on ``torch.distributed``.

Tensor parallelism in the Megatron style (Shoeybi et al., arXiv:1909.08053; sequence parallelism:
Korthikanti et al., arXiv:2205.05198): a column-parallel linear needs its input on every rank (an
all-gather of the token shards, or a copy whose gradient is all-reduced), a row-parallel linear sums
the ranks' partial outputs (an all-reduce, or a reduce-scatter back to token shards).

``*_raw`` functions return ``(output, handle)``: ``handle`` is the async work object when
``async_op=True`` and the backend supports it, else None (the result is ready). The gloo backend has
no reduce-scatter (and an all-gather into one tensor only in recent torch versions), so on gloo these
run as an all-reduce / list all-gather with the same result.

``all_gather``, ``reduce_scatter`` and ``all_reduce`` are the autograd forms (upstream's names):

    all_gather:     forward gathers the shards (rank order) along dim 0; backward reduce-scatters
    reduce_scatter: forward sums over ranks and keeps this rank's slice of dim 0; backward all-gathers
    all_reduce:     forward sums over ranks; backward passes the gradient through (it is already the
                    same on every rank)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup, Work

__all__ = [
    "AllGatherFunc",
    "AllReduceFunc",
    "ReduceScatterFunc",
    "all_gather",
    "all_gather_raw",
    "all_reduce",
    "all_reduce_raw",
    "allreduce_sequence_parallel_grad",
    "get_dim_for_local_rank",
    "reduce_scatter",
    "reduce_scatter_raw",
    "sync_shared_params",
]


def _is_gloo(process_group: ProcessGroup | None) -> bool:
    return dist.get_backend(process_group) == "gloo"


def all_gather_raw(
    input_: torch.Tensor, process_group: ProcessGroup | None, async_op: bool = False
) -> tuple[torch.Tensor, Work | None]:
    """Concatenate every rank's ``input_`` along dim 0, in rank order.

    input_: (n, ...) on each rank (the same shape everywhere). Returns ((world_size * n, ...), handle).
    """
    world_size = dist.get_world_size(process_group)
    input_ = input_.contiguous()
    if world_size == 1:
        return input_, None
    if _is_gloo(process_group):
        parts = [torch.empty_like(input_) for _ in range(world_size)]
        dist.all_gather(parts, input_, group=process_group)
        return torch.cat(parts, dim=0), None
    output = input_.new_empty(world_size * input_.shape[0], *input_.shape[1:])
    handle = dist.all_gather_into_tensor(output, input_, group=process_group, async_op=async_op)
    return output, handle


def reduce_scatter_raw(
    input_: torch.Tensor, process_group: ProcessGroup | None, async_op: bool = False
) -> tuple[torch.Tensor, Work | None]:
    """Sum ``input_`` over ranks and keep this rank's slice of dim 0.

    input_: (world_size * n, ...). Returns ((n, ...), handle).

    Raises:
        ValueError: dim 0 is not a multiple of the world size.
    """
    world_size = dist.get_world_size(process_group)
    if input_.shape[0] % world_size:
        raise ValueError(
            f"reduce_scatter: dim 0 of the input ({tuple(input_.shape)}) must be a multiple of the "
            f"world size {world_size} (with sequence parallelism: batch * seqlen)"
        )
    input_ = input_.contiguous()
    if world_size == 1:
        return input_, None
    if _is_gloo(process_group):
        total = input_.clone()
        dist.all_reduce(total, group=process_group)
        rank = dist.get_rank(process_group)
        return total.chunk(world_size, dim=0)[rank].contiguous(), None
    output = input_.new_empty(input_.shape[0] // world_size, *input_.shape[1:])
    handle = dist.reduce_scatter_tensor(output, input_, group=process_group, async_op=async_op)
    return output, handle


def all_reduce_raw(
    input_: torch.Tensor, process_group: ProcessGroup | None, async_op: bool = False
) -> tuple[torch.Tensor, Work | None]:
    """Sum ``input_`` over ranks. Returns (a new tensor of input_'s shape, handle); input_ is not changed."""
    output = input_.contiguous().clone()
    if dist.get_world_size(process_group) == 1:
        return output, None
    handle = dist.all_reduce(output, group=process_group, async_op=async_op and not _is_gloo(process_group))
    return output, handle


class AllGatherFunc(torch.autograd.Function):
    """All-gather along dim 0 whose backward is a reduce-scatter."""

    @staticmethod
    def forward(ctx: Any, input_: torch.Tensor, process_group: ProcessGroup | None) -> torch.Tensor:
        """(n, ...) per rank -> (world_size * n, ...)."""
        ctx.process_group = process_group
        return all_gather_raw(input_, process_group)[0]

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The gradient of ``input_``: grad_output reduce-scattered."""
        return reduce_scatter_raw(grad_output, ctx.process_group)[0], None


class ReduceScatterFunc(torch.autograd.Function):
    """Reduce-scatter along dim 0 whose backward is an all-gather."""

    @staticmethod
    def forward(ctx: Any, input_: torch.Tensor, process_group: ProcessGroup | None) -> torch.Tensor:
        """(world_size * n, ...) -> (n, ...) summed over ranks."""
        ctx.process_group = process_group
        return reduce_scatter_raw(input_, process_group)[0]

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The gradient of ``input_``: grad_output all-gathered."""
        return all_gather_raw(grad_output, ctx.process_group)[0], None


class AllReduceFunc(torch.autograd.Function):
    """All-reduce whose backward is the identity."""

    @staticmethod
    def forward(ctx: Any, input_: torch.Tensor, process_group: ProcessGroup | None) -> torch.Tensor:
        """input_ summed over ranks (same shape)."""
        return all_reduce_raw(input_, process_group)[0]

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The gradient of ``input_``: grad_output itself."""
        return grad_output, None


class _CopyToParallelFunc(torch.autograd.Function):
    """Identity forward (the input is replicated on every rank); backward all-reduces the gradient,
    the sum of the ranks' partial gradients."""

    @staticmethod
    def forward(ctx: Any, input_: torch.Tensor, process_group: ProcessGroup | None) -> torch.Tensor:
        """input_ itself (a view)."""
        ctx.process_group = process_group
        return input_.view_as(input_)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor, None]:
        """The gradient of ``input_``: grad_output all-reduced."""
        return all_reduce_raw(grad_output, ctx.process_group)[0], None


def all_gather(input_: torch.Tensor, process_group: ProcessGroup | None) -> torch.Tensor:
    """Autograd all-gather along dim 0: (n, ...) per rank -> (world_size * n, ...)."""
    out: torch.Tensor = AllGatherFunc.apply(input_, process_group)
    return out


def reduce_scatter(input_: torch.Tensor, process_group: ProcessGroup | None) -> torch.Tensor:
    """Autograd reduce-scatter along dim 0: (world_size * n, ...) -> (n, ...) summed over ranks."""
    out: torch.Tensor = ReduceScatterFunc.apply(input_, process_group)
    return out


def all_reduce(input_: torch.Tensor, process_group: ProcessGroup | None) -> torch.Tensor:
    """Autograd all-reduce (sum over ranks), gradient passed through."""
    out: torch.Tensor = AllReduceFunc.apply(input_, process_group)
    return out


def copy_to_parallel_region(input_: torch.Tensor, process_group: ProcessGroup | None) -> torch.Tensor:
    """Identity whose gradient is all-reduced over ``process_group`` (input of a column-parallel layer)."""
    out: torch.Tensor = _CopyToParallelFunc.apply(input_, process_group)
    return out


def sync_shared_params(model: nn.Module, process_group: ProcessGroup | None) -> None:
    """Broadcast, from the group's first rank, every parameter marked ``_shared_params = True`` (the
    parameters replicated on all ranks), so all ranks start from the same values."""
    params = [p for _, p in sorted(model.named_parameters()) if getattr(p, "_shared_params", False)]
    src = dist.get_global_rank(process_group, 0) if process_group is not None else 0
    for p in params:
        with torch.no_grad():
            dist.broadcast(p.data, src=src, group=process_group)


def allreduce_sequence_parallel_grad(model: nn.Module, process_group: ProcessGroup | None) -> None:
    """Sum over ranks the gradients of the parameters marked ``_sequence_parallel = True`` (replicated
    parameters that see only this rank's tokens under sequence parallelism, e.g. norms)."""
    grads = [p.grad for _, p in sorted(model.named_parameters()) if getattr(p, "_sequence_parallel", False)]
    for grad in grads:
        if grad is not None:
            dist.all_reduce(grad, group=process_group)


def get_dim_for_local_rank(dim: int, world_size: int, local_rank: int, multiple_of: int = 1) -> int:
    """This rank's share of ``dim`` split in units of ``multiple_of``: the first ``(dim / multiple_of)
    % world_size`` ranks get one unit more.

    Raises:
        ValueError: dim is not a multiple of multiple_of.
    """
    if dim % multiple_of:
        raise ValueError(f"get_dim_for_local_rank: dim {dim} is not a multiple of multiple_of {multiple_of}")
    units, extra = divmod(dim // multiple_of, world_size)
    return (units + int(local_rank < extra)) * multiple_of
