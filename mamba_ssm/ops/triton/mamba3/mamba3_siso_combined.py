"""Mamba-3 SISO over whole sequences, at upstream's path ``mamba_ssm.ops.triton.mamba3.mamba3_siso_combined``
(flash-linear-attention's Mamba-3 imports it from here). The math: :mod:`mamba_ssm._families.mamba3.torch_impl`."""

from __future__ import annotations

from typing import Literal, Tuple, cast, overload

from torch import Tensor

from mamba_ssm._families.mamba3.torch_impl import Mamba3States
from mamba_ssm.ops.triton.mamba3._args import Checker, InputStates, run_chunked

__all__ = ["mamba3_siso_combined"]

#: (out, angle_state, ssm_state, k_state, v_state): the result with ``return_final_states``.
_WithStates = Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]


@overload
def mamba3_siso_combined(
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
    chunk_size: int = 64,
    return_final_states: Literal[False] = False,
    cu_seqlens: Tensor | None = None,
    seq_idx: Tensor | None = None,
) -> Tensor: ...


@overload
def mamba3_siso_combined(
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
    chunk_size: int = 64,
    *,
    return_final_states: Literal[True],
    cu_seqlens: Tensor | None = None,
    seq_idx: Tensor | None = None,
) -> _WithStates: ...


@overload
def mamba3_siso_combined(
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
    chunk_size: int = 64,
    return_final_states: bool = False,
    cu_seqlens: Tensor | None = None,
    seq_idx: Tensor | None = None,
) -> Tensor | _WithStates: ...


def mamba3_siso_combined(
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
    chunk_size: int = 64,
    return_final_states: bool = False,
    cu_seqlens: Tensor | None = None,
    seq_idx: Tensor | None = None,
) -> Tensor | _WithStates:
    """Mamba-3 SISO scan, chunked, differentiable (every input, the input states included).

    Per head h (group g = h // (nheads / ngroups)), with lambda = sigmoid(Trap), alpha = exp(ADT):
    theta_t = (theta_{t-1} + pi tanh(Angles_t) DT_t) mod 2 pi; q_t = rot(Q_t + Q_bias, theta_t) and
    k_t = rot(K_t + K_bias, theta_t), rotating adjacent pairs (2i, 2i+1) for i < num_angles;
    h_t = alpha_t h_{t-1} + (1 - lambda_t) DT_t alpha_t V_{t-1} k_{t-1}^T + lambda_t DT_t V_t k_t^T;
    out_t = (h_t q_t + D V_t) * silu(Z_t) (arXiv:2603.15569; see :mod:`mamba_ssm._families.mamba3.torch_impl`).

    Args:
        Q, K: (batch, seqlen, ngroups, d_state) (C and B after their RMSNorm).
        V: (batch, seqlen, nheads, headdim) (x); ngroups must divide nheads.
        ADT, DT, Trap: (batch, nheads, seqlen): A * dt (<= 0), dt (> 0), the trapezoid logit (before
            the sigmoid).
        Q_bias, K_bias: (nheads, d_state).
        Angles: (batch, seqlen, nheads, num_angles) before tanh, 1 <= num_angles <= d_state // 2.
        D: (nheads,) or None. Z: (batch, seqlen, nheads, headdim) or None (no gate).
        Input_States: None, or (angle (S, nheads, num_angles), ssm (S, nheads, headdim, d_state),
            k (S, nheads, d_state) (the last rotated, biased key), v (S, nheads, headdim)); S = batch,
            or the number of sequences with cu_seqlens (each packed sequence starts from its own).
        chunk_size: tokens per chunk (64).
        return_final_states: also return the states after each row's (sequence's) last token.
        cu_seqlens: (num_seqs + 1,) int cumulative lengths of sequences packed in a batch of one, the
            rule of :mod:`mamba_ssm._families.packing`: 0 first, non-decreasing, at most seqlen
            last; the rows after the last entry are padding (seq_idx -1); an empty sequence (two equal
            entries) ends in its input state (zero without Input_States).
        seq_idx: (batch, seqlen) int ids of packed sequences (an extension of upstream's signature;
            derived from cu_seqlens when not given): nothing crosses from one id to the next (the
            state, the angle sum theta, the trapezoid's term of the previous token); a negative id
            marks a padding token.

    Returns:
        out (batch, seqlen, nheads, headdim) in V's dtype; its rows at padding tokens are 0 (the whole
        row, D V and the Z gate included), and padding reads and writes no state (nothing flows back
        to a padding token's inputs: their gradients are 0). With ``return_final_states`` the tuple
        (out, angle_state (S, nheads, num_angles), ssm_state (S, nheads, headdim, d_state),
        k_state (S, nheads, d_state), v_state (S, nheads, headdim)), states in float32 (float64 for
        float64 V) except v_state (V's dtype); without cu_seqlens a row that ends in padding has zero
        states.

    Computed in float32 (float64 for float64 inputs): on CUDA/ROCm devices by the Triton kernels
    (:mod:`mamba_ssm._families.mamba3.triton_kernels`), elsewhere and for the calls they do not take by the
    PyTorch path (``mamba_ssm._dispatch`` op ``mamba3_siso``; doctor says which).

    Raises:
        TypeError / ValueError: a missing or non-float tensor, a wrong shape, bad cu_seqlens (not
            1-D integer, not from 0, decreasing, past seqlen, or with batch > 1: the message shows the
            values) or chunk_size (the message names the argument and the expected shape).
    """
    c = Checker("mamba3_siso_combined")
    c.tensor("Q", Q, ("batch", "seqlen", "ngroups", "d_state"))
    c.tensor("K", K, ("batch", "seqlen", "ngroups", "d_state"))
    c.tensor("V", V, ("batch", "seqlen", "nheads", "headdim"))
    c.divides("ngroups", "nheads")
    for name, t in (("ADT", ADT), ("DT", DT), ("Trap", Trap)):
        c.tensor(name, t, ("batch", "nheads", "seqlen"))
    c.tensor("Q_bias", Q_bias, ("nheads", "d_state"))
    c.tensor("K_bias", K_bias, ("nheads", "d_state"))
    c.tensor("Angles", Angles, ("batch", "seqlen", "nheads", "num_angles"))
    c.angles(c.sizes["d_state"], "adjacent")
    c.tensor("D", D, ("nheads",), optional=True)
    c.tensor("Z", Z, ("batch", "seqlen", "nheads", "headdim"), optional=True)
    c.chunk_size(chunk_size)
    rows, cu_seqlens, seq_idx = c.packing(cu_seqlens, seq_idx, V.device)
    states = c.states(Input_States, rows, mimo=False)
    res = run_chunked(
        "mamba3_siso",
        {
            "q": Q.unsqueeze(2),
            "k": K.unsqueeze(2),
            "v": V,
            "adt": ADT,
            "dt": DT,
            "trap": Trap,
            "q_bias": Q_bias.unsqueeze(1),
            "k_bias": K_bias.unsqueeze(1),
            "angles": Angles,
            "pairing": "adjacent",
            "chunk_size": chunk_size,
            "D": D,
            "z": Z,
            "initial_states": states,
            "seq_idx": seq_idx,
            "cu_seqlens": cu_seqlens,
            "return_final_states": return_final_states,
        },
    )
    # run_chunked returns out alone, or (out, states) with return_final_states.
    if not return_final_states:
        return cast(Tensor, res)[:, :, 0]
    out, final = cast(Tuple[Tensor, Mamba3States], res)
    return out[:, :, 0], final.angle, final.ssm, final.k[:, 0], final.v
