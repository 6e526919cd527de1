"""The packed-sequence (varlen) rule shared by every op and module that takes ``cu_seqlens``.

Several sequences packed one after another along the token axis are described by ``cu_seqlens``, their
cumulative lengths: sequence ``i`` is rows ``[cu_seqlens[i], cu_seqlens[i + 1])``. The rule, the same
in :func:`mamba_ssm.ops.causal_conv1d.causal_conv1d_varlen_states`,
:func:`mamba_ssm.ops.triton.ssd_combined.mamba_chunk_scan_combined`, ``Mamba2``'s varlen inference, the
Mamba-3 ops (:func:`mamba_ssm.ops.triton.mamba3.mamba3_siso_combined.mamba3_siso_combined`,
:func:`mamba_ssm.ops.tilelang.mamba3.mamba3_mimo.mamba3_mimo`) and ``Mamba3``:

* ``cu_seqlens`` is 1-D, integer, starts at 0 and does not decrease;
* its last entry may be smaller than the number of tokens: the rows after it are padding, which belong to
  no sequence (their ``seq_idx`` is -1: their outputs are 0 and they read and write no state);
* a sequence may be empty (two equal entries): its states are zero.
"""

from __future__ import annotations

import torch

__all__ = ["PADDING", "check_cu_seqlens", "check_rows", "seq_idx_from_cu_seqlens"]

#: The seq_idx of a padding token.
PADDING = -1


def check_cu_seqlens(fn: str, cu_seqlens: object, total: int) -> torch.Tensor:
    """``cu_seqlens`` as an int64 tensor on its own device, after checking the rule above.

    Args:
        fn: the calling function's name, for the message.
        cu_seqlens: (num_seqs + 1,) integer tensor.
        total: the number of packed tokens (rows).

    Raises:
        ValueError: cu_seqlens is not a 1-D integer tensor of at least 2 entries that starts at 0, does
            not decrease and ends at most at ``total`` (the message shows the values).
    """
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1 or cu_seqlens.is_floating_point():
        raise ValueError(
            f"{fn}: cu_seqlens must be a 1-D integer tensor of cumulative sequence lengths, got "
            f"{getattr(cu_seqlens, 'shape', type(cu_seqlens).__name__)}"
            f"{' ' + str(cu_seqlens.dtype) if isinstance(cu_seqlens, torch.Tensor) else ''}"
        )
    cu = cu_seqlens.long()
    if cu.is_meta:  # no values to check (tracing, ahead-of-time compilation)
        return cu
    if cu.numel() < 2 or int(cu[0]) != 0 or int(cu[-1]) > total or bool((cu.diff() < 0).any()):
        raise ValueError(
            f"{fn}: cu_seqlens must be non-decreasing cumulative lengths from 0 to at most the "
            f"{total} packed tokens (rows after the last entry are padding), got {cu_seqlens.tolist()}"
        )
    return cu


def seq_idx_from_cu_seqlens(
    cu_seqlens: torch.Tensor, total: int, fn: str = "seq_idx_from_cu_seqlens"
) -> torch.Tensor:
    """(1, total) int32 sequence ids of packed sequences: ``i`` on rows ``[cu_seqlens[i],
    cu_seqlens[i + 1])``, :data:`PADDING` (-1) on the rows from ``cu_seqlens[-1]`` on.

    Raises:
        ValueError: cu_seqlens breaks the rule of this module (see :func:`check_cu_seqlens`).
    """
    cu = check_cu_seqlens(fn, cu_seqlens, total)
    lengths = cu.diff()
    ids = torch.repeat_interleave(torch.arange(lengths.numel(), device=cu.device), lengths)
    pad = total - int(cu[-1])
    if pad:
        ids = torch.cat([ids, torch.full((pad,), PADDING, dtype=ids.dtype, device=ids.device)])
    return ids.to(torch.int32).unsqueeze(0)


def check_rows(name: str, arg: str, indices: torch.Tensor, rows: int) -> None:
    """ValueError naming ``arg`` when an index of ``indices`` (a negative one marks a padded slot) is not
    a row of a ``rows``-row cache. Reads the values: the ops call it in front of every backend for CPU
    tensors, and on the PyTorch path for the others (a GPU kernel's path is not synchronised for it)."""
    if indices.numel() and int(indices.max()) >= rows:
        bad = int(indices.max())
        raise ValueError(
            f"{name}: {arg} holds {bad}, not a row of the cache ({rows} rows: 0..{rows - 1}; a negative "
            f"index marks a padded slot)"
        )
