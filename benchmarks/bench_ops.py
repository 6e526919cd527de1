#!/usr/bin/env python
"""Op benchmark: mamba_ssm's kernels for the hot-path ops (issue 10) against PyTorch, interleaved in one run.

Each entry of ``ENTRIES`` is one op on one set of devices: its shape, the kernel under test ("ours": the
compiled ``mamba_ssm._C`` kernel or the Triton kernel, whichever the dispatcher picks) and one or more
baselines (our PyTorch path of the same op, ``F.conv1d(groups=D)`` + SiLU, the Mamba-1 scan at equal
state size). Every round times every variant of an entry once, in an order that rotates from round to
round (so load on a shared machine hits them alike); the table gives the medians over the rounds of wall
time and of this process's CPU time (``time.process_time``) per call, and each baseline's time / ours
(the speed-up). CPU time is the steadier figure on a loaded machine; on CUDA the wall time (between
``torch.cuda.synchronize`` calls) is the one that counts. On CUDA, rows with a byte count (the bytes the
op must move at least) also give the achieved bandwidth against the measured device-to-device copy
bandwidth (``Tensor.copy_`` of 1 GiB, read + written bytes / time).

An entry is skipped, with the dispatcher's reason, where its kernel does not run: the Triton rows (SSD,
``mamba_split_conv1d_scan_combined``, ``selective_state_update``, the norms) on ``--device cpu``, the
compiled rows when ``mamba_ssm._C`` is not loaded. One failing entry is reported and does not stop the
others. CPU rows run with one torch thread unless ``--threads`` says otherwise.

Issue 10's goals (as ratios in one run): CPU causal_conv1d fwd (B=8, D=1536, L=2048, width 4, fp32, 1
thread) >= 2x ``F.conv1d(groups=D)`` + SiLU, ``causal_conv1d_update`` at batch 1 >= 5x the PyTorch path
(judged on CPU time); GPU selective_state_update and causal conv1d >= 60 % of copy bandwidth, SSD fwd+bwd
(B=4, L=4096, 32 heads x headdim 64, d_state 128, bf16) >= 10x our PyTorch SSD and faster than our
Mamba-1 scan at equal state size (judged on wall time).

Usage::

    python benchmarks/bench_ops.py --device cpu  [--repeats 7] [--threads 1] [--only conv1d,update] [--write-doc]
    python benchmarks/bench_ops.py --device cuda [--reps 5] [--skip mamba3] [--out DIR]

``--only`` takes comma-separated pieces of entry names (an entry runs when any piece is in its name),
``--skip`` the same to leave entries out;
``--reps`` is an alias of ``--repeats``; ``--out DIR`` writes ``bench_ops_<device>.md`` and ``.json`` there,
rewritten after every entry (a run cut short keeps what it measured); ``--write-doc`` puts the table into
docs/benchmarks.md between the ``bench_ops:<device>`` markers. Exit status: 0 after a run (skipped
entries included), 2 when ``--device cuda`` finds no CUDA device, or on bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import json
import os
import platform
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _docsection import replace_section

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
DOC = os.path.join(REPO, "docs", "benchmarks.md")


@dataclasses.dataclass
class Impl:
    """One variant of an entry: ``fn()`` runs the op once under ``backend`` (set with
    ``mamba_ssm.set_backend`` around each sample, outside the timing; None: leave it as it is)."""

    label: str
    fn: Callable[[], object]
    backend: Optional[str] = None
    goal: Optional[float] = None  # speed-up over ours asked for when this is a baseline (None: reported only)


@dataclasses.dataclass
class Case:
    """What an entry's ``make(device)`` returns: ours, then the baselines, on inputs already built."""

    ours: Impl
    baselines: List[Impl]
    calls: int = 1  # calls per timed sample (short ops repeat inside one sample)
    nbytes: Optional[int] = None  # bytes ours must move at least per call (bandwidth column on CUDA)


@dataclasses.dataclass
class Entry:
    name: str
    devices: Tuple[str, ...]  # device types the entry runs on
    shape: str
    op: str  # mamba_ssm._dispatch op name: which backend ours runs on
    kernel: Optional[str]  # the backend ours must get ("compiled" or "triton"), else skipped; None: any
    make: Callable[[str], Case]
    bw_goal: Optional[float] = None  # fraction of copy bandwidth asked for on CUDA


# ------------------------------------------------------------------------------------- inputs
def _randn(gen, device, *shape, dtype=None, scale=1.0, grad=False):
    import torch

    t = (torch.randn(*shape, generator=gen) * scale).to(device=device, dtype=dtype or torch.float32)
    return t.requires_grad_(grad)


def _gen():
    import torch

    return torch.Generator().manual_seed(0)


