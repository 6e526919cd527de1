"""One Mamba-3 decode step, SISO or MIMO (the op ``mamba3_step`` of ``mamba_ssm._dispatch``: a Triton kernel
on CUDA/ROCm devices, the PyTorch path elsewhere); pure: the new states are returned, nothing is written
in place. The math: :func:`mamba_ssm._families.mamba3.torch_impl.mamba3_step_torch`."""

from __future__ import annotations

from torch import Tensor

from mamba_ssm._families.mamba3.torch_impl import Mamba3States
from mamba_ssm.ops.triton.mamba3._args import Checker, InputStates, run_step

__all__ = ["mamba3_step"]


def mamba3_step(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    ADT: Tensor,
    DT: Tensor,
    Trap: Tensor,
    Q_bias: Tensor,
    K_bias: Tensor,
    Angles: Tensor,
    Input_States: InputStates,
    D: Tensor | None = None,
    Z: Tensor | None = None,
    MIMO_V: Tensor | None = None,
    MIMO_Z: Tensor | None = None,
    MIMO_Out: Tensor | None = None,
    rotary_pairing: str = "adjacent",
    outproj_norm_weight: Tensor | None = None,
    outproj_norm_eps: float = 1e-5,
) -> tuple[Tensor, Mamba3States]:
    """The next token of a Mamba-3 layer from its cached states.

    theta' = (theta + pi tanh(Angles) DT) mod 2 pi; q_r, k_r rotated by theta'; with
    lambda = sigmoid(Trap), alpha = exp(ADT): h' = alpha h + (1 - lambda) DT alpha sum_r x_prev,r
    k_prev,r^T + lambda DT sum_r x_r k_r^T (x_r = V * MIMO_V[:, r], x_prev from the cached v);
    y_r = h' q_r + D x_r, then the gate (and norm) and the MIMO_Out sum as :func:`mamba3_mimo`.

    Args:
        Q, K: (batch, mimo_rank, ngroups, d_state) (mimo_rank 1 for SISO). V: (batch, nheads, headdim).
        ADT, DT, Trap: (batch, nheads). Q_bias, K_bias: (nheads, mimo_rank, d_state).
        Angles: (batch, nheads, num_angles) before tanh.
        Input_States: (angle (batch, nheads, num_angles), ssm (batch, nheads, headdim, d_state),
            k (batch, mimo_rank, nheads, d_state), v (batch, nheads, headdim)).
        D: (nheads,) or None. Z: (batch, nheads, headdim) or None.
        MIMO_V, MIMO_Z, MIMO_Out: (nheads, mimo_rank, headdim) or None (SISO: all None).
        rotary_pairing: "adjacent" (SISO's (2i, 2i+1)) or "halves" (MIMO's (i, i + d_state/2)).
        outproj_norm_weight: (nheads * headdim,) or None: the head-wise RMSNorm before the gate.

    Returns:
        (out, states): out in V's dtype, (batch, nheads, headdim), except (batch, mimo_rank, nheads,
        headdim) when MIMO_V is given without MIMO_Out; states a
        :class:`~mamba_ssm._families.mamba3.torch_impl.Mamba3States` (angle, ssm, k in float32,
        float64 for float64 V; v is V).

    Raises:
        TypeError / ValueError: a wrong tensor or shape (named).
    """
    c = Checker("mamba3_step")
    c.tensor("Q", Q, ("batch", "mimo_rank", "ngroups", "d_state"))
    c.tensor("K", K, ("batch", "mimo_rank", "ngroups", "d_state"))
    c.tensor("V", V, ("batch", "nheads", "headdim"))
    c.divides("ngroups", "nheads")
    t: Tensor | None
    for name, t in (("ADT", ADT), ("DT", DT), ("Trap", Trap)):
        c.tensor(name, t, ("batch", "nheads"))
    c.tensor("Q_bias", Q_bias, ("nheads", "mimo_rank", "d_state"))
    c.tensor("K_bias", K_bias, ("nheads", "mimo_rank", "d_state"))
    c.tensor("Angles", Angles, ("batch", "nheads", "num_angles"))
    if rotary_pairing not in ("adjacent", "halves"):
        raise ValueError(
            f"mamba3_step: rotary_pairing must be 'adjacent' or 'halves', got {rotary_pairing!r}"
        )
    c.angles(c.sizes["d_state"], rotary_pairing)
    c.tensor("D", D, ("nheads",), optional=True)
    c.tensor("Z", Z, ("batch", "nheads", "headdim"), optional=True)
    for name, t in (("MIMO_V", MIMO_V), ("MIMO_Z", MIMO_Z), ("MIMO_Out", MIMO_Out)):
        c.tensor(name, t, ("nheads", "mimo_rank", "headdim"), optional=True)
    norm_weight = None
    if outproj_norm_weight is not None:
        h, p = c.sizes["nheads"], c.sizes["headdim"]
        if outproj_norm_weight.numel() != h * p:
            raise ValueError(
                f"mamba3_step: outproj_norm_weight must have nheads * headdim = {h * p} entries, got "
                f"shape {tuple(outproj_norm_weight.shape)}"
            )
        norm_weight = outproj_norm_weight.reshape(h, p)
    states = c.states(Input_States, c.sizes["batch"], mimo=True)
    if states is None:
        raise TypeError("mamba3_step: Input_States is required (zeros before the first token)")
    out, new = run_step(
        {
            "q": Q,
            "k": K,
            "v": V,
            "adt": ADT,
            "dt": DT,
            "trap": Trap,
            "q_bias": Q_bias,
            "k_bias": K_bias,
            "angles": Angles,
            "states": states,
            "pairing": rotary_pairing,
            "D": D,
            "z": Z,
            "mimo_x": MIMO_V,
            "mimo_z": MIMO_Z,
            "mimo_o": MIMO_Out,
            "norm_weight": norm_weight,
            "norm_eps": outproj_norm_eps,
        }
    )
    if MIMO_Out is None and MIMO_V is None:
        out = out[:, 0]
    return out, new
