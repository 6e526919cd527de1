"""The SSD's calls as each backend runs them, with the arguments the public functions of
``mamba_ssm.ops.triton.ssd_*`` check and hand to the dispatch (every call shares the op
``ssd_chunk_scan``'s decision):

* ``ssd_chunk_scan`` / ``_fwd`` / ``_bwd``: ``(x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states,
  ...)``; the Triton forms here, the PyTorch ones in :mod:`.torch_combined` and :mod:`.autograd`.
* the stages: ``ssd_chunk_cumsum`` ``(dt, A, chunk_size, dt_bias, dt_softplus, dt_limit)``,
  ``ssd_chunk_state`` ``(x, B, dt, dA_cumsum, seq_idx)``, ``ssd_chunk_state_varlen`` ``(x, B, dt,
  dA_cumsum, chunk_states, cu_seqlens, seq_idx)`` (no batch axis), ``ssd_state_passing`` ``(states,
  dA_chunk_cumsum, initial_states, seq_idx, chunk_size, out_dtype)``: both backends' forms here.

The ``triton_*_unsupported`` checks say why the Triton kernels do not take a call (float64, a chunk_size
that is not a power of two in 16..256, headdim or dstate above 256, ...); the kernels are imported only on
the Triton path.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from mamba_ssm._families.ssd import torch_impl as S
from mamba_ssm._families.ssd.torch_combined import FwdResult, FwdVarlenResult, fwd_result

__all__ = [
    "carry",
    "torch_chunk_state",
    "torch_chunk_state_varlen",
    "torch_state_passing",
    "triton_chunk_cumsum",
    "triton_chunk_cumsum_unsupported",
    "triton_chunk_scan_bwd",
    "triton_chunk_scan_combined",
    "triton_chunk_scan_fwd",
    "triton_chunk_state",
    "triton_chunk_state_unsupported",
    "triton_chunk_state_varlen",
    "triton_chunk_state_varlen_unsupported",
    "triton_combined_unsupported",
    "triton_state_passing",
    "triton_state_passing_unsupported",
]

#: One SSD call's gradients: (dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial_states), None for an
#: input that is None.
Grads = list[Optional[torch.Tensor]]


def _flat(t: torch.Tensor) -> torch.Tensor:
    """(batch, nheads, nchunks, Q) -> contiguous float32 (batch, nheads, nchunks * Q): the kernels' layout."""
    return t.float().contiguous().view(t.shape[0], t.shape[1], -1)


def _pair(dt_limit: Sequence[float]) -> tuple[float, float]:
    """dt_limit as the kernels take it."""
    return (dt_limit[0], dt_limit[1])


def carry(seq_idx: Optional[torch.Tensor], chunk_size: Optional[int]) -> Optional[torch.Tensor]:
    """Which chunks carry the entering state (:func:`~.torch_impl.carry_mask`), or None without seq_idx.

    Raises:
        ValueError: seq_idx without chunk_size."""
    if seq_idx is None:
        return None
    if chunk_size is None:  # (the public functions' checks raise first, naming the caller)
        raise ValueError(f"seq_idx needs chunk_size (the chunk edges in it), got {chunk_size!r}")
    return S.carry_mask(seq_idx, chunk_size)


# ----------------------------------------------------------------------------------------------------
# The combined scan
# ----------------------------------------------------------------------------------------------------


def triton_combined_unsupported(
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
    *rest: object,
) -> Optional[str]:
    """None when the Triton kernels take this ``ssd_chunk_scan`` / ``_fwd`` / ``_bwd`` call, else why
    not (the chunk size is checked by the kernels' entry points, with a ValueError)."""
    del chunk_size, rest
    from mamba_ssm._families.ssd import triton_kernels as K

    return K.unsupported(x, dt, A, B, C, D, z, dt_bias, initial_states)


