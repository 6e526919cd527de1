"""Tensor-parallel layers on ``torch.distributed`` (upstream's ``mamba_ssm.distributed.tensor_parallel``),
in the Megatron style (Shoeybi et al., arXiv:1909.08053):

* :class:`ColumnParallelLinear`: each rank holds a contiguous block of the output features (rows of
  the weight); its input is the full activation (all-gathered from token shards with
  ``sequence_parallel``), its output this rank's features.
* :class:`RowParallelLinear`: each rank holds a block of the input features (columns of the weight)
  and the bias lives on rank 0 only; the partial outputs are summed over ranks (all-reduce, or
  reduce-scatter to token shards with ``sequence_parallel``).
* :class:`VocabParallelEmbedding` (a block of the vocabulary per rank; other ids give zeros),
  :class:`ColumnParallelEmbedding` (a block of the embedding dim per rank) and
  :class:`ParallelEmbeddings` (word + optional position embeddings, summed over ranks).

Sizes split in units of ``multiple_of`` (:func:`.distributed_utils.get_dim_for_local_rank`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.types import Device

from mamba_ssm._families import recompute as _recompute
from mamba_ssm.distributed.distributed_utils import (
    all_gather,
    all_reduce,
    copy_to_parallel_region,
    get_dim_for_local_rank,
    reduce_scatter,
)
from mamba_ssm.modules._common import FactoryKwargs

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = [
    "ColumnParallelEmbedding",
    "ColumnParallelLinear",
    "ParallelEmbeddings",
    "ParallelLinearFunc",
    "RowParallelLinear",
    "VocabParallelEmbedding",
    "parallel_linear_func",
]


def _group(process_group: ProcessGroup | None, what: str) -> tuple[int, int]:
    """(world size, rank) of ``process_group``; ValueError naming ``what`` when it is None."""
    if process_group is None:
        raise ValueError(
            f"{what}: process_group is None; pass a torch.distributed group "
            f"(e.g. torch.distributed.group.WORLD after init_process_group)"
        )
    return dist.get_world_size(process_group), dist.get_rank(process_group)


def _parallel_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    process_group: ProcessGroup | None,
    sequence_parallel: bool,
) -> torch.Tensor:
    """:func:`parallel_linear_func`'s math (the autograd Function recomputes it)."""
    if process_group is not None:
        x = all_gather(x, process_group) if sequence_parallel else copy_to_parallel_region(x, process_group)
    return F.linear(x, weight, bias)


