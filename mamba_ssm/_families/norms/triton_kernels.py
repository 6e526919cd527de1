"""Triton kernels for LayerNorm / RMSNorm with a fused residual add (``layer_norm_fn`` /
``rms_norm_fn``) and the gated norm of Mamba-2 (``layernorm_gated.rmsnorm_fn`` / ``layernorm_fn``),
forward and backward.

Math. LayerNorm (Ba et al., arXiv:1607.06450): ``xhat = (x - mean) * rstd``, ``rstd = 1 / sqrt(var + eps)``;
RMSNorm (Zhang & Sennrich, arXiv:1910.07467): ``xhat = x * rstd``, ``rstd = 1 / sqrt(mean(x^2) + eps)``;
``y = xhat * weight + bias``. With ``g = dy * weight`` over a row of n values the input gradient is
``dx = rstd * (g - xhat * mean(g * xhat) - mean(g))`` (RMSNorm: without the ``mean(g)`` term), and
``dweight = sum_rows dy * xhat``, ``dbias = sum_rows dy``. Mamba-2's gate (arXiv:2405.21060, section 7):
``y = norm(x) * weight * silu(z)`` (norm_before_gate) or ``y = norm(x * silu(z)) * weight``, each norm over
groups of ``group_size`` channels; ``silu'(z) = sigmoid(z) * (1 + z * (1 - sigmoid(z)))``.

One program per row (per row and group for the gated norm) in the forward; the backward's programs each
take a block of rows and write one partial ``dweight`` / ``dbias`` row, summed by torch afterwards.
Statistics and accumulation in float32.
"""

from typing import Any, Optional, Tuple, Union, cast

import torch
import triton
import triton.language as tl

from mamba_ssm._families.triton_common import Block, Pointer, Scalar, jit, pow2, unsupported_dtype, warps_for

__all__ = ["MAX_ROW", "gated_norm", "layer_norm", "unsupported_gated_norm", "unsupported_layer_norm"]

#: The longest normalised row (or group) one program holds in registers.
MAX_ROW = 65536


@jit
def _row_stats(x: Block, m: Block, n: Scalar, eps: Scalar, IS_RMS: tl.constexpr) -> Block:
    """(mean, x - mean (0 outside the mask), rstd) of the n values of x under mask m (RMSNorm: mean 0)."""
    if IS_RMS:
        mean = tl.sum(x, axis=0) * 0.0  # a float32 scalar tensor like the LayerNorm branch's
        xc = x
    else:
        mean = tl.sum(x, axis=0) / n
        xc = tl.where(m, x - mean, 0.0)
    var = tl.sum(xc * xc, axis=0) / n
    return mean, xc, 1.0 / tl.sqrt(var + eps)


@jit
def _input_grad(g: Block, xhat: Block, rstd: Block, n: Scalar, IS_RMS: tl.constexpr) -> Block:
    """d x from g = dy * weight: rstd * (g - xhat * mean(g * xhat) - mean(g)) (RMSNorm: no mean(g))."""
    c1 = tl.sum(xhat * g, axis=0) / n
    if IS_RMS:
        return (g - xhat * c1) * rstd
    else:
        return (g - xhat * c1 - tl.sum(g, axis=0) / n) * rstd


@jit
def _norm_fwd_kernel(
    X: Pointer,
    R: Pointer,
    W: Pointer,
    Bias: Pointer,
    Y: Pointer,
    RO: Pointer,
    Mean: Pointer,
    Rstd: Pointer,
    stride_x: Scalar,
    stride_r: Scalar,
    stride_y: Scalar,
    stride_ro: Scalar,
    N: Scalar,
    eps: Scalar,
    HAS_R: tl.constexpr,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    STORE_RO: tl.constexpr,
    IS_RMS: tl.constexpr,
    BLOCK_N: tl.constexpr,
) -> None:
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    m = cols < N
    x = tl.load(X + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
    if HAS_R:
        x += tl.load(R + row * stride_r + cols, mask=m, other=0.0).to(tl.float32)
    if STORE_RO:
        # The residual stream is kept in RO's dtype; the norm sees that rounded value.
        x = x.to(RO.dtype.element_ty).to(tl.float32)
        tl.store(RO + row * stride_ro + cols, x, mask=m)
    mean, xc, rstd = _row_stats(x, m, N, eps, IS_RMS)
    y = xc * rstd
    if HAS_W:
        y = y * tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
    if HAS_B:
        y = y + tl.load(Bias + cols, mask=m, other=0.0).to(tl.float32)
    tl.store(Y + row * stride_y + cols, y, mask=m)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)


