"""The pre-norm residual block that wraps every mixer layer of a Mamba language model (upstream's
``mamba_ssm.modules.block.Block``).

Data flow of one block (arXiv:2312.00752, section 3.4: "Mamba blocks ... interleaved with standard
normalization and residual connections"; the residual stream is carried separately so that the add and
the norm can be fused):

    residual      = hidden_states + residual        (residual None for the first block)
    hidden_states = mixer(norm(residual))
    # only with an MLP (d_intermediate > 0):
    residual      = hidden_states + residual
    hidden_states = mlp(norm2(residual))
    return hidden_states, residual

With ``residual_in_fp32`` the residual stream is kept in float32 whatever the model's dtype. With
``fused_add_norm`` the add and the norm run as one :func:`mamba_ssm.ops.triton.layer_norm.layer_norm_fn`
call (same math).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, cast

import torch
from torch import nn

from mamba_ssm.ops.triton.layer_norm import RMSNorm, layer_norm_fn

if TYPE_CHECKING:
    from mamba_ssm.utils.generation import InferenceParams, LayerCache

__all__ = ["Block"]


def add_and_norm(
    norm: nn.Module,
    hidden_states: torch.Tensor,
    residual: torch.Tensor | None,
    fused_add_norm: bool,
    residual_in_fp32: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``residual = hidden_states + residual`` then ``norm(residual)``: returns (normed, residual).

    Args:
        norm: an ``nn.LayerNorm`` or :class:`RMSNorm` over the last dim (hidden,).
        hidden_states, residual: (..., hidden); residual may be None (the first block).
        fused_add_norm: one :func:`layer_norm_fn` call instead of the add and the module.
        residual_in_fp32: the returned residual is float32.

    Returns:
        normed (..., hidden) in norm.weight's dtype (hidden_states' dtype when fused), residual (..., hidden).
    """
    if not fused_add_norm:
        residual = hidden_states if residual is None else hidden_states + residual
        # nn.Module's attribute type is Tensor | Module; a norm's weight is a Tensor.
        normed = norm(residual.to(dtype=cast(torch.Tensor, norm.weight).dtype))
        if residual_in_fp32:
            residual = residual.to(torch.float32)
        return normed, residual
    # As above: a norm's weight and bias are tensors (bias None for RMSNorm), its eps a float.
    fused: tuple[torch.Tensor, torch.Tensor] = layer_norm_fn(
        hidden_states,
        cast(torch.Tensor, norm.weight),
        cast("torch.Tensor | None", norm.bias),
        residual=residual,
        eps=cast(float, norm.eps),
        prenorm=True,
        residual_in_fp32=residual_in_fp32,
        is_rms_norm=isinstance(norm, RMSNorm),
    )
    return fused


class Block(nn.Module):
    """mixer (and optionally MLP) with pre-norm residual connections.

    Args:
        dim: hidden width.
        mixer_cls: callable ``mixer_cls(dim) -> nn.Module`` (Mamba, Mamba2, MHA, ...).
        mlp_cls: callable ``mlp_cls(dim) -> nn.Module``, or ``nn.Identity`` for no MLP (no ``norm2``).
        norm_cls: callable ``norm_cls(dim)`` (``nn.LayerNorm`` or ``RMSNorm``, maybe a partial with eps).
        fused_add_norm: fuse the residual add with the norm (needs LayerNorm or RMSNorm).
        residual_in_fp32: keep the residual stream in float32.

    Parameters: ``mixer.*``, ``norm.weight`` (and ``norm.bias`` for LayerNorm), and with an MLP
    ``norm2.*`` and ``mlp.*`` (upstream's checkpoint keys).

    Raises:
        TypeError: fused_add_norm with a norm that is neither ``nn.LayerNorm`` nor ``RMSNorm``.
    """

    #: The block's index in its model (set by ``create_block``; absent on a Block built directly).
    layer_idx: int | None

    def __init__(
        self,
        dim: int,
        mixer_cls: Callable[[int], nn.Module],
        mlp_cls: Callable[[int], nn.Module],
        norm_cls: Callable[[int], nn.Module] = nn.LayerNorm,
        fused_add_norm: bool = False,
        residual_in_fp32: bool = False,
    ) -> None:
        super().__init__()
        self.residual_in_fp32 = residual_in_fp32
        self.fused_add_norm = fused_add_norm
        self.norm = norm_cls(dim)
        self.mixer = mixer_cls(dim)
        if mlp_cls is not nn.Identity:
            self.norm2 = norm_cls(dim)
            self.mlp: nn.Module | None = mlp_cls(dim)
        else:
            self.mlp = None
        if fused_add_norm and not isinstance(self.norm, (nn.LayerNorm, RMSNorm)):
            raise TypeError(
                f"Block: fused_add_norm=True needs an nn.LayerNorm or RMSNorm norm, got "
                f"{type(self.norm).__name__}; pass fused_add_norm=False"
            )

    def forward(
        self,
        hidden_states: torch.Tensor,
        residual: torch.Tensor | None = None,
        inference_params: InferenceParams | None = None,
        **mixer_kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """hidden_states (batch, seqlen, dim), residual (batch, seqlen, dim) or None ->
        (hidden_states, residual), both (batch, seqlen, dim).

        ``inference_params`` (:class:`mamba_ssm.utils.generation.InferenceParams`) and ``mixer_kwargs``
        (e.g. ``seq_idx``, ``cu_seqlens`` for Mamba2) are passed to the mixer.
        """
        hidden_states, new_residual = add_and_norm(
            self.norm, hidden_states, residual, self.fused_add_norm, self.residual_in_fp32
        )
        hidden_states = self.mixer(hidden_states, inference_params=inference_params, **mixer_kwargs)
        if self.mlp is not None:
            hidden_states, new_residual = add_and_norm(
                self.norm2, hidden_states, new_residual, self.fused_add_norm, self.residual_in_fp32
            )
            hidden_states = self.mlp(hidden_states)
        return hidden_states, new_residual

    def allocate_inference_cache(
        self, batch_size: int, max_seqlen: int, dtype: torch.dtype | None = None, **kwargs: Any
    ) -> LayerCache:
        """The mixer's decoding cache (see the mixer's ``allocate_inference_cache``)."""
        # mixer_cls builds any nn.Module; the mixers that decode define allocate_inference_cache.
        allocate = cast("Callable[..., LayerCache]", self.mixer.allocate_inference_cache)
        return allocate(batch_size, max_seqlen, dtype=dtype, **kwargs)