# ----------------------------------------------------------------------------- causal conv1d (item 2)
CONV_B, CONV_D, CONV_L, CONV_W = 8, 1536, 2048, 4
CONV_SHAPE = f"B={CONV_B} D={CONV_D} L={CONV_L} width {CONV_W} fp32, SiLU, bias"


def _conv_inputs(device, grad=False):
    g = _gen()
    return (
        _randn(g, device, CONV_B, CONV_D, CONV_L, grad=grad),
        _randn(g, device, CONV_D, CONV_W, scale=0.5, grad=grad),
        _randn(g, device, CONV_D, scale=0.1, grad=grad),
    )


def make_conv_fwd(device):
    import torch.nn.functional as F

    from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn

    x, w, b = _conv_inputs(device)
    w3 = w.unsqueeze(1)
    ours = lambda: causal_conv1d_fn(x, w, b, activation="silu")
    # Mamba's own fallback: a padded depthwise conv1d, cut to seqlen, then SiLU.
    conv = lambda: F.silu(F.conv1d(x, w3, b, padding=CONV_W - 1, groups=CONV_D)[..., :CONV_L])
    return Case(
        Impl("mamba_ssm._C", ours, "auto"),
        [
            Impl("F.conv1d(groups=D)+SiLU", conv, goal=2.0 if device == "cpu" else None),
            Impl("our PyTorch path", ours, "torch"),
        ],
        nbytes=2 * x.numel() * x.element_size(),
    )  # read x, write out


def make_conv_fwd_bwd(device):
    import torch

    from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn

    x, w, b = _conv_inputs(device, grad=True)
    dout = torch.randn(x.shape, device=device)

    def run():
        x.grad = w.grad = b.grad = None
        causal_conv1d_fn(x, w, b, activation="silu").backward(dout)

    return Case(
        Impl("mamba_ssm._C", run, "auto"),
        [Impl("our PyTorch path", run, "torch")],
        nbytes=5 * x.numel() * x.element_size(),
    )  # fwd: read x, write out; bwd: read x, dout, write dx


def make_conv_update(device):
    from mamba_ssm.ops.causal_conv1d import causal_conv1d_update

    g = _gen()
    x, w, b = _randn(g, device, 1, CONV_D), _randn(g, device, CONV_D, CONV_W), _randn(g, device, CONV_D)
    state = _randn(g, device, 1, CONV_D, CONV_W)
    run = lambda: causal_conv1d_update(x, state, w, b, "silu")
    return Case(
        Impl("mamba_ssm._C", run, "auto"),
        [Impl("our PyTorch path", run, "torch", goal=5.0 if device == "cpu" else None)],
        calls=500,
        nbytes=(2 * x.numel() + 2 * state.numel()) * 4,
    )


VARLEN_SEQS = 8


def make_conv_varlen_states(device):
    import torch

    from mamba_ssm.ops.causal_conv1d import causal_conv1d_varlen_states

    g = _gen()
    total = CONV_B * CONV_L
    x = _randn(g, device, total, CONV_D)
    cuts = torch.sort(torch.randint(1, total, (VARLEN_SEQS - 1,), generator=g)).values
    cu = torch.cat([torch.tensor([0]), cuts, torch.tensor([total])]).to(device=device, dtype=torch.int32)
    run = lambda: causal_conv1d_varlen_states(x, cu, CONV_W)
    return Case(
        Impl("mamba_ssm._C", run, "auto"),
        [Impl("our PyTorch path", run, "torch")],
        calls=20,
        nbytes=2 * VARLEN_SEQS * CONV_D * CONV_W * 4,
    )


# ------------------------------------------------------------------------ Triton kernels (item 1)
SSD_B, SSD_L, SSD_H, SSD_P, SSD_N, SSD_CHUNK = 4, 4096, 32, 64, 128, 256