@jit
def _norm_bwd_kernel(
    X: Pointer,
    W: Pointer,
    DY: Pointer,
    DRO: Pointer,
    DX: Pointer,
    DW: Pointer,
    DB: Pointer,
    Mean: Pointer,
    Rstd: Pointer,
    stride_x: Scalar,
    stride_dy: Scalar,
    stride_dro: Scalar,
    stride_dx: Scalar,
    M: Scalar,
    N: Scalar,
    rows_per_program: Scalar,
    HAS_W: tl.constexpr,
    HAS_B: tl.constexpr,
    HAS_DRO: tl.constexpr,
    IS_RMS: tl.constexpr,
    BLOCK_N: tl.constexpr,
) -> None:
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    m = cols < N
    start = pid.to(tl.int64) * rows_per_program
    count = tl.minimum(start + rows_per_program, M) - start
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_N], dtype=tl.float32)
    if HAS_W:
        w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
    for i in range(0, count):
        row = start + i
        x = tl.load(X + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(DY + row * stride_dy + cols, mask=m, other=0.0).to(tl.float32)
        mean = tl.load(Mean + row)
        rstd = tl.load(Rstd + row)
        xhat = tl.where(m, (x - mean) * rstd, 0.0)
        if HAS_W:
            dw += dy * xhat
            g = dy * w
        else:
            g = dy
        if HAS_B:
            db += dy
        dx = _input_grad(g, xhat, rstd, N, IS_RMS)
        if HAS_DRO:
            dx += tl.load(DRO + row * stride_dro + cols, mask=m, other=0.0).to(tl.float32)
        tl.store(DX + row * stride_dx + cols, dx, mask=m)
    if HAS_W:
        tl.store(DW + pid * N + cols, dw, mask=m)
    if HAS_B:
        tl.store(DB + pid * N + cols, db, mask=m)


def _vector(t: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """A (hidden,) parameter with unit stride (the kernels index it as one), or None."""
    return None if t is None else t.contiguous()


def _bwd_programs(rows: int, device: torch.device) -> int:
    if device.type == "cuda":
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        return max(1, min(rows, 4 * sms))
    return max(1, min(rows, 4))


def unsupported_layer_norm(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor] = None,
    x1: Optional[torch.Tensor] = None,
    weight1: Optional[torch.Tensor] = None,
    bias1: Optional[torch.Tensor] = None,
    dropout_p: float = 0.0,
    rowscale: Optional[torch.Tensor] = None,
    return_dropout_mask: bool = False,
    out_dtype: Optional[torch.dtype] = None,
) -> Optional[str]:
    """None when :func:`layer_norm` takes this ``layer_norm_fn`` call, else why it cannot (one sentence)."""
    if (
        dropout_p != 0.0
        or x1 is not None
        or weight1 is not None
        or bias1 is not None
        or rowscale is not None
        or return_dropout_mask
    ):
        return "dropout, x1, weight1/bias1 and rowscale are not in the Triton norm kernel"
    why = unsupported_dtype(x=x, weight=weight, bias=bias, residual=residual)
    if (
        why is None
        and out_dtype is not None
        and out_dtype not in (torch.float32, torch.float16, torch.bfloat16)
    ):
        why = f"out_dtype {out_dtype} is not float32/float16/bfloat16"
    if why is None and x.shape[-1] > MAX_ROW:
        why = f"the normalised dimension {x.shape[-1]} exceeds the kernel's {MAX_ROW}"
    if why is None and x.numel() == 0:
        why = "x is empty"
    return why


class _NormFn(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: Optional[torch.Tensor],
        bias: Optional[torch.Tensor],
        residual: Optional[torch.Tensor],
        eps: float,
        prenorm: bool,
        residual_in_fp32: bool,
        is_rms_norm: bool,
        out_dtype: Optional[torch.dtype],
    ) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
        weight, bias = _vector(weight), _vector(bias)
        shape = x.shape
        n = shape[-1]
        x2 = x.reshape(-1, n)
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        r2 = None
        if residual is not None:
            r2 = residual.reshape(-1, n)
            if r2.stride(-1) != 1:
                r2 = r2.contiguous()
        rows = x2.shape[0]
        res_dtype = (
            torch.float32 if residual_in_fp32 else (residual.dtype if residual is not None else x.dtype)
        )
        out_dtype = out_dtype or x.dtype
        store_ro = residual is not None or prenorm or res_dtype != x.dtype
        y = torch.empty((rows, n), dtype=out_dtype, device=x.device)
        ro = torch.empty((rows, n), dtype=res_dtype, device=x.device) if store_ro else None
        mean = torch.empty(rows, dtype=torch.float32, device=x.device)
        rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
        block = pow2(n, 16)
        _norm_fwd_kernel[(rows,)](
            x2,
            r2 if r2 is not None else x2,
            weight if weight is not None else x2,
            bias if bias is not None else x2,
            y,
            ro if ro is not None else y,
            mean,
            rstd,
            x2.stride(0),
            r2.stride(0) if r2 is not None else 0,
            y.stride(0),
            ro.stride(0) if ro is not None else 0,
            n,
            float(eps),
            HAS_R=r2 is not None,
            HAS_W=weight is not None,
            HAS_B=bias is not None,
            STORE_RO=store_ro,
            IS_RMS=bool(is_rms_norm),
            BLOCK_N=block,
            num_warps=warps_for(block),
        )
        xs = ro if ro is not None else x2
        ctx.save_for_backward(xs, weight, bias, mean, rstd)
        ctx.meta = (
            shape,
            x.dtype,
            residual.dtype if residual is not None else None,
            bool(is_rms_norm),
            prenorm,
        )
        y = y.reshape(shape)
        if prenorm:
            return y, cast(torch.Tensor, ro).reshape(shape)  # prenorm made store_ro true
        return y

    @staticmethod
    def backward(
        ctx: Any, dy: torch.Tensor, *rest: Optional[torch.Tensor]
    ) -> Tuple[Optional[torch.Tensor], ...]:
        xs, weight, bias, mean, rstd = ctx.saved_tensors
        shape, x_dtype, r_dtype, is_rms, prenorm = ctx.meta
        n = shape[-1]
        dy2 = dy.reshape(-1, n)
        if dy2.stride(-1) != 1:
            dy2 = dy2.contiguous()
        dro = rest[0] if prenorm and rest and rest[0] is not None else None
        if dro is not None:
            dro = dro.reshape(-1, n)
            if dro.stride(-1) != 1:
                dro = dro.contiguous()
        rows = xs.shape[0]
        dx = torch.empty((rows, n), dtype=torch.float32, device=xs.device)
        programs = _bwd_programs(rows, xs.device)
        per = triton.cdiv(rows, programs)
        programs = triton.cdiv(rows, per)
        dw = torch.empty((programs, n), dtype=torch.float32, device=xs.device) if weight is not None else None
        db = torch.empty((programs, n), dtype=torch.float32, device=xs.device) if bias is not None else None
        block = pow2(n, 16)
        _norm_bwd_kernel[(programs,)](
            xs,
            weight if weight is not None else xs,
            dy2,
            dro if dro is not None else dy2,
            dx,
            dw if dw is not None else dx,
            db if db is not None else dx,
            mean,
            rstd,
            xs.stride(0),
            dy2.stride(0),
            dro.stride(0) if dro is not None else 0,
            dx.stride(0),
            rows,
            n,
            per,
            HAS_W=weight is not None,
            HAS_B=bias is not None,
            HAS_DRO=dro is not None,
            IS_RMS=is_rms,
            BLOCK_N=block,
            num_warps=warps_for(block),
        )
        dx = dx.reshape(shape)
        gx = dx.to(x_dtype) if ctx.needs_input_grad[0] else None
        gw = dw.sum(0).to(weight.dtype) if dw is not None and ctx.needs_input_grad[1] else None
        gb = db.sum(0).to(bias.dtype) if db is not None and ctx.needs_input_grad[2] else None
        gr = dx.to(r_dtype) if r_dtype is not None and ctx.needs_input_grad[3] else None
        return gx, gw, gb, gr, None, None, None, None, None


def layer_norm(
    x: torch.Tensor,
    weight: Optional[torch.Tensor],
    bias: Optional[torch.Tensor],
    residual: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    prenorm: bool = False,
    residual_in_fp32: bool = False,
    is_rms_norm: bool = False,
    out_dtype: Optional[torch.dtype] = None,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """LayerNorm / RMSNorm of ``x + residual`` over the last dimension (Triton; differentiable).

    Args:
        x: (..., hidden) float32/float16/bfloat16 on a CUDA device (or a CPU tensor under
            ``TRITON_INTERPRET=1``). weight, bias: (hidden,) or None. residual: x's shape, or None.
        eps: added to the variance. prenorm: also return ``x + residual``. residual_in_fp32: keep that
            sum in float32 (else residual's dtype, else x's). is_rms_norm: RMSNorm. out_dtype: y's dtype
            (default x's).

    Returns:
        y (x's shape, ``out_dtype``), or ``(y, x + residual)`` with prenorm; as ``layer_norm_fn``.
        The caller checked :func:`unsupported_layer_norm` first.
    """
    out: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]] = _NormFn.apply(
        x, weight, bias, residual, eps, prenorm, residual_in_fp32, is_rms_norm, out_dtype
    )
    return out


