"""The selective scan and the fused Mamba inner function, with upstream mamba-ssm's import path,
signatures and semantics.

The selective scan is the S6 layer of Mamba (Gu & Dao, arXiv:2312.00752, Algorithm 2, section 3.2, with
the zero-order-hold discretisation of A and the simplified Euler discretisation of B used by the
reference implementation):

    delta' = softplus(delta + delta_bias)      (softplus only with delta_softplus=True)
    h_t    = exp(delta'_t * A) * h_{t-1} + delta'_t * B_t * u_t      (per channel d, state index n)
    y_t    = C_t . h_t + D * u_t
    out    = y * silu(z)                        (when z is given)

Each call checks its arguments and runs through :func:`mamba_ssm._dispatch.call`: the compiled kernels of
``mamba_ssm._C`` when they load, cover the device and take the call, else the chunked PyTorch scan, or
the sequential reference ``selective_scan_ref`` when the ``ref`` backend is chosen
(``MAMBA_SSM_BACKEND=ref``). The implementations live in :mod:`mamba_ssm._families.selective_scan`.
"""

from __future__ import annotations

from typing import Any, Literal, overload

import torch
import torch.nn.functional as F
from torch import Tensor

from mamba_ssm import _dispatch
from mamba_ssm._families import recompute as _recompute
from mamba_ssm._families.checks import require_float, require_tensor, shape_text
from mamba_ssm._families.selective_scan.checks import validate_selective_scan
from mamba_ssm._families.selective_scan.reference import selective_scan_ref

__all__ = [
    "MambaInnerFn",
    "SelectiveScanFn",
    "mamba_inner_fn",
    "mamba_inner_ref",
    "rms_norm_forward",
    "selective_scan_fn",
    "selective_scan_ref",
]

# ----------------------------------------------------------------------------------------------------
# Public ops
# ----------------------------------------------------------------------------------------------------


@overload
def selective_scan_fn(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    z: Tensor | None = None,
    delta_bias: Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: Literal[False] = False,
) -> Tensor: ...
@overload
def selective_scan_fn(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    z: Tensor | None = None,
    delta_bias: Tensor | None = None,
    delta_softplus: bool = False,
    *,
    return_last_state: Literal[True],
) -> tuple[Tensor, Tensor]: ...
@overload
def selective_scan_fn(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    z: Tensor | None = None,
    delta_bias: Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]: ...


