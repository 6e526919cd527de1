"""transformers' Mamba / Mamba2 checkpoint format (``MambaForCausalLM`` / ``Mamba2ForCausalLM``, the
``state-spaces/mamba-*-hf`` layout) and mamba-ssm's (upstream's), both ways.

``MambaLMHeadModel.from_pretrained`` reads a transformers folder directly (its config.json has
``model_type`` "mamba" or "mamba2"); ``MambaLMHeadModel.save_pretrained(dir, transformers_format=True)``
writes one. What differs:

    transformers                          mamba-ssm
    backbone.embeddings.weight      <->   backbone.embedding.weight   (vocab_size rows <-> rows padded
    lm_head.weight (when untied)    <->   lm_head.weight               to pad_vocab_size_multiple)
    every other key (backbone.layers.{i}.norm.weight, .mixer.*, backbone.norm_f.weight): the same name
    and shape.

    config.json: hidden_size -> d_model, num_hidden_layers -> n_layer, vocab_size, residual_in_fp32,
    tie_word_embeddings -> tie_embeddings; into ssm_cfg: state_size -> d_state, conv_kernel -> d_conv,
    expand, use_bias -> bias, use_conv_bias -> conv_bias, time_step_min / time_step_max /
    time_step_floor -> dt_min / dt_max / dt_init_floor; Mamba: time_step_rank -> dt_rank,
    time_step_scale -> dt_scale, time_step_init_scheme -> dt_init; Mamba2 ("layer": "Mamba2"):
    head_dim -> headdim, n_groups -> ngroups, chunk_size, time_step_limit -> dt_limit. rms_norm and
    fused_add_norm are True, pad_vocab_size_multiple 8.

transformers fields absent from a config.json take transformers' defaults (its ``MambaConfig`` /
``Mamba2Config``). Fields about generation (token ids), initialisation (initializer_range,
rescale_prenorm_residual) and transformers' own runtime (use_cache, use_mambapy, ...) do not change the
weights' meaning and are not carried over. Padded vocabulary rows are zeros when loading and dropped when
saving (no tokenizer produces them), so a transformers folder loaded and saved again is the same.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mamba_ssm.models.config_mamba import HasMambaConfig, MambaConfig

if TYPE_CHECKING:
    import torch

__all__ = [
    "TRANSFORMERS_MODEL_TYPES",
    "config_from_transformers",
    "config_to_transformers",
    "key_from_transformers",
    "key_to_transformers",
    "save_transformers_format",
    "state_dict_to_transformers",
    "transformers_model_type",
]

#: transformers' model_type -> its causal LM class, for the types this module converts.
TRANSFORMERS_MODEL_TYPES = {"mamba": "MambaForCausalLM", "mamba2": "Mamba2ForCausalLM"}

EMBEDDING_HF = "backbone.embeddings.weight"
EMBEDDING = "backbone.embedding.weight"
LM_HEAD = "lm_head.weight"
#: Keys whose rows are the vocabulary (padded in mamba-ssm, not in transformers).
VOCAB_KEYS = (EMBEDDING, LM_HEAD)

# transformers' defaults (transformers.MambaConfig / Mamba2Config) for fields a config.json may omit.
_HF_DEFAULTS: dict[str, dict[str, Any]] = {
    "mamba": {
        "state_size": 16,
        "expand": 2,
        "conv_kernel": 4,
        "use_bias": False,
        "use_conv_bias": True,
        "residual_in_fp32": True,
        "tie_word_embeddings": True,
        "layer_norm_epsilon": 1e-5,
        "hidden_act": "silu",
        "time_step_rank": "auto",
        "time_step_scale": 1.0,
        "time_step_min": 0.001,
        "time_step_max": 0.1,
        "time_step_floor": 1e-4,
        "time_step_init_scheme": "random",
    },
    "mamba2": {
        "num_heads": 128,
        "head_dim": 64,
        "state_size": 128,
        "expand": 2,
        "conv_kernel": 4,
        "n_groups": 8,
        "chunk_size": 256,
        "use_bias": False,
        "use_conv_bias": True,
        "residual_in_fp32": True,
        "tie_word_embeddings": False,
        "layer_norm_epsilon": 1e-5,
        "hidden_act": "silu",
        "time_step_min": 0.001,
        "time_step_max": 0.1,
        "time_step_floor": 1e-4,
        "time_step_limit": (0.0, float("inf")),
    },
}
# The norms of MambaLMHeadModel (and Mamba2's gated norm) use eps 1e-5, upstream's fixed value.
_EPS = 1e-5
# mamba-ssm's Mamba / Mamba2 defaults of the ssm_cfg fields mapped below (a field equal to its default
# is left out of ssm_cfg, as upstream's own config.json files do).
_OURS_DEFAULTS: dict[str, dict[str, Any]] = {
    "Mamba1": {
        "d_state": 16,
        "d_conv": 4,
        "expand": 2,
        "dt_min": 0.001,
        "dt_max": 0.1,
        "dt_init_floor": 1e-4,
        "dt_scale": 1.0,
        "dt_init": "random",
        "bias": False,
        "conv_bias": True,
    },
    "Mamba2": {
        "d_state": 128,
        "d_conv": 4,
        "expand": 2,
        "headdim": 64,
        "ngroups": 1,
        "chunk_size": 256,
        "dt_min": 0.001,
        "dt_max": 0.1,
        "dt_init_floor": 1e-4,
        "dt_limit": (0.0, float("inf")),
        "bias": False,
        "conv_bias": True,
    },
}
# ssm_cfg fields that change neither the weights' shapes nor the forward pass (runtime / init choices).
_RUNTIME_ONLY = {"use_fast_path", "use_mem_eff_path", "A_init_range", "conv_init", "layer"}


def transformers_model_type(config: object) -> str | None:
    """``"mamba"`` or ``"mamba2"`` when the config.json dict ``config`` is transformers' (it has a
    ``model_type``), None when it is mamba-ssm's.

    Raises:
        ValueError: a transformers ``model_type`` other than mamba / mamba2 (named).
    """
    if not isinstance(config, dict) or "model_type" not in config:
        return None
    model_type: str = config["model_type"]
    if model_type not in TRANSFORMERS_MODEL_TYPES:
        raise ValueError(
            f"config.json is transformers' model_type={model_type!r}; MambaLMHeadModel reads transformers' "
            f"{' and '.join(repr(t) for t in TRANSFORMERS_MODEL_TYPES)} checkpoints "
            f"({', '.join(TRANSFORMERS_MODEL_TYPES.values())}); load this one with transformers"
        )
    return model_type


def _unsupported(source: str, field: str, value: object, why: str) -> ValueError:
    """The error for a value the other format cannot represent: ``source: field=value why``."""
    return ValueError(f"{source}: {field}={value!r} {why}")


def config_from_transformers(
    config: dict[str, Any], source: str = "config.json", pad_vocab_size_multiple: int = 8
) -> MambaConfig:
    """The :class:`MambaConfig` of a transformers Mamba / Mamba2 ``config.json`` dict (the table in the
    module docstring).

    Raises:
        ValueError: not a mamba / mamba2 config, a required field missing (hidden_size,
            num_hidden_layers, vocab_size), or a value MambaLMHeadModel cannot represent (a norm eps
            other than 1e-5, an activation other than silu, Mamba2 num_heads * head_dim != expand *
            hidden_size), each named with ``source``.
    """
    model_type = transformers_model_type(config)
    if model_type is None:
        raise ValueError(f"{source}: not a transformers config (it has no model_type)")
    hf = {**_HF_DEFAULTS[model_type], **config}
    missing = [k for k in ("hidden_size", "num_hidden_layers", "vocab_size") if k not in config]
    if missing:
        raise ValueError(f"{source}: transformers config without {', '.join(missing)}")
    if not math.isclose(float(hf["layer_norm_epsilon"]), _EPS, rel_tol=1e-6):
        raise _unsupported(
            source,
            "layer_norm_epsilon",
            hf["layer_norm_epsilon"],
            "sets the norms' eps; MambaLMHeadModel's norms use upstream's 1e-5",
        )
    if hf["hidden_act"] != "silu":
        raise _unsupported(
            source, "hidden_act", hf["hidden_act"], "is the activation; Mamba and Mamba2 use silu only"
        )
    d_model = hf["hidden_size"]
    common = {
        "d_state": hf["state_size"],
        "d_conv": hf["conv_kernel"],
        "expand": hf["expand"],
        "dt_min": hf["time_step_min"],
        "dt_max": hf["time_step_max"],
        "dt_init_floor": hf["time_step_floor"],
        "bias": hf["use_bias"],
        "conv_bias": hf["use_conv_bias"],
    }
    d_inner = int(hf["expand"] * d_model)
    if "intermediate_size" in config and config["intermediate_size"] != d_inner:
        raise _unsupported(
            source,
            "intermediate_size",
            config["intermediate_size"],
            f"is not expand * hidden_size = {d_inner}; Mamba's inner width is expand * d_model",
        )
    if model_type == "mamba":
        layer = "Mamba1"
        ssm = dict(common, dt_scale=hf["time_step_scale"], dt_init=hf["time_step_init_scheme"])
        rank = hf["time_step_rank"]
        if rank != "auto" and rank != math.ceil(d_model / 16):
            ssm["dt_rank"] = rank
    else:
        layer = "Mamba2"
        if hf["num_heads"] * hf["head_dim"] != d_inner:
            raise _unsupported(
                source,
                "num_heads",
                hf["num_heads"],
                f"times head_dim={hf['head_dim']} is not expand * hidden_size = {d_inner}; Mamba2's heads "
                f"span its whole inner width",
            )
        ssm = dict(
            common,
            headdim=hf["head_dim"],
            ngroups=hf["n_groups"],
            chunk_size=hf["chunk_size"],
            dt_limit=tuple(float(v) for v in hf["time_step_limit"]),
        )
    defaults = _OURS_DEFAULTS[layer]
    ssm_cfg: dict[str, Any] = {"layer": "Mamba2"} if layer == "Mamba2" else {}
    ssm_cfg.update({k: v for k, v in ssm.items() if k not in defaults or v != defaults[k]})
    if "dt_limit" in ssm_cfg:
        ssm_cfg["dt_limit"] = list(ssm_cfg["dt_limit"])
    return MambaConfig(
        d_model=d_model,
        d_intermediate=0,
        n_layer=hf["num_hidden_layers"],
        vocab_size=hf["vocab_size"],
        ssm_cfg=ssm_cfg,
        attn_layer_idx=[],
        attn_cfg={},
        rms_norm=True,
        residual_in_fp32=bool(hf["residual_in_fp32"]),
        fused_add_norm=True,
        pad_vocab_size_multiple=pad_vocab_size_multiple,
        tie_embeddings=bool(hf["tie_word_embeddings"]),
    )


def config_to_transformers(config: MambaConfig) -> dict[str, Any]:
    """transformers' config.json dict (``MambaForCausalLM`` or ``Mamba2ForCausalLM``) for a
    :class:`MambaConfig`; its vocab_size is ``config.vocab_size`` (the padded rows are not written).

    Raises:
        ValueError: what transformers' Mamba / Mamba2 cannot represent, named: MLP blocks
            (d_intermediate > 0), attention layers, LayerNorm (rms_norm=False), an SSM layer other than
            Mamba1 / Mamba2, or an ssm_cfg field without a transformers counterpart.
    """
    source = "save_pretrained(transformers_format=True)"
    no = "transformers' Mamba / Mamba2 has no counterpart; keep mamba-ssm's format for this model"
    if config.d_intermediate:
        raise _unsupported(source, "d_intermediate", config.d_intermediate, f"adds MLP blocks: {no}")
    if config.attn_layer_idx:
        raise _unsupported(source, "attn_layer_idx", config.attn_layer_idx, f"adds attention layers: {no}")
    if not config.rms_norm:
        raise _unsupported(source, "rms_norm", config.rms_norm, f"asks for LayerNorm: {no}")
    ssm = dict(config.ssm_cfg or {})
    layer = ssm.get("layer", "Mamba1")
    if layer not in _OURS_DEFAULTS:
        raise _unsupported(source, "ssm_cfg['layer']", layer, f"is the SSM layer: {no}")
    fixed = {"rmsnorm": True, "norm_before_gate": False, "D_has_hdim": False} if layer == "Mamba2" else {}
    for key, want in fixed.items():
        if key in ssm and ssm[key] != want:
            raise _unsupported(source, f"ssm_cfg[{key!r}]", ssm[key], f"is a Mamba2 variant: {no}")
    full = {**_OURS_DEFAULTS[layer], **ssm}
    d_inner = int(full["expand"] * config.d_model)
    if layer == "Mamba2" and ssm.get("d_ssm") not in (None, d_inner):
        raise _unsupported(source, "ssm_cfg['d_ssm']", ssm["d_ssm"], f"makes a partial SSM: {no}")
    known = set(_OURS_DEFAULTS[layer]) | set(fixed) | _RUNTIME_ONLY
    known |= {"dt_rank"} if layer == "Mamba1" else {"d_ssm"}
    extra = sorted(set(ssm) - known)
    if extra:
        raise _unsupported(source, "ssm_cfg", {k: ssm[k] for k in extra}, f"has fields for which {no}")
    hf: dict[str, Any] = {
        "model_type": "mamba" if layer == "Mamba1" else "mamba2",
        "architectures": ["MambaForCausalLM" if layer == "Mamba1" else "Mamba2ForCausalLM"],
        "hidden_size": config.d_model,
        "num_hidden_layers": config.n_layer,
        "vocab_size": config.vocab_size,
        "state_size": full["d_state"],
        "conv_kernel": full["d_conv"],
        "expand": full["expand"],
        "use_bias": bool(full["bias"]),
        "use_conv_bias": bool(full["conv_bias"]),
        "residual_in_fp32": bool(config.residual_in_fp32),
        "tie_word_embeddings": bool(config.tie_embeddings),
        "layer_norm_epsilon": _EPS,
        "hidden_act": "silu",
        "time_step_min": full["dt_min"],
        "time_step_max": full["dt_max"],
        "time_step_floor": full["dt_init_floor"],
    }
    if layer == "Mamba1":
        rank = ssm.get("dt_rank", "auto")
        hf.update(
            intermediate_size=d_inner,
            time_step_rank=math.ceil(config.d_model / 16) if rank == "auto" else rank,
            time_step_scale=full["dt_scale"],
            time_step_init_scheme=full["dt_init"],
        )
    else:
        hf.update(
            head_dim=full["headdim"],
            num_heads=d_inner // full["headdim"],
            n_groups=full["ngroups"],
            chunk_size=full["chunk_size"],
        )
        limit = tuple(float(v) for v in full["dt_limit"])
        if limit != (0.0, float("inf")):  # transformers' default; an infinite bound is written Infinity
            hf["time_step_limit"] = list(limit)
    return hf


def key_from_transformers(key: str) -> str:
    """mamba-ssm's name of transformers' state_dict key ``key``."""
    return EMBEDDING if key == EMBEDDING_HF else key


def key_to_transformers(key: str) -> str:
    """transformers' name of mamba-ssm's state_dict key ``key``."""
    return EMBEDDING_HF if key == EMBEDDING else key


def state_dict_to_transformers(
    state_dict: Mapping[str, torch.Tensor], config: MambaConfig
) -> dict[str, torch.Tensor]:
    """mamba-ssm's state_dict -> transformers' (keys renamed, vocabulary rows cut to
    ``config.vocab_size``, a tied lm_head.weight left out, every tensor contiguous; nothing copied
    that need not be)."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        if key == LM_HEAD and config.tie_embeddings:
            continue
        kept = value[: config.vocab_size] if key in VOCAB_KEYS else value
        out[key_to_transformers(key)] = kept.contiguous()
    return out


