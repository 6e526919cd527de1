"""The configuration of a Mamba language model (upstream's ``mamba_ssm.models.config_mamba.MambaConfig``).

A ``config.json`` next to a checkpoint holds these fields; fields it lacks take the defaults below (the
hub's Mamba-1 configs hold only d_model, n_layer, vocab_size, ssm_cfg, rms_norm, residual_in_fp32,
fused_add_norm and pad_vocab_size_multiple).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["HasMambaConfig", "MambaConfig"]


@dataclass
class MambaConfig:
    """Fields (upstream's names and defaults):

    d_model: width (2560). d_intermediate: width of a GatedMLP after each mixer (0: none).
    n_layer: number of blocks (64). vocab_size: tokens (50277), rounded up to a multiple of
    pad_vocab_size_multiple (8) for the embedding and lm_head.
    ssm_cfg: keyword arguments of the Mamba layer, with ``"layer": "Mamba1"`` (default), ``"Mamba2"`` or
    ``"Mamba3"``.
    attn_layer_idx: indices of the blocks whose mixer is :class:`~mamba_ssm.modules.mha.MHA` (hybrids),
    attn_cfg: its keyword arguments. rms_norm: RMSNorm (True) or LayerNorm. residual_in_fp32: keep the
    residual stream in float32. fused_add_norm: fuse the residual add and the norm.
    tie_embeddings: lm_head.weight is the embedding's weight.
    """

    d_model: int = 2560
    d_intermediate: int = 0
    n_layer: int = 64
    vocab_size: int = 50277
    # The layers' keyword arguments: JSON values, passed through to the Mamba / MHA constructors.
    ssm_cfg: dict[str, Any] = field(default_factory=dict)
    attn_layer_idx: list[int] = field(default_factory=list)
    attn_cfg: dict[str, Any] = field(default_factory=dict)
    rms_norm: bool = True
    residual_in_fp32: bool = True
    fused_add_norm: bool = True
    pad_vocab_size_multiple: int = 8
    tie_embeddings: bool = True

    @classmethod
    def from_dict(cls, data: object, source: str = "config") -> MambaConfig:
        """A MambaConfig from a ``config.json`` dict; absent fields take the defaults.

        Raises:
            ValueError: data is not a dict, or holds a field MambaConfig does not have (named, with
                ``source`` for the file it came from).
        """
        if not isinstance(data, dict):
            raise ValueError(
                f"{source}: expected a JSON object of MambaConfig fields, got {type(data).__name__}"
            )
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"{source}: unknown MambaConfig field(s) {unknown}; the fields are {sorted(known)}. "
                f"MambaLMHeadModel.from_pretrained converts a transformers config.json when it names its "
                f"model_type ('mamba' or 'mamba2'), which this one does not"
            )
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (what ``save_pretrained`` writes to config.json)."""
        return dataclasses.asdict(self)


class HasMambaConfig(Protocol):
    """A model built from a :class:`MambaConfig` (``MambaLMHeadModel``), as the checkpoint writers and
    readers use it: its ``config`` and its ``state_dict``."""

    config: MambaConfig

    def state_dict(self, *, keep_vars: bool = False) -> Mapping[str, Any]:
        """{name: tensor} of the parameters and buffers (nn.Module's)."""
        ...