def triton_chunk_scan_combined(
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
    """``mamba_chunk_scan_combined`` on the Triton kernels (differentiable): (out, final_states,
    varlen_states or None without cu_seqlens).

    Raises:
        ValueError: a chunk_size the kernels do not take (a power of two in 16..256)."""
    from mamba_ssm._families.ssd import triton_kernels as K

    res = K.chunk_scan_combined(
        x, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias, initial_states=initial_states,
        seq_idx=seq_idx, dt_softplus=dt_softplus, dt_limit=_pair(dt_limit), cu_seqlens=cu_seqlens,
        state_dtype=state_dtype,
    )  # fmt: skip
    varlen = res[2] if len(res) == 3 and cu_seqlens is not None else None
    return res[0], res[1], varlen


def triton_chunk_scan_fwd(
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
    """``_mamba_chunk_scan_combined_fwd`` on the Triton kernels (no autograd): its tuple.

    Raises:
        ValueError: a chunk_size the kernels do not take; cu_seqlens breaking the packed-sequence rule."""
    from mamba_ssm._families.ssd import triton_kernels as K

    K.check_chunk_size(chunk_size)
    seq_idx, cu_seqlens = K.prepare_packing(x, seq_idx, cu_seqlens)
    r = K.forward(
        x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, dt_softplus, _pair(dt_limit),
        cu_seqlens, state_dtype,
    )  # fmt: skip
    shape = (x.shape[0], x.shape[2], -1, chunk_size)
    return fwd_result(
        r["out"], r["ypre"], r["dtp"].view(shape), r["cs"].view(shape), r["hin"], r["final"], r["varlen"],
        state_dtype, cu_seqlens,
    )  # fmt: skip


def triton_chunk_scan_bwd(
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
    dt_softplus: bool,
    dt_limit: Sequence[float],
    state_dtype: Optional[torch.dtype],
    dout: torch.Tensor,
    dfinal_states: Optional[torch.Tensor],
) -> tuple[Grads, torch.Tensor]:
    """``_mamba_chunk_scan_combined_bwd`` on the Triton kernels (the forward recomputed): (the nine
    gradients, out after the z gate).

    Raises:
        ValueError: a chunk_size the kernels do not take."""
    from mamba_ssm._families.ssd import triton_kernels as K

    K.check_chunk_size(chunk_size)
    seq_idx, _ = K.prepare_packing(x, seq_idx, None)
    r = K.forward(
        x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, dt_softplus, _pair(dt_limit),
        None, state_dtype,
    )  # fmt: skip
    grads: Grads = list(
        K.backward(
            dout, dfinal_states, x, dt, A, B, C, chunk_size, D, z, dt_bias, seq_idx, dt_softplus,
            _pair(dt_limit), r["dtp"], r["cs"], r["hin"], r["ypre"],
            initial_states.dtype if initial_states is not None else None,
        )
    )  # fmt: skip
    return grads, r["out"]


# ----------------------------------------------------------------------------------------------------
# The stages
# ----------------------------------------------------------------------------------------------------


def _stage_unsupported(chunk_size: int, **tensors: Optional[torch.Tensor]) -> Optional[str]:
    from mamba_ssm._families.ssd import triton_kernels as K

    return K.stage_unsupported(chunk_size, **tensors)


def triton_chunk_cumsum_unsupported(
    dt: torch.Tensor,
    A: torch.Tensor,
    chunk_size: int,
    dt_bias: Optional[torch.Tensor],
    dt_softplus: bool,
    dt_limit: Sequence[float],
) -> Optional[str]:
    """None when the Triton kernels take this ``ssd_chunk_cumsum`` call, else why not."""
    del dt_softplus, dt_limit
    return _stage_unsupported(chunk_size, dt=dt, A=A, dt_bias=dt_bias)


def triton_chunk_cumsum(
    dt: torch.Tensor,
    A: torch.Tensor,
    chunk_size: int,
    dt_bias: Optional[torch.Tensor],
    dt_softplus: bool,
    dt_limit: Sequence[float],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 1 on the Triton kernel, as :func:`~.torch_impl.chunk_cumsum` returns it: (dA_cumsum,
    dt_out), each (batch, nheads, nchunks, chunk_size) float32."""
    from mamba_ssm._families.ssd import triton_kernels as K

    dtp, cs = K.dt_cumsum(dt, A, chunk_size, dt_bias, dt_softplus, _pair(dt_limit))
    shape = (dt.shape[0], dt.shape[2], -1, chunk_size)
    return cs.view(shape), dtp.view(shape)


def triton_chunk_state_unsupported(
    x: torch.Tensor,
    B: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    seq_idx: Optional[torch.Tensor],
) -> Optional[str]:
    """None when the Triton kernels take this ``ssd_chunk_state`` call, else why not."""
    del seq_idx
    return _stage_unsupported(dt.shape[3], x=x, B=B, dt=dt, dA_cumsum=dA_cumsum)


def triton_chunk_state(
    x: torch.Tensor,
    B: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    seq_idx: Optional[torch.Tensor],
) -> torch.Tensor:
    """Stage 2 on the Triton kernel: the chunks' own end states (batch, nchunks, nheads, headdim, dstate)
    float32."""
    from mamba_ssm._families.ssd import triton_kernels as K

    return K.chunk_states(x, B, _flat(dt), _flat(dA_cumsum), seq_idx, dt.shape[3])


def torch_chunk_state(
    x: torch.Tensor,
    B: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    seq_idx: Optional[torch.Tensor],
) -> torch.Tensor:
    """Stage 2 in PyTorch (:func:`~.torch_impl.chunk_state`), in the compute dtype."""
    return S.chunk_state(B, x, dt, dA_cumsum, seq_idx)


def triton_chunk_state_varlen_unsupported(
    x: torch.Tensor,
    B: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    chunk_states: torch.Tensor,
    cu_seqlens: torch.Tensor,
    seq_idx: torch.Tensor,
) -> Optional[str]:
    """None when the Triton kernels take this ``ssd_chunk_state_varlen`` call, else why not."""
    del dA_cumsum, cu_seqlens, seq_idx
    return _stage_unsupported(dt.shape[2], x=x, B=B, chunk_states=chunk_states)


def triton_chunk_state_varlen(
    x: torch.Tensor,
    B: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    chunk_states: torch.Tensor,
    cu_seqlens: torch.Tensor,
    seq_idx: torch.Tensor,
) -> torch.Tensor:
    """Each packed sequence's last state on the Triton kernel (num_seqs, nheads, headdim, dstate); x
    (total, nheads, headdim), B (total, ngroups, dstate), dt / dA_cumsum (nheads, nchunks, chunk_size),
    seq_idx (1, total)."""
    from mamba_ssm._families.ssd import triton_kernels as K

    return K.varlen_states(
        x.unsqueeze(0),
        B.unsqueeze(0),
        _flat(dt.unsqueeze(0)),
        _flat(dA_cumsum.unsqueeze(0)),
        seq_idx,
        chunk_states.float().unsqueeze(0).contiguous(),
        cu_seqlens.contiguous(),
        dt.shape[2],
    )


def torch_chunk_state_varlen(
    x: torch.Tensor,
    B: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    chunk_states: torch.Tensor,
    cu_seqlens: torch.Tensor,
    seq_idx: torch.Tensor,
) -> torch.Tensor:
    """:func:`triton_chunk_state_varlen` in PyTorch (:func:`~.torch_impl.varlen_states`)."""
    return S.varlen_states(B, x, dt, dA_cumsum, chunk_states, cu_seqlens, seq_idx[0])


def triton_state_passing_unsupported(
    states: torch.Tensor,
    dA_chunk_cumsum: torch.Tensor,
    initial_states: Optional[torch.Tensor],
    seq_idx: Optional[torch.Tensor],
    chunk_size: Optional[int],
    out_dtype: torch.dtype,
) -> Optional[str]:
    """None when the Triton kernels take this ``ssd_state_passing`` call, else why not."""
    del dA_chunk_cumsum, seq_idx, out_dtype
    return _stage_unsupported(chunk_size or 16, states=states, initial_states=initial_states)


def triton_state_passing(
    states: torch.Tensor,
    dA_chunk_cumsum: torch.Tensor,
    initial_states: Optional[torch.Tensor],
    seq_idx: Optional[torch.Tensor],
    chunk_size: Optional[int],
    out_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage 3 on the Triton kernel: (the states entering the chunks in ``out_dtype``, the final states
    float32); states (batch, nchunks, nheads, dim)."""
    from mamba_ssm._families.ssd import triton_kernels as K

    hin, final = K.state_passing(
        states.float().contiguous(), dA_chunk_cumsum, seq_idx, initial_states, chunk_size or 16
    )
    return hin.to(out_dtype), final


def torch_state_passing(
    states: torch.Tensor,
    dA_chunk_cumsum: torch.Tensor,
    initial_states: Optional[torch.Tensor],
    seq_idx: Optional[torch.Tensor],
    chunk_size: Optional[int],
    out_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`triton_state_passing` in PyTorch (final states float64 for float64 inputs)."""
    cd = S.compute_dtype(states, dA_chunk_cumsum)
    hin, final = S.state_passing(states.to(cd), dA_chunk_cumsum, initial_states, carry(seq_idx, chunk_size))
    return hin.to(out_dtype), final if cd == torch.float64 else final.float()
