"""Small helpers of upstream's Triton modules (version flags, autotune pre-hooks, argument checks of the
SSD stage functions), light: nothing here imports triton."""

from __future__ import annotations

import importlib.metadata
from typing import Any, Callable, Iterable, Optional, Sequence

import torch

__all__ = ["init_to_zero", "require", "triton_at_least", "triton_version"]


def triton_version() -> Optional[tuple[int, int, int]]:
    """The installed triton's (major, minor, patch) from its distribution metadata (triton itself is not
    imported), or None when it is not installed."""
    for dist in ("triton", "pytorch-triton-rocm", "pytorch-triton"):
        try:
            text = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        parts: list[int] = []
        for piece in text.split("+")[0].split(".")[:3]:
            digits = "".join(ch for ch in piece if ch.isdigit())
            parts.append(int(digits) if digits else 0)
        major, minor, patch = parts + [0] * (3 - len(parts))
        return (major, minor, patch)
    return None


def triton_at_least(*version: int) -> bool:
    """Whether triton is installed at ``version`` or later (e.g. ``triton_at_least(3, 0)``)."""
    have = triton_version()
    return have is not None and have >= tuple(version) + (0,) * (3 - len(version))


def init_to_zero(names: Iterable[str]) -> Callable[[dict[str, Any]], None]:
    """A Triton autotune ``pre_hook``: zero the kernel arguments ``names`` (those that are not None)
    before each benchmarked launch, for kernels that accumulate into their outputs."""
    names = tuple(names)

    def hook(nargs: dict[str, Any]) -> None:
        for name in names:
            if nargs.get(name) is not None:
                nargs[name].zero_()

    return hook


def require(fn: str, name: str, t: object, shape: Sequence[Optional[int]]) -> None:
    """Raise ValueError unless tensor ``t`` has ``shape`` (a tuple; None entries match any size)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != len(shape) or any(want is not None and got != want for got, want in zip(t.shape, shape)):
        want = "(" + ", ".join("*" if w is None else str(w) for w in shape) + ")"
        raise ValueError(f"{fn}: {name} must have shape {want}, got {tuple(t.shape)}")