def save_transformers_format(
    model: HasMambaConfig, save_directory: str | os.PathLike[str], safe_serialization: bool = True
) -> None:
    """Write ``model`` (a MambaLMHeadModel) as transformers' Mamba / Mamba2 checkpoint: ``config.json``
    (:func:`config_to_transformers`) and ``model.safetensors`` (``pytorch_model.bin`` with
    ``safe_serialization=False``), loadable with ``MambaForCausalLM.from_pretrained`` /
    ``Mamba2ForCausalLM.from_pretrained``. The config is checked before anything is written.

    Raises:
        ValueError: the model is not representable in transformers (:func:`config_to_transformers`).
        ImportError: safe_serialization without the safetensors package.
    """
    import torch

    hf = config_to_transformers(model.config)
    if safe_serialization:
        try:
            from safetensors.torch import save_file
        except ImportError:
            raise ImportError(
                "save_pretrained(transformers_format=True) writes model.safetensors, which needs the "
                "safetensors package: pip install safetensors (or pass safe_serialization=False)"
            ) from None
    tensors = state_dict_to_transformers(model.state_dict(), model.config)
    os.makedirs(save_directory, exist_ok=True)
    if safe_serialization:
        save_file(tensors, os.path.join(save_directory, "model.safetensors"), metadata={"format": "pt"})
    else:
        torch.save(tensors, os.path.join(save_directory, "pytorch_model.bin"))
    with open(os.path.join(save_directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(hf, f, indent=2, sort_keys=True)
        f.write("\n")