class ParallelLinearFunc(torch.autograd.Function):
    """:func:`parallel_linear_func` as a ``torch.autograd.Function`` (upstream's class; the backward
    recomputes the forward, collectives included, and differentiates it)."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        process_group: ProcessGroup | None = None,
        sequence_parallel: bool = True,
    ) -> torch.Tensor:
        """See :func:`parallel_linear_func`."""
        out: torch.Tensor = _recompute.forward(
            ctx, _parallel_linear, (x, weight, bias, process_group, sequence_parallel)
        )
        return out

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        """The gradients of x, weight, bias (None for the group and the flag)."""
        grads: tuple[torch.Tensor | None, ...] = _recompute.backward(ctx, grad_output)
        return grads


def parallel_linear_func(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    process_group: ProcessGroup | None = None,
    sequence_parallel: bool = True,
) -> torch.Tensor:
    """The column-parallel linear map: ``F.linear(x, weight, bias)`` where, with a ``process_group``, x is
    first all-gathered over the ranks' token rows (dim 0) when ``sequence_parallel``, its gradient then
    reduce-scattered back; without sequence parallelism x is the same on every rank and its gradient is
    all-reduced. Without a process group it is ``F.linear``.

    Args:
        x: (n, in_features) (this rank's rows with sequence_parallel). weight: (local_out, in_features).
        bias: (local_out,) or None.

    Returns:
        (N, local_out), N the gathered rows.
    """
    out: torch.Tensor = ParallelLinearFunc.apply(x, weight, bias, process_group, sequence_parallel)
    return out


class ColumnParallelLinear(nn.Linear):
    """Linear(in_features, out_features) with the output features split across ``process_group``.

    Args:
        in_features, out_features: the full (unsharded) sizes; this rank's weight is
            (local_out, in_features) with local_out = get_dim_for_local_rank(out_features, ...).
        process_group: the tensor-parallel group. bias: a bias on the local outputs.
        sequence_parallel: the input holds this rank's token rows (dim 0) and is all-gathered first;
            otherwise the input is the same on every rank (its gradient is all-reduced).
        multiple_of: split unit of out_features. device, dtype: of the parameters.

    forward: x (n, in_features) (n per rank with sequence_parallel) -> (N, local_out), N the gathered
    rows.

    Raises:
        ValueError: out_features not a multiple of multiple_of, process_group None.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        process_group: ProcessGroup | None,
        bias: bool = True,
        sequence_parallel: bool = True,
        multiple_of: int = 1,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        world_size, rank = _group(process_group, "ColumnParallelLinear")
        local_out = get_dim_for_local_rank(out_features, world_size, rank, multiple_of)
        super().__init__(in_features, local_out, bias=bias, device=device, dtype=dtype)
        self.process_group = process_group
        self.sequence_parallel = sequence_parallel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (n, in_features) -> (N, local_out) (class docstring)."""
        return _parallel_linear(x, self.weight, self.bias, self.process_group, self.sequence_parallel)


class RowParallelLinear(nn.Linear):
    """Linear(in_features, out_features) with the input features split across ``process_group``.

    Args:
        in_features, out_features: the full sizes; this rank's weight is (out_features, local_in).
        process_group: the tensor-parallel group. bias: a bias (held by rank 0 only, so it is added once).
        sequence_parallel: reduce-scatter the summed output to token rows (dim 0) instead of
            all-reducing it. multiple_of: split unit of in_features. device, dtype: of the parameters.

    forward: x (N, local_in) -> (N, out_features) summed over ranks (N / world_size rows with
    sequence_parallel).

    Raises:
        ValueError: in_features not a multiple of multiple_of, process_group None.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        process_group: ProcessGroup | None,
        bias: bool = True,
        sequence_parallel: bool = True,
        multiple_of: int = 1,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        world_size, rank = _group(process_group, "RowParallelLinear")
        local_in = get_dim_for_local_rank(in_features, world_size, rank, multiple_of)
        super().__init__(local_in, out_features, bias=bias and rank == 0, device=device, dtype=dtype)
        self.process_group = process_group
        self.sequence_parallel = sequence_parallel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (N, local_in) -> (N, out_features) summed over ranks (class docstring)."""
        out = F.linear(x, self.weight, self.bias)
        return (reduce_scatter if self.sequence_parallel else all_reduce)(out, self.process_group)


class VocabParallelEmbedding(nn.Embedding):
    """nn.Embedding with the vocabulary split in equal blocks across ``process_group``: rank r holds ids
    [r * V / world_size, (r + 1) * V / world_size); other ids give zero rows (the sum over ranks is the
    full lookup).

    ``args`` is nn.Embedding's ``embedding_dim`` (upstream's signature; it may also come by keyword);
    ``padding_idx`` and the other keywords (``max_norm``, ``device``, ``dtype`` ...) are nn.Embedding's.

    Raises:
        ValueError: num_embeddings not a multiple of the world size (pad the vocabulary).
        TypeError: more than one positional argument after num_embeddings (nn.Embedding's third
            positional is padding_idx, which this class takes by keyword).
    """

    def __init__(
        self,
        num_embeddings: int,
        *args: Any,
        process_group: ProcessGroup | None = None,
        padding_idx: int | None = None,
        **kwargs: Any,
    ) -> None:
        if len(args) > 1:
            raise TypeError(
                f"VocabParallelEmbedding: got positional arguments {args!r} after num_embeddings; pass "
                f"embedding_dim positionally and padding_idx and the rest by keyword"
            )
        self.process_group = process_group
        world_size, rank = (
            (1, 0) if process_group is None else _group(process_group, "VocabParallelEmbedding")
        )
        if num_embeddings % world_size:
            raise ValueError(
                f"VocabParallelEmbedding: num_embeddings {num_embeddings} is not a multiple of the "
                f"world size {world_size}; pad the vocabulary (pad_vocab_size_multiple)"
            )
        local = num_embeddings // world_size
        self.vocab_start_index, self.vocab_end_index = rank * local, (rank + 1) * local
        if padding_idx is not None:
            padding_idx = (
                padding_idx - self.vocab_start_index
                if self.vocab_start_index <= padding_idx < self.vocab_end_index
                else None
            )
        dims = {"embedding_dim": args[0]} if args else {}
        super().__init__(local, padding_idx=padding_idx, **dims, **kwargs)

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # noqa: A002 - nn.Embedding's name
        """input: int ids (any shape) -> (..., embedding_dim); ids outside this rank's block give zeros."""
        if self.process_group is None or dist.get_world_size(self.process_group) == 1:
            return super().forward(input)
        outside = (input < self.vocab_start_index) | (input >= self.vocab_end_index)
        local = (input - self.vocab_start_index).masked_fill(outside, 0)
        out = super().forward(local)
        return out.masked_fill(outside.unsqueeze(-1), 0.0)


