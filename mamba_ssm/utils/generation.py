"""Decoding state shared by the layers of a model during generation (upstream's
``mamba_ssm.utils.generation.InferenceParams``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import torch

__all__ = ["InferenceParams"]


@dataclass
class InferenceParams:
    """Inference parameters passed to each layer's ``forward`` while generating.

    Attributes:
        max_seqlen: the longest sequence (prompt + generated tokens) the caches are for.
        max_batch_size: the largest batch the caches are for.
        seqlen_offset: tokens already processed (0 for the prompt; then the decode position).
        batch_size_offset: first batch row of this call inside the caches.
        key_value_memory_dict: per ``layer_idx`` cache; Mamba stores ``(conv_state, ssm_state)``.
        lengths_per_sample: (batch,) int tokens per sample, or None.
    """

    max_seqlen: int
    max_batch_size: int
    seqlen_offset: int = 0
    batch_size_offset: int = 0
    key_value_memory_dict: dict = field(default_factory=dict)
    lengths_per_sample: Optional[torch.Tensor] = None

    def reset(self, max_seqlen, max_batch_size):
        """Start a new generation with these limits (the caches are kept, the offsets zeroed)."""
        self.max_seqlen = max_seqlen
        self.max_batch_size = max_batch_size
        self.seqlen_offset = 0
        if self.lengths_per_sample is not None:
            self.lengths_per_sample.zero_()
