"""Mamba language models (upstream's ``mamba_ssm.models.mixer_seq_simple``): ``create_block``,
``MixerModel`` (embedding, blocks, final norm) and ``MambaLMHeadModel`` (plus the LM head, ``generate``,
``from_pretrained`` and ``save_pretrained``).

Checkpoint keys (upstream's):

    backbone.embedding.weight                      (padded vocab, d_model)
    backbone.layers.{i}.norm.weight (.bias)        pre-mixer norm
    backbone.layers.{i}.mixer.*                    Mamba / Mamba2 / Mamba3 / MHA parameters
    backbone.layers.{i}.norm2.*, .mlp.fc1/fc2.*    only where d_intermediate > 0
    backbone.norm_f.weight (.bias)                 final norm
    lm_head.weight                                 (padded vocab, d_model), the embedding's when tied

The vocabulary is rounded up to a multiple of ``pad_vocab_size_multiple`` (50277 -> 50280 with 8); the
extra rows are never produced by a tokenizer.
"""

from __future__ import annotations

import copy
import json
import math
import os
import warnings
from collections.abc import Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, cast

import torch
from torch import nn
from torch.types import Device

from mamba_ssm.models._checkpoint import load_weights
from mamba_ssm.models.config_mamba import MambaConfig
from mamba_ssm.models.transformers_format import (
    config_from_transformers,
    save_transformers_format,
    transformers_model_type,
)
from mamba_ssm.modules._common import FactoryKwargs, set_flag
from mamba_ssm.modules.block import Block, add_and_norm
from mamba_ssm.modules.mamba_simple import Mamba
from mamba_ssm.modules.mha import MHA
from mamba_ssm.modules.mlp import GatedMLP
from mamba_ssm.ops.triton.layer_norm import RMSNorm
from mamba_ssm.utils.generation import GenerationMixin
from mamba_ssm.utils.hf import CONFIG_NAME, SAFE_WEIGHTS_NAME, WEIGHTS_NAME, find_weights, load_config_hf

if TYPE_CHECKING:
    from mamba_ssm.utils.generation import InferenceParams, LayerCache

__all__ = ["CausalLMOutput", "MambaLMHeadModel", "MixerModel", "create_block"]


class CausalLMOutput(NamedTuple):
    """What :meth:`MambaLMHeadModel.forward` returns (upstream's namedtuple)."""

    logits: torch.Tensor  # (batch, seqlen or num_last_tokens, padded vocab)


SSM_LAYERS = ("Mamba1", "Mamba2", "Mamba3")


def _ssm_cls(layer: str) -> type[nn.Module]:
    """The class of ``ssm_cfg["layer"]`` ("Mamba2" and "Mamba3" imported on first use)."""
    if layer == "Mamba1":
        return Mamba
    module = f"mamba_ssm.modules.{layer.lower()}"
    try:
        import importlib

        cls: type[nn.Module] = getattr(importlib.import_module(module), layer)
        return cls
    except ModuleNotFoundError as exc:
        if exc.name == module:
            raise ImportError(
                f'ssm_cfg={{"layer": "{layer}"}} needs {module}, which this build of mamba-ssm lacks; '
                'use "layer": "Mamba1"'
            ) from None
        raise


