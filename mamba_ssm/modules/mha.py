"""Multi-head attention for hybrid Mamba models (upstream's ``mamba_ssm.modules.mha.MHA``).

Math: scaled dot-product attention (Vaswani et al., arXiv:1706.03762) ``softmax(q k^T * scale) v`` per
head, with grouped-query attention (Ainslie et al., arXiv:2305.13245: ``num_heads_kv`` key/value heads,
each shared by ``num_heads / num_heads_kv`` query heads), rotary position embeddings (Su et al., RoFormer,
arXiv:2104.09864) on the first ``rotary_emb_dim`` channels of q and k, an optional short causal depthwise
conv over q, k, v (``d_conv``), and an optional gated MLP sharing in_proj / out_proj (``mlp_dim``).

Parameters (upstream's names and shapes), with ``qkv_dim = head_dim * (num_heads + 2 * num_heads_kv)``
and ``mlp_dim`` rounded up to a multiple of 256:

    in_proj   Linear(embed_dim, qkv_dim + mlp_dim)
    conv1d    depthwise Conv1d(qkv_dim, d_conv)                  (d_conv > 0 only)
    out_proj  Linear(head_dim * num_heads + mlp_dim // 2, embed_dim)

Decoding keeps ``(kv_cache, conv_state)`` in ``inference_params.key_value_memory_dict[layer_idx]``:
kv_cache (batch, max_seqlen, 2, num_heads_kv, head_dim), conv_state (batch, qkv_dim, d_conv) or None.
Attention runs on flash-attn when it is installed and the inputs are fp16/bf16 CUDA tensors, else on
``torch.nn.functional.scaled_dot_product_attention``.
"""

from __future__ import annotations

import importlib
import importlib.util
import math
from typing import TYPE_CHECKING, Any, Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.types import Device

from mamba_ssm.modules._common import FactoryKwargs
from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn, causal_conv1d_update

if TYPE_CHECKING:
    from mamba_ssm.utils.generation import InferenceParams

__all__ = ["MHA", "RotaryEmbedding", "apply_rotary"]


def apply_rotary(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool = False
) -> torch.Tensor:
    """Rotate the first ``2 * cos.shape[-1]`` channels of x by the angles whose cos / sin are given.

    Args:
        x: (batch, seqlen, nheads, head_dim).
        cos, sin: (seqlen, rotary_dim / 2) or (batch, seqlen, rotary_dim / 2), float32.
        interleaved: rotate channel pairs (0, 1), (2, 3), ... (GPT-J style) instead of (i, i + rotary_dim/2)
            (GPT-NeoX style, the default).

    Returns:
        x's shape and dtype; channels past rotary_dim are unchanged.
    """
    half = cos.shape[-1]
    rot = x[..., : 2 * half].float()
    if cos.dim() == 2:
        cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    else:
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    if interleaved:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).flatten(-2)
    else:
        x1, x2 = rot[..., :half], rot[..., half:]
        out = torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)
    return torch.cat([out.to(x.dtype), x[..., 2 * half :]], dim=-1)


