"""The fast PyTorch fallback of the selective scan: a chunked parallel scan, CPU and CUDA, any d_state.

Math (Mamba, arXiv:2312.00752, Algorithm 2 and section 3, zero-order-hold discretisation with the
simplified B): for every batch b, channel d and state index n,

    h_t = exp(delta_t * A[d, n]) * h_{t-1} + delta_t * u_t * B_t[n]          (h_{-1} = 0 or a given state)
    y_t = sum_n C_t[n] * h_t[n]

``selective_scan_fn`` adds ``D * u``, the ``silu(z)`` gate, ``delta_bias`` and the softplus around this core.

How it is computed (no Python loop over every timestep):

* The sequence is cut into *segments* whose length comes from a memory budget (bytes per timestep =
  batch * dim * d_state * itemsize * buffers), processed one after the other with the state carried
  between them, so memory stays bounded for any seqlen.
* Each segment is cut into chunks of T steps (T about sqrt(segment length)). One pass of T vectorised
  steps computes every chunk's local end state (zero initial state) for all chunks at once; a pass over
  the chunks carries the state across chunk boundaries using the chunk decay
  ``exp(A * sum(delta over the chunk))``; a second pass of T steps recomputes the states from each
  chunk's true initial state. Every factor is ``exp(delta * A)`` of one step or of one chunk, never the
  quotient of two cumulative products, so nothing overflows when A < 0 (the decays only underflow to 0,
  which is the right limit). A > 0 (a growing state) is computed exactly as the recurrence says; it
  overflows only where the state itself does.
* Backward is a custom autograd function: it keeps only the inputs and one state per segment, recomputes
  a segment's states, runs the reverse scan ``g_t = C_t dy_t + exp(delta_{t+1} A) g_{t+1}`` with the same
  chunked scheme, and forms every input's gradient from ``h``, ``g`` and ``h_{t-1}``:
  ``dA = sum g * a * h_{t-1} * delta``, ``ddelta = sum_n g*a*h_{t-1}*A + u * sum_n g*B``,
  ``du = delta * sum_n g*B``, ``dB = sum g * delta * u``, ``dC = sum h * dy``.

fp16/bf16 inputs are converted per segment to float32 (float64 inputs compute in float64).
"""
from __future__ import annotations

import math
import os
from typing import List, Optional, Tuple

import torch

__all__ = ["selective_scan", "selective_scan_with_state", "plan_chunks", "DEFAULT_MEMORY_BUDGET"]

#: Working-set budget of one segment, in bytes, per device type (override with MAMBA_SSM_SCAN_MEMORY_MB).
#: On CPU a segment that stays in the caches is fastest (measured: 8 MiB beats 2, 4, 16, 64 and 256 MiB
#: at seqlen 8192 on a 2-core EPYC); on a GPU, larger segments mean fewer kernel launches.
DEFAULT_MEMORY_BUDGET = 8 * 1024 * 1024
_DEVICE_BUDGETS = {"cpu": DEFAULT_MEMORY_BUDGET, "cuda": 1024 * 1024 * 1024}
#: Buffers of shape (batch, dim, segment, d_state) alive at once in backward (a, b, h, g, products).
_BUFFERS = 6
_MIN_CHUNK, _MAX_CHUNK = 4, 128


def _budget(device_type: str = "cpu") -> int:
    text = os.environ.get("MAMBA_SSM_SCAN_MEMORY_MB", "").strip()
    if not text:
        return _DEVICE_BUDGETS.get(device_type, DEFAULT_MEMORY_BUDGET)
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"MAMBA_SSM_SCAN_MEMORY_MB={text!r} is not a number of MiB (e.g. 64)") from None
    if value <= 0:
        raise ValueError(f"MAMBA_SSM_SCAN_MEMORY_MB={text!r} must be positive")
    return int(value * 1024 * 1024)


