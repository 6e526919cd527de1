"""One Mamba-3 SISO decode step at upstream's path ``mamba_ssm.ops.triton.mamba3.mamba3_siso_step``
(upstream's arguments and results; it runs :func:`.mamba3_step.mamba3_step`)."""

from __future__ import annotations

import torch
from torch import Tensor

from mamba_ssm.ops.triton.mamba3._args import InputStates
from mamba_ssm.ops.triton.mamba3.mamba3_step import mamba3_step

__all__ = ["mamba3_siso_step"]


def mamba3_siso_step(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    ADT: Tensor,
    DT: Tensor,
    Trap: Tensor,
    Q_bias: Tensor,
    K_bias: Tensor,
    Angles: Tensor,
    D: Tensor | None = None,
    Z: Tensor | None = None,
    Input_States: InputStates | None = None,
) -> tuple[Tensor, list[Tensor]]:
    """The next token of a Mamba-3 SISO layer; the states are returned, not written in place.

    Args:
        Q, K: (batch, ngroups, d_state). V: (batch, nheads, headdim). ADT, DT, Trap: (batch, nheads)
            (Trap before the sigmoid). Q_bias, K_bias: (nheads, d_state). Angles: (batch, nheads,
            num_angles) before tanh. D: (nheads,) or None. Z: (batch, nheads, headdim) or None.
        Input_States: (angle (batch, nheads, num_angles), ssm (batch, nheads, headdim, d_state),
            k (batch, nheads, d_state), v (batch, nheads, headdim)); None: zeros (a first token).

    Returns:
        (out (batch, nheads, headdim) in V's dtype, [angle, ssm, k, v]) with the new states (angle,
        ssm, k in float32, float64 for float64 V; v is V), as upstream.

    Raises:
        TypeError / ValueError: a wrong tensor or shape (named).
    """
    if Input_States is None:
        b, h, p = V.shape
        n, a = Q.shape[-1], Angles.shape[-1]
        f = torch.float64 if V.dtype == torch.float64 else torch.float32
        Input_States = (
            V.new_zeros(b, h, a, dtype=f),
            V.new_zeros(b, h, p, n, dtype=f),
            V.new_zeros(b, h, n, dtype=f),
            V.new_zeros(b, h, p),
        )
    if not isinstance(Input_States, (tuple, list)) or len(Input_States) != 4:
        raise ValueError("mamba3_siso_step: Input_States must be (angle_state, ssm_state, k_state, v_state)")
    angle, ssm, k_state, v_state = Input_States
    if not isinstance(k_state, torch.Tensor) or k_state.dim() != 3:
        raise ValueError(
            f"mamba3_siso_step: Input_States[2] (k) must have shape (batch, nheads, d_state), got "
            f"{tuple(getattr(k_state, 'shape', ()))}"
        )
    for name, t in (("Q", Q), ("K", K), ("Q_bias", Q_bias), ("K_bias", K_bias)):
        if not isinstance(t, torch.Tensor) or t.dim() != (2 if "bias" in name else 3):
            raise ValueError(
                f"mamba3_siso_step: {name} must have shape "
                f"{'(nheads, d_state)' if 'bias' in name else '(batch, ngroups, d_state)'}, got "
                f"{tuple(getattr(t, 'shape', ()))}"
            )
    out, new = mamba3_step(
        Q.unsqueeze(1),
        K.unsqueeze(1),
        V,
        ADT,
        DT,
        Trap,
        Q_bias.unsqueeze(1),
        K_bias.unsqueeze(1),
        Angles,
        (angle, ssm, k_state.unsqueeze(1), v_state),
        D=D,
        Z=Z,
    )
    return out, [new.angle, new.ssm, new.k[:, 0], new.v]