# ------------------------------------------------------------------------------------------------
# Gated norm (Mamba-2).


@jit
def _gated_fwd_kernel(
    X: Pointer,
    Z: Pointer,
    W: Pointer,
    Bias: Pointer,
    Y: Pointer,
    Mean: Pointer,
    Rstd: Pointer,
    stride_x: Scalar,
    stride_z: Scalar,
    stride_y: Scalar,
    N: Scalar,
    G: Scalar,
    eps: Scalar,
    HAS_Z: tl.constexpr,
    HAS_B: tl.constexpr,
    NORM_BEFORE_GATE: tl.constexpr,
    IS_RMS: tl.constexpr,
    BLOCK: tl.constexpr,
) -> None:
    row = tl.program_id(0).to(tl.int64)
    grp = tl.program_id(1)
    ngroups = tl.num_programs(1)
    offs = tl.arange(0, BLOCK)
    m = offs < G
    cols = grp * G + offs
    x = tl.load(X + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
    if HAS_Z:
        z = tl.load(Z + row * stride_z + cols, mask=m, other=0.0).to(tl.float32)
        if not NORM_BEFORE_GATE:
            x = x * z * tl.sigmoid(z)
    mean, xc, rstd = _row_stats(x, m, G, eps, IS_RMS)
    y = xc * rstd * tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
    if HAS_B:
        y = y + tl.load(Bias + cols, mask=m, other=0.0).to(tl.float32)
    if HAS_Z:
        if NORM_BEFORE_GATE:
            y = y * z * tl.sigmoid(z)
    tl.store(Y + row * stride_y + cols, y, mask=m)
    tl.store(Mean + row * ngroups + grp, mean)
    tl.store(Rstd + row * ngroups + grp, rstd)


@jit
def _gated_bwd_kernel(
    X: Pointer,
    Z: Pointer,
    W: Pointer,
    Bias: Pointer,
    DY: Pointer,
    DX: Pointer,
    DZ: Pointer,
    DW: Pointer,
    DB: Pointer,
    Mean: Pointer,
    Rstd: Pointer,
    stride_x: Scalar,
    stride_z: Scalar,
    stride_dy: Scalar,
    stride_dx: Scalar,
    stride_dz: Scalar,
    M: Scalar,
    N: Scalar,
    G: Scalar,
    rows_per_program: Scalar,
    HAS_Z: tl.constexpr,
    HAS_B: tl.constexpr,
    NORM_BEFORE_GATE: tl.constexpr,
    IS_RMS: tl.constexpr,
    BLOCK: tl.constexpr,
) -> None:
    pid = tl.program_id(0)
    grp = tl.program_id(1)
    ngroups = tl.num_programs(1)
    offs = tl.arange(0, BLOCK)
    m = offs < G
    cols = grp * G + offs
    w = tl.load(W + cols, mask=m, other=0.0).to(tl.float32)
    if HAS_B:
        b = tl.load(Bias + cols, mask=m, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK], dtype=tl.float32)
    db = tl.zeros([BLOCK], dtype=tl.float32)
    start = pid.to(tl.int64) * rows_per_program
    count = tl.minimum(start + rows_per_program, M) - start
    for i in range(0, count):
        row = start + i
        x = tl.load(X + row * stride_x + cols, mask=m, other=0.0).to(tl.float32)
        dy = tl.load(DY + row * stride_dy + cols, mask=m, other=0.0).to(tl.float32)
        mean = tl.load(Mean + row * ngroups + grp)
        rstd = tl.load(Rstd + row * ngroups + grp)
        xs = x
        if HAS_Z:
            z = tl.load(Z + row * stride_z + cols, mask=m, other=0.0).to(tl.float32)
            sz = tl.sigmoid(z)
            if not NORM_BEFORE_GATE:
                xs = x * z * sz
        xhat = tl.where(m, (xs - mean) * rstd, 0.0)
        dyn = dy
        if HAS_Z:
            if NORM_BEFORE_GATE:
                yn = xhat * w
                if HAS_B:
                    yn = yn + b
                tl.store(DZ + row * stride_dz + cols, dy * yn * sz * (1.0 + z * (1.0 - sz)), mask=m)
                dyn = dy * z * sz
        dw += dyn * xhat
        db += dyn
        g = dyn * w
        dxs = _input_grad(g, xhat, rstd, G, IS_RMS)
        dx = dxs
        if HAS_Z:
            if not NORM_BEFORE_GATE:
                dx = dxs * z * sz
                tl.store(DZ + row * stride_dz + cols, dxs * x * sz * (1.0 + z * (1.0 - sz)), mask=m)
        tl.store(DX + row * stride_dx + cols, dx, mask=m)
    tl.store(DW + pid * N + cols, dw, mask=m)
    if HAS_B:
        tl.store(DB + pid * N + cols, db, mask=m)