def plan_chunks(batch: int, dim: int, d_state: int, seqlen: int, itemsize: int = 4,
                budget: Optional[int] = None, device_type: str = "cpu") -> Tuple[int, int]:
    """Segment length and chunk size for a scan of this shape.

    Args:
        batch, dim, d_state, seqlen: the scan's sizes.
        itemsize: bytes per element of the compute dtype (4 for float32, 8 for float64).
        budget: bytes the per-segment buffers may take (default: ``MAMBA_SSM_SCAN_MEMORY_MB``, else
            8 MiB on CPU and 1 GiB on CUDA).
        device_type: "cpu", "cuda", ... (picks the default budget).

    Returns:
        ``(segment, chunk)``: timesteps per segment (a multiple of ``chunk`` unless the whole sequence
        is shorter) and timesteps per chunk.
    """
    budget = _budget(device_type) if budget is None else budget
    per_step = max(1, batch * dim * d_state * itemsize * _BUFFERS)
    segment = max(_MIN_CHUNK * _MIN_CHUNK, budget // per_step)
    segment = min(segment, max(seqlen, 1))
    chunk = 2 ** int(round(math.log2(max(1.0, math.sqrt(segment)))))
    chunk = max(_MIN_CHUNK, min(_MAX_CHUNK, chunk))
    if segment >= chunk:
        segment = (segment // chunk) * chunk
    return segment, chunk


def _segments(seqlen: int, segment: int, chunk: int) -> List[Tuple[int, int, int]]:
    """(start, end, chunk) per segment: full segments, then a multiple-of-chunk rest, then a tail."""
    out = []
    start = 0
    if segment >= chunk:
        segment = (segment // chunk) * chunk
    while seqlen - start >= segment and segment >= chunk:
        out.append((start, start + segment, chunk))
        start += segment
    rest = seqlen - start
    if rest >= chunk:
        main = (rest // chunk) * chunk
        out.append((start, start + main, chunk))
        start += main
    if seqlen > start:
        out.append((start, seqlen, seqlen - start))
    return out


def _view6(x: torch.Tensor, nc: int, t: int) -> torch.Tensor:
    """(..., L, N) -> (..., nc, t, N); a length-1 L axis (constant B/C) stays broadcastable."""
    if x.shape[-2] == 1:
        return x.unsqueeze(-3)
    return x.view(*x.shape[:-2], nc, t, x.shape[-1])


def _step(x6: torch.Tensor, j: int) -> torch.Tensor:
    return x6[..., j if x6.shape[-2] > 1 else 0, :]


def _forward_states(a: torch.Tensor, b: torch.Tensor, dt: torch.Tensor, A5: torch.Tensor,
                    h0: torch.Tensor, t: int, hbuf: torch.Tensor) -> torch.Tensor:
    """States of one segment: ``hbuf[..., 1 + i, :] = h_i``, ``hbuf[..., 0, :] = h0``.

    a, b: (Bt, G, H, Ls, N) contiguous (decay and input per step); dt: (Bt, G, H, Ls, 1); A5:
    (1, G, H, 1, N); h0: (Bt, G, H, N); hbuf: (Bt, G, H, Ls + 1, N). Returns the final state.
    """
    ls = a.shape[-2]
    nc = ls // t
    a6, b6 = _view6(a, nc, t), _view6(b, nc, t)
    hbuf[..., 0, :] = h0
    hs6 = hbuf[..., 1:, :].view(*a.shape[:-2], nc, t, a.shape[-1])
    if nc == 1:
        hin = h0.unsqueeze(-2)
    else:
        # Pass 1: each chunk's end state from a zero initial state, all chunks at once.
        h = b6[..., 0, :]
        for j in range(1, t):
            h = torch.addcmul(b6[..., j, :], a6[..., j, :], h)
        # Carry across chunks with the chunk decay exp(A * sum(delta)) (a product of per-step decays).
        decay = torch.exp(dt.view(*dt.shape[:-2], nc, t).sum(-1, keepdim=True) * A5)
        hin = torch.empty_like(h)
        cur = h0
        for c in range(nc):
            hin[..., c, :] = cur
            cur = torch.addcmul(h[..., c, :], decay[..., c, :], cur)
    # Pass 2: the states from each chunk's true initial state.
    torch.addcmul(b6[..., 0, :], a6[..., 0, :], hin, out=hs6[..., 0, :])
    for j in range(1, t):
        torch.addcmul(b6[..., j, :], a6[..., j, :], hs6[..., j - 1, :], out=hs6[..., j, :])
    return hbuf[..., -1, :]


def _reverse_states(a: torch.Tensor, c: torch.Tensor, dt: torch.Tensor, A5: torch.Tensor,
                    carry: torch.Tensor, t: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Reverse scan of one segment: ``g_i = c_i + a_{i+1} g_{i+1}``, the step past the end given by
    ``carry`` (= a_{next} * g_{next}, already decayed). Returns (g (Bt, G, H, Ls, N), the carry for the
    segment before: a_0 * g_0)."""
    ls = a.shape[-2]
    nc = ls // t
    a6, c6 = _view6(a, nc, t), _view6(c, nc, t)
    g = torch.empty_like(c)
    g6 = g.view(*c.shape[:-2], nc, t, c.shape[-1])
    if nc == 1:
        ein = carry.unsqueeze(-2)
    else:
        r = c6[..., t - 1, :]
        for j in range(t - 2, -1, -1):
            r = torch.addcmul(c6[..., j, :], a6[..., j + 1, :], r)
        # Decay from the chunk's first step to the step past its end, excluding step 0's own decay.
        dt6 = dt.view(*dt.shape[:-2], nc, t)
        inner = torch.exp((dt6.sum(-1, keepdim=True) - dt6[..., :1]) * A5)
        ein = torch.empty_like(r)
        cur = carry
        for k in range(nc - 1, -1, -1):
            ein[..., k, :] = cur
            first = torch.addcmul(r[..., k, :], inner[..., k, :], cur)
            cur = a6[..., k, 0, :] * first
    torch.add(c6[..., t - 1, :], ein, out=g6[..., t - 1, :])
    for j in range(t - 2, -1, -1):
        torch.addcmul(c6[..., j, :], a6[..., j + 1, :], g6[..., j + 1, :], out=g6[..., j, :])
    return g, a6[..., 0, 0, :] * g6[..., 0, 0, :]


def _seg_inputs(u, dt, A5, Bv, Cv, s, e, cdtype):
    """Per-segment operands in the compute dtype: u, dt (Bt,G,H,Ls,1); B, C broadcastable 5D."""
    us = u[..., s:e].to(cdtype).contiguous().unsqueeze(-1)
    dts = dt[..., s:e].to(cdtype).contiguous().unsqueeze(-1)
    Bs = Bv[:, :, s:e].to(cdtype).contiguous().unsqueeze(2) if Bv.dim() == 4 else Bv
    Cs = Cv[:, :, s:e].to(cdtype).contiguous().unsqueeze(2) if Cv.dim() == 4 else Cv
    return us, dts, Bs, Cs


class _ScanCore(torch.autograd.Function):
    """(u, dt, A, B, C, h0) -> (y, last state). Shapes (Bt = batch, D = G * H):

    u, dt: (Bt, G, H, L); A: (G, H, N); B, C: (Bt, G, L, N) (variable) or (G, H, N) (constant);
    h0: (Bt, G, H, N) or None. y: (Bt, G, H, L) and last state (Bt, G, H, N) in the compute dtype.
    """

    @staticmethod
    def forward(ctx, u, dt, A, B, C, h0, segment, chunk):  # noqa: D401
        cdtype = A.dtype
        bt, g, hh, seqlen = u.shape
        n = A.shape[-1]
        A5 = A.unsqueeze(0).unsqueeze(3)
        Bv = B if B.dim() == 4 else B.to(cdtype).unsqueeze(0).unsqueeze(3)
        Cv = C if C.dim() == 4 else C.to(cdtype).unsqueeze(0).unsqueeze(3)
        segs = _segments(seqlen, segment, chunk)
        y = torch.empty(bt, g, hh, seqlen, dtype=cdtype, device=u.device)
        cur = torch.zeros(bt, g, hh, n, dtype=cdtype, device=u.device) if h0 is None else h0.to(cdtype)
        starts = []
        hbuf = None
        for s, e, t in segs:
            starts.append(cur)
            us, dts, Bs, Cs = _seg_inputs(u, dt, A5, Bv, Cv, s, e, cdtype)
            a = torch.exp(dts * A5)
            b = (dts * us) * Bs
            if hbuf is None or hbuf.shape[-2] != e - s + 1:
                hbuf = torch.empty(bt, g, hh, e - s + 1, n, dtype=cdtype, device=u.device)
            cur = _forward_states(a, b, dts, A5, cur, t, hbuf).clone()
            del a, b
            y[..., s:e] = (hbuf[..., 1:, :] * Cs).sum(-1)
        ctx.save_for_backward(u, dt, A, B, C, *starts)
        ctx.segs = segs
        ctx.has_h0 = h0 is not None
        return y, cur

    @staticmethod
    def backward(ctx, dy, dlast):
        u, dt, A, B, C, *starts = ctx.saved_tensors
        segs = ctx.segs
        cdtype = A.dtype
        bt, g, hh, seqlen = u.shape
        n = A.shape[-1]
        A5 = A.unsqueeze(0).unsqueeze(3)
        var_b, var_c = B.dim() == 4, C.dim() == 4
        Bv = B if var_b else B.to(cdtype).unsqueeze(0).unsqueeze(3)
        Cv = C if var_c else C.to(cdtype).unsqueeze(0).unsqueeze(3)
        need = ctx.needs_input_grad
        du = torch.empty(bt, g, hh, seqlen, dtype=cdtype, device=u.device) if need[0] else None
        ddt = torch.empty(bt, g, hh, seqlen, dtype=cdtype, device=u.device) if need[1] else None
        dA = torch.zeros_like(A) if need[2] else None
        dB = (torch.empty(bt, g, seqlen, n, dtype=cdtype, device=u.device) if var_b
              else torch.zeros(g, hh, n, dtype=cdtype, device=u.device)) if need[3] else None
        dC = (torch.empty(bt, g, seqlen, n, dtype=cdtype, device=u.device) if var_c
              else torch.zeros(g, hh, n, dtype=cdtype, device=u.device)) if need[4] else None
        carry = (torch.zeros(bt, g, hh, n, dtype=cdtype, device=u.device) if dlast is None
                 else dlast.to(cdtype))
        if dy is None:
            dy = torch.zeros(bt, g, hh, seqlen, dtype=cdtype, device=u.device)
        for (s, e, t), h0 in zip(reversed(segs), reversed(starts)):
            us, dts, Bs, Cs = _seg_inputs(u, dt, A5, Bv, Cv, s, e, cdtype)
            dys = dy[..., s:e].to(cdtype).unsqueeze(-1)
            a = torch.exp(dts * A5)
            dtu = dts * us
            b = dtu * Bs
            hbuf = torch.empty(bt, g, hh, e - s + 1, n, dtype=cdtype, device=u.device)
            _forward_states(a, b, dts, A5, h0, t, hbuf)
            del b
            hs, hprev = hbuf[..., 1:, :], hbuf[..., :-1, :]
            if need[4]:
                prod = hs * dys
                if var_c:
                    dC[:, :, s:e] = prod.sum(2)
                else:
                    dC += prod.sum((0, 3))
                del prod
            del hs
            gs, carry = _reverse_states(a, dys * Cs, dts, A5, carry, t)
            if need[3] or need[0] or need[1]:
                gB = gs * Bs
                gBn = gB.sum(-1, keepdim=True)
                del gB
                if need[0]:
                    du[..., s:e] = (dts * gBn).squeeze(-1)
                if need[3]:
                    prod = gs * dtu
                    if var_b:
                        dB[:, :, s:e] = prod.sum(2)
                    else:
                        dB += prod.sum((0, 3))
                    del prod
            if need[1] or need[2]:
                q = gs * a
                q *= hprev
                if need[2]:
                    dA += (q * dts).sum((0, 3))
                if need[1]:
                    ddt[..., s:e] = ((q * A5).sum(-1, keepdim=True) + us * gBn).squeeze(-1)
                del q
            del gs, a, hbuf
        dh0 = carry if ctx.has_h0 else None
        return du, ddt, dA, dB, dC, dh0, None, None


def _lcm(a: int, b: int) -> int:
    return a * b // math.gcd(a, b)


def _canonical_bc(X: torch.Tensor, batch: int, dim: int, groups: int) -> torch.Tensor:
    """B or C in the core's layout: (batch, groups, L, N) when variable, (groups, dim/groups, N) when
    constant."""
    if X.dim() == 2:
        return X.reshape(groups, dim // groups, X.shape[-1])
    if X.dim() == 3:
        X = X.unsqueeze(1)
    if X.shape[1] != groups:
        X = X.repeat_interleave(groups // X.shape[1], dim=1)
    return X.transpose(-1, -2)


def selective_scan_with_state(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                              initial_state=None, segment: Optional[int] = None,
                              chunk: Optional[int] = None):
    """Selective scan starting from ``initial_state`` (batch, dim, d_state); returns (out, last_state).

    Same shapes and semantics as :func:`selective_scan` (inputs are assumed validated), plus the
    initial state, which receives a gradient. ``segment``/``chunk`` override :func:`plan_chunks`
    (tests use them to exercise the segment and chunk boundaries).
    """
    batch, dim, seqlen = u.shape
    n = A.shape[-1]
    dtypes = {u.dtype, delta.dtype, A.dtype, B.dtype, C.dtype}
    cdtype = torch.float64 if torch.float64 in dtypes else torch.float32
    device_type = u.device.type
    with torch.autocast(device_type=device_type, enabled=False) if _autocast_known(device_type) \
            else _nullcontext():
        dt = delta.to(cdtype)
        if delta_bias is not None:
            dt = dt + delta_bias.to(cdtype).unsqueeze(-1)
        if delta_softplus:
            dt = torch.nn.functional.softplus(dt)
        groups = 1
        for X in (B, C):
            if X.dim() == 4:
                groups = _lcm(groups, X.shape[1])
        hh = dim // groups
        u4 = u.reshape(batch, groups, hh, seqlen)
        dt4 = dt.reshape(batch, groups, hh, seqlen)
        A3 = A.to(cdtype).reshape(groups, hh, n)
        Bc = _canonical_bc(B, batch, dim, groups)
        Cc = _canonical_bc(C, batch, dim, groups)
        h0 = None if initial_state is None else initial_state.to(cdtype).reshape(batch, groups, hh, n)
        if segment is None or chunk is None:
            seg, ch = plan_chunks(batch, dim, n, seqlen, torch.empty((), dtype=cdtype).element_size(),
                                  device_type=device_type)
            segment = segment or seg
            chunk = chunk or ch
        y, last = _ScanCore.apply(u4, dt4, A3, Bc, Cc, h0, segment, chunk)
        out = y.reshape(batch, dim, seqlen)
        if D is not None:
            out = out + u.to(cdtype) * D.to(cdtype).unsqueeze(-1)
        if z is not None:
            out = out * torch.nn.functional.silu(z.to(cdtype))
        return out.to(u.dtype), last.reshape(batch, dim, n)


def selective_scan(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False,
                   return_last_state=False):
    """The PyTorch fallback of :func:`mamba_ssm.ops.selective_scan_interface.selective_scan_fn`.

    Args (validated by ``selective_scan_fn``): u, delta (batch, dim, seqlen); A (dim, d_state) real;
    B, C (dim, d_state), (batch, d_state, seqlen) or (batch, groups, d_state, seqlen); D (dim,);
    z (batch, dim, seqlen); delta_bias (dim,); delta_softplus; return_last_state.

    Returns:
        out (batch, dim, seqlen) in u's dtype, and with ``return_last_state`` the state after the last
        step (batch, dim, d_state) in float32 (float64 for float64 inputs).
    """
    out, last = selective_scan_with_state(u, delta, A, B, C, D, z, delta_bias, delta_softplus)
    return (out, last) if return_last_state else out


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _autocast_known(device_type: str) -> bool:
    return device_type in ("cpu", "cuda", "xpu", "hpu", "mps")
