"""Mamba-2's state space duality (SSD) scan with upstream's import path
``mamba_ssm.ops.triton.ssd_combined`` (transformers imports these names when mamba-ssm >= 2.0.4).

Math (Dao & Gu, arXiv:2405.21060, sections 6-7): per head h with scalar A[h] and head dimension p,

    dt'   = clamp(softplus(dt + dt_bias), dt_limit)
    h_t   = exp(dt'_t A) h_{t-1} + dt'_t x_t B_t^T          (h_t: (headdim, d_state))
    y_t   = h_t C_t + D x_t, then * silu(z_t)

Chunked algorithm (section 6 "SSD algorithm"): within a chunk of ``chunk_size`` steps the output is a
masked matrix product with the decay matrix ``L[i, j] = exp(cumsum(dA)_i - cumsum(dA)_j)`` (i >= j;
exponents are non-positive for A <= 0), each chunk's end state is a decayed sum of its inputs, the
states are carried across chunks, and each chunk adds ``C_t exp(cumsum(dA)_t) h_in``. ``seq_idx``
(packed sequences) masks every term that would cross a sequence boundary; the tokens of a sequence are
contiguous, and a negative ``seq_idx`` marks a padding token, whose output is 0 and which writes no
state (a row ending in padding has a zero final state). ``cu_seqlens`` follows the packed-sequence rule
of :mod:`mamba_ssm._families.packing` (its last entry may be below seqlen: the rest is padding; an empty
sequence has a zero state).

Two implementations: the Triton kernels (:mod:`mamba_ssm._families.ssd.triton_kernels`) on CUDA/ROCm devices
with triton >= 3.0, and the PyTorch stages (:mod:`mamba_ssm._families.ssd.torch_impl`, differentiable
through autograd) elsewhere and for float64; ``mamba_ssm._dispatch`` decides and says why. The stage
modules ``ssd_chunk_state``, ``ssd_state_passing``, ``ssd_bmm`` and ``ssd_chunk_scan`` expose the same
stages one at a time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mamba_ssm._families import packing as _packing
from mamba_ssm._families import recompute as _recompute
from mamba_ssm._families.ssd import torch_impl as S
from mamba_ssm._families.ssd.torch_impl import ssd_chunk_scan_weighted
from mamba_ssm.ops.triton import _route
from mamba_ssm.ops.triton._helpers import init_to_zero, triton_at_least

__all__ = [
    "TRITON_22",
    "MambaChunkScanCombinedFn",
    "MambaSplitConv1dScanCombinedFn",
    "_chunk_scan_chunk_state_bwd_dx",
    "_mamba_chunk_scan_combined_bwd",
    "_mamba_chunk_scan_combined_fwd",
    "ensure_stride",
    "init_to_zero",
    "mamba_chunk_scan",
    "mamba_chunk_scan_combined",
    "mamba_conv1d_scan_ref",
    "mamba_split_conv1d_scan_combined",
    "mamba_split_conv1d_scan_ref",
    "selective_scan_bwd",
    "ssd_chunk_scan_combined_ref",
    "ssd_chunk_scan_weighted",
    "ssd_selective_scan",
]

#: Whether the installed triton is 2.2 or later (upstream's flag; nothing here depends on it).
TRITON_22 = triton_at_least(2, 2)


def ensure_stride(inp):
    """``inp`` (batch, seqlen, channels) with ``stride(1)`` a multiple of 8 (contiguous otherwise): the
    alignment upstream's kernels want of a (batch, seqlen, ...) view.

    Raises:
        ValueError: the last dimension is not a multiple of 8 (no layout can align it then)."""
    if inp.shape[2] % 8:
        raise ValueError(f"ensure_stride: the last dimension must be a multiple of 8, got {tuple(inp.shape)}")
    return inp if inp.stride(1) % 8 == 0 else inp.contiguous()


# ----------------------------------------------------------------------------------------------------
# Checks and the two implementations
# ----------------------------------------------------------------------------------------------------


def _check(fn, name, t, shape):
    if t is not None and tuple(t.shape) != tuple(shape):
        raise ValueError(f"{fn}: {name} must have shape {tuple(shape)}, got {tuple(t.shape)}")


def _validate(fn, x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, state_dtype=None):
    """The shape / dtype checks of the SSD's inputs (TypeError / ValueError naming the argument)."""
    for name, t in (("x", x), ("dt", dt), ("A", A), ("B", B), ("C", C)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if t.is_complex() or not t.is_floating_point():
            raise TypeError(f"{fn}: {name} has dtype {t.dtype}; expected a real float")
    if x.dim() != 4:
        raise ValueError(f"{fn}: x must have shape (batch, seqlen, nheads, headdim), got {tuple(x.shape)}")
    b, l, h, p = x.shape
    if B.dim() != 4 or B.shape[:2] != (b, l) or h % B.shape[2]:
        raise ValueError(
            f"{fn}: B must have shape (batch, seqlen, ngroups, dstate) = ({b}, {l}, ngroups dividing "
            f"{h}, dstate), got {tuple(B.shape)}"
        )
    g, n = B.shape[2], B.shape[3]
    _check(fn, "C", C, (b, l, g, n))
    _check(fn, "dt", dt, (b, l, h))
    _check(fn, "A", A, (h,))
    _check(fn, "z", z, (b, l, h, p))
    _check(fn, "dt_bias", dt_bias, (h,))
    _check(fn, "initial_states", initial_states, (b, h, p, n))
    _check(fn, "seq_idx", seq_idx, (b, l))
    if D is not None and tuple(D.shape) not in ((h, p), (h,)):
        raise ValueError(f"{fn}: D must have shape ({h}, {p}) or ({h},), got {tuple(D.shape)}")
    if not isinstance(chunk_size, int) or isinstance(chunk_size, bool) or chunk_size < 1:
        raise ValueError(f"{fn}: chunk_size must be a positive int, got {chunk_size!r}")
    if state_dtype is not None and not (
        isinstance(state_dtype, torch.dtype) and state_dtype.is_floating_point
    ):
        raise ValueError(f"{fn}: state_dtype must be a floating torch.dtype or None, got {state_dtype!r}")


def _triton_kernels(x, dt, A, B, C, D, z, dt_bias, initial_states):
    """The Triton SSD kernels module when this call runs on them, else None."""
    if _route.use_triton(
        "ssd_chunk_scan",
        x,
        lambda: _route.kernels().ssd.unsupported(x, dt, A, B, C, D, z, dt_bias, initial_states),
    ):
        return _route.kernels().ssd
    return None


def _round_states(hin, state_dtype):
    """The inter-chunk states materialised in ``state_dtype`` (rounded when it is narrower than the
    compute dtype; upstream's ``state_dtype``)."""
    if state_dtype is not None and torch.finfo(state_dtype).bits < torch.finfo(hin.dtype).bits:
        return hin.to(state_dtype).to(hin.dtype)
    return hin


def _torch_forward(
    x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_softplus, dt_limit,
    state_dtype=None,
):  # fmt: skip
    """The PyTorch SSD (differentiable), the stages composed: a dict with ``out`` and ``ypre`` (the
    output after / before the z gate, compute dtype), ``dtp`` / ``cs`` (batch, nheads, nchunks, Q),
    ``hin`` (the states entering the chunks), ``final`` and ``varlen`` (None without cu_seqlens)."""
    q = chunk_size
    cs, dtp = S.chunk_cumsum(dt, A, q, dt_bias, dt_softplus, dt_limit)
    states = S.chunk_state(B, x, dtp, cs, seq_idx)
    carry = S.carry_mask(seq_idx, q) if seq_idx is not None else None
    hin, final = S.state_passing(states, cs[..., -1], initial_states, carry)
    hin = _round_states(hin, state_dtype)
    y, ypre = S.chunk_scan(S.bmm_chunk(C, B, q), x, dtp, cs, C, hin, D, z, seq_idx)
    varlen = None
    if cu_seqlens is not None:
        varlen = S.varlen_states(B[0], x[0], dtp[0], cs[0], hin[0], cu_seqlens, seq_idx[0])
    return {"out": y, "ypre": ypre, "dtp": dtp, "cs": cs, "hin": hin, "final": final, "varlen": varlen}


def _packing_of(x, seq_idx, cu_seqlens):
    """(seq_idx, cu_seqlens) after the packed-sequence rule: cu_seqlens (batch 1) int64 on x's device,
    seq_idx derived from it when not given."""
    if cu_seqlens is None:
        return seq_idx, None
    if x.shape[0] != 1:
        raise ValueError(f"mamba_chunk_scan_combined: cu_seqlens needs batch 1, got batch {x.shape[0]}")
    cu = _packing.check_cu_seqlens("mamba_chunk_scan_combined", cu_seqlens, x.shape[1]).to(x.device)
    if seq_idx is None:
        seq_idx = _packing.seq_idx_from_cu_seqlens(cu, x.shape[1]).to(x.device)
    return seq_idx, cu


# ----------------------------------------------------------------------------------------------------
# mamba_chunk_scan_combined
# ----------------------------------------------------------------------------------------------------


def mamba_chunk_scan_combined(
    x,
    dt,
    A,
    B,
    C,
    chunk_size,
    D=None,
    z=None,
    dt_bias=None,
    initial_states=None,
    seq_idx=None,
    cu_seqlens=None,
    dt_softplus=False,
    dt_limit=(0.0, float("inf")),
    return_final_states=False,
    return_varlen_states=False,
    state_dtype=None,
):
    """Mamba-2's SSD scan.

    Args:
        x: (batch, seqlen, nheads, headdim). dt: (batch, seqlen, nheads). A: (nheads,) real.
        B, C: (batch, seqlen, ngroups, dstate), ngroups dividing nheads (head h uses group
            h // (nheads / ngroups)).
        chunk_size: steps per chunk (e.g. 256).
        D: (nheads, headdim) or (nheads,), or None. z: (batch, seqlen, nheads, headdim) gate, or None.
        dt_bias: (nheads,) or None. dt_softplus: softplus on dt + dt_bias. dt_limit: (min, max) clamp of
            the processed dt ((0, inf) = none).
        initial_states: (batch, nheads, headdim, dstate) or None.
        seq_idx: (batch, seqlen) int ids of packed sequences (each sequence's tokens contiguous; a
            negative id marks a padding token: output 0, no state read or written), or None.
        cu_seqlens: (num_seqs + 1,) cumulative lengths (batch 1), for ``return_varlen_states``: 0
            first, non-decreasing, at most seqlen last (the rows after it are padding); seq_idx is
            derived from it when not given.
        return_final_states: also return the state after the last step (batch, nheads, headdim, dstate).
        return_varlen_states: also return each sequence's final state (num_seqs, nheads, headdim, dstate);
            zero for an empty sequence.
        state_dtype: the dtype the inter-chunk states are materialised in (upstream's argument, HEAD).
            None: float32 (float64 for float64 inputs); a narrower dtype rounds them to it.

    Returns:
        out (batch, seqlen, nheads, headdim) in x's dtype; then final_states (float32) and/or
        varlen_states when asked for, in that order.

    On CUDA/ROCm devices with triton >= 3.0 the Triton kernels run (``mamba_ssm._families.ssd.triton_kernels``;
    chunk_size must then be a power of two in 16..256); elsewhere and for float64 the PyTorch stages
    (``mamba_ssm._dispatch`` decides and says why).

    Raises:
        TypeError / ValueError: bad shapes, dtypes or arguments, naming the argument.
    """
    fn = "mamba_chunk_scan_combined"
    _validate(fn, x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, state_dtype)
    b, l = x.shape[:2]
    if return_varlen_states and (cu_seqlens is None or b != 1):
        raise ValueError(f"{fn}: return_varlen_states needs cu_seqlens and batch 1")
    if not return_varlen_states:
        cu_seqlens = None
    K = _triton_kernels(x, dt, A, B, C, D, z, dt_bias, initial_states)
    if K is not None:
        res = K.chunk_scan_combined(  # ValueError for a chunk_size it does not take
            x, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias, initial_states=initial_states,
            seq_idx=seq_idx, dt_softplus=dt_softplus, dt_limit=dt_limit, cu_seqlens=cu_seqlens,
            state_dtype=state_dtype,
        )  # fmt: skip
        out, final, varlen = res[0], res[1], res[2] if cu_seqlens is not None else None
    else:
        seq_idx, cu_seqlens = _packing_of(x, seq_idx, cu_seqlens)
        # A sequence shorter than a chunk is one chunk of its own length (no padding to compute).
        q = max(1, min(chunk_size, l))
        r = _torch_forward(
            x, dt, A, B, C, q, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_softplus, dt_limit,
            state_dtype,
        )  # fmt: skip
        f32 = r["final"].dtype != torch.float64
        out = _recompute.plain(r["out"].to(x.dtype))
        final = r["final"].float() if f32 else r["final"]
        varlen = r["varlen"]
        if varlen is not None:
            varlen = varlen.detach().float() if f32 else varlen.detach()
    rest = ([final] if return_final_states else []) + ([varlen] if return_varlen_states else [])
    return (out, *rest) if rest else out


class MambaChunkScanCombinedFn(torch.autograd.Function):
    """:func:`mamba_chunk_scan_combined` as an autograd Function (upstream's class; same arguments and
    results, differentiable in x, dt, A, B, C, D, z, dt_bias, initial_states)."""

    @staticmethod
    def forward(
        ctx,
        x,
        dt,
        A,
        B,
        C,
        chunk_size,
        D=None,
        z=None,
        dt_bias=None,
        initial_states=None,
        seq_idx=None,
        cu_seqlens=None,
        dt_softplus=False,
        dt_limit=(0.0, float("inf")),
        return_final_states=False,
        return_varlen_states=False,
        state_dtype=None,
    ):
        args = (
            x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_softplus,
            dt_limit, return_final_states, return_varlen_states, state_dtype,
        )  # fmt: skip
        return _recompute.forward(ctx, mamba_chunk_scan_combined, args)

    @staticmethod
    def backward(ctx, dout, *args):
        return _recompute.backward(ctx, dout, *args)


def _mamba_chunk_scan_combined_fwd(
    x,
    dt,
    A,
    B,
    C,
    chunk_size,
    D=None,
    z=None,
    dt_bias=None,
    initial_states=None,
    seq_idx=None,
    cu_seqlens=None,
    dt_softplus=False,
    dt_limit=(0.0, float("inf")),
    state_dtype=None,
):
    """The SSD's forward with its intermediate results (upstream's entry point; no autograd).

    Args: as :func:`mamba_chunk_scan_combined`.

    Returns:
        (out, out_x, dt_out, dA_cumsum, states, final_states), plus varlen_states with cu_seqlens:
        out (batch, seqlen, nheads, headdim) in x's dtype; out_x the output before the z gate (None
        without z); dt_out and dA_cumsum (batch, nheads, nchunks, chunk_size) float32 (stage 1); states
        (batch, nchunks, nheads, headdim, dstate) the states entering the chunks; final_states (batch,
        nheads, headdim, dstate) float32; varlen_states (num_seqs, nheads, headdim, dstate) float32.
    """
    fn = "_mamba_chunk_scan_combined_fwd"
    _validate(fn, x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, state_dtype)
    K = _triton_kernels(x, dt, A, B, C, D, z, dt_bias, initial_states)
    if K is not None:
        K.check_chunk_size(chunk_size)
        seq_idx, cu_seqlens = K.prepare_packing(x, seq_idx, cu_seqlens)
        r = K.forward(
            x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, dt_softplus, tuple(dt_limit),
            cu_seqlens, state_dtype,
        )  # fmt: skip
        shape = (x.shape[0], x.shape[2], -1, chunk_size)
        dtp, cs, out, ypre = r["dtp"].view(shape), r["cs"].view(shape), r["out"], r["ypre"]
    else:
        seq_idx, cu_seqlens = _packing_of(x, seq_idx, cu_seqlens)
        with torch.no_grad():
            r = _torch_forward(
                x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, cu_seqlens, dt_softplus,
                dt_limit, state_dtype,
            )  # fmt: skip
        dtp, cs, out = r["dtp"], r["cs"], r["out"].to(x.dtype)
        ypre = r["ypre"].to(x.dtype) if r["ypre"] is not None else None
    hin = r["hin"].to(state_dtype) if state_dtype is not None else r["hin"]
    result = (out, ypre, dtp, cs, hin, r["final"])
    return result if cu_seqlens is None else (*result, r["varlen"])


def _chunk_scan_chunk_state_bwd_dx(x, dt, dA_cumsum, B, CB, dout, dstates, D=None, seq_idx=None, dx=None):
    """The gradients with respect to x, dt and D of the SSD's in-chunk output term (stage 4,
    ``sum_{j<=i} CB_ij exp(cs_i - cs_j) dt'_j x_j + D x_i``, given dout) plus those of the chunks' own end
    states (stage 2, ``S_c = sum_j exp(cs_end - cs_j) dt'_j x_j B_j^T``, given dstates); the two stages
    of :mod:`mamba_ssm._families.ssd.torch_impl` through autograd.

    Args:
        x, dout: (batch, seqlen, nheads, headdim). dt, dA_cumsum: (batch, nheads, nchunks, chunk_size).
        B: (batch, seqlen, ngroups, dstate). CB: (batch, nchunks, ngroups, chunk_size, chunk_size).
        dstates: (batch, nchunks, nheads, headdim, dstate). D: (nheads, headdim), (nheads,) or None.
        seq_idx: (batch, seqlen) or None. dx: a tensor of x's shape to write dx into, or None.

    Returns:
        (dx in x's dtype, ddt (batch, nheads, nchunks, chunk_size) float32 (float64 for float64 inputs),
        dD in D's shape and dtype or None).

    Raises:
        TypeError / ValueError: shapes that disagree, naming the argument.
    """
    from mamba_ssm.ops.triton.ssd_chunk_scan import _check as check_scan
    from mamba_ssm.ops.triton.ssd_chunk_state import _check_state_args, _f32, _grads

    fn = "_chunk_scan_chunk_state_bwd_dx"
    batch, seqlen, nheads, headdim, ngroups, dstate, nchunks, q = _check_state_args(
        fn, B, x, dt, dA_cumsum, seq_idx
    )
    C0 = x.new_zeros(batch, seqlen, ngroups, 1)  # no state term in the output: it depends on neither x nor dt
    states0 = x.new_zeros(batch, nchunks, nheads, headdim, 1)
    check_scan(fn, x, dt, dA_cumsum, C0, states0, D, None, seq_idx)
    _check(fn, "CB", CB, (batch, nchunks, ngroups, q, q))
    _check(fn, "dout", dout, tuple(x.shape))
    _check(fn, "dstates", dstates, (batch, nchunks, nheads, headdim, dstate))

    def both(x_, dt_, D_):
        y = S.chunk_scan(CB, x_, dt_, dA_cumsum, C0, states0, D_, None, seq_idx)[0]
        return y, S.chunk_state(B, x_, dt_, dA_cumsum, seq_idx)

    wrt = [0, 1] + ([2] if D is not None else [])
    got = _grads(both, (x, dt, D), wrt, (dout, dstates))
    g_dt = got[1] if got[1] is not None else torch.zeros_like(dt, dtype=S.compute_dtype(dt))
    if dx is not None:
        _check(fn, "dx", dx, tuple(x.shape))
        dx.copy_(got[0])
    else:
        dx = got[0].to(x.dtype)
    dD = got[2].to(D.dtype) if D is not None else None
    return dx, _f32(g_dt), dD


def _mamba_chunk_scan_combined_bwd(
    dout,
    x,
    dt,
    A,
    B,
    C,
    out,
    chunk_size,
    D=None,
    z=None,
    dt_bias=None,
    initial_states=None,
    dfinal_states=None,
    seq_idx=None,
    dt_softplus=False,
    dt_limit=(0.0, float("inf")),
    dx=None,
    ddt=None,
    dB=None,
    dC=None,
    dz=None,
    recompute_output=False,
    state_dtype=None,
):
    """The SSD's backward (upstream's entry point): the forward is recomputed (``out`` is not read).

    Args: dout (batch, seqlen, nheads, headdim), the gradient of out; dfinal_states (batch, nheads,
        headdim, dstate) or None, of the final state; dx, ddt, dB, dC, dz: tensors to write those
        gradients into, or None; recompute_output: also return out (after the z gate); the rest as
        :func:`mamba_chunk_scan_combined`.

    Returns:
        (dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial_states), None for an input that is None; plus
        out with ``recompute_output``.
    """
    fn = "_mamba_chunk_scan_combined_bwd"
    _validate(fn, x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, state_dtype)
    _check(fn, "dout", dout, tuple(x.shape))
    K = _triton_kernels(x, dt, A, B, C, D, z, dt_bias, initial_states)
    if K is not None:
        K.check_chunk_size(chunk_size)
        seq_idx, _ = K.prepare_packing(x, seq_idx, None)
        r = K.forward(
            x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, dt_softplus, tuple(dt_limit),
            None, state_dtype,
        )  # fmt: skip
        grads = list(
            K.backward(
                dout, dfinal_states, x, dt, A, B, C, chunk_size, D, z, dt_bias, seq_idx, dt_softplus,
                tuple(dt_limit), r["dtp"], r["cs"], r["hin"], r["ypre"],
                initial_states.dtype if initial_states is not None else None,
            )
        )  # fmt: skip
        y = r["out"]
    else:
        inputs = [x, dt, A, B, C, D, z, dt_bias, initial_states]
        leaves = [t.detach().requires_grad_(True) if t is not None else None for t in inputs]
        with torch.enable_grad():
            r = _torch_forward(
                *leaves[:5], chunk_size, *leaves[5:], seq_idx, None, dt_softplus, dt_limit, state_dtype
            )
            outs, gouts = [r["out"]], [dout]
            if dfinal_states is not None:
                outs.append(r["final"])
                gouts.append(dfinal_states)
            present = [t for t in leaves if t is not None]
            got = iter(
                torch.autograd.grad(
                    outs, present, [g.to(o.dtype) for o, g in zip(outs, gouts)], allow_unused=True
                )
            )
        grads = []  # (dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial_states): the order of ``inputs``
        for t, src in zip(leaves, inputs):
            g = next(got) if t is not None else None
            if t is not None and g is None:
                g = torch.zeros_like(src)
            grads.append(g.to(src.dtype) if g is not None else None)
        y = r["out"].detach().to(x.dtype)
    for i, buf in ((0, dx), (1, ddt), (3, dB), (4, dC), (6, dz)):
        if buf is not None and grads[i] is not None:
            buf.copy_(grads[i])
            grads[i] = buf
    return (*grads, y) if recompute_output else tuple(grads)


# ----------------------------------------------------------------------------------------------------
# Stage-by-stage compositions and references
# ----------------------------------------------------------------------------------------------------


def mamba_chunk_scan(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, dt_softplus=False):
    """The SSD built from the stage functions (``_chunk_cumsum_fwd``, ``chunk_state``, ``state_passing``,
    ``chunk_scan``), differentiable through their autograd Functions: out (batch, seqlen, nheads,
    headdim) in x's dtype. Arguments as :func:`mamba_chunk_scan_combined` (no initial states)."""
    from mamba_ssm.ops.triton.ssd_chunk_scan import chunk_scan
    from mamba_ssm.ops.triton.ssd_chunk_state import chunk_state
    from mamba_ssm.ops.triton.ssd_state_passing import state_passing

    _validate("mamba_chunk_scan", x, dt, A, B, C, chunk_size, D, z, dt_bias, None, None)
    cs, dtp = S.chunk_cumsum(dt, A, chunk_size, dt_bias, dt_softplus)  # differentiable in dt, A, dt_bias
    states = chunk_state(B, x, dtp, cs)
    hin, _ = state_passing(states.flatten(3), cs[..., -1])
    out = chunk_scan(B, C, x, dtp, cs, hin.view(states.shape).to(states.dtype), D=D, z=z)
    return out.to(x.dtype)


def ssd_chunk_scan_combined_ref(x, dt, A, B, C, chunk_size, D=None, z=None, dt_bias=None, dt_softplus=False):
    """The SSD from the plain PyTorch stage references (``chunk_state_ref``, ``state_passing_ref``,
    ``chunk_scan_ref``): out (batch, seqlen, nheads, headdim) in x's dtype."""
    from mamba_ssm.ops.triton.ssd_chunk_scan import chunk_scan_ref
    from mamba_ssm.ops.triton.ssd_chunk_state import chunk_state_ref
    from mamba_ssm.ops.triton.ssd_state_passing import state_passing_ref

    _validate("ssd_chunk_scan_combined_ref", x, dt, A, B, C, chunk_size, D, z, dt_bias, None, None)
    cs, dtp = S.chunk_cumsum(dt, A, chunk_size, dt_bias, dt_softplus)
    states = chunk_state_ref(B, x, dtp, cs)
    hin, _ = state_passing_ref(states.flatten(3), cs[..., -1])
    return chunk_scan_ref(B, C, x, dtp, cs, hin.view(states.shape), D=D, z=z)


def _ssd_as_selective_scan(x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_limit):
    """The SSD layout mapped onto Mamba's selective scan: (u, delta, A, B, C, D, z) of
    :func:`mamba_ssm.ops.selective_scan_interface.selective_scan_fn` (channels = heads x headdim)."""
    b, l, h, p = x.shape
    n = B.shape[-1]
    step = dt if dt.dim() == 4 else dt.unsqueeze(-1).expand(b, l, h, p)
    if dt_bias is not None:
        step = step + (dt_bias if dt_bias.dim() == 2 else dt_bias.unsqueeze(-1))
    if dt_softplus:
        step = F.softplus(step)
    if tuple(dt_limit) != S.NO_LIMIT:
        step = step.clamp(dt_limit[0], dt_limit[1])
    u = x.reshape(b, l, h * p).transpose(1, 2)
    delta = step.reshape(b, l, h * p).transpose(1, 2).to(u.dtype)
    Af = A.float() if A.dtype != torch.float64 else A
    A2 = Af if A.dim() == 2 else Af.view(h, 1, 1).expand(h, p, n).reshape(h * p, n)
    Bs, Cs = (t.permute(0, 2, 3, 1) for t in (B, C))  # (batch, ngroups, dstate, seqlen)
    Dv = None
    if D is not None:
        Dv = (D if D.dim() == 2 else D.unsqueeze(-1).expand(h, p)).reshape(h * p)
        Dv = Dv.float() if Dv.dtype != torch.float64 else Dv
    zs = z.reshape(b, l, h * p).transpose(1, 2) if z is not None else None
    return u, delta, A2, Bs, Cs, Dv, zs


def ssd_selective_scan(
    x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False, dt_limit=(0.0, float("inf"))
):
    """The SSD computed by Mamba's selective scan (``selective_scan_fn``): one channel per (head, headdim)
    index, A per head expanded over dstate (or a full (dim, dstate) A).

    Args:
        x: (batch, seqlen, nheads, headdim). dt: (batch, seqlen, nheads) or (batch, seqlen, nheads,
        headdim). A: (nheads,) or (nheads * headdim, dstate). B, C: (batch, seqlen, ngroups, dstate).
        D: (nheads, headdim) or (nheads,). z: x's shape. dt_bias: (nheads,) or (nheads, headdim).

    Returns:
        out (batch, seqlen, nheads, headdim) in x's dtype.
    """
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn

    b, l, h, p = x.shape
    u, delta, A2, Bs, Cs, Dv, zs = _ssd_as_selective_scan(
        x, dt, A, B, C, D, z, dt_bias, dt_softplus, dt_limit
    )
    out = selective_scan_fn(u.contiguous(), delta.contiguous(), A2, Bs, Cs, Dv, zs)
    return out.transpose(1, 2).reshape(b, l, h, p)


def selective_scan_bwd(dout, x, dt, A, B, C, D=None, z=None):
    """The gradients of dt and A of the SSD computed by Mamba's selective scan, given dout.

    Args:
        dout, x: (batch, seqlen, nheads, headdim). dt: the processed step in the chunked layout, (batch,
        nheads, nchunks, chunk_size) or (batch, nheads, headdim, nchunks, chunk_size). A: (nheads,) or
        (nheads * headdim, dstate). B, C: (batch, seqlen, ngroups, dstate). D, z: as
        :func:`ssd_selective_scan`.

    Returns:
        (ddt in dt's shape, dA in A's shape), float32.
    """
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn

    b, l, h, p = x.shape
    per_channel = dt.dim() == 5
    dt_leaf = dt.detach().float().requires_grad_(True)
    A_leaf = A.detach().float().requires_grad_(True)
    with torch.enable_grad():
        steps = dt_leaf if per_channel else dt_leaf.unsqueeze(2).expand(b, h, p, *dt.shape[2:])
        steps = steps.reshape(b, h, p, -1)[..., :l].permute(0, 3, 1, 2)  # (batch, seqlen, nheads, headdim)
        u, delta, A2, Bs, Cs, Dv, zs = _ssd_as_selective_scan(
            x, steps, A_leaf, B, C, D, z, None, False, S.NO_LIMIT
        )
        out = selective_scan_fn(u.float().contiguous(), delta.float().contiguous(), A2, Bs.float(), Cs.float(), Dv,
                                zs.float() if zs is not None else None)  # fmt: skip
        ddt, dA = torch.autograd.grad(
            out, (dt_leaf, A_leaf), dout.float().reshape(b, l, h * p).transpose(1, 2)
        )
    return ddt, dA


def mamba_conv1d_scan_ref(
    xBC,
    conv1d_weight,
    conv1d_bias,
    dt,
    A,
    chunk_size,
    D=None,
    z=None,
    dt_bias=None,
    dt_softplus=False,
    dt_limit=(0.0, float("inf")),
    activation="silu",
    headdim=None,
    ngroups=1,
):
    """Causal conv1d over (x, B, C) then the SSD, from the PyTorch references.

    Args:
        xBC: (batch, seqlen, dim + 2 * ngroups * dstate), dim = nheads * headdim.
        conv1d_weight: (dim + 2 * ngroups * dstate, width) (or with a middle 1). conv1d_bias or None.
        dt: (batch, seqlen, nheads). A: (nheads,). D, dt_bias, dt_softplus, dt_limit: as
        :func:`mamba_chunk_scan_combined`. z: (batch, seqlen, dim) or (batch, seqlen, nheads, headdim).
        activation: the conv's ("silu" or None). headdim: needed unless D is (nheads, headdim).

    Returns:
        (batch, seqlen, dim) in xBC's dtype.
    """
    from mamba_ssm.ops.causal_conv1d import causal_conv1d_ref

    b, l, _ = xBC.shape
    nheads = A.shape[0]
    if headdim is None:
        if D is None or D.dim() != 2:
            raise ValueError("mamba_conv1d_scan_ref: pass headdim (or a D of shape (nheads, headdim))")
        headdim = D.shape[1]
    dim = nheads * headdim
    dstate = (xBC.shape[-1] - dim) // (2 * ngroups)
    if dstate < 1 or dim + 2 * ngroups * dstate != xBC.shape[-1]:
        raise ValueError(
            f"mamba_conv1d_scan_ref: xBC's last dim {xBC.shape[-1]} is not dim + 2 * ngroups * dstate with "
            f"dim = {dim}, ngroups = {ngroups}"
        )
    conv = causal_conv1d_ref(
        xBC.transpose(1, 2), conv1d_weight.reshape(conv1d_weight.shape[0], -1), conv1d_bias,
        activation=activation,
    ).transpose(1, 2)  # fmt: skip
    x, Bm, Cm = torch.split(conv, [dim, ngroups * dstate, ngroups * dstate], dim=-1)
    x = x.reshape(b, l, nheads, headdim)
    r = _torch_forward(
        x, dt, A, Bm.reshape(b, l, ngroups, dstate), Cm.reshape(b, l, ngroups, dstate), chunk_size, D,
        z.reshape(b, l, nheads, headdim) if z is not None else None, dt_bias, None, None, None, dt_softplus,
        dt_limit,
    )  # fmt: skip
    return r["out"].reshape(b, l, dim).to(xBC.dtype)


# ----------------------------------------------------------------------------------------------------
# mamba_split_conv1d_scan_combined
# ----------------------------------------------------------------------------------------------------


def _split_conv1d_scan(
    zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, chunk_size, initial_states, seq_idx, dt_limit,
    return_final_states, activation, rmsnorm_weight, rmsnorm_eps, outproj_weight, outproj_bias, headdim,
    ngroups, norm_before_gate, state_dtype, ref,
):  # fmt: skip
    fn = "mamba_split_conv1d_scan_ref" if ref else "mamba_split_conv1d_scan_combined"
    from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn, causal_conv1d_ref
    from mamba_ssm.ops.triton.layernorm_gated import rms_norm_ref, rmsnorm_fn

    if zxbcdt.dim() != 3:
        raise ValueError(f"{fn}: zxbcdt must be (batch, seqlen, channels), got {tuple(zxbcdt.shape)}")
    nheads = A.shape[0]
    if headdim is None:
        if D is None or D.dim() != 2:
            raise ValueError(f"{fn}: pass headdim (or a D of shape (nheads, headdim))")
        headdim = D.shape[1]
    dim = nheads * headdim
    b, l, total = zxbcdt.shape
    conv_dim = conv1d_weight.shape[0]
    dstate = (conv_dim - dim) // (2 * ngroups)
    d_nonssm = (total - 2 * dim - 2 * ngroups * dstate - nheads) // 2
    if (
        dstate < 1
        or dim + 2 * ngroups * dstate != conv_dim
        or d_nonssm < 0
        or 2 * d_nonssm + 2 * dim + 2 * ngroups * dstate + nheads != total
    ):
        raise ValueError(
            f"{fn}: zxbcdt's last dim {total} and conv1d_weight's {conv_dim} channels are not "
            f"2 * d_nonssm + 2 * dim + 2 * ngroups * dstate + nheads and dim + 2 * ngroups * dstate with "
            f"dim = {dim}, ngroups = {ngroups}, nheads = {nheads}"
        )
    z0, x0, z, xBC, dt = torch.split(
        zxbcdt, [d_nonssm, d_nonssm, dim, dim + 2 * ngroups * dstate, nheads], dim=-1
    )
    cw = conv1d_weight.reshape(conv1d_weight.shape[0], -1)
    conv = causal_conv1d_ref if ref else causal_conv1d_fn
    xBC = conv(xBC.transpose(1, 2), cw, conv1d_bias, seq_idx=seq_idx, activation=activation).transpose(1, 2)
    x, Bm, Cm = torch.split(xBC, [dim, ngroups * dstate, ngroups * dstate], dim=-1)
    scan_args = (
        x.reshape(b, l, nheads, headdim), dt, A, Bm.reshape(b, l, ngroups, dstate),
        Cm.reshape(b, l, ngroups, dstate),
    )  # fmt: skip
    zs = None if rmsnorm_weight is not None else z.reshape(b, l, nheads, headdim)
    if ref:
        r = _torch_forward(
            *scan_args, chunk_size, D, zs, dt_bias, initial_states, seq_idx, None, True, dt_limit, state_dtype
        )
        y, final = r["out"].to(x.dtype), r["final"].float()
    else:
        res = mamba_chunk_scan_combined(
            *scan_args, chunk_size, D=D, z=zs, dt_bias=dt_bias, initial_states=initial_states, seq_idx=seq_idx,
            dt_softplus=True, dt_limit=dt_limit, return_final_states=return_final_states,
            state_dtype=state_dtype,
        )  # fmt: skip
        y, final = res if return_final_states else (res, None)
    y = y.reshape(b, l, dim)
    if rmsnorm_weight is not None:
        norm = rms_norm_ref if ref else rmsnorm_fn
        y = norm(y, rmsnorm_weight, None, z=z, eps=rmsnorm_eps, group_size=dim // ngroups,
                 norm_before_gate=norm_before_gate)  # fmt: skip
    if d_nonssm > 0:  # the gated-MLP channels in front of the SSM's (Mamba2 with d_ssm < d_inner)
        y = torch.cat([F.silu(z0) * x0, y], dim=-1)
    if outproj_weight is not None:
        y = F.linear(y, outproj_weight, outproj_bias)
    return (y, final) if return_final_states else y


def mamba_split_conv1d_scan_combined(
    zxbcdt,
    conv1d_weight,
    conv1d_bias,
    dt_bias,
    A,
    D,
    chunk_size,
    initial_states=None,
    seq_idx=None,
    dt_limit=(0.0, float("inf")),
    return_final_states=False,
    activation="silu",
    rmsnorm_weight=None,
    rmsnorm_eps=1e-6,
    outproj_weight=None,
    outproj_bias=None,
    headdim=None,
    ngroups=1,
    norm_before_gate=True,
    state_dtype=None,
):
    """Mamba-2's block after in_proj (arXiv:2405.21060, Figure 6): split, causal conv1d on (x, B, C),
    SSD scan, gated RMSNorm (or the z gate), out_proj.

    Args:
        zxbcdt: (batch, seqlen, 2 * d_nonssm + 2 * dim + 2 * ngroups * dstate + nheads): z0, x0 (the
            gated-MLP part, d_nonssm >= 0 channels each, output silu(z0) * x0 in front), z, xBC, dt.
        conv1d_weight: (dim + 2 * ngroups * dstate, width) (or with a middle 1); conv1d_bias or None.
        dt_bias: (nheads,). A: (nheads,). D: (nheads, headdim) or (nheads,).
        chunk_size, initial_states, seq_idx, dt_limit, return_final_states, state_dtype: as
            :func:`mamba_chunk_scan_combined` (dt always goes through softplus).
        activation: "silu"/"swish" or None for the conv. rmsnorm_weight: (dim,) for the gated RMSNorm
            (then z gates through the norm), else z gates the scan output.
        outproj_weight: (d_model, dim) and outproj_bias, or None (the output stays (batch, seqlen, dim)).
        headdim: head dimension (inferred from a 2-D D when None). ngroups: B/C groups.
        norm_before_gate: the gated norm's order.

    Returns:
        out (batch, seqlen, d_model or dim), and the final states with ``return_final_states``.
    """
    return _split_conv1d_scan(
        zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, chunk_size, initial_states, seq_idx, dt_limit,
        return_final_states, activation, rmsnorm_weight, rmsnorm_eps, outproj_weight, outproj_bias, headdim,
        ngroups, norm_before_gate, state_dtype, ref=False,
    )  # fmt: skip


class MambaSplitConv1dScanCombinedFn(torch.autograd.Function):
    """:func:`mamba_split_conv1d_scan_combined` as an autograd Function (upstream's class; same arguments
    and results)."""

    @staticmethod
    def forward(
        ctx,
        zxbcdt,
        conv1d_weight,
        conv1d_bias,
        dt_bias,
        A,
        D,
        chunk_size,
        initial_states=None,
        seq_idx=None,
        dt_limit=(0.0, float("inf")),
        return_final_states=False,
        activation="silu",
        rmsnorm_weight=None,
        rmsnorm_eps=1e-6,
        outproj_weight=None,
        outproj_bias=None,
        headdim=None,
        ngroups=1,
        norm_before_gate=True,
        state_dtype=None,
    ):
        args = (
            zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, chunk_size, initial_states, seq_idx, dt_limit,
            return_final_states, activation, rmsnorm_weight, rmsnorm_eps, outproj_weight, outproj_bias,
            headdim, ngroups, norm_before_gate, state_dtype,
        )  # fmt: skip
        return _recompute.forward(ctx, mamba_split_conv1d_scan_combined, args)

    @staticmethod
    def backward(ctx, dout, *args):
        return _recompute.backward(ctx, dout, *args)


def mamba_split_conv1d_scan_ref(
    zxbcdt,
    conv1d_weight,
    conv1d_bias,
    dt_bias,
    A,
    D,
    chunk_size,
    dt_limit=(0.0, float("inf")),
    activation="silu",
    rmsnorm_weight=None,
    rmsnorm_eps=1e-6,
    outproj_weight=None,
    outproj_bias=None,
    headdim=None,
    ngroups=1,
    norm_before_gate=True,
):
    """:func:`mamba_split_conv1d_scan_combined` from the PyTorch references (the conv's, the PyTorch SSD
    stages, the gated norm's): same arguments (no initial states, seq_idx or final states) and output."""
    return _split_conv1d_scan(
        zxbcdt, conv1d_weight, conv1d_bias, dt_bias, A, D, chunk_size, None, None, dt_limit, False,
        activation, rmsnorm_weight, rmsnorm_eps, outproj_weight, outproj_bias, headdim, ngroups,
        norm_before_gate, None, ref=True,
    )  # fmt: skip
