"""The gated feed-forward layer of hybrid Mamba models (upstream's ``mamba_ssm.modules.mlp.GatedMLP``).

Math (Shazeer, *GLU Variants Improve Transformer*, arXiv:2002.05202, SwiGLU with SiLU by default):

    fc1(x) = [u, g]   (each hidden_features wide)
    out    = fc2(u * activation(g))

Parameters (upstream's names and shapes): ``fc1.weight`` (2 * hidden_features, in_features),
``fc2.weight`` (out_features, hidden_features), plus biases with ``bias=True``.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.types import Device

from mamba_ssm.modules._common import FactoryKwargs

__all__ = ["GatedMLP"]


class GatedMLP(nn.Module):
    """Gated MLP: (..., in_features) -> (..., out_features).

    Args:
        in_features: input width.
        hidden_features: width of the gated hidden layer (default ``8 * in_features / 3``), rounded up
            to a multiple of ``multiple_of``.
        out_features: output width (default ``in_features``).
        activation: the gate's nonlinearity (default ``F.silu``).
        bias: fc1 and fc2 have biases.
        multiple_of: the hidden width is rounded up to a multiple of this (128).
        device, dtype: of the parameters.

    Raises:
        ValueError: a width or ``multiple_of`` that is not a positive integer.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int | None = None,
        out_features: int | None = None,
        activation: Callable[[torch.Tensor], torch.Tensor] = F.silu,
        bias: bool = False,
        multiple_of: int = 128,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        factory_kwargs: FactoryKwargs = {"device": device, "dtype": dtype}
        super().__init__()
        out_features = out_features if out_features is not None else in_features
        hidden_features = hidden_features if hidden_features is not None else int(8 * in_features / 3)
        for name, value in (
            ("in_features", in_features),
            ("hidden_features", hidden_features),
            ("out_features", out_features),
            ("multiple_of", multiple_of),
        ):
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"GatedMLP: {name} must be a positive int, got {value!r}")
        hidden_features = -(-hidden_features // multiple_of) * multiple_of
        self.hidden_features = hidden_features
        self.fc1 = nn.Linear(in_features, 2 * hidden_features, bias=bias, **factory_kwargs)
        self.activation = activation
        self.fc2 = nn.Linear(hidden_features, out_features, bias=bias, **factory_kwargs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x: (..., in_features) -> (..., out_features), x's dtype."""
        up, gate = self.fc1(x).chunk(2, dim=-1)
        out: torch.Tensor = self.fc2(up * self.activation(gate))
        return out
