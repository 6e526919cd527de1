"""The compiled causal conv1d kernels of ``mamba_ssm._C`` (CPU, CUDA, HIP): fake implementations,
autograd and the Python face used by :mod:`mamba_ssm.ops.causal_conv1d`.

Imported by :mod:`mamba_ssm._families.selective_scan.compiled` (after ``_C`` is loaded; importing this module
loads it too). A ``_C`` without the conv ops (not loadable, or built before them) leaves
:func:`available` False and the conv ops on their PyTorch path. Like the scan, the C++ side has no Python C API: ``torch.library.register_fake``
and ``register_autograd`` are called here.

Ops (schemas private to ``csrc/binding_registry.h`` and this file; math in ``csrc/conv1d_params.h``):

* ``mamba_ssm::causal_conv1d_fwd(x, weight, bias?, seq_idx?, initial_states?, silu) -> (out, final_states)``
* ``mamba_ssm::causal_conv1d_bwd(x, weight, bias?, seq_idx?, initial_states?, dout, dfinal_states?, silu)
  -> (dx, dweight, dbias, dinitial_states)`` (dbias / dinitial_states empty when absent)
* ``mamba_ssm::causal_conv1d_update(x, conv_state!, weight, bias?, silu, cache_seqlens?,
  conv_state_indices?) -> out`` (conv_state updated in place)
* ``mamba_ssm::causal_conv1d_varlen_states(x, cu_seqlens, state_len) -> states``

Math: the causal depthwise convolution in front of Mamba's selective scan (Gu & Dao, arXiv:2312.00752,
Figure 3) and of Mamba-2's SSD (Dao & Gu, arXiv:2405.21060, Figure 6):
``out[b, d, t] = act(bias[d] + sum_k weight[d, k] * x[b, d, t - (width - 1) + k])``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch

__all__ = ["WIDTHS", "available", "conv1d", "supports", "supports_varlen", "update", "varlen_states"]

_NS = "mamba_ssm"
_FWD = f"{_NS}::causal_conv1d_fwd"
_BWD = f"{_NS}::causal_conv1d_bwd"
_UPDATE = f"{_NS}::causal_conv1d_update"
_VARLEN = f"{_NS}::causal_conv1d_varlen_states"
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
#: The widths the kernels take.
WIDTHS = (2, 3, 4)


def available() -> bool:
    """Whether the loaded ``mamba_ssm._C`` defines the causal conv1d ops."""
    ops = getattr(torch.ops, _NS, None)
    return ops is not None and hasattr(ops, "causal_conv1d_fwd")


def _channel_last(x: torch.Tensor) -> bool:
    # The layout rule of csrc/binding_conv1d_common.h (conv_channel_last): outputs follow x's layout.
    return x.shape[2] > 1 and x.shape[1] > 1 and x.stride(2) != 1 and x.stride(1) == 1


def _empty_like_layout(x: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    # A plain tensor (never a view: the op's outputs take in-place updates), strided as the binding's.
    b, d, l = x.shape
    dtype = dtype or x.dtype
    if _channel_last(x):
        return torch.empty_strided((b, d, l), (l * d, 1, d), dtype=dtype, device=x.device)
    return torch.empty((b, d, l), dtype=dtype, device=x.device)


from mamba_ssm import _loader  # noqa: E402

_loader.load()  # (done already when the dispatcher imports this module; once per process, never raises)
_AVAILABLE = available()
# The overload itself (a decode step is short enough for the overload lookup to show).
_update_op: Optional[Callable[..., torch.Tensor]] = (
    torch.ops.mamba_ssm.causal_conv1d_update.default if _AVAILABLE else None
)

if _AVAILABLE:

    def _fwd_fake(
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: Optional[torch.Tensor],
        seq_idx: Optional[torch.Tensor],
        initial_states: Optional[torch.Tensor],
        silu: bool,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        final = torch.empty((x.shape[0], x.shape[1], weight.shape[1] - 1), dtype=x.dtype, device=x.device)
        return _empty_like_layout(x), final

    torch.library.register_fake(_FWD)(_fwd_fake)

    def _bwd_fake(
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: Optional[torch.Tensor],
        seq_idx: Optional[torch.Tensor],
        initial_states: Optional[torch.Tensor],
        dout: torch.Tensor,
        dfinal_states: Optional[torch.Tensor],
        silu: bool,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        def opt(t: Optional[torch.Tensor]) -> torch.Tensor:
            if t is None:
                return torch.empty((0,), dtype=torch.float32, device=x.device)
            return torch.empty(t.shape, dtype=t.dtype, device=t.device)

        return (
            _empty_like_layout(x),
            torch.empty(weight.shape, dtype=weight.dtype, device=weight.device),
            opt(bias),
            opt(initial_states),
        )

    torch.library.register_fake(_BWD)(_bwd_fake)

    def _update_fake(
        x: torch.Tensor,
        conv_state: torch.Tensor,
        weight: torch.Tensor,
        bias: Optional[torch.Tensor],
        silu: bool,
        cache_seqlens: Optional[torch.Tensor],
        conv_state_indices: Optional[torch.Tensor],
    ) -> torch.Tensor:
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)

    torch.library.register_fake(_UPDATE)(_update_fake)

    def _varlen_fake(x: torch.Tensor, cu_seqlens: torch.Tensor, state_len: int) -> torch.Tensor:
        batch, dim = cu_seqlens.shape[0] - 1, x.shape[1]
        return torch.empty_strided(
            (batch, dim, state_len), (state_len * dim, 1, dim), dtype=x.dtype, device=x.device
        )

    torch.library.register_fake(_VARLEN)(_varlen_fake)

    def _setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        x, weight, bias, seq_idx, initial_states, silu = inputs
        ctx.save_for_backward(x, weight, bias, seq_idx, initial_states)
        ctx.silu = silu
        ctx.has = (bias is not None, initial_states is not None)

    def _backward(
        ctx: Any, dout: Optional[torch.Tensor], dfinal_states: Optional[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor], None, Optional[torch.Tensor], None]:
        x, weight, bias, seq_idx, initial_states = ctx.saved_tensors
        if dout is None:
            dout = torch.zeros_like(x)
        dx, dweight, dbias, dinit = torch.ops.mamba_ssm.causal_conv1d_bwd(
            x, weight, bias, seq_idx, initial_states, dout, dfinal_states, ctx.silu
        )
        has_bias, has_init = ctx.has
        return dx, dweight, dbias if has_bias else None, None, dinit if has_init else None, None

    torch.library.register_autograd(_FWD, _backward, setup_context=_setup_context)


def _has_cuda_kernel() -> bool:
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(_FWD, "CUDA"))
    except Exception:  # noqa: BLE001 - a private API; assume present when it is gone
        return True


def supports(x: torch.Tensor, weight: torch.Tensor, *others: Optional[torch.Tensor]) -> Optional[str]:
    """Whether the compiled conv kernels can run this call.

    Args:
        x: the input (any of the conv ops' x); weight: (dim, width); others: the other tensor arguments
            (None allowed), which must be on x's device.

    Returns:
        None when they can, else the reason in one sentence (the caller then runs the PyTorch path): a
        ``_C`` without the conv ops, a dtype other than float32/float16/bfloat16 (float64 included), a
        width outside 2-4, a device other than CPU/CUDA, a CUDA tensor with a CPU-only build.
    """
    if (
        _AVAILABLE
        and x.is_cpu
        and weight.is_cpu
        and x.dtype in _DTYPES
        and weight.dtype in _DTYPES
        and weight.dim() == 2
        and weight.shape[1] in WIDTHS
    ):
        for t in others:  # the common CPU case, decided without building device objects (decode steps)
            if t is not None and not t.is_cpu:
                break
        else:
            return None
    device = x.device
    if not available():
        return "this mamba_ssm._C was built without the causal conv1d kernels (an older build)"
    if x.dtype not in _DTYPES:
        return f"the compiled conv1d kernels take float32/float16/bfloat16 x, got {x.dtype}"
    if weight.dtype not in _DTYPES:
        return f"the compiled conv1d kernels take a float32/float16/bfloat16 weight, got {weight.dtype}"
    if weight.dim() != 2 or weight.shape[1] not in WIDTHS:
        return f"the compiled conv1d kernels take width 2, 3 or 4, got weight of shape {tuple(weight.shape)}"
    if device.type not in ("cpu", "cuda"):
        return f"the compiled kernels run on CPU and CUDA/ROCm devices, not {device.type}"
    for t in (weight,) + others:
        if isinstance(t, torch.Tensor) and t.device != device:
            return f"an argument is on {t.device} but x is on {device}"
    if device.type == "cuda" and not _has_cuda_kernel():
        return "this build of mamba_ssm._C has no CUDA kernel (a CPU-only build)"
    return None


def supports_varlen(x: torch.Tensor, cu_seqlens: torch.Tensor) -> Optional[str]:
    """:func:`supports` for :func:`varlen_states` (a copy: any dtype of 2, 4 or 8 bytes)."""
    if not _AVAILABLE:
        return "this mamba_ssm._C was built without the causal conv1d kernels (an older build)"
    if x.element_size() not in (2, 4, 8):
        return f"the compiled varlen-states copy takes 2-, 4- or 8-byte elements, got {x.dtype}"
    if x.device.type not in ("cpu", "cuda"):
        return f"the compiled kernels run on CPU and CUDA/ROCm devices, not {x.device.type}"
    if cu_seqlens.device != x.device:
        return f"cu_seqlens is on {cu_seqlens.device} but x is on {x.device}"
    if x.device.type == "cuda" and not _has_cuda_kernel():
        return "this build of mamba_ssm._C has no CUDA kernel (a CPU-only build)"
    return None


def conv1d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    initial_states: Optional[torch.Tensor] = None,
    silu: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal depthwise conv1d with the compiled kernels; differentiable in x, weight, bias and
    initial_states.

    Args:
        x: (batch, dim, seqlen), float32/float16/bfloat16, a contiguous seqlen axis or channel-last
            (a transposed (batch, seqlen, dim) tensor; other strides are copied).
        weight: (dim, width), width 2-4. bias: (dim,) or None.
        seq_idx: (batch, seqlen) integer or None. initial_states: (batch, dim, width - 1) or None.
        silu: apply SiLU.

    Returns:
        ``(out, final_states)``: out (batch, dim, seqlen) in x's dtype and layout, final_states
        (batch, dim, width - 1) in x's dtype.

    Raises:
        RuntimeError: from the kernels for shapes they reject (the message names the argument).
    """
    out, final_states = torch.ops.mamba_ssm.causal_conv1d_fwd(
        x, weight, bias, seq_idx, initial_states, bool(silu)
    )
    return out, final_states


def update(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    silu: bool = False,
    cache_seqlens: Optional[torch.Tensor] = None,
    conv_state_indices: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Decode step(s) with the compiled kernels; ``conv_state`` is updated in place.

    Args:
        x: (batch, dim, seqlen), or (batch, dim) for one step. conv_state: (n_states, dim,
            state_len >= width - 1), any strides.
        weight, bias, silu: as :func:`conv1d`. cache_seqlens: (batch,) int, circular-state positions.
        conv_state_indices: (batch,) int rows of conv_state; -1 marks a padded slot (output 0, no state
            touched).

    Returns:
        out with x's shape and dtype.

    Raises:
        RuntimeError: this ``mamba_ssm._C`` has no conv ops (:func:`supports` says so beforehand).
    """
    if _update_op is None:
        raise RuntimeError("this mamba_ssm._C was built without the causal conv1d kernels (an older build)")
    return _update_op(x, conv_state, weight, bias, bool(silu), cache_seqlens, conv_state_indices)


def varlen_states(x: torch.Tensor, cu_seqlens: torch.Tensor, state_len: int) -> torch.Tensor:
    """The last ``state_len`` inputs of each packed sequence (zero-padded on the left).

    Args:
        x: (total_tokens, dim), any dtype of 2, 4 or 8 bytes. cu_seqlens: (batch + 1,) int, non-decreasing
            from 0 to at most total_tokens (rows after its last entry are padding, read by no state).
        state_len: int >= 1.

    Returns:
        (batch, dim, state_len) in x's dtype, laid out as a (batch, state_len, dim) tensor in memory.
    """
    states: torch.Tensor = torch.ops.mamba_ssm.causal_conv1d_varlen_states(x, cu_seqlens, int(state_len))
    return states
