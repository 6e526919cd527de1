#!/usr/bin/env python
"""Op benchmark: mamba_ssm's kernels for the hot-path ops against PyTorch, interleaved in one run.

Every row times two implementations of one op on the same inputs, alternating them sample by sample
(so load on a shared machine hits both alike), and reports medians of wall time and of this process's
CPU time, and their ratios. On CUDA, rows with a byte count also give the achieved bandwidth (bytes the
op must move at least / time) against the measured device copy bandwidth.

The rows are the entries of ``OPS`` (one per op and device; each names its shape, baseline and goal):
add an op by appending an entry. CPU rows run with one torch thread (``--threads``).

Usage::

    python benchmarks/bench_ops.py --device cpu  [--repeats 7] [--only conv] [--write-doc]
    python benchmarks/bench_ops.py --device cuda [--repeats 20] [--write-doc]

``--write-doc`` puts the table into docs/benchmarks.md between the ``bench_ops:<device>`` markers.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import os
import platform
import statistics
import sys
import time
from typing import Callable, List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
DOC = os.path.join(REPO, "docs", "benchmarks.md")


@dataclasses.dataclass
class Impl:
    """One side of a row: ``fn()`` runs the op once; ``context()`` is entered around each sample
    (outside the timing), e.g. to choose a backend."""
    label: str
    fn: Callable[[], object]
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext


@dataclasses.dataclass
class Case:
    ours: Impl
    baseline: Impl
    calls: int = 1                 # calls per timed sample (short ops repeat inside one sample)
    nbytes: Optional[int] = None   # bytes the op must move at least (CUDA bandwidth column)


@dataclasses.dataclass
class Op:
    name: str
    device: str                    # "cpu" or "cuda"
    shape: str
    goal: Optional[float]          # ours / baseline speed-up asked for (None: reported only)
    make: Callable[[str], Case]


def _backend(name):
    @contextlib.contextmanager
    def ctx():
        import mamba_ssm

        prev = mamba_ssm.set_backend(name)
        try:
            yield
        finally:
            mamba_ssm.set_backend(prev)
    return ctx


# ----------------------------------------------------------------------------- causal conv1d (issue 10)
CONV_B, CONV_D, CONV_L, CONV_W = 8, 1536, 2048, 4


def _conv_inputs(device, requires_grad=False):
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(CONV_B, CONV_D, CONV_L, generator=g).to(device).requires_grad_(requires_grad)
    w = (torch.randn(CONV_D, CONV_W, generator=g) * 0.5).to(device).requires_grad_(requires_grad)
    b = (torch.randn(CONV_D, generator=g) * 0.1).to(device).requires_grad_(requires_grad)
    return x, w, b


def conv_fwd_vs_torch_conv1d(device):
    import torch
    import torch.nn.functional as F

    from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn

    x, w, b = _conv_inputs(device)
    w3 = w.unsqueeze(1)

    def ours():
        with torch.no_grad():
            return causal_conv1d_fn(x, w, b, activation="silu")

    def baseline():  # Mamba's own fallback: a padded depthwise conv1d, cut to seqlen, then SiLU
        with torch.no_grad():
            return F.silu(F.conv1d(x, w3, b, padding=CONV_W - 1, groups=CONV_D)[..., :CONV_L])

    return Case(Impl("mamba_ssm._C", ours), Impl("F.conv1d(groups=D)+SiLU", baseline),
                nbytes=2 * x.numel() * x.element_size())


def conv_fwd_vs_torch_path(device):
    case = conv_fwd_vs_torch_conv1d(device)
    case.baseline = Impl("our PyTorch path", case.ours.fn, _backend("torch"))
    return case


def conv_fwd_bwd_vs_torch_path(device):
    import torch

    from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn

    x, w, b = _conv_inputs(device, requires_grad=True)
    dout = torch.randn(x.shape, device=device)

    def run():
        x.grad = w.grad = b.grad = None
        causal_conv1d_fn(x, w, b, activation="silu").backward(dout)

    return Case(Impl("mamba_ssm._C", run), Impl("our PyTorch path", run, _backend("torch")),
                nbytes=5 * x.numel() * x.element_size())   # fwd: read x, write out; bwd: read x, dout, write dx


def conv_update_batch1(device):
    import torch

    from mamba_ssm.ops.causal_conv1d import causal_conv1d_update

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, CONV_D, generator=g).to(device)
    w = torch.randn(CONV_D, CONV_W, generator=g).to(device)
    b = torch.randn(CONV_D, generator=g).to(device)
    state = torch.randn(1, CONV_D, CONV_W, generator=g).to(device)

    def run():
        return causal_conv1d_update(x, state, w, b, "silu")

    return Case(Impl("mamba_ssm._C", run), Impl("our PyTorch path", run, _backend("torch")),
                calls=200, nbytes=(2 * x.numel() + 2 * state.numel()) * 4)


OPS: List[Op] = [
    Op("causal_conv1d fwd", "cpu", "B=8 D=1536 L=2048 width 4 fp32, SiLU, bias", 2.0, conv_fwd_vs_torch_conv1d),
    Op("causal_conv1d fwd", "cpu", "B=8 D=1536 L=2048 width 4 fp32, SiLU, bias", None, conv_fwd_vs_torch_path),
    Op("causal_conv1d fwd+bwd", "cpu", "B=8 D=1536 L=2048 width 4 fp32, SiLU, bias", None,
       conv_fwd_bwd_vs_torch_path),
    Op("causal_conv1d_update", "cpu", "batch 1, D=1536, width 4, state_len 4, fp32, SiLU", 5.0, conv_update_batch1),
    Op("causal_conv1d fwd", "cuda", "B=8 D=1536 L=2048 width 4 fp32, SiLU, bias", None, conv_fwd_vs_torch_conv1d),
    Op("causal_conv1d fwd+bwd", "cuda", "B=8 D=1536 L=2048 width 4 fp32, SiLU, bias", None,
       conv_fwd_bwd_vs_torch_path),
    Op("causal_conv1d_update", "cuda", "batch 1, D=1536, width 4, state_len 4, fp32, SiLU", None, conv_update_batch1),
]


# ------------------------------------------------------------------------------------------- timing
def _sample(impl: Impl, calls: int, cuda: bool):
    """(wall ms, CPU ms) per call of one sample."""
    import torch

    with impl.context():
        if cuda:
            torch.cuda.synchronize()
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(calls):
            impl.fn()
        if cuda:
            torch.cuda.synchronize()
        w1, c1 = time.perf_counter(), time.process_time()
    return (w1 - w0) * 1e3 / calls, (c1 - c0) * 1e3 / calls


def measure(case: Case, repeats: int, cuda: bool):
    """Interleaved medians: {"ours": (wall, cpu), "baseline": (wall, cpu)} in ms per call."""
    for impl in (case.ours, case.baseline):  # warm-up (first-call setup, allocator)
        _sample(impl, case.calls, cuda)
    samples = {"ours": [], "baseline": []}
    for i in range(repeats):
        order = ("ours", "baseline") if i % 2 == 0 else ("baseline", "ours")
        for side in order:
            samples[side].append(_sample(getattr(case, side), case.calls, cuda))
    return {side: (statistics.median(s[0] for s in v), statistics.median(s[1] for s in v))
            for side, v in samples.items()}


def copy_bandwidth_gbs(device, nbytes=1 << 30, repeats=10):
    import torch

    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        dst.copy_(src)
    torch.cuda.synchronize()
    return 2 * nbytes * repeats / (time.perf_counter() - t0) / 1e9


def _fmt(ms):
    return f"{ms:.3f}" if ms < 1 else f"{ms:.1f}"


def run(device, repeats, only=None, threads=1):
    import torch

    if device == "cpu":
        torch.set_num_threads(threads)
    rows = []
    copy_bw = copy_bandwidth_gbs(device) if device == "cuda" else None
    for op in OPS:
        if op.device != device or (only and only not in op.name):
            continue
        case = op.make(device)
        res = measure(case, repeats, device == "cuda")
        (ow, oc), (bw, bc) = res["ours"], res["baseline"]
        row = dict(op=op.name, shape=op.shape, ours=case.ours.label, baseline=case.baseline.label,
                   ours_wall=ow, ours_cpu=oc, base_wall=bw, base_cpu=bc, ratio_wall=bw / ow,
                   ratio_cpu=bc / oc if oc > 0 else float("nan"), goal=op.goal)
        if copy_bw and case.nbytes:
            row["gbs"] = case.nbytes / (ow * 1e-3) / 1e9
            row["of_copy"] = row["gbs"] / copy_bw
        rows.append(row)
        print(f"{op.name:24s} {case.ours.label} {_fmt(ow)} ms wall / {_fmt(oc)} ms CPU; {case.baseline.label} "
              f"{_fmt(bw)} / {_fmt(bc)}; speed-up {row['ratio_wall']:.2f}x wall, {row['ratio_cpu']:.2f}x CPU",
              flush=True)
    return rows, copy_bw


def to_markdown(rows, device, copy_bw, threads):
    lines = []
    if device == "cuda" and copy_bw:
        lines.append(f"Measured device copy bandwidth: {copy_bw:.0f} GB/s.\n")
    if device == "cpu":
        import torch

        lines.append(f"torch threads: {threads}; CPU kernel ISA: {torch.ops.mamba_ssm.cpu_isa()}; load average at "
                     f"start: {os.getloadavg()[0]:.1f}. Times are medians per call, ms (wall / CPU time).\n")
    head = "| op | shape | ours | baseline | ours wall / CPU | baseline wall / CPU | speed-up wall / CPU | goal |"
    lines += [head + (" GB/s (of copy) |" if device == "cuda" else ""),
              "|" + " --- |" * (9 if device == "cuda" else 8)]
    for r in rows:
        goal = "-" if r["goal"] is None else f">= {r['goal']:g}x: {'met' if r['ratio_cpu'] >= r['goal'] else 'NOT met'}"
        line = (f"| {r['op']} | {r['shape']} | {r['ours']} | {r['baseline']} | {_fmt(r['ours_wall'])} / "
                f"{_fmt(r['ours_cpu'])} | {_fmt(r['base_wall'])} / {_fmt(r['base_cpu'])} | {r['ratio_wall']:.2f}x / "
                f"{r['ratio_cpu']:.2f}x | {goal} |")
        if device == "cuda":
            line += f" {r['gbs']:.0f} ({r['of_copy']:.0%}) |" if "gbs" in r else " - |"
        lines.append(line)
    return "\n".join(lines) + "\n"


def write_doc(markdown, device, command):
    import torch

    begin, end = f"<!-- bench_ops:{device}:begin -->", f"<!-- bench_ops:{device}:end -->"
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    host = (f"{platform.node()}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch "
            f"{torch.__version__}, Python {platform.python_version()}")
    section = (f"{begin}\n### Ops on {device.upper()} (bench_ops.py --device {device})\n\nCommand: `{command}`; "
               f"machine: {host}; date: {stamp}.\n\n{markdown}{end}\n")
    text = open(DOC).read() if os.path.exists(DOC) else "# Benchmarks\n\n"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + section + rest.split(end, 1)[1].lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    with open(DOC + ".tmp", "w") as f:
        f.write(text)
    os.replace(DOC + ".tmp", DOC)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), required=True)
    ap.add_argument("--repeats", type=int, default=None, help="interleaved samples per side (median reported)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads for the CPU rows (default 1)")
    ap.add_argument("--only", help="run only the ops whose name contains this text")
    ap.add_argument("--write-doc", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("bench_ops: no CUDA device visible to torch", file=sys.stderr)
        return 2
    from mamba_ssm import _loader

    result = _loader.load()
    if not result.loaded:
        print(f"bench_ops: mamba_ssm._C is not loaded ({result.reason}); build it first", file=sys.stderr)
        return 2
    repeats = args.repeats or (7 if args.device == "cpu" else 20)
    rows, copy_bw = run(args.device, repeats, args.only, args.threads)
    md = to_markdown(rows, args.device, copy_bw, args.threads)
    print(md)
    if args.write_doc:
        cmd = "python benchmarks/bench_ops.py " + " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
        write_doc(md, args.device, cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