def create_block(
    d_model: int,
    d_intermediate: int,
    ssm_cfg: dict[str, Any] | None = None,
    attn_layer_idx: Sequence[int] | None = None,
    attn_cfg: dict[str, Any] | None = None,
    norm_epsilon: float = 1e-5,
    rms_norm: bool = False,
    residual_in_fp32: bool = False,
    fused_add_norm: bool = False,
    layer_idx: int | None = None,
    device: Device = None,
    dtype: torch.dtype | None = None,
) -> Block:
    """One :class:`~mamba_ssm.modules.block.Block`: an MHA mixer when ``layer_idx`` is in
    ``attn_layer_idx`` (with ``attn_cfg``), else the SSM layer ``ssm_cfg["layer"]`` ("Mamba1", the
    default, "Mamba2" or "Mamba3") with the rest of ``ssm_cfg``; a GatedMLP of width ``d_intermediate`` when > 0.

    Raises:
        ValueError: an unknown ``ssm_cfg["layer"]`` (the known ones named).
    """
    factory_kwargs: FactoryKwargs = {"device": device, "dtype": dtype}
    ssm_cfg = copy.deepcopy(ssm_cfg) if ssm_cfg is not None else {}
    attn_cfg = copy.deepcopy(attn_cfg) if attn_cfg is not None else {}
    attn_layer_idx = attn_layer_idx if attn_layer_idx is not None else []
    layer = ssm_cfg.pop("layer", "Mamba1")
    if layer not in SSM_LAYERS:
        raise ValueError(
            f"create_block: ssm_cfg['layer']={layer!r} is not an SSM layer of mamba-ssm; use one of "
            f"{list(SSM_LAYERS)}"
        )
    mixer_cls: Callable[[int], nn.Module]
    mlp_cls: Callable[[int], nn.Module]
    if layer_idx in attn_layer_idx:
        mixer_cls = partial(MHA, layer_idx=layer_idx, **attn_cfg, **factory_kwargs)
    else:
        ssm_cls = _ssm_cls(layer)
        mixer_cls = partial(ssm_cls, layer_idx=layer_idx, **ssm_cfg, **factory_kwargs)
    norm_cls: Callable[[int], nn.Module] = partial(
        RMSNorm if rms_norm else nn.LayerNorm, eps=norm_epsilon, **factory_kwargs
    )
    if d_intermediate == 0:
        mlp_cls = nn.Identity
    else:
        mlp_cls = partial(GatedMLP, hidden_features=d_intermediate, out_features=d_model, **factory_kwargs)
    block = Block(
        d_model,
        mixer_cls,
        mlp_cls,
        norm_cls=norm_cls,
        fused_add_norm=fused_add_norm,
        residual_in_fp32=residual_in_fp32,
    )
    block.layer_idx = layer_idx
    return block


def _init_weights(
    module: nn.Module,
    n_layer: int,
    initializer_range: float = 0.02,
    rescale_prenorm_residual: bool = True,
    n_residuals_per_layer: int = 1,
) -> None:
    """GPT-2 style initialisation (Radford et al. 2019, "Language Models are Unsupervised Multitask
    Learners", section 2.3): zero Linear biases, N(0, initializer_range) embeddings, and the output
    projections feeding the residual stream (``out_proj``, ``fc2``) scaled by
    ``1 / sqrt(n_residuals_per_layer * n_layer)``. Biases marked ``_no_reinit`` (Mamba's dt_proj) keep
    their initialisation."""
    if isinstance(module, nn.Linear):
        if module.bias is not None and not getattr(module.bias, "_no_reinit", False):
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, std=initializer_range)
    if rescale_prenorm_residual:
        for name, p in module.named_parameters(recurse=False):
            if name == "weight" and isinstance(module, nn.Linear) and getattr(module, "_residual_out", False):
                nn.init.kaiming_uniform_(p, a=math.sqrt(5))
                with torch.no_grad():
                    p.div_(math.sqrt(n_residuals_per_layer * n_layer))