def make_ssd(device):
    import torch

    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    b, l, h, p, n, bf = SSD_B, SSD_L, SSD_H, SSD_P, SSD_N, torch.bfloat16
    g = _gen()
    x = _randn(g, device, b, l, h, p, dtype=bf, grad=True)
    dt = (torch.rand(b, l, h, generator=g) * 0.1).to(device, bf).requires_grad_(True)
    A = (-torch.rand(h, generator=g) - 0.5).to(device).requires_grad_(True)
    B = _randn(g, device, b, l, 1, n, dtype=bf, grad=True)
    C = _randn(g, device, b, l, 1, n, dtype=bf, grad=True)
    dy = _randn(g, device, b, l, h, p, dtype=bf)

    def ssd():
        mamba_chunk_scan_combined(x, dt, A, B, C, SSD_CHUNK).backward(dy)

    # Mamba-1's scan at the same state size: d_inner = heads * headdim channels x d_state.
    d = h * p
    u = _randn(g, device, b, d, l, dtype=bf, grad=True)
    delta = (torch.rand(b, d, l, generator=g) * 0.1).to(device, bf).requires_grad_(True)
    A1 = (-torch.rand(d, n, generator=g) - 0.5).to(device).requires_grad_(True)
    B1 = _randn(g, device, b, n, l, dtype=bf, grad=True)
    C1 = _randn(g, device, b, n, l, dtype=bf, grad=True)
    du = _randn(g, device, b, d, l, dtype=bf)

    def scan1():
        selective_scan_fn(u, delta, A1, B1, C1).backward(du)

    return Case(
        Impl("triton", ssd, "auto"),
        [
            Impl("our PyTorch SSD", ssd, "torch", goal=10.0),
            Impl(
                f"Mamba-1 selective_scan fwd+bwd (compiled), d_inner {d} x d_state {n}",
                scan1,
                "auto",
                goal=1.0,
            ),
        ],
    )


SPLIT_B, SPLIT_L, SPLIT_H, SPLIT_P, SPLIT_N = 2, 2048, 32, 64, 128


def make_split_conv1d_scan(device):
    import torch

    from mamba_ssm.ops.triton.ssd_combined import mamba_split_conv1d_scan_combined

    b, l, h, p, n, bf = SPLIT_B, SPLIT_L, SPLIT_H, SPLIT_P, SPLIT_N, torch.bfloat16
    dim, conv_dim = h * p, h * p + 2 * n
    g = _gen()
    zxbcdt = _randn(g, device, b, l, 2 * dim + 2 * n + h, dtype=bf, grad=True)
    wconv = _randn(g, device, conv_dim, CONV_W, scale=0.5, grad=True)
    bconv = _randn(g, device, conv_dim, scale=0.1, grad=True)
    dt_bias = _randn(g, device, h, scale=0.1, grad=True)
    A = (-torch.rand(h, generator=g) - 0.5).to(device).requires_grad_(True)
    D = _randn(g, device, h, grad=True)
    norm_w = (1 + _randn(g, device, dim, scale=0.1)).requires_grad_(True)
    dy = _randn(g, device, b, l, dim, dtype=bf)

    def run():
        mamba_split_conv1d_scan_combined(
            zxbcdt,
            wconv,
            bconv,
            dt_bias,
            A,
            D,
            SSD_CHUNK,
            rmsnorm_weight=norm_w,
            headdim=p,
            ngroups=1,
            norm_before_gate=False,
        ).backward(dy)

    return Case(Impl("triton", run, "auto"), [Impl("our PyTorch path", run, "torch")])


UPD_B, UPD_H, UPD_P, UPD_N = 64, 80, 64, 128  # Mamba-2 2.7B decode, batch 64


def make_state_update(device):
    import torch

    from mamba_ssm.ops.triton.selective_state_update import selective_state_update

    b, h, p, n, bf = UPD_B, UPD_H, UPD_P, UPD_N, torch.bfloat16
    g = _gen()
    state = _randn(g, device, b, h, p, n, dtype=bf)
    x = _randn(g, device, b, h, p, dtype=bf)
    dt = torch.rand(b, h, generator=g).to(device, bf)[:, :, None].expand(b, h, p)
    A = (-torch.rand(h, generator=g)).to(device)[:, None, None].expand(h, p, n)
    B = _randn(g, device, b, 1, n, dtype=bf)
    C = _randn(g, device, b, 1, n, dtype=bf)
    D = _randn(g, device, h)[:, None].expand(h, p)
    dt_bias = torch.rand(h, generator=g).to(device)[:, None].expand(h, p)
    run = lambda: selective_state_update(state, x, dt, A, B, C, D, None, dt_bias, True)
    return Case(
        Impl("triton", run, "auto"),
        [Impl("our PyTorch path", run, "torch")],
        calls=20,
        nbytes=2 * state.numel() * state.element_size(),
    )  # the state: read and written


# Mamba-3: the backend the dispatcher picks for it (its Triton kernels on a CUDA/ROCm GPU), against
# Mamba-2's SSD (and its decode step) at the same shape, and against our Mamba-3 PyTorch path.
M3_B, M3_L, M3_H, M3_P, M3_N, M3_CHUNK, M3_R = 2, 4096, 32, 64, 128, 64, 4
M3_SHAPE = f"B={M3_B} L={M3_L} {M3_H} heads x headdim {M3_P}, d_state {M3_N}, 1 group, bf16"


def _backend_label(op, device):
    from mamba_ssm import _dispatch

    return str(_dispatch.plan(op, device).backend)


