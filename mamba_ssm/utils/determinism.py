"""Upstream's ``mamba_ssm.utils.determinism``: the deterministic-mode switch and the helpers Triton kernels
use to honour it (autotune config choice, per-program reduction workspaces).

Deterministic mode is on when :func:`set_deterministic_mode` said so, else when ``MAMBA_DETERMINISTIC``
starts with ``1`` (``0`` turns it off), else when ``torch.use_deterministic_algorithms(True)`` is in force.

What it means here: this package's Triton kernels (SSD, state update, norms) reduce without atomics, and
its CPU kernels split work the same way on every run, so they give bit-identical results run to run in
either mode. The CUDA/HIP kernels of ``mamba_ssm._C`` add the selective scan's dB/dC and the causal
conv1d's dweight/dbias partial sums with float atomics, whose order (and so the last bits) may vary;
deterministic mode does not change that.
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Optional, Sequence

import torch
from packaging.version import Version
from torch.types import Device

from mamba_ssm.ops.triton._helpers import triton_version

if TYPE_CHECKING:
    import triton  # untyped: its Config is Any to mypy

__all__ = [
    "TRITON_HAS_CACHE_RESULTS",
    "TRITON_VERSION",
    "alloc_tile_workspace",
    "autotune_configs",
    "finalize_tile_workspace",
    "set_deterministic_mode",
    "use_deterministic_mode",
]

#: The installed triton's version (``0.0.0`` when it is not installed), read without importing it.
TRITON_VERSION = Version(".".join(map(str, triton_version() or (0, 0, 0))))
#: Whether the installed triton (>= 3.4) can cache autotuning results (``TRITON_CACHE_AUTOTUNING=1``).
TRITON_HAS_CACHE_RESULTS = Version("3.4.0") <= TRITON_VERSION

_override: Optional[bool] = None
_warned = False


def use_deterministic_mode() -> bool:
    """Whether deterministic mode is on (see the module docstring for the order of the switches)."""
    if _override is not None:
        return _override
    env = os.environ.get("MAMBA_DETERMINISTIC", "")
    if env:
        return env[0] == "1"
    return torch.are_deterministic_algorithms_enabled()


def set_deterministic_mode(value: Optional[bool]) -> None:
    """Force deterministic mode on (True) or off (False); None returns to the environment's choice."""
    global _override  # noqa: PLW0603
    _override = None if value is None else bool(value)


def _cost(config: triton.Config) -> int:
    """A config's shared-memory footprint, as the product of its BLOCK_SIZE_* entries times its stages."""
    product = 1
    for key, value in getattr(config, "kwargs", {}).items():
        if key.startswith("BLOCK_SIZE_"):
            product *= int(value)
    return product * (getattr(config, "num_stages", 1) or 1)


def autotune_configs(configs: list[triton.Config]) -> list[triton.Config]:
    """The Triton autotune configs to offer a kernel: all of them normally; in deterministic mode the
    cached-autotuning ones when triton can cache results and ``TRITON_CACHE_AUTOTUNING=1``, else one
    config, so every run launches the same one: the one matching ``TRITON_AUTOTUNE_BLOCK_SIZE_{M,N,K,
    DSTATE}`` when those are set, else the cheapest (smallest block product times stages).

    Args:
        configs: a list of ``triton.Config``.

    Returns:
        a list of configs (possibly the same list).
    """
    global _warned  # noqa: PLW0603
    if not configs or not use_deterministic_mode():
        return configs
    if TRITON_HAS_CACHE_RESULTS and os.environ.get("TRITON_CACHE_AUTOTUNING") == "1":
        return configs
    if not _warned:
        _warned = True
        warnings.warn(
            "mamba_ssm deterministic mode: one autotune config per kernel; "
            + (
                "set TRITON_CACHE_AUTOTUNING=1 to autotune once and reuse the result"
                if TRITON_HAS_CACHE_RESULTS
                else "triton >= 3.4 can cache autotuning results instead"
            ),
            stacklevel=2,
        )
    wanted: dict[str, int] = {}
    for suffix in ("M", "N", "K", "DSTATE"):
        value = os.environ.get(f"TRITON_AUTOTUNE_BLOCK_SIZE_{suffix}")
        if value is not None:
            wanted[f"BLOCK_SIZE_{suffix}"] = int(value)
    if wanted:
        matching = [c for c in configs if all(c.kwargs.get(k) == v for k, v in wanted.items())]
        if matching:
            return matching[:1]
    return [min(configs, key=_cost)]


def alloc_tile_workspace(
    base_shape: Sequence[int] | None,
    tile_dim: int,
    dtype: torch.dtype,
    device: Device,
    deterministic: bool,
    *,
    zero_init: bool = True,
) -> tuple[torch.Tensor | None, int]:
    """A buffer for a reduction over programs: with ``deterministic``, ``base_shape + (tile_dim,)`` (each
    program writes its own slot, summed by :func:`finalize_tile_workspace`), zeroed unless ``zero_init``
    is False; otherwise ``base_shape`` for atomic accumulation.

    Returns:
        (tensor, the stride of the slot axis (0 without one)), or (None, 0) for ``base_shape`` None.
    """
    if base_shape is None:
        return None, 0
    if deterministic:
        make = torch.zeros if zero_init else torch.empty
        buf = make(*base_shape, tile_dim, device=device, dtype=dtype)
        return buf, buf.stride(-1)
    return torch.empty(*base_shape, device=device, dtype=dtype), 0


def finalize_tile_workspace(tensor: torch.Tensor | None, deterministic: bool) -> torch.Tensor | None:
    """The reduction's result from :func:`alloc_tile_workspace`'s buffer: summed over the slot axis when
    ``deterministic``, else the buffer itself (None stays None)."""
    if tensor is None:
        return None
    return tensor.sum(dim=-1) if deterministic else tensor