def selective_scan_fn(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    z: Tensor | None = None,
    delta_bias: Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Mamba's selective scan (S6), differentiable in every tensor argument.

    Args:
        u: (batch, dim, seqlen) input.
        delta: (batch, dim, seqlen) step size Delta (before ``delta_bias`` and the softplus).
        A: (dim, d_state) state matrix (diagonal per channel; typically negative real part): real, or
            complex64 (S4D-style complex state; see Complex A below).
        B, C: (dim, d_state) constant; (batch, d_state, seqlen) input-dependent (Mamba); or
            (batch, groups, d_state, seqlen) grouped: channel d uses group d // (dim / groups). When
            both are input-dependent they have the same number of groups (a 3-D one counts as 1).
        D: (dim,) skip connection, or None. z: (batch, dim, seqlen) gate, or None.
        delta_bias: (dim,) added to delta, or None. delta_softplus: apply softplus to delta.
        return_last_state: also return the state after the last step.

    Dtypes (upstream mamba-ssm's rule, checked before any backend runs):
        u: float16, bfloat16, float32 or float64; delta and z: u's dtype; A, D, delta_bias: float32
        (float64 also when u is float64); B, C: u's dtype or float32. Any other mix raises TypeError
        with the cast that fixes it (e.g. ``delta.to(u.dtype)``). The op is not autocast-aware: under
        ``torch.autocast`` the tensors are taken as passed (cast them consistently first, as
        :func:`mamba_inner_fn` does). float64 runs on the PyTorch backends only.

    Complex A (upstream mamba-ssm's complex variant; math and the accepted forms of B and C in
    :mod:`mamba_ssm._families.selective_scan.complex`): A complex64 (complex128 also when u is float64); the
    state is complex and ``y = 2 * Re(sum_n C h) + D * u`` (S4D's conjugate pairs). B and C are each
    complex (constant (dim, d_state), or variable as real tensors with (re, im) interleaved along time,
    last dim 2 * seqlen: upstream's layout, or complex with last dim seqlen) or real (a zero
    imaginary part). The last state is complex64 (complex128 for float64 inputs); gradients of
    complex inputs follow PyTorch's convention.

    Returns:
        out (batch, dim, seqlen) in u's dtype; with ``return_last_state`` also the last state
        (batch, dim, d_state) in float32 (float64 for float64 inputs; complex with a complex A).
        fp16/bf16 inputs are computed in float32; autocast does not lower the scan's precision.

    Raises:
        TypeError: a non-tensor argument, a non-float or complex dtype, or a mix of dtypes outside the
            rule below (upstream mamba-ssm's).
        ValueError: a wrong rank or shape, mismatched batch/dim/seqlen/d_state, inputs on different
            devices; the message names the argument, what was received and what was expected.
        RuntimeError: the compiled backend was forced and cannot take this call.
    """
    validate_selective_scan(u, delta, A, B, C, D, z, delta_bias)
    if A.is_complex():  # every backend takes B, C in the one complex-A form
        from mamba_ssm._families.selective_scan.complex import kernel_bc

        B, C = kernel_bc(B, u.shape[-1]), kernel_bc(C, u.shape[-1])
    result: Tensor | tuple[Tensor, Tensor] = _dispatch.call(
        "selective_scan", u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state
    )
    return result


def _rms(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """RMSNorm over the last dim: x / sqrt(mean(x^2) + eps) * weight (computed in float32)."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def _mamba_inner(
    xz: Tensor,
    conv1d_weight: Tensor,
    conv1d_bias: Tensor | None,
    x_proj_weight: Tensor,
    delta_proj_weight: Tensor,
    out_proj_weight: Tensor,
    out_proj_bias: Tensor | None,
    A: Tensor,
    B: Tensor | None,
    C: Tensor | None,
    D: Tensor | None,
    delta_bias: Tensor | None,
    B_proj_bias: Tensor | None,
    C_proj_bias: Tensor | None,
    delta_softplus: bool,
    checkpoint_lvl: int,
    b_rms_weight: Tensor | None,
    c_rms_weight: Tensor | None,
    dt_rms_weight: Tensor | None,
    b_c_dt_rms_eps: float,
    ref: bool,
) -> Tensor:
    fn = "mamba_inner_ref" if ref else "mamba_inner_fn"
    for name, value in (
        ("xz", xz),
        ("conv1d_weight", conv1d_weight),
        ("x_proj_weight", x_proj_weight),
        ("delta_proj_weight", delta_proj_weight),
        ("out_proj_weight", out_proj_weight),
        ("A", A),
    ):
        require_tensor(fn, name, value)
    for name, maybe in (
        ("xz", xz),
        ("conv1d_weight", conv1d_weight),
        ("conv1d_bias", conv1d_bias),
        ("x_proj_weight", x_proj_weight),
        ("delta_proj_weight", delta_proj_weight),
        ("out_proj_weight", out_proj_weight),
        ("out_proj_bias", out_proj_bias),
    ):
        require_tensor(fn, name, maybe, optional=True)
        require_float(fn, name, maybe)
    if not A.is_complex():  # a complex A is checked by selective_scan_fn
        require_float(fn, "A", A)
    if checkpoint_lvl not in (0, 1):
        raise ValueError(f"{fn}: checkpoint_lvl must be 0 or 1, got {checkpoint_lvl!r}")
    if xz.dim() != 3 or xz.shape[1] % 2:
        raise ValueError(f"{fn}: xz must have shape (batch, 2 * d_inner, seqlen), got {shape_text(xz)}")
    batch, two_d, seqlen = xz.shape
    d_inner = two_d // 2
    if A.dim() != 2 or A.shape[0] != d_inner:
        raise ValueError(
            f"{fn}: A must have shape (d_inner, d_state) = ({d_inner}, d_state), got {shape_text(A)}"
        )
    d_state = A.shape[1]
    # x_proj's columns per input-dependent B / C: d_state, or (re, im) pairs with a complex A (upstream).
    bc_cols = 2 * d_state if A.is_complex() else d_state
    delta_rank = delta_proj_weight.shape[1]
    if delta_proj_weight.dim() != 2 or delta_proj_weight.shape[0] != d_inner:
        raise ValueError(
            f"{fn}: delta_proj_weight must have shape (d_inner, dt_rank) = ({d_inner}, "
            f"dt_rank), got {shape_text(delta_proj_weight)}"
        )
    expect_rows = delta_rank + (bc_cols if B is None else 0) + (bc_cols if C is None else 0)
    if x_proj_weight.dim() != 2 or tuple(x_proj_weight.shape) != (expect_rows, d_inner):
        per = "2 * d_state (complex A)" if A.is_complex() else "d_state"
        raise ValueError(
            f"{fn}: x_proj_weight must have shape (dt_rank + {per} for each of B, C given "
            f"as None, d_inner) = ({expect_rows}, {d_inner}), got {shape_text(x_proj_weight)}"
        )
    cw = conv1d_weight.reshape(d_inner, -1) if conv1d_weight.dim() == 3 else conv1d_weight
    if cw.dim() != 2 or cw.shape[0] != d_inner:
        raise ValueError(
            f"{fn}: conv1d_weight must have shape (d_inner, 1, d_conv) or (d_inner, d_conv) "
            f"with d_inner = {d_inner}, got {shape_text(conv1d_weight)}"
        )
    device_type = xz.device.type
    if torch.is_autocast_enabled(device_type):
        adt = torch.get_autocast_dtype(device_type)
        x_proj_weight = x_proj_weight.to(adt)
        delta_proj_weight = delta_proj_weight.to(adt)
        out_proj_weight = out_proj_weight.to(adt)
        out_proj_bias = out_proj_bias.to(adt) if out_proj_bias is not None else None
    from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn, causal_conv1d_ref

    x, z = xz.chunk(2, dim=1)
    # The scan runs in xz's dtype (upstream: the conv kernel keeps x's dtype, autocast or not); under
    # autocast the projections below come out in the autocast dtype, so delta and the input-dependent
    # B and C are cast to the scan's input dtype before the call (selective_scan_fn's dtype rule).
    if ref:
        conv_out = causal_conv1d_ref(x, cw, conv1d_bias, activation="silu")
    else:
        conv_out = causal_conv1d_fn(x, cw, conv1d_bias, activation="silu")
    conv_out = conv_out.to(x.dtype)
    x_dbl = F.linear(conv_out.transpose(1, 2).reshape(batch * seqlen, d_inner), x_proj_weight)
    delta = (delta_proj_weight @ x_dbl[:, :delta_rank].t()).reshape(d_inner, batch, seqlen).transpose(0, 1)
    if dt_rms_weight is not None:
        delta = _rms(delta.transpose(1, 2), dt_rms_weight, b_c_dt_rms_eps).transpose(1, 2)
    delta = delta.to(x.dtype)
    col = delta_rank

    def take(given: Tensor | None, proj_bias: Tensor | None, rms_weight: Tensor | None) -> Tensor:
        nonlocal col
        if given is not None:
            return given
        part = x_dbl[:, col : col + bc_cols]
        col += bc_cols
        if proj_bias is not None:
            part = part + proj_bias.to(part.dtype)
        if rms_weight is not None:
            part = _rms(part, rms_weight, b_c_dt_rms_eps)
        if bc_cols != d_state:  # columns (2n, 2n + 1) = (re, im) of state n -> (re, im) pairs along time
            part = part.reshape(batch, seqlen, d_state, 2).permute(0, 2, 1, 3)
            return part.reshape(batch, d_state, 2 * seqlen).to(x.dtype).contiguous()
        return part.reshape(batch, seqlen, d_state).transpose(1, 2).to(x.dtype).contiguous()

    Bm = take(B, B_proj_bias, b_rms_weight)
    Cm = take(C, C_proj_bias, c_rms_weight)
    if ref:
        y = selective_scan_ref(
            conv_out, delta, A, Bm, Cm, D, z=z, delta_bias=delta_bias, delta_softplus=delta_softplus
        )
    else:
        y = selective_scan_fn(
            conv_out, delta, A, Bm, Cm, D, z=z, delta_bias=delta_bias, delta_softplus=delta_softplus
        )
    return F.linear(y.transpose(1, 2), out_proj_weight, out_proj_bias)


def mamba_inner_fn(
    xz: Tensor,
    conv1d_weight: Tensor,
    conv1d_bias: Tensor | None,
    x_proj_weight: Tensor,
    delta_proj_weight: Tensor,
    out_proj_weight: Tensor,
    out_proj_bias: Tensor | None,
    A: Tensor,
    B: Tensor | None = None,
    C: Tensor | None = None,
    D: Tensor | None = None,
    delta_bias: Tensor | None = None,
    B_proj_bias: Tensor | None = None,
    C_proj_bias: Tensor | None = None,
    delta_softplus: bool = True,
    checkpoint_lvl: int = 1,
    b_rms_weight: Tensor | None = None,
    c_rms_weight: Tensor | None = None,
    dt_rms_weight: Tensor | None = None,
    b_c_dt_rms_eps: float = 1e-6,
) -> Tensor:
    """The Mamba block's inner path after ``in_proj`` (arXiv:2312.00752, Figure 3):
    split ``xz`` into x and z, causal conv1d + SiLU on x, ``x_proj`` to (dt, B, C), ``dt_proj`` to delta,
    the selective scan gated by ``silu(z)``, then ``out_proj``.

    Args:
        xz: (batch, 2 * d_inner, seqlen) the output of in_proj, channels first.
        conv1d_weight: (d_inner, 1, d_conv) or (d_inner, d_conv); conv1d_bias: (d_inner,) or None.
        x_proj_weight: (dt_rank + 2 * d_state, d_inner) (fewer rows when B or C is given; twice the
            B / C rows with a complex A).
        delta_proj_weight: (d_inner, dt_rank). out_proj_weight: (d_model, d_inner);
        out_proj_bias: (d_model,) or None.
        A: (d_inner, d_state) real, or complex64 (then x_proj gives 2 * d_state columns per
            input-dependent B / C, the (re, im) of each state, as upstream; see :func:`selective_scan_fn`).
        B, C: None (input-dependent, from x_proj) or (d_inner, d_state) (complex with a complex A).
        D: (d_inner,). delta_bias: (d_inner,) (dt_proj's bias). B_proj_bias, C_proj_bias: (d_state,)
            ((2 * d_state,) with a complex A).
        delta_softplus: softplus on delta (Mamba: True). checkpoint_lvl: 0 or 1 (upstream's memory
            trade-off; both compute the same values here).
        b_rms_weight, c_rms_weight: (d_state,) RMSNorm weights applied to B and C; dt_rms_weight:
            (d_inner,) applied to delta after dt_proj; b_c_dt_rms_eps: their epsilon.

    Returns:
        (batch, seqlen, d_model). Under autocast the projection weights are cast to the autocast dtype
        and delta, B and C (computed by the projections) are cast back to xz's dtype, the dtype the
        scan runs with (see the dtype rule of :func:`selective_scan_fn`).

    Raises:
        TypeError / ValueError: bad inputs, naming the argument (see :func:`selective_scan_fn`).
    """
    return _mamba_inner(
        xz,
        conv1d_weight,
        conv1d_bias,
        x_proj_weight,
        delta_proj_weight,
        out_proj_weight,
        out_proj_bias,
        A,
        B,
        C,
        D,
        delta_bias,
        B_proj_bias,
        C_proj_bias,
        delta_softplus,
        checkpoint_lvl,
        b_rms_weight,
        c_rms_weight,
        dt_rms_weight,
        b_c_dt_rms_eps,
        ref=False,
    )


def mamba_inner_ref(
    xz: Tensor,
    conv1d_weight: Tensor,
    conv1d_bias: Tensor | None,
    x_proj_weight: Tensor,
    delta_proj_weight: Tensor,
    out_proj_weight: Tensor,
    out_proj_bias: Tensor | None,
    A: Tensor,
    B: Tensor | None = None,
    C: Tensor | None = None,
    D: Tensor | None = None,
    delta_bias: Tensor | None = None,
    B_proj_bias: Tensor | None = None,
    C_proj_bias: Tensor | None = None,
    delta_softplus: bool = True,
    checkpoint_lvl: int = 1,
    b_rms_weight: Tensor | None = None,
    c_rms_weight: Tensor | None = None,
    dt_rms_weight: Tensor | None = None,
    b_c_dt_rms_eps: float = 1e-6,
) -> Tensor:
    """:func:`mamba_inner_fn` built from the references (PyTorch conv1d, sequential scan)."""
    return _mamba_inner(
        xz,
        conv1d_weight,
        conv1d_bias,
        x_proj_weight,
        delta_proj_weight,
        out_proj_weight,
        out_proj_bias,
        A,
        B,
        C,
        D,
        delta_bias,
        B_proj_bias,
        C_proj_bias,
        delta_softplus,
        checkpoint_lvl,
        b_rms_weight,
        c_rms_weight,
        dt_rms_weight,
        b_c_dt_rms_eps,
        ref=True,
    )


def rms_norm_forward(
    x: Tensor, weight: Tensor, bias: Tensor | None, eps: float = 1e-6, is_rms_norm: bool = True
) -> Tensor:
    """The norm ``mamba_inner_fn`` applies to B, C and delta (upstream's helper): RMSNorm (or LayerNorm
    with ``is_rms_norm=False``) over x's last dimension, computed in float32, returned in x's dtype
    (:func:`mamba_ssm.ops.triton.layer_norm.layer_norm_fn`).

    Args:
        x: (..., hidden). weight: (hidden,). bias: (hidden,) or None. eps: the epsilon in the square root.
    """
    from mamba_ssm.ops.triton.layer_norm import layer_norm_fn

    return layer_norm_fn(x, weight, bias, eps=eps, is_rms_norm=is_rms_norm).to(x.dtype)


class SelectiveScanFn(torch.autograd.Function):
    """:func:`selective_scan_fn` as a ``torch.autograd.Function`` (upstream's class):
    ``SelectiveScanFn.apply(u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state)``
    gives the same results and gradients as :func:`selective_scan_fn` on whichever backend it runs (the
    backward recomputes the forward and differentiates it: :mod:`mamba_ssm._families.recompute`)."""

    @staticmethod
    def forward(
        ctx: Any,
        u: Tensor,
        delta: Tensor,
        A: Tensor,
        B: Tensor,
        C: Tensor,
        D: Tensor | None = None,
        z: Tensor | None = None,
        delta_bias: Tensor | None = None,
        delta_softplus: bool = False,
        return_last_state: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        args = (u, delta, A, B, C, D, z, delta_bias, delta_softplus, return_last_state)
        out: Tensor | tuple[Tensor, Tensor] = _recompute.forward(ctx, selective_scan_fn, args)
        return out

    @staticmethod
    def backward(ctx: Any, dout: Tensor | None, *args: Tensor | None) -> tuple[Tensor | None, ...]:
        return _recompute.backward(ctx, dout, *args)


class MambaInnerFn(torch.autograd.Function):
    """:func:`mamba_inner_fn` as a ``torch.autograd.Function`` (upstream's class), same positional
    arguments, results and gradients (the backward recomputes the forward, as upstream's
    ``checkpoint_lvl=1`` does for the conv and delta)."""

    @staticmethod
    def forward(
        ctx: Any,
        xz: Tensor,
        conv1d_weight: Tensor,
        conv1d_bias: Tensor | None,
        x_proj_weight: Tensor,
        delta_proj_weight: Tensor,
        out_proj_weight: Tensor,
        out_proj_bias: Tensor | None,
        A: Tensor,
        B: Tensor | None = None,
        C: Tensor | None = None,
        D: Tensor | None = None,
        delta_bias: Tensor | None = None,
        B_proj_bias: Tensor | None = None,
        C_proj_bias: Tensor | None = None,
        delta_softplus: bool = True,
        checkpoint_lvl: int = 1,
        b_rms_weight: Tensor | None = None,
        c_rms_weight: Tensor | None = None,
        dt_rms_weight: Tensor | None = None,
        b_c_dt_rms_eps: float = 1e-6,
    ) -> Tensor:
        args = (
            xz, conv1d_weight, conv1d_bias, x_proj_weight, delta_proj_weight, out_proj_weight, out_proj_bias,
            A, B, C, D, delta_bias, B_proj_bias, C_proj_bias, delta_softplus, checkpoint_lvl, b_rms_weight,
            c_rms_weight, dt_rms_weight, b_c_dt_rms_eps,
        )  # fmt: skip
        out: Tensor = _recompute.forward(ctx, mamba_inner_fn, args)
        return out

    @staticmethod
    def backward(ctx: Any, dout: Tensor | None) -> tuple[Tensor | None, ...]:
        return _recompute.backward(ctx, dout)