class ColumnParallelEmbedding(nn.Embedding):
    """nn.Embedding with the embedding dim split across ``process_group`` (this rank's columns)."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        *args: Any,
        process_group: ProcessGroup | None = None,
        **kwargs: Any,
    ) -> None:
        self.process_group = process_group
        world_size, _rank = (
            (1, 0) if process_group is None else _group(process_group, "ColumnParallelEmbedding")
        )
        if embedding_dim % world_size:
            raise ValueError(
                f"ColumnParallelEmbedding: embedding_dim {embedding_dim} is not a multiple of the "
                f"world size {world_size}"
            )
        super().__init__(num_embeddings, embedding_dim // world_size, *args, **kwargs)


class ParallelEmbeddings(nn.Module):
    """Word (vocabulary-parallel) + optional position (column-parallel) embeddings, summed over ranks.

    Args:
        embed_dim, vocab_size: full sizes. max_position_embeddings: > 0 adds learned positions.
        process_group: the tensor-parallel group. padding_idx: as nn.Embedding.
        sequence_parallel: the output is reduce-scattered to token rows (use
            ``combine_batch_seqlen_dim=True``) instead of all-reduced. device, dtype: of the parameters.

    forward(input_ids (batch, seqlen), position_ids=None, combine_batch_seqlen_dim=False) ->
    (batch, seqlen, embed_dim), or (batch * seqlen [/ world_size], embed_dim) when combined.
    """

    def __init__(
        self,
        embed_dim: int,
        vocab_size: int,
        max_position_embeddings: int,
        process_group: ProcessGroup | None,
        padding_idx: int | None = None,
        sequence_parallel: bool = True,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        factory_kwargs: FactoryKwargs = {"device": device, "dtype": dtype}
        super().__init__()
        self.process_group = process_group
        self.sequence_parallel = sequence_parallel
        self.word_embeddings = VocabParallelEmbedding(
            vocab_size, embed_dim, padding_idx=padding_idx, process_group=process_group, **factory_kwargs
        )
        self.max_position_embeddings = max_position_embeddings
        if max_position_embeddings > 0:
            self.position_embeddings = ColumnParallelEmbedding(
                max_position_embeddings, embed_dim, process_group=process_group, **factory_kwargs
            )

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        combine_batch_seqlen_dim: bool = False,
    ) -> torch.Tensor:
        """input_ids (batch, seqlen) -> embeddings (class docstring)."""
        batch, seqlen = input_ids.shape
        world_size = 1 if self.process_group is None else dist.get_world_size(self.process_group)
        embeddings: torch.Tensor = self.word_embeddings(input_ids)
        if self.max_position_embeddings > 0:
            if position_ids is None:
                position_ids = torch.arange(seqlen, dtype=torch.long, device=input_ids.device)
            pos = self.position_embeddings(position_ids)
            if world_size <= 1:
                embeddings = embeddings + pos
            else:
                width = self.position_embeddings.embedding_dim
                rank = dist.get_rank(self.process_group)
                embeddings = embeddings.clone()
                embeddings[..., rank * width : (rank + 1) * width] += pos
        if combine_batch_seqlen_dim:
            embeddings = embeddings.reshape(batch * seqlen, -1)
        if world_size <= 1:
            return embeddings
        return (reduce_scatter if self.sequence_parallel else all_reduce)(embeddings, self.process_group)
