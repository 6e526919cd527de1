"""Mamba-3 MIMO over whole sequences, at upstream's path ``mamba_ssm.ops.tilelang.mamba3.mamba3_mimo``
(the name is upstream's; this is this package's implementation, without TileLang). The math:
:mod:`mamba_ssm._families.mamba3.torch_impl`."""

from __future__ import annotations

from typing import Literal, Tuple, cast, overload

import torch
from torch import Tensor

from mamba_ssm._families.mamba3.torch_impl import Mamba3States
from mamba_ssm.ops.triton.mamba3._args import Checker, InputStates, run_chunked

__all__ = ["mamba3_mimo"]

#: (out, angle_state, ssm_state, k_state, v_state): the result with ``return_state``.
_WithStates = Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]


@overload
def mamba3_mimo(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    ADT: Tensor,
    DT: Tensor,
    Trap: Tensor,
    Q_bias: Tensor,
    K_bias: Tensor,
    MIMO_V: Tensor,
    MIMO_Z: Tensor | None,
    MIMO_Out: Tensor | None,
    Angles: Tensor,
    D: Tensor | None,
    Z: Tensor | None,
    chunk_size: int,
    rotary_dim_divisor: int,
    dtype: torch.dtype,
    return_state: Literal[False] = False,
    cu_seqlens: Tensor | None = None,
    fuse_pregate_headwise_rms_norm: bool = False,
    outproj_norm_weight: Tensor | None = None,
    outproj_norm_eps: float = 1e-5,
    Input_States: InputStates | None = None,
    seq_idx: Tensor | None = None,
) -> Tensor: ...


@overload
def mamba3_mimo(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    ADT: Tensor,
    DT: Tensor,
    Trap: Tensor,
    Q_bias: Tensor,
    K_bias: Tensor,
    MIMO_V: Tensor,
    MIMO_Z: Tensor | None,
    MIMO_Out: Tensor | None,
    Angles: Tensor,
    D: Tensor | None,
    Z: Tensor | None,
    chunk_size: int,
    rotary_dim_divisor: int,
    dtype: torch.dtype,
    return_state: Literal[True],
    cu_seqlens: Tensor | None = None,
    fuse_pregate_headwise_rms_norm: bool = False,
    outproj_norm_weight: Tensor | None = None,
    outproj_norm_eps: float = 1e-5,
    Input_States: InputStates | None = None,
    seq_idx: Tensor | None = None,
) -> _WithStates: ...


@overload
def mamba3_mimo(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    ADT: Tensor,
    DT: Tensor,
    Trap: Tensor,
    Q_bias: Tensor,
    K_bias: Tensor,
    MIMO_V: Tensor,
    MIMO_Z: Tensor | None,
    MIMO_Out: Tensor | None,
    Angles: Tensor,
    D: Tensor | None,
    Z: Tensor | None,
    chunk_size: int,
    rotary_dim_divisor: int,
    dtype: torch.dtype,
    return_state: bool = False,
    cu_seqlens: Tensor | None = None,
    fuse_pregate_headwise_rms_norm: bool = False,
    outproj_norm_weight: Tensor | None = None,
    outproj_norm_eps: float = 1e-5,
    Input_States: InputStates | None = None,
    seq_idx: Tensor | None = None,
) -> Tensor | _WithStates: ...


