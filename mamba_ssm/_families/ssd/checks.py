"""The argument checks of the SSD's combined entry points (``mamba_chunk_scan_combined`` and the
functions that take its arguments): TypeError / ValueError naming the function, the argument, what was
received and what was expected."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

__all__ = ["check_shape", "validate"]


def check_shape(fn: str, name: str, t: Optional[torch.Tensor], shape: Sequence[int]) -> None:
    """ValueError unless ``t`` (None passes) has exactly ``shape``."""
    if t is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{fn}: {name} must have shape {tuple(shape)}, got {tuple(t.shape)}")


def validate(
    fn: str,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    dt_bias: Optional[torch.Tensor],
    initial_states: Optional[torch.Tensor],
    seq_idx: Optional[torch.Tensor],
    state_dtype: Optional[torch.dtype] = None,
) -> None:
    """The shape / dtype checks of the SSD's inputs (shapes as ``mamba_chunk_scan_combined`` documents).

    Raises:
        TypeError: x, dt, A, B or C is not a real float tensor.
        ValueError: a shape that disagrees with x's (batch, seqlen, nheads, headdim) and B's (ngroups,
            dstate), chunk_size not a positive int, state_dtype not a floating dtype.
    """
    given: tuple[tuple[str, object], ...] = (("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C))
    for name, t in given:  # (typed callers aside, anything can arrive here)
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.is_complex() or not t.is_floating_point():
            raise TypeError(f"{fn}: {name} has dtype {t.dtype}; expected a real float")
    if x.dim() != 4:
        raise ValueError(f"{fn}: x must have shape (batch, seqlen, nheads, headdim), got {tuple(x.shape)}")
    b, l, h, p = x.shape
    if B.dim() != 4 or B.shape[:2] != (b, l) or h % B.shape[2]:
        raise ValueError(
            f"{fn}: B must have shape (batch, seqlen, ngroups, dstate) = ({b}, {l}, ngroups dividing "
            f"{h}, dstate), got {tuple(B.shape)}"
        )
    g, n = B.shape[2], B.shape[3]
    check_shape(fn, "C", C, (b, l, g, n))
    check_shape(fn, "dt", dt, (b, l, h))
    check_shape(fn, "A", A, (h,))
    check_shape(fn, "z", z, (b, l, h, p))
    check_shape(fn, "dt_bias", dt_bias, (h,))
    check_shape(fn, "initial_states", initial_states, (b, h, p, n))
    check_shape(fn, "seq_idx", seq_idx, (b, l))
    if D is not None and tuple(D.shape) not in ((h, p), (h,)):
        raise ValueError(f"{fn}: D must have shape ({h}, {p}) or ({h},), got {tuple(D.shape)}")
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValueError(f"{fn}: chunk_size must be a positive int, got {chunk_size!r}")
    if state_dtype is not None and not (
        isinstance(state_dtype, torch.dtype) and state_dtype.is_floating_point
    ):
        raise ValueError(f"{fn}: state_dtype must be a floating torch.dtype or None, got {state_dtype!r}")
