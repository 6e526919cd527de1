"""The fast PyTorch fallback of the selective scan: a chunked parallel scan, CPU and CUDA, any d_state.

Math (Mamba, arXiv:2312.00752, Algorithm 2 and section 3, zero-order-hold discretisation with the
simplified B): for every batch b, channel d and state index n,

    h_t = exp(delta_t * A[d, n]) * h_{t-1} + delta_t * u_t * B_t[n]          (h_{-1} = 0 or a given state)
    y_t = sum_n C_t[n] * h_t[n]

``selective_scan_fn`` adds ``D * u``, the ``silu(z)`` gate, ``delta_bias`` and the softplus around this core.

How it is computed (no Python loop over every timestep):

* The sequence is cut into *segments* whose length comes from a memory budget (bytes per timestep =
  batch * dim * d_state * itemsize * buffers), processed one after the other with the state carried
  between them, so the d_state-sized working set stays bounded for any seqlen. On CPU the budget grows
  with the per-step size (256 timesteps' worth, between 8 and 64 MiB), so that wide models get long
  segments and few, large ops instead of many small ones.
* On CPU the core runs its ops with one intra-op thread (``MAMBA_SSM_SCAN_THREADS`` changes it; 0 keeps
  torch's setting): it issues hundreds of small elementwise ops, and with torch's default OpenMP threads
  each op waits at a barrier for a worker thread that, on a busy machine, is not scheduled for a
  time slice: measured 12-21 s instead of 0.2 s for one forward on a loaded 2-core machine.
  ``torch.set_num_threads`` is process-wide, so other threads of the process see the one thread while a
  scan runs (it is restored after).
* Each segment is cut into chunks of T steps (T about sqrt(segment length)). One pass of T vectorised
  steps computes every chunk's local end state (zero initial state) for all chunks at once; a pass over
  the chunks carries the state across chunk boundaries using the chunk decay
  ``exp(A * sum(delta over the chunk))``; a second pass of T steps recomputes the states from each
  chunk's true initial state. Every factor is ``exp(delta * A)`` of one step or of one chunk, never the
  quotient of two cumulative products, so nothing overflows when A < 0 (the decays only underflow to 0,
  which is the right limit). A > 0 (a growing state) is computed exactly as the recurrence says; it
  overflows only where the state itself does.
* Inside a segment the tensors are laid out "time-major by chunk", (T, batch, groups, chunks,
  dim/groups, d_state), so each of the T vectorised steps reads and writes one dense block, the sums
  over d_state (y = C . h, sum_n g B) and over the channels of a group (variable dB, dC) are batched
  matrix products over (T, batch, groups, chunks) instead of a product tensor and a sum, and the big
  per-segment buffers are allocated once per call and reused by every segment. The per-step tensors
  (u, delta, variable B and C, dy, and y and the gradients on the way out) are made time-major,
  (seqlen, ...), once per call (a 2-D transpose, or a row copy where time is not the innermost
  dimension), so a segment's chunk layout is a copy of whole rows (a 4-D permuted copy per segment ran
  at about 3 ns per element). These whole-sequence copies are the size of the inputs: memory grows with
  seqlen like the inputs and outputs do, while the (.., d_state) buffers stay within the segment budget.
* Decays are ``exp2(delta * A log2 e)`` (torch's CPU exp2 takes a third of exp's time).
* Backward is a custom autograd function: it keeps only the inputs and one state per segment, recomputes
  a segment's states, runs the reverse scan ``g_t = C_t dy_t + exp(delta_{t+1} A) g_{t+1}`` with the same
  chunked scheme, and forms every input's gradient from ``h``, ``g`` and ``h_{t-1}``:
  ``dA = sum g * a * h_{t-1} * delta``, ``ddelta = sum_n g*a*h_{t-1}*A + u * sum_n g*B``,
  ``du = delta * sum_n g*B``, ``dB = sum g * delta * u``, ``dC = sum h * dy``.

fp16/bf16 inputs are converted to float32 on the way in (float64 inputs compute in float64).
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, Callable, List, Literal, Optional, Sequence, Tuple, Union

import torch

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["DEFAULT_MEMORY_BUDGET", "plan_chunks", "selective_scan", "selective_scan_with_state"]

#: Working-set budget of one segment, in bytes, per device type (override with MAMBA_SSM_SCAN_MEMORY_MB).
#: On CPU: _CPU_BUDGET_STEPS timesteps' worth, clamped to [DEFAULT_MEMORY_BUDGET, _CPU_BUDGET_MAX]
#: (measured with benchmarks/bench_cpu_scan.py on a 2-core EPYC: a fixed 8 MiB gives 160-step segments at
#: dim 64 and 14-step ones at dim 1536, 1,500-12,500 ops per forward; 16-64 MiB ran 15-25% faster with a
#: third of the ops, 256 MiB slower again; at dim 64, 256 steps' worth (12 MiB, 2 MiB per buffer) ran
#: 6-30% faster than 512 steps' worth, the buffers closer to the cache's size); on a GPU, larger
#: segments mean fewer kernel launches.
DEFAULT_MEMORY_BUDGET = 8 * 1024 * 1024
_CPU_BUDGET_STEPS = 256
_CPU_BUDGET_MAX = 64 * 1024 * 1024
_DEVICE_BUDGETS = {"cpu": DEFAULT_MEMORY_BUDGET, "cuda": 1024 * 1024 * 1024}
#: Buffers of shape (batch, dim, segment, d_state) alive at once in backward (a, b, h, g, products).
_BUFFERS = 6
_MIN_CHUNK, _MAX_CHUNK = 4, 128
#: The core's gradients (du, ddt, dA, dB, dC, dh0), None where none is wanted.
_CoreGrads = tuple[
    Optional[torch.Tensor], Optional[torch.Tensor], Optional[torch.Tensor],
    Optional[torch.Tensor], Optional[torch.Tensor], Optional[torch.Tensor],
]  # fmt: skip
#: log2(e): the decays are computed as exp2(delta * A log2 e), because torch's CPU exp2 takes about a third
#: of exp's time (0.36 vs 1.14 ns per fp32 element, AVX-512 ATen kernels, one thread), and exp2 is the
#: same function of the scaled argument.
_LOG2E = 1.4426950408889634


def _budget(device_type: str = "cpu", per_step: int = 0) -> int:
    text = os.environ.get("MAMBA_SSM_SCAN_MEMORY_MB", "").strip()
    if not text:
        if device_type == "cpu":
            return max(DEFAULT_MEMORY_BUDGET, min(_CPU_BUDGET_MAX, per_step * _CPU_BUDGET_STEPS))
        return _DEVICE_BUDGETS.get(device_type, DEFAULT_MEMORY_BUDGET)
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"MAMBA_SSM_SCAN_MEMORY_MB={text!r} is not a number of MiB (e.g. 64)") from None
    if value <= 0:
        raise ValueError(f"MAMBA_SSM_SCAN_MEMORY_MB={text!r} must be positive")
    return int(value * 1024 * 1024)


def plan_chunks(
    batch: int,
    dim: int,
    d_state: int,
    seqlen: int,
    itemsize: int = 4,
    budget: Optional[int] = None,
    device_type: str = "cpu",
) -> Tuple[int, int]:
    """Segment length and chunk size for a scan of this shape.

    Args:
        batch, dim, d_state, seqlen: the scan's sizes.
        itemsize: bytes per element of the compute dtype (4 for float32, 8 for float64).
        budget: bytes the per-segment buffers may take (default: ``MAMBA_SSM_SCAN_MEMORY_MB``, else
            on CPU 256 timesteps' worth clamped to 8-64 MiB, and 1 GiB on CUDA).
        device_type: "cpu", "cuda", ... (picks the default budget).

    Returns:
        ``(segment, chunk)``: timesteps per segment (a multiple of ``chunk`` unless the whole sequence
        is shorter) and timesteps per chunk.
    """
    per_step = max(1, batch * dim * d_state * itemsize * _BUFFERS)
    budget = _budget(device_type, per_step) if budget is None else budget
    segment = max(_MIN_CHUNK * _MIN_CHUNK, budget // per_step)
    segment = min(segment, max(seqlen, 1))
    chunk = 2 ** round(math.log2(max(1.0, math.sqrt(segment))))
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
    while seqlen - start >= segment >= chunk:
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


# Layout of a segment of Ls = NC * T steps inside the core: "time-major chunks",
# (T, Bt, G, NC, H, N): the step-j slice of every chunk, x[j], is one contiguous block, so each of
# the T vectorised steps is a dense elementwise op; (H, N) last makes the sums over N and over H
# matrix products.


def _bc_layout(X: torch.Tensor, cdtype: torch.dtype) -> torch.Tensor:
    """B or C for the whole call, in the compute dtype: variable (Bt, G, L, N) -> time-major (L, Bt, G, N)
    (:func:`_time_major`); constant (G, H, N) -> (1, 1, G, 1, H, N), which broadcasts against the chunk
    layout."""
    if X.dim() == 4:
        return _time_major(X.transpose(-1, -2), cdtype)
    return X.to(cdtype).reshape(1, 1, X.shape[0], 1, *X.shape[1:])


def _bc_segment(X: torch.Tensor, s: int, e: int, nc: int, t: int) -> torch.Tensor:
    """Steps [s, e) of :func:`_bc_layout`'s result: variable -> (T, Bt, G, NC, 1, N); constant as it is."""
    return _tm_chunks(X, s, e, nc, t).unsqueeze(4) if X.dim() == 4 else X


def _dot_n(x: torch.Tensor, X: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
    """sum over N of x * X: x (T, Bt, G, NC, H, N) with X variable (T, Bt, G, NC, 1, N) (a batched matrix
    product, no product tensor) or constant (1, 1, G, 1, H, N) (through buf, like x). -> (T, Bt, G, NC, H)."""
    if X.shape[-2] == 1 and x.shape[-2] != 1:
        return torch.matmul(x, X.transpose(-1, -2)).squeeze(-1)
    return torch.mul(x, X, out=buf).sum(-1)


def _time_major(x: torch.Tensor, cdtype: torch.dtype) -> torch.Tensor:
    """(*P, L) -> (L, *P), contiguous in the compute dtype. Time innermost (x.stride(-1) == 1): one 2-D
    transpose (torch copies a 2-D transpose about 4x faster than the same permutation of a 4-D tensor:
    110 vs 414 us for (2, 1, 64, 1024) fp32, one thread); time already strided (a transposed view, as
    Mamba's projections give delta, B and C): a copy of whole rows of the last leading dim."""
    x = x.to(cdtype)
    if x.numel() == 0 or x.stride(-1) != 1:
        return x.movedim(-1, 0).contiguous()
    lead, length = tuple(x.shape[:-1]), x.shape[-1]
    return x.reshape(-1, length).t().contiguous().view(length, *lead)


def _from_time_major(x: torch.Tensor) -> torch.Tensor:
    """(L, *P) -> (*P, L) contiguous (the inverse of :func:`_time_major`)."""
    if x.numel() == 0:
        return x.movedim(0, -1).contiguous()
    length, lead = x.shape[0], tuple(x.shape[1:])
    return x.reshape(length, -1).t().contiguous().view(*lead, length)


def _tm_chunks(xtm: torch.Tensor, s: int, e: int, nc: int, t: int) -> torch.Tensor:
    """Steps [s, e) of a time-major (L, Bt, G, X) tensor in the chunk layout (T, Bt, G, NC, X)."""
    return xtm[s:e].view(nc, t, *xtm.shape[1:]).permute(1, 2, 3, 0, 4).contiguous()


def _tm_put(xtm: torch.Tensor, s: int, e: int, x: torch.Tensor) -> None:
    """Writes x (T, Bt, G, NC, X), steps [s, e) in the chunk layout, into the time-major (L, Bt, G, X)."""
    t, nc = x.shape[0], x.shape[3]
    xtm[s:e].view(nc, t, *xtm.shape[1:]).copy_(x.permute(3, 0, 1, 2, 4))


class _Workspace:
    """Big per-segment buffers, allocated once per call and reused by every segment: a fresh multi-MiB
    tensor per op costs page faults (measured: exp of a fresh product 3x slower than in place)."""

    bufs: dict[str, torch.Tensor]

    def __init__(self, dtype: torch.dtype, device: torch.device) -> None:
        self.dtype, self.device, self.bufs = dtype, device, {}

    def get(self, name: str, shape: Sequence[int]) -> torch.Tensor:
        numel = 1
        for d in shape:
            numel *= d
        buf = self.bufs.get(name)
        if buf is None or buf.numel() < numel:
            buf = torch.empty(numel, dtype=self.dtype, device=self.device)
            self.bufs[name] = buf
        return buf[:numel].view(shape)


def _forward_states(
    a: torch.Tensor,
    b: torch.Tensor,
    dt: torch.Tensor,
    A2: torch.Tensor,
    h0: torch.Tensor,
    hbuf: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """States of one segment in the chunk layout.

    a, b: (T, Bt, G, NC, H, N) decay and input per step; dt: (T, Bt, G, NC, H, 1); A2: A log2(e) as
    (1, 1, G, 1, H, N);
    h0: (Bt, G, H, N). Returns hbuf (T + 1, Bt, G, NC, H, N) with ``hbuf[1 + j][:, :, c]`` the state
    after step j of chunk c and ``hbuf[0][:, :, c]`` the state entering chunk c (so hbuf[1:] are the
    states and hbuf[:-1] the states one step earlier).
    """
    t, nc = a.shape[0], a.shape[3]
    if hbuf is None:
        hbuf = torch.empty((t + 1,) + tuple(a.shape[1:]), dtype=a.dtype, device=a.device)
    # unbind once (one op) instead of indexing every step (one op per index): a third of the ops.
    a_s, b_s, h_s = a.unbind(0), b.unbind(0), hbuf.unbind(0)
    if nc == 1:
        hbuf[0, :, :, 0] = h0
    else:
        # Pass 1: each chunk's end state from a zero initial state, all chunks at once (into the last two
        # state slices, which pass 2 overwrites).
        h = b_s[0]
        for j in range(1, t):
            h = torch.addcmul(b_s[j], a_s[j], h, out=h_s[t - (j % 2)])
        # Carry across chunks with the chunk decay exp(A * sum(delta)) (= the product of its steps' decays).
        decay = torch.exp2(dt.sum(0) * A2[0]).unbind(2)  # NC x (Bt, G, H, N)
        hin = h_s[0].unbind(2)
        h_c = h.unbind(2)
        hin[0].copy_(h0)
        for c in range(nc - 1):
            torch.addcmul(h_c[c], decay[c], hin[c], out=hin[c + 1])
    # Pass 2: the states from each chunk's true initial state.
    for j in range(t):
        torch.addcmul(b_s[j], a_s[j], h_s[j], out=h_s[j + 1])
    return hbuf


def _reverse_states(
    a: torch.Tensor,
    c: torch.Tensor,
    dt: torch.Tensor,
    A2: torch.Tensor,
    carry: torch.Tensor,
    g: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Reverse scan of one segment (chunk layout): ``g_i = c_i + a_{i+1} g_{i+1}``, the step past the end
    given by ``carry`` (= a_next * g_next, already decayed). Returns (g like c, the carry for the segment
    before: a_0 * g_0)."""
    t, nc = a.shape[0], a.shape[3]
    if g is None:
        g = torch.empty_like(c)
    a_s, c_s, g_s = a.unbind(0), c.unbind(0), g.unbind(0)
    if nc == 1:
        ein = carry.unsqueeze(2)
    else:
        r = c_s[t - 1]
        for j in range(t - 2, -1, -1):
            r = torch.addcmul(c_s[j], a_s[j + 1], r)
        # Decay from a chunk's first step to the step past its end, excluding step 0's own decay.
        inner = torch.exp2((dt.sum(0) - dt[0]) * A2[0]).unbind(2)
        ein = torch.empty_like(r)
        ein_k, r_k, a0_k = ein.unbind(2), r.unbind(2), a_s[0].unbind(2)
        ein_k[nc - 1].copy_(carry)
        for k in range(nc - 1, 0, -1):
            torch.mul(a0_k[k], torch.addcmul(r_k[k], inner[k], ein_k[k]), out=ein_k[k - 1])
    torch.add(c_s[t - 1], ein, out=g_s[t - 1])
    for j in range(t - 2, -1, -1):
        torch.addcmul(c_s[j], a_s[j + 1], g_s[j + 1], out=g_s[j])
    return g, a_s[0][:, :, 0] * g_s[0][:, :, 0]


class _ScanCore(torch.autograd.Function):
    """(u, dt, A, B, C, h0) -> (y, last state). Shapes (Bt = batch, D = G * H):

    u, dt: (Bt, G, H, L); A: (G, H, N) in the compute dtype; B, C: (Bt, G, L, N) (variable) or (G, H, N)
    (constant); h0: (Bt, G, H, N) or None. y: (Bt, G, H, L) and the last state (Bt, G, H, N) in the
    compute dtype (A's).
    """

    @staticmethod
    def forward(
        ctx: Any,
        u: torch.Tensor,
        dt: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        h0: Optional[torch.Tensor],
        segment: int,
        chunk: int,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        segs = _segments(u.shape[-1], segment, chunk)
        y, cur, starts = _scan_forward(u, dt, A, B, C, h0, segs)
        ctx.save_for_backward(u, dt, A, B, C, *starts)
        ctx.segs = segs
        ctx.has_h0 = h0 is not None
        return y, cur

    @staticmethod
    def backward(
        ctx: Any, dy: Optional[torch.Tensor], dlast: Optional[torch.Tensor]
    ) -> tuple[Optional[torch.Tensor], ...]:
        u, dt, A, B, C, *starts = ctx.saved_tensors
        grads = _scan_backward(u, dt, A, B, C, starts, ctx.has_h0, dy, dlast, ctx.segs, ctx.needs_input_grad)
        return (*grads, None, None)


def _scan_threads() -> int:
    """Intra-op threads for the core's CPU ops: ``MAMBA_SSM_SCAN_THREADS`` (0: torch's setting), default 1."""
    text = os.environ.get("MAMBA_SSM_SCAN_THREADS", "").strip()
    if not text:
        return 1
    try:
        value = int(text)
    except ValueError:
        raise ValueError(
            f"MAMBA_SSM_SCAN_THREADS={text!r} is not a whole number of threads (e.g. 1; 0 keeps "
            "torch's setting)"
        ) from None
    if value < 0:
        raise ValueError(f"MAMBA_SSM_SCAN_THREADS={text!r} must be >= 0 (0 keeps torch's setting)")
    return value


class _CpuThreads:
    """The core's CPU ops run with :func:`_scan_threads` intra-op threads; torch's count is restored after
    (see the module docstring for why)."""

    def __init__(self, device_type: str) -> None:
        want = _scan_threads() if device_type == "cpu" else 0
        self.prev = torch.get_num_threads() if want else 0
        self.want = want if want and want != self.prev else 0

    def __enter__(self) -> Self:
        if self.want:
            torch.set_num_threads(self.want)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        if self.want:
            torch.set_num_threads(self.prev)
        return False


def _scan_forward(
    u: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    h0: Optional[torch.Tensor],
    segs: Sequence[Tuple[int, int, int]],
) -> tuple[torch.Tensor, torch.Tensor, List[torch.Tensor]]:
    """The core's forward (shapes: :class:`_ScanCore`): returns (y, last state, the state entering each
    segment)."""
    with _CpuThreads(u.device.type):
        return _scan_forward_core(u, dt, A, B, C, h0, segs)


def _scan_forward_core(
    u: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    h0: Optional[torch.Tensor],
    segs: Sequence[Tuple[int, int, int]],
) -> tuple[torch.Tensor, torch.Tensor, List[torch.Tensor]]:
    cdtype = A.dtype
    bt, g, hh, seqlen = u.shape
    n = A.shape[-1]
    A2 = A.reshape(1, 1, g, 1, hh, n) * _LOG2E
    # Per-step inputs and the output time-major ((L, Bt, G, H) / (L, Bt, G, N)); constant B, C reshaped
    # once to broadcast.
    dtm, utm = _time_major(dt, cdtype), _time_major(u, cdtype)
    Bl, Cl = _bc_layout(B, cdtype), _bc_layout(C, cdtype)
    ytm = torch.empty(seqlen, bt, g, hh, dtype=cdtype, device=u.device)
    cur = torch.zeros(bt, g, hh, n, dtype=cdtype, device=u.device) if h0 is None else h0.to(cdtype)
    starts: List[torch.Tensor] = []
    ws = _Workspace(cdtype, u.device)
    for s, e, t in segs:
        starts.append(cur)
        nc = (e - s) // t
        shape = (t, bt, g, nc, hh, n)
        dts = _tm_chunks(dtm, s, e, nc, t).unsqueeze(-1)
        a = torch.mul(dts, A2, out=ws.get("a", shape)).exp2_()
        dtu = dts * _tm_chunks(utm, s, e, nc, t).unsqueeze(-1)
        Bs = _bc_segment(Bl, s, e, nc, t)
        b = torch.mul(dtu, Bs, out=ws.get("b", shape))
        hbuf = _forward_states(a, b, dts, A2, cur, ws.get("h", (t + 1,) + shape[1:]))
        cur = hbuf[t][:, :, nc - 1].clone()
        Cs = _bc_segment(Cl, s, e, nc, t)
        _tm_put(ytm, s, e, _dot_n(hbuf[1:], Cs, ws.get("b", shape)))
    del ws
    return _from_time_major(ytm), cur, starts


def _scan_backward(
    u: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    starts: Sequence[torch.Tensor],
    has_h0: bool,
    dy: Optional[torch.Tensor],
    dlast: Optional[torch.Tensor],
    segs: Sequence[Tuple[int, int, int]],
    need: Sequence[bool],
) -> _CoreGrads:
    """The core's backward: (du, ddt, dA, dB, dC, dh0), None where ``need`` (needs_input_grad of
    u, dt, A, B, C, h0) says no gradient is wanted."""
    with _CpuThreads(u.device.type):
        return _scan_backward_core(u, dt, A, B, C, starts, has_h0, dy, dlast, segs, need)


def _scan_backward_core(
    u: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    starts: Sequence[torch.Tensor],
    has_h0: bool,
    dy: Optional[torch.Tensor],
    dlast: Optional[torch.Tensor],
    segs: Sequence[Tuple[int, int, int]],
    need: Sequence[bool],
) -> _CoreGrads:
    cdtype = A.dtype
    bt, g, hh, seqlen = u.shape
    n = A.shape[-1]
    A6 = A.reshape(1, 1, g, 1, hh, n)
    A2 = A6 * _LOG2E
    var_b, var_c = B.dim() == 4, C.dim() == 4

    def new(*shape: int) -> torch.Tensor:
        return torch.empty(*shape, dtype=cdtype, device=u.device)

    # Time-major ((L, Bt, G, H) / (L, Bt, G, N)) per-step inputs and gradients, as in the forward.
    dtm, utm = _time_major(dt, cdtype), _time_major(u, cdtype)
    Bl, Cl = _bc_layout(B, cdtype), _bc_layout(C, cdtype)
    dytm = (
        torch.zeros(seqlen, bt, g, hh, dtype=cdtype, device=u.device)
        if dy is None
        else _time_major(dy, cdtype)
    )
    dutm = new(seqlen, bt, g, hh) if need[0] else None
    ddttm = new(seqlen, bt, g, hh) if need[1] else None
    dA = torch.zeros_like(A) if need[2] else None
    dBtm = new(seqlen, bt, g, n) if need[3] and var_b else None
    dCtm = new(seqlen, bt, g, n) if need[4] and var_c else None
    dB = torch.zeros_like(B, dtype=cdtype) if need[3] and not var_b else None
    dC = torch.zeros_like(C, dtype=cdtype) if need[4] and not var_c else None
    carry = torch.zeros(bt, g, hh, n, dtype=cdtype, device=u.device) if dlast is None else dlast.to(cdtype)
    ws = _Workspace(cdtype, u.device)
    for (s, e, t), h0 in zip(reversed(segs), reversed(starts)):
        nc = (e - s) // t
        shape = (t, bt, g, nc, hh, n)
        dts = _tm_chunks(dtm, s, e, nc, t).unsqueeze(-1)
        us = _tm_chunks(utm, s, e, nc, t).unsqueeze(-1)
        dys = _tm_chunks(dytm, s, e, nc, t).unsqueeze(-1)
        Bs, Cs = _bc_segment(Bl, s, e, nc, t), _bc_segment(Cl, s, e, nc, t)
        a = torch.mul(dts, A2, out=ws.get("a", shape)).exp2_()
        dtu = dts * us
        tmp = ws.get("tmp", shape)
        hbuf = _forward_states(a, torch.mul(dtu, Bs, out=tmp), dts, A2, h0, ws.get("h", (t + 1,) + shape[1:]))
        if need[4]:
            # variable C: sum over the group's channels, (1, H) @ (H, N) per (step, batch, group, chunk)
            if dCtm is not None:
                _tm_put(dCtm, s, e, torch.matmul(dys.transpose(-1, -2), hbuf[1:]).squeeze(-2))
            elif dC is not None:
                dC += torch.mul(hbuf[1:], dys, out=tmp).sum((0, 1, 3))
        gs, carry = _reverse_states(a, torch.mul(dys, Cs, out=tmp), dts, A2, carry, ws.get("g", shape))
        if need[0] or need[1] or need[3]:
            gBn = _dot_n(gs, Bs, tmp).unsqueeze(-1)
            if dutm is not None:
                _tm_put(dutm, s, e, (dts * gBn).squeeze(-1))
            if need[3]:
                if dBtm is not None:
                    _tm_put(dBtm, s, e, torch.matmul(dtu.transpose(-1, -2), gs).squeeze(-2))
                elif dB is not None:
                    dB += torch.mul(gs, dtu, out=tmp).sum((0, 1, 3))
        if need[1] or need[2]:
            q = torch.mul(gs, a, out=tmp)
            q *= hbuf[:-1]
            if ddttm is not None:
                qA = torch.mul(q, A6, out=a).sum(-1, keepdim=True)  # a is no longer needed
                _tm_put(ddttm, s, e, (qA + us * gBn).squeeze(-1))
            if dA is not None:
                dA += q.mul_(dts).sum((0, 1, 3))
    del ws
    du = _from_time_major(dutm) if dutm is not None else None
    ddt = _from_time_major(ddttm) if ddttm is not None else None
    # Variable dB / dC in B's and C's (Bt, G, L, N) layout, contiguous.
    if dBtm is not None:
        dB = dBtm.permute(1, 2, 0, 3).contiguous()
    if dCtm is not None:
        dC = dCtm.permute(1, 2, 0, 3).contiguous()
    dh0 = carry if has_h0 else None
    return du, ddt, dA, dB, dC, dh0


# Under torch.compile the core is one opaque op (torch.library.custom_op, torch >= 2.4) with a fake
# implementation and the same backward: tracing it step by step would unroll every Python loop of the
# chunked scan into the graph, and Dynamo refuses some of its ``out=`` calls ("Attempted to call op with
# non-contiguous `out=` tensor"). Eager calls keep using _ScanCore directly (no dispatcher overhead).


def _fresh(x: torch.Tensor, *inputs: Optional[torch.Tensor]) -> torch.Tensor:
    """x, copied when it is one of ``inputs`` (a custom op's outputs may not alias its inputs)."""
    return x.clone() if any(x is i for i in inputs if i is not None) else x


def _define_core_op() -> Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    from torch.library import custom_op, register_fake

    ns = "mamba_ssm_torch_scan"

    @custom_op(f"{ns}::scan_fwd", mutates_args=())
    def scan_fwd(
        u: torch.Tensor,
        dt: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        h0: Optional[torch.Tensor],
        segment: int,
        chunk: int,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        segs = _segments(u.shape[-1], segment, chunk)
        y, last, starts = _scan_forward(u, dt, A, B, C, h0, segs)
        stacked = torch.stack(starts) if starts else last.new_empty((0,) + tuple(last.shape))
        return y, _fresh(last, h0), stacked

    def scan_fwd_fake(
        u: torch.Tensor,
        dt: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        h0: Optional[torch.Tensor],
        segment: int,
        chunk: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        bt, g, hh, seqlen = u.shape
        n = A.shape[-1]
        nseg = len(_segments(seqlen, segment, chunk))
        return (
            u.new_empty((bt, g, hh, seqlen), dtype=A.dtype),
            u.new_empty((bt, g, hh, n), dtype=A.dtype),
            u.new_empty((nseg, bt, g, hh, n), dtype=A.dtype),
        )

    register_fake(f"{ns}::scan_fwd")(scan_fwd_fake)

    @custom_op(f"{ns}::scan_bwd", mutates_args=())
    def scan_bwd(
        u: torch.Tensor,
        dt: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        starts: torch.Tensor,
        dy: torch.Tensor,
        dlast: torch.Tensor,
        segment: int,
        chunk: int,
        need: List[bool],
    ) -> List[torch.Tensor]:
        segs = _segments(u.shape[-1], segment, chunk)
        grads = _scan_backward(u, dt, A, B, C, list(starts.unbind(0)), need[5], dy, dlast, segs, need)
        # Not wanted: an empty tensor (a custom op returns tensors), turned back into None below.
        return [u.new_empty((0,), dtype=A.dtype) if x is None else _fresh(x, dlast) for x in grads]

    def scan_bwd_fake(
        u: torch.Tensor,
        dt: torch.Tensor,
        A: torch.Tensor,
        B: torch.Tensor,
        C: torch.Tensor,
        starts: torch.Tensor,
        dy: torch.Tensor,
        dlast: torch.Tensor,
        segment: int,
        chunk: int,
        need: List[bool],
    ) -> List[torch.Tensor]:
        bt, g, hh, seqlen = u.shape
        n = A.shape[-1]

        def like(x: torch.Tensor) -> torch.Tensor:
            return u.new_empty(tuple(x.shape), dtype=A.dtype)

        def bc(X: torch.Tensor) -> torch.Tensor:
            return u.new_empty((bt, g, seqlen, n) if X.dim() == 4 else tuple(X.shape), dtype=A.dtype)

        shapes: List[Callable[[], torch.Tensor]] = [
            lambda: like(u),
            lambda: like(u),
            lambda: like(A),
            lambda: bc(B),
            lambda: bc(C),
            lambda: u.new_empty((bt, g, hh, n), dtype=A.dtype),
        ]
        return [make() if want else u.new_empty((0,), dtype=A.dtype) for make, want in zip(shapes, need)]

    register_fake(f"{ns}::scan_bwd")(scan_bwd_fake)

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        u, dt, A, B, C, h0, segment, chunk = inputs
        ctx.save_for_backward(u, dt, A, B, C, output[2])
        ctx.segment, ctx.chunk = segment, chunk
        ctx.h0_shape = None if h0 is None else tuple(h0.shape)

    def backward(
        ctx: Any, dy: Optional[torch.Tensor], dlast: Optional[torch.Tensor], _dstarts: Optional[torch.Tensor]
    ) -> tuple[Optional[torch.Tensor], ...]:
        u, dt, A, B, C, starts = ctx.saved_tensors
        need = [bool(x) for x in ctx.needs_input_grad[:6]]
        need[5] = need[5] and ctx.h0_shape is not None
        bt, g, hh, seqlen = u.shape
        if dy is None:
            dy = u.new_zeros((bt, g, hh, seqlen), dtype=A.dtype)
        if dlast is None:
            dlast = u.new_zeros((bt, g, hh, A.shape[-1]), dtype=A.dtype)
        grads = torch.ops.mamba_ssm_torch_scan.scan_bwd(
            u, dt, A, B, C, starts, dy, dlast, ctx.segment, ctx.chunk, need
        )
        return (*[x if want else None for x, want in zip(grads, need)], None, None)

    scan_fwd.register_autograd(backward, setup_context=setup_context)
    return scan_fwd


_CORE_OP: Optional[Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]
try:  # at import: defining it while Dynamo traces a call would not work
    _CORE_OP = _define_core_op()
except (ImportError, AttributeError, TypeError):  # torch < 2.4: no torch.library.custom_op
    _CORE_OP = None


def _compiling() -> bool:
    try:
        return bool(torch.compiler.is_compiling())
    except AttributeError:  # torch without torch.compiler
        return False


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


def selective_scan_with_state(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    delta_bias: Optional[torch.Tensor] = None,
    delta_softplus: bool = False,
    initial_state: Optional[torch.Tensor] = None,
    segment: Optional[int] = None,
    chunk: Optional[int] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
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
    with (
        torch.autocast(device_type=device_type, enabled=False)
        if _autocast_known(device_type)
        else _nullcontext()
    ):
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
            seg, ch = plan_chunks(
                batch, dim, n, seqlen, torch.empty((), dtype=cdtype).element_size(), device_type=device_type
            )
            segment = segment or seg
            chunk = chunk or ch
        core = _CORE_OP if _compiling() else None
        if core is not None:
            y, last, _ = core(u4, dt4, A3, Bc, Cc, h0, segment, chunk)
        else:
            y, last = _ScanCore.apply(u4, dt4, A3, Bc, Cc, h0, segment, chunk)
        out = y.reshape(batch, dim, seqlen)
        if D is not None:
            out = out + u.to(cdtype) * D.to(cdtype).unsqueeze(-1)
        if z is not None:
            out = out * torch.nn.functional.silu(z.to(cdtype))
        return out.to(u.dtype), last.reshape(batch, dim, n)


def selective_scan(
    u: torch.Tensor,
    delta: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    delta_bias: Optional[torch.Tensor] = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
) -> Union[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
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


class _nullcontext:  # noqa: N801 - contextlib.nullcontext's name
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> Literal[False]:
        return False


def _autocast_known(device_type: str) -> bool:
    return device_type in ("cpu", "cuda", "xpu", "hpu", "mps")
