"""Pieces shared by the Mamba blocks (:mod:`.mamba_simple`, :mod:`.mamba2`, :mod:`.mamba2_simple`)."""
from __future__ import annotations

import math

import torch


def inverse_softplus_dt(size, dt_min, dt_max, dt_init_floor, device=None, dtype=None):
    """The initial dt bias of Mamba (arXiv:2312.00752, section 3.6 / appendix): dt log-uniform in
    [dt_min, dt_max], floored at dt_init_floor, returned as its inverse softplus (so that
    softplus(bias) == dt). Returns a (size,) tensor."""
    dt = torch.exp(torch.rand(size, device=device, dtype=dtype) * (math.log(dt_max) - math.log(dt_min))
                   + math.log(dt_min)).clamp(min=dt_init_floor)
    return dt + torch.log(-torch.expm1(-dt))


def check_sequence_input(where, x, d_model):
    """Raise ValueError naming ``where`` unless x is (batch, seqlen, d_model)."""
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"{where}: the input must have shape (batch, seqlen, d_model={d_model}), got "
                         f"{tuple(x.shape)}")
