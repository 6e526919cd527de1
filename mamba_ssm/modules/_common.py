"""Pieces shared by the Mamba blocks (:mod:`.mamba_simple`, :mod:`.mamba2`, :mod:`.mamba2_simple`)."""

from __future__ import annotations

import math
import numbers
from typing import TypedDict

import torch
from torch import nn
from torch.types import Device


class FactoryKwargs(TypedDict):
    """The ``device`` / ``dtype`` pair a block passes to every parameter it creates (``**factory_kwargs``)."""

    device: Device
    dtype: torch.dtype | None


def set_flag(obj: torch.Tensor | nn.Module, flag: str) -> None:
    """Set the boolean attribute ``flag`` on a parameter or module (upstream's markers, read with
    ``getattr(obj, flag, False)``): ``_no_weight_decay`` (exclude a parameter from weight decay),
    ``_no_reinit`` (keep a bias's initialisation when the model re-initialises its weights),
    ``_residual_out`` (a Linear feeding the residual stream, rescaled at initialisation)."""
    setattr(obj, flag, True)


def inverse_softplus_dt(
    size: int,
    dt_min: float,
    dt_max: float,
    dt_init_floor: float,
    device: Device = None,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """The initial dt bias of Mamba (arXiv:2312.00752, section 3.6 / appendix): dt log-uniform in
    [dt_min, dt_max], floored at dt_init_floor, returned as its inverse softplus (so that
    softplus(bias) == dt). Returns a (size,) tensor in ``dtype`` (torch's default float dtype when None)."""
    dt = torch.exp(
        torch.rand(size, device=device, dtype=dtype) * (math.log(dt_max) - math.log(dt_min))
        + math.log(dt_min)
    ).clamp(min=dt_init_floor)
    return dt + torch.log(-torch.expm1(-dt))


def check_sequence_input(where: str, x: torch.Tensor, d_model: int) -> None:
    """Raise ValueError naming ``where`` unless x is (batch, seqlen, d_model)."""
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(
            f"{where}: the input must have shape (batch, seqlen, d_model={d_model}), got {tuple(x.shape)}"
        )


# Upstream's defaults, named in the error so the fix is concrete.
_SIZE_HINTS = {
    "d_model": "the model width, e.g. d_model=768",
    "d_state": "the SSM state size, e.g. d_state=16",
    "d_conv": "the causal conv width, e.g. d_conv=4",
    "headdim": "the SSD head size, e.g. headdim=64",
}


def check_positive_sizes(where: str, **sizes: object) -> None:
    """Raise ValueError naming ``where``, the size and its value unless every given size is an integer >= 1.

    A zero or negative d_model / d_state / d_conv otherwise surfaces later as an unrelated torch error
    ("groups must be a positive integer", a oneDNN convolution failure). ``bool`` is not accepted.
    """
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(
                f"{where}: {name}={value!r} must be a positive integer ({_SIZE_HINTS.get(name, name)})"
            )