def mamba3_mimo(
    Q: Tensor,
    K: Tensor,
    V: Tensor,
    ADT: Tensor,
    DT: Tensor,
    Trap: Tensor,
    Q_bias: Tensor,
    K_bias: Tensor,
    MIMO_V: Tensor,
    MIMO_Z: Tensor | None,
    MIMO_Out: Tensor | None,
    Angles: Tensor,
    D: Tensor | None,
    Z: Tensor | None,
    chunk_size: int,
    rotary_dim_divisor: int,
    dtype: torch.dtype,
    return_state: bool = False,
    cu_seqlens: Tensor | None = None,
    fuse_pregate_headwise_rms_norm: bool = False,
    outproj_norm_weight: Tensor | None = None,
    outproj_norm_eps: float = 1e-5,
    Input_States: InputStates | None = None,
    seq_idx: Tensor | None = None,
) -> Tensor | _WithStates:
    """Mamba-3 MIMO scan, chunked, differentiable.

    R ranks per token share one state per head: with x_r = V * MIMO_V[:, r], q_r = rot(Q_r + Q_bias_r,
    theta_t) and k_r = rot(K_r + K_bias_r, theta_t) (entry i paired with i + d_state/2, i < num_angles),
    h_t = alpha_t h_{t-1} + (1 - lambda_t) DT_t alpha_t sum_r x_{t-1,r} k_{t-1,r}^T
    + lambda_t DT_t sum_r x_{t,r} k_{t,r}^T, y_r = h_t q_r + D x_r, gated by silu(Z * MIMO_Z[:, r])
    (after a head-wise RMSNorm times ``outproj_norm_weight`` with ``fuse_pregate_headwise_rms_norm``),
    out = sum_r MIMO_Out[:, r] y_r (arXiv:2603.15569; see :mod:`mamba_ssm._families.mamba3.torch_impl`).

    Args:
        Q, K: (batch, seqlen, mimo_rank, ngroups, d_state). V: (batch, seqlen, nheads, headdim).
        ADT, DT, Trap: (batch, nheads, seqlen) (Trap before the sigmoid).
        Q_bias, K_bias: (nheads, mimo_rank, d_state). MIMO_V, MIMO_Z, MIMO_Out: (nheads, mimo_rank,
            headdim); MIMO_Out None: the ranks' outputs are returned unreduced.
        Angles: (batch, seqlen, nheads, num_angles) before tanh, num_angles <= d_state // 2.
        D: (nheads,) or None. Z: (batch, seqlen, nheads, headdim) or None.
        chunk_size: tokens per chunk (upstream recommends 64 / mimo_rank).
        rotary_dim_divisor: 2 (rope_fraction 1.0) or 4 (0.5); checked, the angles' count decides.
        dtype: the output dtype (e.g. V.dtype); the computation is float32 (float64 for float64 V).
        return_state: also return the states after each row's (sequence's) last token.
        cu_seqlens: (num_seqs + 1,) int cumulative lengths of sequences packed in a batch of one, the
            rule of :mod:`mamba_ssm._families.packing`: 0 first, non-decreasing, at most seqlen
            last; the rows after the last entry are padding (seq_idx -1); an empty sequence (two equal
            entries) ends in its input state (zero without Input_States).
        fuse_pregate_headwise_rms_norm, outproj_norm_weight ((nheads * headdim,) or (nheads, headdim)),
            outproj_norm_eps: the RMSNorm over headdim of each rank's y before the gate (needs Z,
            MIMO_Z and MIMO_Out, as upstream).
        Input_States, seq_idx: extensions of upstream's signature: initial states (angle (S, nheads,
            num_angles), ssm (S, nheads, headdim, d_state), k (S, mimo_rank, nheads, d_state),
            v (S, nheads, headdim)) and packed-sequence ids (batch, seqlen) (derived from cu_seqlens
            when not given; nothing crosses from one id to the next: the state, the angle sum, the
            trapezoid's term of the previous token; a negative id marks a padding token).

    Returns:
        out ((batch, seqlen, nheads, headdim), or (batch, seqlen, mimo_rank, nheads, headdim) without
        MIMO_Out) in ``dtype``; its rows at padding tokens are 0 (the whole row: D, the gate, the norm
        and MIMO_Out included), and padding reads and writes no state (the gradients of a padding
        token's inputs are 0). With ``return_state`` the tuple (out, angle_state, ssm_state (S,
        nheads, headdim, d_state), k_state (S, mimo_rank, nheads, d_state), v_state (S, nheads,
        headdim)), differentiable (upstream's are not); without cu_seqlens a row that ends in padding
        has zero states.

    Runs the Triton kernels on CUDA/ROCm devices (ranks that are powers of two up to 16), the PyTorch
    path elsewhere (``mamba_ssm._dispatch`` op ``mamba3_mimo``; doctor says which).

    Raises:
        TypeError / ValueError: a missing or non-float tensor, a wrong shape or argument (named); bad
            cu_seqlens (not 1-D integer, not from 0, decreasing, past seqlen, or with batch > 1: the
            message shows the values).
    """
    c = Checker("mamba3_mimo")
    c.tensor("Q", Q, ("batch", "seqlen", "mimo_rank", "ngroups", "d_state"))
    c.tensor("K", K, ("batch", "seqlen", "mimo_rank", "ngroups", "d_state"))
    c.tensor("V", V, ("batch", "seqlen", "nheads", "headdim"))
    c.divides("ngroups", "nheads")
    for name, t in (("ADT", ADT), ("DT", DT), ("Trap", Trap)):
        c.tensor(name, t, ("batch", "nheads", "seqlen"))
    c.tensor("Q_bias", Q_bias, ("nheads", "mimo_rank", "d_state"))
    c.tensor("K_bias", K_bias, ("nheads", "mimo_rank", "d_state"))
    c.tensor("MIMO_V", MIMO_V, ("nheads", "mimo_rank", "headdim"))
    c.tensor("MIMO_Z", MIMO_Z, ("nheads", "mimo_rank", "headdim"), optional=True)
    c.tensor("MIMO_Out", MIMO_Out, ("nheads", "mimo_rank", "headdim"), optional=True)
    c.tensor("Angles", Angles, ("batch", "seqlen", "nheads", "num_angles"))
    if rotary_dim_divisor not in (2, 4):
        raise ValueError(
            f"mamba3_mimo: rotary_dim_divisor must be 2 (rope_fraction 1.0) or 4 (0.5), got {rotary_dim_divisor!r}"
        )
    c.angles(c.sizes["d_state"], "halves")
    c.tensor("D", D, ("nheads",), optional=True)
    c.tensor("Z", Z, ("batch", "seqlen", "nheads", "headdim"), optional=True)
    c.chunk_size(chunk_size)
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"mamba3_mimo: dtype must be a floating torch.dtype (e.g. V.dtype), got {dtype!r}")
    norm_weight = None
    if fuse_pregate_headwise_rms_norm:
        if MIMO_Out is None or Z is None or MIMO_Z is None or outproj_norm_weight is None:
            raise ValueError(
                "mamba3_mimo: fuse_pregate_headwise_rms_norm=True needs MIMO_Out, Z, MIMO_Z and "
                "outproj_norm_weight"
            )
        h, p = c.sizes["nheads"], c.sizes["headdim"]
        if outproj_norm_weight.numel() != h * p:
            raise ValueError(
                f"mamba3_mimo: outproj_norm_weight must have nheads * headdim = {h * p} entries, got "
                f"shape {tuple(outproj_norm_weight.shape)}"
            )
        norm_weight = outproj_norm_weight.reshape(h, p)
    rows, cu_seqlens, seq_idx = c.packing(cu_seqlens, seq_idx, V.device)
    states = c.states(Input_States, rows, mimo=True)
    res = run_chunked(
        "mamba3_mimo",
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
            "pairing": "halves",
            "chunk_size": chunk_size,
            "D": D,
            "z": Z,
            "mimo_x": MIMO_V,
            "mimo_z": MIMO_Z,
            "mimo_o": MIMO_Out,
            "norm_weight": norm_weight,
            "norm_eps": outproj_norm_eps,
            "initial_states": states,
            "seq_idx": seq_idx,
            "cu_seqlens": cu_seqlens,
            "return_final_states": return_state,
        },
    )
    # run_chunked returns out alone, or (out, states) with return_state.
    if not return_state:
        return cast(Tensor, res).to(dtype)
    out, final = cast(Tuple[Tensor, Mamba3States], res)
    return (out.to(dtype), *final)