def _as_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    """``dtype`` as a torch.dtype: None and torch.dtype pass; a name such as "bfloat16" or
    "torch.float16" is looked up in torch. Raises TypeError naming the value otherwise."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    found = getattr(torch, dtype.removeprefix("torch."), None) if isinstance(dtype, str) else None
    if not isinstance(found, torch.dtype) or not found.is_floating_point:
        raise TypeError(
            f"dtype={dtype!r} is not a floating torch dtype; pass e.g. torch.bfloat16, torch.float16, "
            f"torch.float32 or their names ('bfloat16', ...)"
        )
    return found


def _as_config(config: object) -> MambaConfig:
    """``config`` when it is a MambaConfig; TypeError naming its type and the fix otherwise."""
    if not isinstance(config, MambaConfig):
        raise TypeError(
            f"MambaLMHeadModel: config must be a MambaConfig, got {type(config).__name__} "
            f"(use MambaConfig(**fields) or MambaLMHeadModel.from_pretrained)"
        )
    return config


class MixerModel(nn.Module):
    """Embedding, ``n_layer`` blocks and the final norm: input_ids (batch, seqlen) -> hidden_states
    (batch, seqlen, d_model).

    Args:
        d_model, n_layer, d_intermediate, vocab_size (already padded), ssm_cfg, attn_layer_idx, attn_cfg,
        rms_norm, fused_add_norm, residual_in_fp32: see :class:`MambaConfig`.
        norm_epsilon: eps of every norm (1e-5). initializer_cfg: keyword arguments of the initialisation
        (``initializer_range``, ``rescale_prenorm_residual``). device, dtype: of the parameters.

    Raises:
        ValueError: attn_layer_idx names an index outside 0..n_layer-1 (upstream ignores it silently).

    Warns:
        UserWarning: attention layers without ``attn_cfg["causal"] = True`` (MHA's default, as upstream's,
        is not causal: wrong for a language model).
    """

    def __init__(
        self,
        d_model: int,
        n_layer: int,
        d_intermediate: int,
        vocab_size: int,
        ssm_cfg: dict[str, Any] | None = None,
        attn_layer_idx: Sequence[int] | None = None,
        attn_cfg: dict[str, Any] | None = None,
        norm_epsilon: float = 1e-5,
        rms_norm: bool = False,
        initializer_cfg: dict[str, Any] | None = None,
        fused_add_norm: bool = False,
        residual_in_fp32: bool = False,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        factory_kwargs: FactoryKwargs = {"device": device, "dtype": dtype}
        super().__init__()
        outside = [
            i
            for i in (attn_layer_idx or [])
            if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n_layer
        ]
        if outside:
            raise ValueError(
                f"MixerModel: attn_layer_idx={list(attn_layer_idx or [])!r} names {outside!r}, not a layer "
                f"index of this model's n_layer={n_layer} layers (0..{n_layer - 1}); fix "
                f"attn_layer_idx or raise n_layer"
            )
        if attn_layer_idx and not (attn_cfg or {}).get("causal", False):
            # MHA's default is upstream's causal=False; upstream's hybrid checkpoints all set causal=True.
            warnings.warn(
                f"MixerModel: the attention layers {list(attn_layer_idx)} are not causal (attn_cfg has no "
                f"causal=True), so each position sees later tokens and generate's step-by-step "
                f"decoding differs from a full forward pass; for a language model pass "
                f"attn_cfg={{..., 'causal': True}}",
                UserWarning,
                stacklevel=3,
            )
        self.residual_in_fp32 = residual_in_fp32
        self.fused_add_norm = fused_add_norm
        self.embedding = nn.Embedding(vocab_size, d_model, **factory_kwargs)
        self.layers = nn.ModuleList(
            [
                create_block(
                    d_model,
                    d_intermediate,
                    ssm_cfg=ssm_cfg,
                    attn_layer_idx=attn_layer_idx,
                    attn_cfg=attn_cfg,
                    norm_epsilon=norm_epsilon,
                    rms_norm=rms_norm,
                    residual_in_fp32=residual_in_fp32,
                    fused_add_norm=fused_add_norm,
                    layer_idx=i,
                    **factory_kwargs,
                )
                for i in range(n_layer)
            ]
        )
        self.norm_f = (RMSNorm if rms_norm else nn.LayerNorm)(d_model, eps=norm_epsilon, **factory_kwargs)
        for block in self._blocks():
            for proj in (getattr(block.mixer, "out_proj", None), getattr(block.mlp, "fc2", None)):
                if isinstance(proj, nn.Linear):
                    set_flag(proj, "_residual_out")
        self.apply(
            partial(
                _init_weights,
                n_layer=n_layer,
                **(initializer_cfg or {}),
                n_residuals_per_layer=1 if d_intermediate == 0 else 2,
            )
        )

    def _blocks(self) -> Iterator[Block]:
        """The model's blocks, in order (``self.layers``, which holds the Blocks ``__init__`` built)."""
        for layer in self.layers:
            yield cast(Block, layer)

    def allocate_inference_cache(
        self, batch_size: int, max_seqlen: int, dtype: torch.dtype | None = None, **kwargs: Any
    ) -> dict[int, LayerCache]:
        """{layer_idx: that layer's cache} for ``InferenceParams.key_value_memory_dict``."""
        return {
            i: layer.allocate_inference_cache(batch_size, max_seqlen, dtype=dtype, **kwargs)
            for i, layer in enumerate(self._blocks())
        }

    def forward(
        self, input_ids: torch.Tensor, inference_params: InferenceParams | None = None, **mixer_kwargs: Any
    ) -> torch.Tensor:
        """input_ids: (batch, seqlen) int -> (batch, seqlen, d_model) in the parameters' dtype.

        Raises:
            ValueError: input_ids not 2-D integers, or a token id outside the vocabulary.
        """
        if input_ids.dim() != 2 or input_ids.is_floating_point():
            raise ValueError(
                f"MixerModel: input_ids must be (batch, seqlen) integer token ids, got "
                f"{tuple(input_ids.shape)} {input_ids.dtype}"
            )
        hidden_states = self.embedding(input_ids)
        residual = None
        for layer in self.layers:
            hidden_states, residual = layer(
                hidden_states, residual, inference_params=inference_params, **mixer_kwargs
            )
        hidden_states, _ = add_and_norm(
            self.norm_f, hidden_states, residual, self.fused_add_norm, self.residual_in_fp32
        )
        return hidden_states