def unsupported_gated_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    group_size: Optional[int],
) -> Optional[str]:
    """None when :func:`gated_norm` takes this call (shapes already checked), else why not."""
    why = unsupported_dtype(x=x, weight=weight, bias=bias, z=z)
    group = x.shape[-1] if group_size is None else group_size
    if why is None and group > MAX_ROW:
        why = f"the group size {group} exceeds the kernel's {MAX_ROW}"
    if why is None and x.numel() == 0:
        why = "x is empty"
    return why


def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    t2 = t.reshape(-1, n)
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


class _GatedNormFn(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: Optional[torch.Tensor],
        z: Optional[torch.Tensor],
        eps: float,
        group_size: Optional[int],
        norm_before_gate: bool,
        is_rms_norm: bool,
    ) -> torch.Tensor:
        weight, bias = weight.contiguous(), _vector(bias)
        shape = x.shape
        n = shape[-1]
        group = n if group_size is None else group_size
        x2 = _rows(x, n)
        z2 = _rows(z, n) if z is not None else None
        rows = x2.shape[0]
        ngroups = n // group
        y = torch.empty((rows, n), dtype=x.dtype, device=x.device)
        mean = torch.empty(rows * ngroups, dtype=torch.float32, device=x.device)
        rstd = torch.empty(rows * ngroups, dtype=torch.float32, device=x.device)
        block = pow2(group, 16)
        _gated_fwd_kernel[(rows, ngroups)](
            x2,
            z2 if z2 is not None else x2,
            weight,
            bias if bias is not None else weight,
            y,
            mean,
            rstd,
            x2.stride(0),
            z2.stride(0) if z2 is not None else 0,
            y.stride(0),
            n,
            group,
            float(eps),
            HAS_Z=z2 is not None,
            HAS_B=bias is not None,
            NORM_BEFORE_GATE=bool(norm_before_gate),
            IS_RMS=bool(is_rms_norm),
            BLOCK=block,
            num_warps=warps_for(block),
        )
        ctx.save_for_backward(x2, z2, weight, bias, mean, rstd)
        ctx.meta = (
            shape,
            group,
            bool(norm_before_gate),
            bool(is_rms_norm),
            x.dtype,
            z.dtype if z is not None else None,
        )
        return y.reshape(shape)

    @staticmethod
    def backward(ctx: Any, dy: torch.Tensor) -> Tuple[Optional[torch.Tensor], ...]:
        x2, z2, weight, bias, mean, rstd = ctx.saved_tensors
        shape, group, nbg, is_rms, x_dtype, z_dtype = ctx.meta
        n = shape[-1]
        dy2 = _rows(dy, n)
        rows = x2.shape[0]
        ngroups = n // group
        programs = _bwd_programs(rows, x2.device)
        per = triton.cdiv(rows, programs)
        programs = triton.cdiv(rows, per)
        dx = torch.empty((rows, n), dtype=torch.float32, device=x2.device)
        dz = torch.empty((rows, n), dtype=torch.float32, device=x2.device) if z2 is not None else None
        dw = torch.empty((programs, n), dtype=torch.float32, device=x2.device)
        db = torch.empty((programs, n), dtype=torch.float32, device=x2.device) if bias is not None else None
        block = pow2(group, 16)
        _gated_bwd_kernel[(programs, ngroups)](
            x2,
            z2 if z2 is not None else x2,
            weight,
            bias if bias is not None else weight,
            dy2,
            dx,
            dz if dz is not None else dx,
            dw,
            db if db is not None else dw,
            mean,
            rstd,
            x2.stride(0),
            z2.stride(0) if z2 is not None else 0,
            dy2.stride(0),
            dx.stride(0),
            dz.stride(0) if dz is not None else 0,
            rows,
            n,
            group,
            per,
            HAS_Z=z2 is not None,
            HAS_B=bias is not None,
            NORM_BEFORE_GATE=nbg,
            IS_RMS=is_rms,
            BLOCK=block,
            num_warps=warps_for(block),
        )
        gx = dx.reshape(shape).to(x_dtype)
        gw = dw.sum(0).to(weight.dtype)
        gb = db.sum(0).to(bias.dtype) if db is not None else None
        gz = dz.reshape(shape).to(z_dtype) if dz is not None else None
        return gx, gw, gb, gz, None, None, None, None


def gated_norm(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    z: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    group_size: Optional[int] = None,
    norm_before_gate: bool = True,
    is_rms_norm: bool = True,
) -> torch.Tensor:
    """Mamba-2's gated RMSNorm / LayerNorm (Triton; differentiable).

    Args:
        x, z: (..., hidden) float32/float16/bfloat16 (z may be None). weight: (hidden,); bias: (hidden,)
            or None. group_size: channels per norm group (divides hidden; default hidden).
        norm_before_gate: ``norm(x) * weight * silu(z)`` if True, else ``norm(x * silu(z)) * weight``.

    Returns:
        y with x's shape and dtype. The caller validated shapes and checked :func:`unsupported_gated_norm`.
    """
    y: torch.Tensor = _GatedNormFn.apply(x, weight, bias, z, eps, group_size, norm_before_gate, is_rms_norm)
    return y
