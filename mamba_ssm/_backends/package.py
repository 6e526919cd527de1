"""The causal-conv1d package backend: that package's CUDA kernels behind the conv ops' signatures.

It can run on a CUDA device where ``causal_conv1d`` imports (looked up once per process). The package
refuses ``seq_idx`` together with initial or final states, and has no padded decode slots; those calls,
and the varlen-states copy it does not have, run the PyTorch implementation (no warning: the package is
a choice among kernels, the PyTorch code computes the same).
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar

from .._devices import DeviceKey
from .base import Backend, BackendObject, Target, Unavailable

__all__ = ["PackageBackend", "causal_conv1d_package", "package_unavailable"]

_TORCH = "mamba_ssm._families.causal_conv1d.torch_impl"

# The package's functions, False when it does not import, None before the first look.
_package: tuple[Callable[..., Any], Callable[..., Any]] | bool | None = None


def causal_conv1d_package() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """``(causal_conv1d_fn, causal_conv1d_update)`` of the causal-conv1d package, or None (absent, or
    built for another torch). Looked up once per process."""
    global _package  # noqa: PLW0603 - once per process
    if _package is None:
        try:
            from causal_conv1d import causal_conv1d_fn, causal_conv1d_update
        except Exception:  # noqa: BLE001 - absent, or built for another torch
            _package = False
        else:
            _package = (causal_conv1d_fn, causal_conv1d_update)
    return _package if isinstance(_package, tuple) else None


def package_unavailable(device: DeviceKey) -> Unavailable | None:
    """Why the causal-conv1d package cannot run on ``device`` (its kernels are CUDA-only), or None."""
    if device.type != "cuda":
        return Unavailable("the causal-conv1d package has CUDA kernels only", None)
    if causal_conv1d_package() is None:
        return Unavailable("the causal-conv1d package is not installed (or does not import)", None)
    return None


def _conv(
    x: Any,
    weight: Any,
    bias: Any = None,
    seq_idx: Any = None,
    initial_states: Any = None,
    return_final_states: bool = False,
    final_states_out: Any = None,
    activation: str | None = None,
) -> Any:
    package = causal_conv1d_package()
    if package is None or (seq_idx is not None and (initial_states is not None or return_final_states)):
        from mamba_ssm._families.causal_conv1d import torch_impl

        return torch_impl.causal_conv1d_ref(
            x, weight, bias, seq_idx, initial_states, return_final_states, final_states_out, activation
        )
    kwargs: dict[str, Any] = {}
    if seq_idx is not None:
        kwargs["seq_idx"] = seq_idx
    if initial_states is not None or return_final_states:
        kwargs.update(
            initial_states=initial_states,
            return_final_states=return_final_states,
            final_states_out=final_states_out,
        )
    return package[0](x, weight, bias, activation=activation, **kwargs)


def _update(
    x: Any,
    conv_state: Any,
    weight: Any,
    bias: Any = None,
    activation: str | None = None,
    cache_seqlens: Any = None,
    conv_state_indices: Any = None,
) -> Any:
    package = causal_conv1d_package()
    padded = conv_state_indices is not None and bool((conv_state_indices < 0).any())
    if package is None or padded:
        from mamba_ssm._families.causal_conv1d import torch_impl

        return torch_impl.causal_conv1d_update(
            x, conv_state, weight, bias, activation, cache_seqlens, conv_state_indices
        )
    kwargs: dict[str, Any] = {}
    if cache_seqlens is not None:
        kwargs["cache_seqlens"] = cache_seqlens
    if conv_state_indices is not None:
        kwargs["conv_state_indices"] = conv_state_indices
    return package[1](x, conv_state, weight, bias, activation, **kwargs)


_ADAPTERS: dict[str, Callable[..., Any]] = {"causal_conv1d": _conv, "causal_conv1d_update": _update}


class PackageBackend(BackendObject):
    """The causal-conv1d package's CUDA kernels, for the conv ops."""

    name: ClassVar[str] = Backend.CAUSAL_CONV1D
    implementations: ClassVar[dict[str, Target]] = {
        "causal_conv1d_varlen_states": (_TORCH, "causal_conv1d_varlen_states"),
    }

    def implements(self, op: str) -> bool:
        """The conv ops (the varlen-states copy through the PyTorch code)."""
        return op in _ADAPTERS or op in self.implementations

    def unavailable(self, op: str, device: DeviceKey) -> Unavailable | None:
        """Why the package cannot run on ``device`` (not CUDA, not installed), or None."""
        del op
        return package_unavailable(device)

    def run(self, op: str, *args: Any, **kwargs: Any) -> Any:
        """The package's function for ``op`` with the op's arguments (see the module docstring)."""
        adapter = _ADAPTERS.get(op)
        if adapter is not None:
            return adapter(*args, **kwargs)
        return super().run(op, *args, **kwargs)


def _reset_for_tests() -> None:
    """Look the package up again at the next question (tests only)."""
    global _package  # noqa: PLW0603
    _package = None