def _mamba3_inputs(device, rank=None):
    """Mamba3 layer-like op inputs (SISO, or MIMO with ``rank``), every float input requiring grad."""
    import torch

    b, l, h, p, n, bf = M3_B, M3_L, M3_H, M3_P, M3_N, torch.bfloat16
    g = _gen()
    qk = (b, l, 1, n) if rank is None else (b, l, rank, 1, n)
    bias = (h, n) if rank is None else (h, rank, n)
    dt = (torch.rand(b, h, l, generator=g) * 0.1 + 0.001).to(device)
    t = {
        "Q": _randn(g, device, *qk, dtype=bf, grad=True),
        "K": _randn(g, device, *qk, dtype=bf, grad=True),
        "V": _randn(g, device, b, l, h, p, dtype=bf, grad=True),
        "ADT": (-dt * torch.rand(b, h, l, generator=g).to(device)).requires_grad_(True),
        "DT": dt.requires_grad_(True),
        "Trap": _randn(g, device, b, h, l, dtype=bf, grad=True),
        "Q_bias": (1 + _randn(g, device, *bias, scale=0.1)).requires_grad_(True),
        "K_bias": (1 + _randn(g, device, *bias, scale=0.1)).requires_grad_(True),
        "Angles": _randn(g, device, b, l, h, n // 4, grad=True),
        "D": _randn(g, device, h, grad=True),
        "Z": _randn(g, device, b, l, h, p, dtype=bf, grad=True),
    }
    dy = _randn(g, device, b, l, h, p, dtype=bf)
    return t, dy


def _ssd_same_shape(device, backward):
    """Mamba-2's SSD (mamba_chunk_scan_combined, chunk 256) at the Mamba-3 rows' shape."""
    import torch

    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    b, l, h, p, n, bf = M3_B, M3_L, M3_H, M3_P, M3_N, torch.bfloat16
    g = _gen()
    x = _randn(g, device, b, l, h, p, dtype=bf, grad=backward)
    dt = (torch.rand(b, l, h, generator=g) * 0.1).to(device, bf).requires_grad_(backward)
    A = (-torch.rand(h, generator=g) - 0.5).to(device).requires_grad_(backward)
    B = _randn(g, device, b, l, 1, n, dtype=bf, grad=backward)
    C = _randn(g, device, b, l, 1, n, dtype=bf, grad=backward)
    z = _randn(g, device, b, l, h, p, dtype=bf, grad=backward)
    dy = _randn(g, device, b, l, h, p, dtype=bf)

    def run():
        y = mamba_chunk_scan_combined(x, dt, A, B, C, 256, z=z)
        if backward:
            y.backward(dy)

    return Impl(
        "Mamba-2 SSD (mamba_chunk_scan_combined, chunk 256)" + (" fwd+bwd" if backward else ""), run, "auto"
    )


def _make_mamba3_siso(device, backward):
    import torch

    from mamba_ssm.ops.triton.mamba3.mamba3_siso_combined import mamba3_siso_combined

    t, dy = _mamba3_inputs(device)

    def run():
        with torch.set_grad_enabled(backward):
            y = mamba3_siso_combined(**t, chunk_size=M3_CHUNK)
            if backward:
                y.backward(dy)

    return Case(
        Impl(_backend_label("mamba3_siso", device), run, "auto"),
        [_ssd_same_shape(device, backward), Impl("our Mamba-3 PyTorch path", run, "torch")],
    )


def make_mamba3_siso_fwd(device):
    return _make_mamba3_siso(device, False)


def make_mamba3_siso_fwd_bwd(device):
    return _make_mamba3_siso(device, True)


def make_mamba3_mimo_fwd_bwd(device):
    import torch

    from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo import mamba3_mimo

    t, dy = _mamba3_inputs(device, rank=M3_R)
    g = _gen()
    mimo = [_randn(g, device, M3_H, M3_R, M3_P, grad=True) for _ in range(3)]

    def run():
        y = mamba3_mimo(
            t["Q"], t["K"], t["V"], t["ADT"], t["DT"], t["Trap"], t["Q_bias"], t["K_bias"], *mimo, t["Angles"],
            t["D"], t["Z"], M3_CHUNK // M3_R, 4, torch.bfloat16,
        )  # fmt: skip
        y.backward(dy)

    return Case(
        Impl(_backend_label("mamba3_mimo", device), run, "auto"),
        [_ssd_same_shape(device, True), Impl("our Mamba-3 PyTorch path", run, "torch")],
    )


def make_mamba3_step(device):
    import torch

    from mamba_ssm.ops.triton.mamba3.mamba3_step import mamba3_step
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update

    b, h, p, n, bf = UPD_B, UPD_H, UPD_P, UPD_N, torch.bfloat16
    g = _gen()
    q, k = _randn(g, device, b, 1, 1, n, dtype=bf), _randn(g, device, b, 1, 1, n, dtype=bf)
    v, z = _randn(g, device, b, h, p, dtype=bf), _randn(g, device, b, h, p, dtype=bf)
    dt = (torch.rand(b, h, generator=g) * 0.1).to(device)
    adt, trap = -dt, _randn(g, device, b, h)
    qb, kb = _randn(g, device, h, 1, n), _randn(g, device, h, 1, n)
    angles, D = _randn(g, device, b, h, n // 4), _randn(g, device, h)
    states = (
        torch.zeros(b, h, n // 4, device=device),
        _randn(g, device, b, h, p, n),
        _randn(g, device, b, 1, h, n, dtype=bf),
        _randn(g, device, b, h, p, dtype=bf),
    )

    def run():
        mamba3_step(q, k, v, adt, dt, trap, qb, kb, angles, states, D=D, Z=z)

    state = _randn(g, device, b, h, p, n)  # float32, as Mamba3's cache
    x = _randn(g, device, b, h, p, dtype=bf)
    dt2 = torch.rand(b, h, generator=g).to(device, bf)[:, :, None].expand(b, h, p)
    A = (-torch.rand(h, generator=g)).to(device)[:, None, None].expand(h, p, n)
    B2, C2 = _randn(g, device, b, 1, n, dtype=bf), _randn(g, device, b, 1, n, dtype=bf)
    D2 = _randn(g, device, h)[:, None].expand(h, p)

    def upd():
        selective_state_update(state, x, dt2, A, B2, C2, D2, z, None, False)

    return Case(
        Impl(_backend_label("mamba3_step", device), run, "auto"),
        [
            Impl("Mamba-2 selective_state_update (float32 state, z gate)", upd, "auto"),
            Impl("our Mamba-3 PyTorch path", run, "torch"),
        ],
        calls=20,
    )


NORM_ROWS, NORM_N, GATED_N = 16384, 4096, 5120


def _make_norm(device, fn, with_bias):
    import torch

    g = _gen()
    x = _randn(g, device, NORM_ROWS, NORM_N, dtype=torch.bfloat16)
    res = _randn(g, device, NORM_ROWS, NORM_N)
    w = _randn(g, device, NORM_N, dtype=torch.bfloat16)
    bias = _randn(g, device, NORM_N, dtype=torch.bfloat16) if with_bias else None
    run = lambda: fn(x, w, bias, residual=res, prenorm=True, residual_in_fp32=True)
    return Case(
        Impl("triton", run, "auto"),
        [Impl("our PyTorch path", run, "torch")],
        calls=5,
        nbytes=NORM_ROWS * NORM_N * (2 + 4 + 2 + 4),
    )  # read x bf16, residual fp32; write y, residual


def make_rms_norm(device):
    from mamba_ssm.ops.triton.layer_norm import rms_norm_fn

    return _make_norm(device, rms_norm_fn, with_bias=False)


def make_layer_norm(device):
    from mamba_ssm.ops.triton.layer_norm import layer_norm_fn

    return _make_norm(device, layer_norm_fn, with_bias=True)


def make_gated_rms_norm(device):
    import torch

    from mamba_ssm.ops.triton.layernorm_gated import rmsnorm_fn

    g = _gen()
    x, z = (_randn(g, device, NORM_ROWS, GATED_N, dtype=torch.bfloat16) for _ in range(2))
    w = _randn(g, device, GATED_N, dtype=torch.bfloat16)
    run = lambda: rmsnorm_fn(x, w, None, z=z, group_size=GATED_N // 8, norm_before_gate=False)
    return Case(
        Impl("triton", run, "auto"),
        [Impl("our PyTorch path", run, "torch")],
        calls=5,
        nbytes=NORM_ROWS * GATED_N * 2 * 3,
    )  # read x, z; write y (bf16)


SSD_SHAPE = f"B={SSD_B} L={SSD_L} {SSD_H} heads x headdim {SSD_P}, d_state {SSD_N}, chunk {SSD_CHUNK}, bf16"
ENTRIES: List[Entry] = [
    Entry(
        "causal_conv1d fwd",
        ("cpu", "cuda"),
        CONV_SHAPE,
        "causal_conv1d",
        "compiled",
        make_conv_fwd,
        bw_goal=0.6,
    ),
    Entry(
        "causal_conv1d fwd+bwd", ("cpu", "cuda"), CONV_SHAPE, "causal_conv1d", "compiled", make_conv_fwd_bwd
    ),
    Entry(
        "causal_conv1d_update",
        ("cpu", "cuda"),
        f"batch 1, D={CONV_D}, width {CONV_W}, state_len {CONV_W}, fp32, SiLU",
        "causal_conv1d_update",
        "compiled",
        make_conv_update,
    ),
    Entry(
        "causal_conv1d_varlen_states",
        ("cpu", "cuda"),
        f"{VARLEN_SEQS} sequences, {CONV_B * CONV_L} tokens, D={CONV_D}, state_len {CONV_W}, fp32",
        "causal_conv1d",
        "compiled",
        make_conv_varlen_states,
    ),
    Entry(
        "ssd_chunk_scan fwd+bwd (mamba_chunk_scan_combined)",
        ("cuda",),
        SSD_SHAPE,
        "ssd_chunk_scan",
        "triton",
        make_ssd,
    ),
    Entry(
        "selective_state_update",
        ("cuda",),
        f"Mamba-2 2.7B decode: batch {UPD_B}, {UPD_H} heads x headdim {UPD_P}, "
        f"d_state {UPD_N}, bf16 state, dt_bias + softplus, D",
        "selective_state_update",
        "triton",
        make_state_update,
        bw_goal=0.6,
    ),
    Entry(
        "rms_norm_fn + residual (prenorm)",
        ("cuda",),
        f"{NORM_ROWS} x {NORM_N} bf16, fp32 residual",
        "rms_norm",
        "triton",
        make_rms_norm,
    ),
    Entry(
        "layer_norm_fn + residual (prenorm)",
        ("cuda",),
        f"{NORM_ROWS} x {NORM_N} bf16, bias, fp32 residual",
        "layer_norm",
        "triton",
        make_layer_norm,
    ),
    Entry(
        "gated rmsnorm (layernorm_gated.rmsnorm_fn)",
        ("cuda",),
        f"{NORM_ROWS} x {GATED_N} bf16, 8 groups, z gate",
        "rms_norm",
        "triton",
        make_gated_rms_norm,
    ),
    Entry(
        "mamba_split_conv1d_scan_combined fwd+bwd",
        ("cuda",),
        f"B={SPLIT_B} L={SPLIT_L} {SPLIT_H} heads x headdim {SPLIT_P}, d_state {SPLIT_N}, 1 group, width {CONV_W}, "
        f"gated RMSNorm, bf16",
        "ssd_chunk_scan",
        "triton",
        make_split_conv1d_scan,
    ),
    Entry(
        "mamba3_siso_combined fwd",
        ("cuda",),
        M3_SHAPE + f", chunk {M3_CHUNK}",
        "mamba3_siso",
        None,
        make_mamba3_siso_fwd,
    ),
    Entry(
        "mamba3_siso_combined fwd+bwd",
        ("cuda",),
        M3_SHAPE + f", chunk {M3_CHUNK}",
        "mamba3_siso",
        None,
        make_mamba3_siso_fwd_bwd,
    ),
    Entry(
        "mamba3_mimo fwd+bwd",
        ("cuda",),
        M3_SHAPE + f", mimo_rank {M3_R}, chunk {M3_CHUNK // M3_R}",
        "mamba3_mimo",
        None,
        make_mamba3_mimo_fwd_bwd,
    ),
    Entry(
        "mamba3_step (decode)",
        ("cuda",),
        f"batch {UPD_B}, {UPD_H} heads x headdim {UPD_P}, d_state {UPD_N}, SISO, float32 state, bf16 inputs",
        "mamba3_step",
        None,
        make_mamba3_step,
    ),
]


# ------------------------------------------------------------------------------------------- timing
@contextlib.contextmanager
def _backend(name):
    if name is None:
        yield
        return
    import mamba_ssm

    prev = mamba_ssm.set_backend(name)
    try:
        yield
    finally:
        mamba_ssm.set_backend(prev)


def _sync(cuda):
    if cuda:
        import torch

        torch.cuda.synchronize()


def _sample(impl: Impl, calls: int, cuda: bool) -> Tuple[float, float]:
    """(wall ms, CPU ms) per call of one sample of ``calls`` calls."""
    with _backend(impl.backend):
        _sync(cuda)
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(calls):
            impl.fn()
        _sync(cuda)
        w1, c1 = time.perf_counter(), time.process_time()
    return (w1 - w0) * 1e3 / calls, (c1 - c0) * 1e3 / calls


def measure(impls: Sequence[Impl], repeats: int, cuda: bool, calls: int = 1) -> List[Tuple[float, float]]:
    """Interleaved medians, (wall ms, CPU ms) per call for each of ``impls``, in their order: one warm-up
    sample each (first-call setup, Triton compiles, the allocator), then ``repeats`` rounds, each timing
    every impl once, the order rotated by one each round."""
    for impl in impls:
        _sample(impl, calls, cuda)
    samples: List[List[Tuple[float, float]]] = [[] for _ in impls]
    k = len(impls)
    for r in range(repeats):
        for j in range(k):
            i = (j + r) % k
            samples[i].append(_sample(impls[i], calls, cuda))
    return [(statistics.median(s[0] for s in v), statistics.median(s[1] for s in v)) for v in samples]


def copy_bandwidth_gbs(repeats=10, nbytes=1 << 30) -> float:
    """Device-to-device copy of ``nbytes`` on the current CUDA device: (read + written bytes) / median
    time, GB/s (10^9 bytes)."""
    import torch

    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    ((wall, _),) = measure([Impl("copy", lambda: dst.copy_(src))], repeats, cuda=True)  # noqa: F821 - run before the del below
    del src, dst
    return 2 * nbytes / (wall * 1e-3) / 1e9


# ------------------------------------------------------------------------------------------- running
def _skip_reason(entry: Entry, device: str) -> Optional[str]:
    if device not in entry.devices:
        return f"runs on {'/'.join(entry.devices)} only" + (
            " (the Triton kernels target CUDA/ROCm GPUs)" if entry.kernel == "triton" else ""
        )
    from mamba_ssm import _dispatch

    with _backend("auto"):
        choice = _dispatch.plan(entry.op, device)
    if entry.kernel is not None and choice.backend != entry.kernel:
        return f"the {entry.kernel} kernel does not run here: {choice.reason or choice.backend}"
    return None


def _selected(entry: Entry, only: Sequence[str]) -> bool:
    return not only or any(piece in entry.name for piece in only)


def _fmt(ms):
    return f"{ms:.3f}" if ms < 1 else f"{ms:.1f}"


def run_entry(entry: Entry, device: str, repeats: int, copy_bw: Optional[float]) -> List[Dict[str, object]]:
    """One row per baseline of ``entry`` (ours timed once, with every baseline, interleaved)."""
    cuda = device == "cuda"
    case = entry.make(device)
    times = measure([case.ours] + case.baselines, repeats, cuda, case.calls)
    (ow, oc), rows = times[0], []
    for base, (bw, bc) in zip(case.baselines, times[1:]):
        row = dict(
            op=entry.name,
            shape=entry.shape,
            ours=case.ours.label,
            baseline=base.label,
            ours_wall=ow,
            ours_cpu=oc,
            base_wall=bw,
            base_cpu=bc,
            ratio_wall=bw / ow,
            ratio_cpu=bc / oc if oc > 0 else float("nan"),
            goal=base.goal,
            bw_goal=entry.bw_goal,
        )
        if copy_bw and case.nbytes:
            row["gbs"] = case.nbytes / (ow * 1e-3) / 1e9
            row["of_copy"] = row["gbs"] / copy_bw
        rows.append(row)
        print(
            f"{entry.name}: {case.ours.label} {_fmt(ow)} ms wall / {_fmt(oc)} ms CPU; {base.label} {_fmt(bw)} / "
            f"{_fmt(bc)}; speed-up {row['ratio_wall']:.2f}x wall, {row['ratio_cpu']:.2f}x CPU",
            flush=True,
        )
    return rows


def _goal_text(r, device):
    parts = []
    ratio = r["ratio_cpu"] if device == "cpu" else r["ratio_wall"]
    if r["goal"] is not None:
        parts.append(
            f">= {r['goal']:g}x ({'CPU' if device == 'cpu' else 'wall'}): "
            f"{'met' if ratio >= r['goal'] else 'NOT met'}"
        )
    if r["bw_goal"] is not None and "of_copy" in r:
        parts.append(f">= {r['bw_goal']:.0%} of copy: {'met' if r['of_copy'] >= r['bw_goal'] else 'NOT met'}")
    return "; ".join(parts) or "-"


def to_markdown(rows, skipped, device, copy_bw, threads, repeats, load_start) -> str:
    import torch

    lines = []
    if device == "cuda":
        lines.append(
            f"GPU: {torch.cuda.get_device_name()}; measured device copy bandwidth: "
            + (f"{copy_bw:.0f} GB/s." if copy_bw else "-.")
        )
    else:
        isa = torch.ops.mamba_ssm.cpu_isa() if hasattr(torch.ops.mamba_ssm, "cpu_isa") else "-"
        lines.append(f"torch threads: {threads}; CPU kernel ISA: {isa}.")
    lines[-1] += (
        f" Load average (1 min) at the start / end: {load_start:.1f} / {os.getloadavg()[0]:.1f}. Times are "
        f"medians of {repeats} interleaved rounds, ms per call (wall / CPU time); speed-up = baseline time "
        f"/ ours.\n"
    )
    cuda = device == "cuda"
    lines += [
        "| op | shape | ours | baseline | ours wall / CPU | baseline wall / CPU | speed-up wall / CPU |"
        + (" GB/s (of copy) |" if cuda else "")
        + " goal |",
        "|" + " --- |" * (9 if cuda else 8),
    ]
    for r in rows:
        line = (
            f"| {r['op']} | {r['shape']} | {r['ours']} | {r['baseline']} | {_fmt(r['ours_wall'])} / "
            f"{_fmt(r['ours_cpu'])} | {_fmt(r['base_wall'])} / {_fmt(r['base_cpu'])} | {r['ratio_wall']:.2f}x / "
            f"{r['ratio_cpu']:.2f}x |"
        )
        if cuda:
            line += f" {r['gbs']:.0f} ({r['of_copy']:.0%}) |" if "gbs" in r else " - |"
        lines.append(line + f" {_goal_text(r, device)} |")
    if skipped:
        lines.append("")
        lines += [f"* skipped {s}" for s in skipped]
    return "\n".join(lines) + "\n"


def write_doc(markdown, device, command):
    import torch

    begin, end = f"<!-- bench_ops:{device}:begin -->", f"<!-- bench_ops:{device}:end -->"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    host = (
        f"{platform.node()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch "
        f"{torch.__version__}, Python {platform.python_version()}"
    )
    section = (
        f"{begin}\n### Ops on {device.upper()} (bench_ops.py --device {device})\n\nCommand: `{command}`; "
        f"machine: {host}; date: {stamp}.\n\n{markdown}{end}\n"
    )
    replace_section(DOC, begin, end, section)


def _write_out(out, device, markdown, rows, skipped, copy_bw):
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"bench_ops_{device}.md"), "w") as f:
        f.write(f"# bench_ops --device {device}\n\n{markdown}")
    with open(os.path.join(out, f"bench_ops_{device}.json"), "w") as f:
        json.dump({"copy_gbps": copy_bw, "rows": rows, "skipped": skipped}, f, indent=1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="default: cpu")
    ap.add_argument(
        "--repeats",
        "--reps",
        dest="repeats",
        type=int,
        default=None,
        help="interleaved rounds, median reported (default: 7 on cpu, 5 on cuda)",
    )
    ap.add_argument("--threads", type=int, default=1, help="torch threads for the CPU rows (default 1)")
    ap.add_argument(
        "--only", default="", help="comma-separated pieces of entry names; run the entries containing one"
    )
    ap.add_argument(
        "--skip", default="", help="comma-separated pieces of entry names; leave those entries out"
    )
    ap.add_argument("--out", help="folder for bench_ops_<device>.md and .json, rewritten after each entry")
    ap.add_argument("--write-doc", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args(argv)
    if args.repeats is not None and args.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.threads < 1:
        ap.error(f"--threads must be >= 1, got {args.threads}")
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print(
            "bench_ops: --device cuda: no CUDA device visible to torch "
            f"(torch {torch.__version__}, built for CUDA {torch.version.cuda}); nothing measured. "
            "Run it on a GPU machine, or use --device cpu.",
            file=sys.stderr,
        )
        return 2
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    repeats = args.repeats or (7 if args.device == "cpu" else 5)
    load_start = os.getloadavg()[0]
    only = [s for s in args.only.split(",") if s]
    skip = [s for s in args.skip.split(",") if s]
    copy_bw = copy_bandwidth_gbs() if args.device == "cuda" else None
    rows: List[Dict[str, object]] = []
    skipped: List[str] = []
    for entry in ENTRIES:
        if not _selected(entry, only) or any(piece in entry.name for piece in skip):
            continue
        why = _skip_reason(entry, args.device)
        if why:
            skipped.append(f"{entry.name}: {why}")
            print(f"{entry.name}: skipped: {why}", flush=True)
        else:
            try:
                rows += run_entry(entry, args.device, repeats, copy_bw)
            except Exception as exc:  # noqa: BLE001 - one failing entry must not stop the others
                skipped.append(f"{entry.name}: failed: {type(exc).__name__}: {exc}")
                print(f"{entry.name}: FAILED: {type(exc).__name__}: {exc}", flush=True)
            if args.device == "cuda":
                torch.cuda.empty_cache()
        if args.out:
            md = to_markdown(rows, skipped, args.device, copy_bw, args.threads, repeats, load_start)
            _write_out(args.out, args.device, md, rows, skipped, copy_bw)
    md = to_markdown(rows, skipped, args.device, copy_bw, args.threads, repeats, load_start)
    print(md)
    if args.out:
        _write_out(args.out, args.device, md, rows, skipped, copy_bw)
    if args.write_doc:
        cmd = "python benchmarks/bench_ops.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write_doc(md, args.device, cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
