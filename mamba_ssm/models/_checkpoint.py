"""Copying a checkpoint's weights into a built ``MambaLMHeadModel``: every key and shape checked against
the model before any tensor is read, then one tensor at a time (``mamba_ssm.utils.hf.iter_weights``), so
the model's own parameters are the only full copy of the weights in memory."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mamba_ssm.models.config_mamba import HasMambaConfig, MambaConfig
from mamba_ssm.models.transformers_format import EMBEDDING, LM_HEAD, VOCAB_KEYS, key_from_transformers
from mamba_ssm.utils.hf import WeightFiles, iter_weights, weight_shapes

__all__ = ["load_weights"]


def _show(keys: Sequence[str]) -> str:
    """The first 8 keys, comma-separated, with the count when there are more ("none" for no key)."""
    return (", ".join(keys[:8]) + (f", ... ({len(keys)} in all)" if len(keys) > 8 else "")) or "none"


def _likely_cause(key: str, got: tuple[int, ...], want: tuple[int, ...], config: MambaConfig) -> str:
    """Which config.json fields decide the shape of ``key`` (and their values), for a mismatch."""
    ssm = dict(config.ssm_cfg or {})
    if key in VOCAB_KEYS:
        if len(got) == 2 and len(want) == 2 and got[1] != want[1]:
            return f"d_model={config.d_model} in config.json is not the weights' width {got[1]}"
        return (
            f"the vocabulary: config.json's vocab_size={config.vocab_size} rounded up to a multiple of "
            f"pad_vocab_size_multiple={config.pad_vocab_size_multiple} gives {want[0]} rows, the weights "
            f"have {got[0] if got else '?'} (a config.json from another model, or a different "
            f"pad_vocab_size_multiple)"
        )
    if ".mlp." in key:
        return f"d_intermediate={config.d_intermediate} or d_model={config.d_model} in config.json"
    if ".mixer." in key:
        layer = ssm.get("layer", "Mamba1")
        fields: tuple[str, ...] = ("d_state", "d_conv", "expand")
        fields += ("headdim", "ngroups", "d_ssm") if layer == "Mamba2" else ("dt_rank",)
        given = {k: ssm[k] for k in fields if k in ssm}
        return (
            f"the {layer} layer's sizes in config.json: d_model={config.d_model}, ssm_cfg {given or '{}'} "
            f"(fields not given take {layer}'s defaults) describe another layer than the weights'"
        )
    return f"d_model={config.d_model} in config.json is not the weights' width"


def load_weights(model: HasMambaConfig, weights: WeightFiles, from_transformers: bool = False) -> None:
    """Check the keys and shapes of ``weights`` against ``model`` (a MambaLMHeadModel), then copy them
    in, one tensor at a time (cast to each parameter's dtype and device).

    Keys are transformers' with ``from_transformers`` (renamed by ``key_from_transformers``). With a
    tied head either the embedding or lm_head.weight may be absent. An embedding or untied lm_head.weight
    of exactly ``config.vocab_size`` rows fills the first rows of the padded parameter; the padded rows
    are set to zero.

    Raises:
        KeyError: missing or unexpected keys (both lists named).
        ValueError: a shape mismatch: the key, the checkpoint's and the model's shapes and the
            config.json fields that decide it, for every mismatching key (the first 8 listed).
    """
    config = model.config
    rename = key_from_transformers if from_transformers else (lambda k: k)
    file_shapes = weight_shapes(weights)
    params = model.state_dict(keep_vars=True)
    mapping: dict[str, str] = {}
    unexpected: list[str] = []
    for file_key in file_shapes:
        ours = rename(file_key)
        if ours in params and ours not in mapping.values():
            mapping[file_key] = ours
        else:
            unexpected.append(file_key)
    got = set(mapping.values())
    missing = sorted(set(params) - got)
    if config.tie_embeddings and got & {EMBEDDING, LM_HEAD}:
        missing = [k for k in missing if k not in (EMBEDDING, LM_HEAD)]  # one tensor, either name
    where = f"{weights.source} ({weights.layout})"
    if missing or unexpected:
        hint = ""
        if not from_transformers and any(k.startswith("backbone.embeddings.") for k in unexpected):
            hint = (
                ". These are transformers' names with a mamba-ssm config.json: keep transformers' "
                "config.json (model_type 'mamba' / 'mamba2') next to them and from_pretrained converts "
                "both"
            )
        raise KeyError(
            f"{where}: the weights do not match MambaLMHeadModel({config}): missing keys: "
            f"{_show(missing)}; unexpected keys: {_show(sorted(unexpected))}{hint}"
        )
    padded_rows: dict[str, int] = {}
    problems: list[str] = []
    for file_key, ours in mapping.items():
        have, want = tuple(file_shapes[file_key]), tuple(params[ours].shape)
        if have == want:
            continue
        if ours in VOCAB_KEYS and len(have) == 2 and have == (config.vocab_size, want[1]):
            padded_rows[ours] = have[0]
            continue
        problems.append(
            f"{file_key}: checkpoint {list(have)}, model {list(want)}; likely cause: "
            f"{_likely_cause(ours, have, want, config)}"
        )
    if problems:
        raise ValueError(
            f"{where}: {len(problems)} tensor shape(s) do not match MambaLMHeadModel({config}):\n  "
            + "\n  ".join(problems[:8])
            + (f"\n  ... ({len(problems)} in all)" if len(problems) > 8 else "")
        )
    with torch.no_grad():
        for file_key, tensor in iter_weights(weights):
            ours = mapping[file_key]
            target = params[ours]
            rows = padded_rows.get(ours)
            if rows is None:
                target.copy_(tensor)
            else:
                target[:rows].copy_(tensor)
                target[rows:].zero_()
            del tensor
