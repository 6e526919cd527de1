"""The causal conv1d ops' call forms on mamba_ssm._C's kernels: the public signatures over
:mod:`mamba_ssm._families.causal_conv1d.compiled` (imported by the compiled backend before these run), and
the checks that say which calls those kernels take."""

from __future__ import annotations

from torch import Tensor

__all__ = [
    "compiled_fn",
    "compiled_fn_unsupported",
    "compiled_update",
    "compiled_update_unsupported",
    "compiled_varlen_states",
    "compiled_varlen_states_unsupported",
]


def compiled_fn_unsupported(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    seq_idx: Tensor | None = None,
    initial_states: Tensor | None = None,
    return_final_states: bool = False,
    final_states_out: Tensor | None = None,
    activation: str | None = None,
) -> str | None:
    """None when the compiled kernels take this conv call, else why not."""
    del return_final_states, final_states_out, activation
    from mamba_ssm._families.causal_conv1d import compiled as compiled_conv1d

    return compiled_conv1d.supports(x, weight, bias, seq_idx, initial_states)


def compiled_fn(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    seq_idx: Tensor | None = None,
    initial_states: Tensor | None = None,
    return_final_states: bool = False,
    final_states_out: Tensor | None = None,
    activation: str | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """``causal_conv1d_fn`` on the compiled kernels (final states copied into ``final_states_out``)."""
    from mamba_ssm._families.causal_conv1d import compiled as compiled_conv1d

    out, final = compiled_conv1d.conv1d(x, weight, bias, seq_idx, initial_states, activation is not None)
    if not return_final_states:
        return out
    if final_states_out is not None:
        final_states_out.copy_(final)
        final = final_states_out
    return out, final


def compiled_update_unsupported(
    x: Tensor,
    conv_state: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    activation: str | None = None,
    cache_seqlens: Tensor | None = None,
    conv_state_indices: Tensor | None = None,
) -> str | None:
    """None when the compiled kernels take this update call, else why not."""
    del activation
    from mamba_ssm._families.causal_conv1d import compiled as compiled_conv1d

    return compiled_conv1d.supports(x, weight, conv_state, bias, cache_seqlens, conv_state_indices)


def compiled_update(
    x: Tensor,
    conv_state: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    activation: str | None = None,
    cache_seqlens: Tensor | None = None,
    conv_state_indices: Tensor | None = None,
) -> Tensor:
    """``causal_conv1d_update`` on the compiled kernels (they take x of (batch, dim) as one step)."""
    from mamba_ssm._families.causal_conv1d import compiled as compiled_conv1d

    out: Tensor = compiled_conv1d.update(
        x, conv_state, weight, bias, activation is not None, cache_seqlens, conv_state_indices
    )
    return out


def compiled_varlen_states_unsupported(x: Tensor, cu_seqlens: Tensor, state_len: int) -> str | None:
    """None when the compiled copy takes this call, else why not."""
    del state_len
    from mamba_ssm._families.causal_conv1d import compiled as compiled_conv1d

    return compiled_conv1d.supports_varlen(x, cu_seqlens)


def compiled_varlen_states(x: Tensor, cu_seqlens: Tensor, state_len: int) -> Tensor:
    """``causal_conv1d_varlen_states`` on the compiled copy."""
    from mamba_ssm._families.causal_conv1d import compiled as compiled_conv1d

    out: Tensor = compiled_conv1d.varlen_states(x, cu_seqlens, state_len)
    return out