class RotaryEmbedding(nn.Module):
    """Rotary angles: position p, channel pair i rotates by ``p * base ** (-2 i / dim)``.

    ``inv_freq`` is a non-persistent buffer (not in the state_dict, as upstream's).
    """

    inv_freq: torch.Tensor  # (dim / 2,) float32, registered in __init__

    def __init__(
        self, dim: int, base: float = 10000.0, interleaved: bool = False, device: Device = None
    ) -> None:
        super().__init__()
        if dim <= 0 or dim % 2:
            raise ValueError(f"RotaryEmbedding: dim must be a positive even int, got {dim}")
        self.dim = dim
        self.base = float(base)
        self.interleaved = interleaved
        inv_freq = 1.0 / (self.base ** (torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions: int tensor (...) -> cos, sin (..., dim / 2) in float32."""
        angles = positions.to(torch.float32).unsqueeze(-1) * self.inv_freq.to(positions.device)
        return torch.cos(angles), torch.sin(angles)

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q (batch, seqlen, nheads, head_dim), k (batch, seqlen, nheads_kv, head_dim) rotated at
        ``positions`` ((seqlen,) or (batch, seqlen) ints)."""
        cos, sin = self.cos_sin(positions)
        return apply_rotary(q, cos, sin, self.interleaved), apply_rotary(k, cos, sin, self.interleaved)


def _flash_attn_func() -> Callable[..., torch.Tensor] | None:
    """flash-attn's ``flash_attn_func`` when the package is installed and imports, else None."""
    if importlib.util.find_spec("flash_attn") is None:
        return None
    try:
        # By name: flash-attn is optional and ships no type information.
        flash_attn_func: Callable[..., torch.Tensor] = importlib.import_module("flash_attn").flash_attn_func
    except Exception:  # noqa: BLE001  (a broken flash-attn install: use SDPA)
        return None
    return flash_attn_func


class MHA(nn.Module):
    """Multi-head (grouped-query) self-attention: (batch, seqlen, embed_dim) -> (batch, seqlen, embed_dim).

    Args (upstream's order):
        embed_dim: model width. num_heads: query heads. num_heads_kv: key/value heads (default num_heads;
            must divide num_heads). head_dim: per-head width (default embed_dim // num_heads).
        mlp_dim: width of a gated MLP computed beside the attention (0: none; rounded up to 256).
        qkv_proj_bias, out_proj_bias: biases of in_proj / out_proj.
        softmax_scale: the logit scale (default head_dim ** -0.5).
        causal: each position attends only to itself and earlier ones.
        layer_idx: key of this layer's cache in ``inference_params.key_value_memory_dict``.
        d_conv: width of a causal depthwise conv over q, k, v (0: none).
        rotary_emb_dim: channels of each head that get rotary embeddings (0: none; even, <= head_dim).
        rotary_emb_base: the rotary base. rotary_emb_interleaved: GPT-J style channel pairs.
        device, dtype: of the parameters.

    Raises:
        ValueError: num_heads_kv not dividing num_heads, embed_dim not divisible by num_heads without a
            head_dim, rotary_emb_dim odd or larger than head_dim, a negative d_conv or mlp_dim.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_heads_kv: int | None = None,
        head_dim: int | None = None,
        mlp_dim: int = 0,
        qkv_proj_bias: bool = True,
        out_proj_bias: bool = True,
        softmax_scale: float | None = None,
        causal: bool = False,
        layer_idx: int | None = None,
        d_conv: int = 0,
        rotary_emb_dim: int = 0,
        rotary_emb_base: float = 10000.0,
        rotary_emb_interleaved: bool = False,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        factory_kwargs: FactoryKwargs = {"device": device, "dtype": dtype}
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.num_heads_kv = num_heads_kv if num_heads_kv is not None else num_heads
        if num_heads <= 0 or self.num_heads_kv <= 0 or num_heads % self.num_heads_kv:
            raise ValueError(
                f"MHA: num_heads_kv={self.num_heads_kv} must be positive and divide num_heads={num_heads}"
            )
        if head_dim is None:
            if embed_dim % num_heads:
                raise ValueError(
                    f"MHA: embed_dim={embed_dim} is not divisible by num_heads={num_heads}; pass head_dim"
                )
            head_dim = embed_dim // num_heads
        self.head_dim = head_dim
        if mlp_dim < 0 or d_conv < 0:
            raise ValueError(f"MHA: mlp_dim={mlp_dim} and d_conv={d_conv} must be >= 0")
        if rotary_emb_dim < 0 or rotary_emb_dim % 2 or rotary_emb_dim > head_dim:
            raise ValueError(
                f"MHA: rotary_emb_dim={rotary_emb_dim} must be even and in [0, head_dim={head_dim}]"
            )
        self.mlp_dim = math.ceil(mlp_dim / 256) * 256
        self.softmax_scale = softmax_scale
        self.causal = causal
        self.layer_idx = layer_idx
        self.d_conv = d_conv
        self.rotary_emb_dim = rotary_emb_dim
        self.qkv_dim = head_dim * (num_heads + 2 * self.num_heads_kv)
        out_dim = head_dim * num_heads
        if rotary_emb_dim > 0:
            self.rotary_emb = RotaryEmbedding(
                rotary_emb_dim, base=rotary_emb_base, interleaved=rotary_emb_interleaved, device=device
            )
        self.in_proj = nn.Linear(embed_dim, self.qkv_dim + self.mlp_dim, bias=qkv_proj_bias, **factory_kwargs)
        if d_conv > 0:
            self.conv1d = nn.Conv1d(
                self.qkv_dim,
                self.qkv_dim,
                kernel_size=d_conv,
                padding=d_conv - 1,
                groups=self.qkv_dim,
                **factory_kwargs,
            )
        self.out_proj = nn.Linear(
            out_dim + self.mlp_dim // 2, embed_dim, bias=out_proj_bias, **factory_kwargs
        )

    # ------------------------------------------------------------------------------------------------
    def allocate_inference_cache(
        self, batch_size: int, max_seqlen: int, dtype: torch.dtype | None = None, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Zeroed (kv_cache (batch, max_seqlen, 2, num_heads_kv, head_dim), conv_state (batch, qkv_dim,
        d_conv) or None), in out_proj's weight dtype (or ``dtype``)."""
        dtype = self.out_proj.weight.dtype if dtype is None else dtype
        device = self.out_proj.weight.device
        kv_cache = torch.zeros(
            batch_size, max_seqlen, 2, self.num_heads_kv, self.head_dim, dtype=dtype, device=device
        )
        conv_state = None
        if self.d_conv > 0:
            conv_state = torch.zeros(
                batch_size, self.qkv_dim, self.d_conv, dtype=self.conv1d.weight.dtype, device=device
            )
        return kv_cache, conv_state

    def _cache(self, inference_params: InferenceParams) -> tuple[torch.Tensor, torch.Tensor | None]:
        """This layer's (kv_cache, conv_state) in ``inference_params``, allocated on first use."""
        if self.layer_idx is None:
            raise ValueError(
                "MHA: decoding with inference_params needs layer_idx (the key of this layer's "
                "cache); construct MHA(..., layer_idx=0)"
            )
        cache = inference_params.key_value_memory_dict
        if self.layer_idx not in cache:
            cache[self.layer_idx] = self.allocate_inference_cache(
                inference_params.max_batch_size, inference_params.max_seqlen
            )
        layer_cache: tuple[torch.Tensor, torch.Tensor | None] = cache[self.layer_idx]
        return layer_cache

    def _conv(self, qkv: torch.Tensor, conv_state: torch.Tensor | None, offset: int) -> torch.Tensor:
        """Causal depthwise conv over (batch, seqlen, qkv_dim); conv_state (if any) updated."""
        x = qkv.transpose(1, 2)
        weight = self.conv1d.weight.squeeze(1)
        out: torch.Tensor
        if conv_state is not None and offset > 0:
            out = causal_conv1d_update(x, conv_state, weight, self.conv1d.bias)
            return out.transpose(1, 2)
        if conv_state is not None:
            seqlen = x.shape[-1]
            conv_state.copy_(F.pad(x, (max(self.d_conv - seqlen, 0), 0))[..., -self.d_conv :])
        out = causal_conv1d_fn(x, weight, self.conv1d.bias)
        return out.transpose(1, 2)

    def _attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """q (b, sq, h, d), k/v (b, sk, hkv, d), mask (sq, sk) / (b, 1, sq, sk) bool or None (no mask) ->
        (b, sq, h, d)."""
        flash = _flash_attn_func() if q.is_cuda and q.dtype in (torch.float16, torch.bfloat16) else None
        if flash is not None and (mask is None or mask.dim() == 2):
            # flash-attn aligns a causal mask to the bottom right, as our mask does; it handles GQA itself.
            return flash(q, k, v, softmax_scale=self.softmax_scale, causal=mask is not None)
        groups = self.num_heads // self.num_heads_kv
        k = k.repeat_interleave(groups, dim=2) if groups > 1 else k
        v = v.repeat_interleave(groups, dim=2) if groups > 1 else v
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=self.softmax_scale
        )
        return out.transpose(1, 2)

    def forward(
        self, x: torch.Tensor, inference_params: InferenceParams | None = None, **kwargs: Any
    ) -> torch.Tensor:
        """x: (batch, seqlen, embed_dim) -> (batch, seqlen, embed_dim).

        With ``inference_params`` the keys and values go into this layer's cache at positions
        ``seqlen_offset ...`` (rows ``batch_size_offset ...``) and the queries attend to everything cached
        so far; with ``inference_params.lengths_per_sample`` set (CUDA-graph decoding) each row's
        position is that tensor's entry and attention spans the whole (masked) cache.

        Raises:
            ValueError: x is not (batch, seqlen, embed_dim); the cache is too short or too small.
        """
        if x.dim() != 3 or x.shape[-1] != self.embed_dim:
            raise ValueError(
                f"MHA.forward: x must have shape (batch, seqlen, embed_dim={self.embed_dim}), got "
                f"{tuple(x.shape)}"
            )
        batch, seqlen, _ = x.shape
        kv_cache: torch.Tensor | None = None
        conv_state: torch.Tensor | None = None
        lengths: torch.Tensor | None = None
        offset = b0 = 0
        if inference_params is not None:
            kv_cache, conv_state = self._cache(inference_params)
            offset = inference_params.seqlen_offset
            b0 = inference_params.batch_size_offset
            lengths = inference_params.lengths_per_sample
            if b0 + batch > kv_cache.shape[0] or offset + seqlen > kv_cache.shape[1]:
                raise ValueError(
                    f"MHA: the cache holds {kv_cache.shape[0]} rows x {kv_cache.shape[1]} positions; "
                    f"rows {b0}..{b0 + batch} and positions {offset}..{offset + seqlen} do not fit "
                    f"(raise max_batch_size / max_seqlen of InferenceParams)"
                )
            kv_cache = kv_cache[b0 : b0 + batch]
            conv_state = conv_state[b0 : b0 + batch] if conv_state is not None else None
        qkv = self.in_proj(x)
        if self.mlp_dim > 0:
            qkv, x_mlp = qkv.split([self.qkv_dim, self.mlp_dim], dim=-1)
            up, gate = x_mlp.chunk(2, dim=-1)
            x_mlp = up * F.silu(gate)
        if self.d_conv > 0:
            qkv = self._conv(qkv, conv_state, offset)
        hq, hkv, d = self.num_heads, self.num_heads_kv, self.head_dim
        q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
        q = q.reshape(batch, seqlen, hq, d)
        k = k.reshape(batch, seqlen, hkv, d)
        v = v.reshape(batch, seqlen, hkv, d)
        per_row = lengths is not None and offset > 0
        if lengths is not None and per_row:
            # Per-row positions from a tensor: static shapes, so the step can be captured in a CUDA graph.
            start = lengths[b0 : b0 + batch].to(torch.long)
            positions = start[:, None] + torch.arange(seqlen, device=x.device)
        else:
            positions = torch.arange(offset, offset + seqlen, device=x.device)
        if self.rotary_emb_dim > 0:
            q, k = self.rotary_emb(q, k, positions)
        if kv_cache is None:
            mask = None
            if self.causal:
                mask = torch.ones(seqlen, seqlen, dtype=torch.bool, device=x.device).tril()
            out = self._attend(q, k, v, mask)
        elif per_row:
            rows = torch.arange(batch, device=x.device)[:, None].expand(batch, seqlen)
            kv_cache[rows, positions] = torch.stack([k, v], dim=2).to(kv_cache.dtype)
            keys = torch.arange(kv_cache.shape[1], device=x.device)
            limit = positions if self.causal else (start + seqlen - 1)[:, None].expand(batch, seqlen)
            mask = (keys[None, None, :] <= limit[:, :, None]).unsqueeze(1)  # (b, 1, sq, sk)
            out = self._attend(q, kv_cache[:, :, 0].to(q.dtype), kv_cache[:, :, 1].to(q.dtype), mask)
        else:
            kv_cache[:, offset : offset + seqlen] = torch.stack([k, v], dim=2).to(kv_cache.dtype)
            total = offset + seqlen
            keys, values = kv_cache[:, :total, 0].to(q.dtype), kv_cache[:, :total, 1].to(q.dtype)
            mask = None
            if self.causal:
                # Query i (absolute position offset + i) sees keys 0 .. offset + i.
                mask = torch.ones(seqlen, total, dtype=torch.bool, device=x.device).tril(diagonal=offset)
            out = self._attend(q, keys, values, mask)
        out = out.reshape(batch, seqlen, hq * d)
        if self.mlp_dim > 0:
            out = torch.cat([out, x_mlp], dim=-1)
        projected: torch.Tensor = self.out_proj(out)
        return projected
