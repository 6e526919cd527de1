"""The causal-conv1d package's CUDA kernels behind the conv ops' call forms (the package backend's
implementations).

The package refuses ``seq_idx`` together with initial or final states, and has no padded decode slots;
those calls run the PyTorch implementation (no warning: the package is a choice among kernels, the
PyTorch code computes the same).
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["causal_conv1d_package", "package_fn", "package_update"]

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


def package_fn(
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


def package_update(
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


def _reset_for_tests() -> None:
    """Look the package up again at the next question (tests only)."""
    global _package  # noqa: PLW0603
    _package = None
