"""The SSD scan in PyTorch: the stages of :mod:`.torch_impl` composed (differentiable through autograd),
and the PyTorch forms of the calls ``ssd_chunk_scan`` (``mamba_chunk_scan_combined``) and
``ssd_chunk_scan_fwd`` (``_mamba_chunk_scan_combined_fwd``); arguments as those functions take them
(checked by them)."""

from __future__ import annotations

from typing import Optional, Sequence, TypedDict

import torch

from mamba_ssm._families import packing as _packing
from mamba_ssm._families import recompute as _recompute
from mamba_ssm._families.ssd import torch_impl as S

__all__ = [
    "FwdResult",
    "FwdVarlenResult",
    "TorchForward",
    "forward",
    "fwd_result",
    "packing_of",
    "round_states",
    "torch_chunk_scan_combined",
    "torch_chunk_scan_fwd",
]

#: ``_mamba_chunk_scan_combined_fwd``'s result: (out, out_x or None, dt_out, dA_cumsum, states,
#: final_states).
FwdResult = tuple[
    torch.Tensor, Optional[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor
]
#: The same with cu_seqlens, varlen_states last.
FwdVarlenResult = tuple[
    torch.Tensor, Optional[torch.Tensor], torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor
]


class TorchForward(TypedDict):
    """What :func:`forward` returns: ``out`` / ``ypre`` the output after / before the z gate (ypre None
    without z), ``dtp`` / ``cs`` (batch, nheads, nchunks, Q), ``hin`` the states entering the chunks,
    ``final`` and ``varlen`` (None without cu_seqlens), all in the compute dtype."""

    out: torch.Tensor
    ypre: Optional[torch.Tensor]
    dtp: torch.Tensor
    cs: torch.Tensor
    hin: torch.Tensor
    final: torch.Tensor
    varlen: Optional[torch.Tensor]


def round_states(hin: torch.Tensor, state_dtype: Optional[torch.dtype]) -> torch.Tensor:
    """The inter-chunk states materialised in ``state_dtype`` (rounded when it is narrower than the
    compute dtype; upstream's ``state_dtype``)."""
    if state_dtype is not None and torch.finfo(state_dtype).bits < torch.finfo(hin.dtype).bits:
        return hin.to(state_dtype).to(hin.dtype)
    return hin


def forward(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    dt_bias: Optional[torch.Tensor],
    initial_states: Optional[torch.Tensor],
    seq_idx: Optional[torch.Tensor],
    cu_seqlens: Optional[torch.Tensor],
    dt_softplus: bool,
    dt_limit: Sequence[float],
    state_dtype: Optional[torch.dtype] = None,
) -> TorchForward:
    """The PyTorch SSD (differentiable), the stages composed; shapes as ``mamba_chunk_scan_combined``
    takes them (cu_seqlens needs seq_idx: :func:`packing_of`)."""
    q = chunk_size
    cs, dtp = S.chunk_cumsum(dt, A, q, dt_bias, dt_softplus, dt_limit)
    states = S.chunk_state(B, x, dtp, cs, seq_idx)
    carry = S.carry_mask(seq_idx, q) if seq_idx is not None else None
    hin, final = S.state_passing(states, cs[..., -1], initial_states, carry)
    hin = round_states(hin, state_dtype)
    y, ypre = S.chunk_scan(S.bmm_chunk(C, B, q), x, dtp, cs, C, hin, D, z, seq_idx)
    varlen = None
    if cu_seqlens is not None:
        if seq_idx is None:
            raise ValueError("ssd forward: cu_seqlens needs its seq_idx (packing_of builds it)")
        varlen = S.varlen_states(B[0], x[0], dtp[0], cs[0], hin[0], cu_seqlens, seq_idx[0])
    return {"out": y, "ypre": ypre, "dtp": dtp, "cs": cs, "hin": hin, "final": final, "varlen": varlen}


def packing_of(
    x: torch.Tensor, seq_idx: Optional[torch.Tensor], cu_seqlens: Optional[torch.Tensor]
) -> tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
    """(seq_idx, cu_seqlens) after the packed-sequence rule: cu_seqlens (batch 1) int64 on x's device,
    seq_idx derived from it when not given.

    Raises:
        ValueError: cu_seqlens with batch > 1 or breaking the rule of :mod:`mamba_ssm._families.packing`."""
    if cu_seqlens is None:
        return seq_idx, None
    if x.shape[0] != 1:
        raise ValueError(f"mamba_chunk_scan_combined: cu_seqlens needs batch 1, got batch {x.shape[0]}")
    cu = _packing.check_cu_seqlens("mamba_chunk_scan_combined", cu_seqlens, x.shape[1]).to(x.device)
    if seq_idx is None:
        seq_idx = _packing.seq_idx_from_cu_seqlens(cu, x.shape[1]).to(x.device)
    return seq_idx, cu


def fwd_result(
    out: torch.Tensor,
    ypre: Optional[torch.Tensor],
    dtp: torch.Tensor,
    cs: torch.Tensor,
    hin: torch.Tensor,
    final: torch.Tensor,
    varlen: Optional[torch.Tensor],
    state_dtype: Optional[torch.dtype],
    cu_seqlens: Optional[torch.Tensor],
) -> FwdResult | FwdVarlenResult:
    """``_mamba_chunk_scan_combined_fwd``'s tuple (the states entering the chunks in ``state_dtype``
    when given; varlen_states last with cu_seqlens)."""
    hin = hin.to(state_dtype) if state_dtype is not None else hin
    result: FwdResult = (out, ypre, dtp, cs, hin, final)
    if cu_seqlens is None:
        return result
    if varlen is None:
        raise ValueError("ssd forward: cu_seqlens given but no varlen states computed")
    return (*result, varlen)


def torch_chunk_scan_combined(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    dt_bias: Optional[torch.Tensor],
    initial_states: Optional[torch.Tensor],
    seq_idx: Optional[torch.Tensor],
    cu_seqlens: Optional[torch.Tensor],
    dt_softplus: bool,
    dt_limit: Sequence[float],
    state_dtype: Optional[torch.dtype],
) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """``mamba_chunk_scan_combined`` in PyTorch (differentiable through autograd): (out in x's dtype,
    final_states float32 (float64 for float64 inputs), varlen_states (no gradient) or None without
    cu_seqlens)."""
    seq_idx, cu_seqlens = packing_of(x, seq_idx, cu_seqlens)
    # A sequence shorter than a chunk is one chunk of its own length (no padding to compute).
    q = max(1, min(chunk_size, x.shape[1]))
    r = forward(
        x, dt, A, B, C, q, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_softplus, dt_limit,
        state_dtype,
    )  # fmt: skip
    f32 = r["final"].dtype != torch.float64
    out = _recompute.plain(r["out"].to(x.dtype))
    final = r["final"].float() if f32 else r["final"]
    varlen = r["varlen"]
    if varlen is not None:
        varlen = varlen.detach().float() if f32 else varlen.detach()
    return out, final, varlen


def torch_chunk_scan_fwd(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    dt_bias: Optional[torch.Tensor],
    initial_states: Optional[torch.Tensor],
    seq_idx: Optional[torch.Tensor],
    cu_seqlens: Optional[torch.Tensor],
    dt_softplus: bool,
    dt_limit: Sequence[float],
    state_dtype: Optional[torch.dtype],
) -> FwdResult | FwdVarlenResult:
    """``_mamba_chunk_scan_combined_fwd`` in PyTorch (no autograd): its tuple."""
    seq_idx, cu_seqlens = packing_of(x, seq_idx, cu_seqlens)
    with torch.no_grad():
        r = forward(
            x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_softplus,
            dt_limit, state_dtype,
        )  # fmt: skip
    ypre = r["ypre"].to(x.dtype) if r["ypre"] is not None else None
    return fwd_result(
        r["out"].to(x.dtype), ypre, r["dtp"], r["cs"], r["hin"], r["final"], r["varlen"], state_dtype,
        cu_seqlens,
    )  # fmt: skip
