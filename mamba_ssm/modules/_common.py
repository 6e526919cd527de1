"""Pieces shared by the Mamba blocks (:mod:`.mamba_simple`, :mod:`.mamba2`, :mod:`.mamba2_simple`)."""

from __future__ import annotations

import math
import numbers

import torch


def inverse_softplus_dt(size, dt_min, dt_max, dt_init_floor, device=None, dtype=None):
    """The initial dt bias of Mamba (arXiv:2312.00752, section 3.6 / appendix): dt log-uniform in
    [dt_min, dt_max], floored at dt_init_floor, returned as its inverse softplus (so that
    softplus(bias) == dt). Returns a (size,) tensor."""
    dt = torch.exp(
        torch.rand(size, device=device, dtype=dtype) * (math.log(dt_max) - math.log(dt_min))
        + math.log(dt_min)
    ).clamp(min=dt_init_floor)
    return dt + torch.log(-torch.expm1(-dt))


def check_sequence_input(where, x, d_model):
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


def check_positive_sizes(where, **sizes):
    """Raise ValueError naming ``where``, the size and its value unless every given size is an integer >= 1.

    A zero or negative d_model / d_state / d_conv otherwise surfaces later as an unrelated torch error
    ("groups must be a positive integer", a oneDNN convolution failure). ``bool`` is not accepted.
    """
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(
                f"{where}: {name}={value!r} must be a positive integer ({_SIZE_HINTS.get(name, name)})"
            )