class MambaLMHeadModel(nn.Module, GenerationMixin):
    """A Mamba language model: input_ids (batch, seqlen) -> ``CausalLMOutput(logits)`` with logits
    (batch, seqlen, padded vocab) (the last ``num_last_tokens`` positions when > 0).

    Args:
        config: a :class:`MambaConfig`. initializer_cfg: see :class:`MixerModel`.
        device, dtype: of the parameters.

    ``generate`` (from :class:`~mamba_ssm.utils.generation.GenerationMixin`) decodes with every layer's
    step path. Raises ValueError / ImportError from :func:`create_block` for a bad ``ssm_cfg``.
    """

    def __init__(
        self,
        config: MambaConfig,
        initializer_cfg: dict[str, Any] | None = None,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        config = _as_config(config)
        factory_kwargs: FactoryKwargs = {"device": device, "dtype": dtype}
        super().__init__()
        self.config = config
        vocab_size = config.vocab_size
        multiple = config.pad_vocab_size_multiple
        if multiple and vocab_size % multiple:
            vocab_size += multiple - vocab_size % multiple
        self.backbone = MixerModel(
            d_model=config.d_model,
            n_layer=config.n_layer,
            d_intermediate=config.d_intermediate,
            vocab_size=vocab_size,
            ssm_cfg=config.ssm_cfg,
            attn_layer_idx=config.attn_layer_idx,
            attn_cfg=config.attn_cfg,
            rms_norm=config.rms_norm,
            initializer_cfg=initializer_cfg,
            fused_add_norm=config.fused_add_norm,
            residual_in_fp32=config.residual_in_fp32,
            **factory_kwargs,
        )
        self.lm_head = nn.Linear(config.d_model, vocab_size, bias=False, **factory_kwargs)
        self.tie_weights()

    def tie_weights(self) -> None:
        """With ``config.tie_embeddings``, lm_head.weight becomes the embedding's weight (one tensor)."""
        if self.config.tie_embeddings:
            self.lm_head.weight = self.backbone.embedding.weight

    def allocate_inference_cache(
        self, batch_size: int, max_seqlen: int, dtype: torch.dtype | None = None, **kwargs: Any
    ) -> dict[int, LayerCache]:
        """{layer_idx: cache} for every layer (see :meth:`MixerModel.allocate_inference_cache`)."""
        return self.backbone.allocate_inference_cache(batch_size, max_seqlen, dtype=dtype, **kwargs)

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        inference_params: InferenceParams | None = None,
        num_last_tokens: int = 0,
        **mixer_kwargs: Any,
    ) -> CausalLMOutput:
        """input_ids (batch, seqlen) -> CausalLMOutput(logits (batch, seqlen or num_last_tokens, padded
        vocab)). ``position_ids`` is accepted for upstream compatibility and unused (positions come from
        ``inference_params``)."""
        hidden_states = self.backbone(input_ids, inference_params=inference_params, **mixer_kwargs)
        if num_last_tokens > 0:
            hidden_states = hidden_states[:, -num_last_tokens:]
        return CausalLMOutput(logits=self.lm_head(hidden_states))

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name: str | os.PathLike[str],
        device: Device = None,
        dtype: torch.dtype | str | None = None,
        **kwargs: Any,
    ) -> MambaLMHeadModel:
        """Load a checkpoint: a local directory or a Hugging Face Hub repo id (through huggingface_hub),
        in mamba-ssm's format or transformers' (``MambaForCausalLM`` / ``Mamba2ForCausalLM``).

        Args:
            pretrained_model_name: a directory holding config.json and the weights, or a hub repo id.
                The weights are the first present of ``model.safetensors``,
                ``model.safetensors.index.json`` (sharded), ``pytorch_model.bin``,
                ``pytorch_model.bin.index.json`` (sharded); a warning names the others present
                (:mod:`mamba_ssm.utils.hf`). A config.json with transformers' ``model_type`` "mamba" /
                "mamba2" is converted (:mod:`mamba_ssm.models.transformers_format`): config mapped,
                keys renamed, the embedding and an untied head padded to ``pad_vocab_size_multiple``.
            device, dtype: of the model; dtype is a torch.dtype or its name ("bfloat16",
                "torch.float16", ...). Each tensor is cast to its parameter's dtype (parameters a layer
                keeps in float32, such as Mamba's A_log, keep the file's float32 values).
            kwargs: passed to the constructor (e.g. ``initializer_cfg``).

        Every key and shape is checked before any tensor is read; then the tensors are copied into the
        model one at a time, so the weights are never held twice.

        Raises:
            TypeError: dtype is neither a torch.dtype nor the name of a floating one.
            FileNotFoundError: config.json, the weights or a shard are missing (named).
            ValueError: config.json is invalid, has unknown fields or transformers values this model
                cannot represent; a corrupt weights file; a shape mismatch (key, both shapes, cause).
            KeyError: the weights' keys do not match the config (missing / unexpected keys listed).
        """
        torch_dtype = _as_dtype(dtype)
        raw = load_config_hf(pretrained_model_name)
        source = f"{pretrained_model_name}/{CONFIG_NAME}"
        from_transformers = transformers_model_type(raw) is not None
        if from_transformers:
            config = config_from_transformers(raw, source=source)
        else:
            config = MambaConfig.from_dict(raw, source=source)
        weights = find_weights(pretrained_model_name)
        model = cls(config, device=device, dtype=torch_dtype, **kwargs)
        load_weights(model, weights, from_transformers=from_transformers)
        return model

    def save_pretrained(
        self,
        save_directory: str | os.PathLike[str],
        safe_serialization: bool = False,
        transformers_format: bool = False,
    ) -> None:
        """Write the checkpoint to ``save_directory`` (created if needed).

        Default (upstream's layout): ``config.json`` and ``pytorch_model.bin``, with
        ``safe_serialization=True`` also ``model.safetensors`` (without the tied lm_head.weight).
        ``transformers_format=True``: transformers' ``config.json`` and ``model.safetensors`` (renamed
        keys, the vocabulary cut to ``config.vocab_size`` rows; see
        :func:`~mamba_ssm.models.transformers_format.save_transformers_format`), which
        ``MambaForCausalLM`` / ``Mamba2ForCausalLM.from_pretrained`` load; ``safe_serialization`` does
        not apply.

        Raises:
            ImportError: safetensors output without the safetensors package.
            ValueError: transformers_format for a model transformers cannot represent (MLP blocks,
                attention layers, LayerNorm, ...), before anything is written.
        """
        if transformers_format:
            save_transformers_format(self, save_directory)
            return
        os.makedirs(save_directory, exist_ok=True)
        state_dict = self.state_dict()
        torch.save(state_dict, os.path.join(save_directory, WEIGHTS_NAME))
        if safe_serialization:
            try:
                from safetensors.torch import save_file
            except ImportError:
                raise ImportError(
                    "save_pretrained(safe_serialization=True) needs the safetensors package: "
                    "pip install safetensors"
                ) from None
            tensors = {
                k: v.contiguous()
                for k, v in state_dict.items()
                if not (self.config.tie_embeddings and k == "lm_head.weight")
            }
            save_file(tensors, os.path.join(save_directory, SAFE_WEIGHTS_NAME), metadata={"format": "pt"})
        with open(os.path.join(save_directory, CONFIG_NAME), "w", encoding="utf-8") as f:
            json.dump(self.config.to_dict(), f, indent=2)
            f.write("\n")
