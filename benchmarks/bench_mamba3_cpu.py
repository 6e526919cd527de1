#!/usr/bin/env python
"""CPU benchmark: our Mamba3 layer forward+backward against ``mamba3-ssm`` 0.2.1 (a third-party pure-PyTorch
Mamba-3 on PyPI), interleaved in one run, one torch thread.

Shape (a 130M-like layer): batch 1, d_model 768, expand 2 (24 heads x headdim 64), d_state 128, SISO,
seqlen 2048 (``--seqlen``), float32; ours with chunk_size 64. Each round runs ``layer(u).backward(dy)``
once per side, alternating which goes first; the table gives the medians of wall and CPU time
(``time.process_time``) and their ratio (theirs / ours). Goal: >= 3x.

The two layers share in_proj / out_proj / norm / bias shapes (the parameters are copied across), but
their conventions differ: mamba3-ssm 0.2.1 uses A = -softplus(dd_A) (ours: -max(heavy-tail(dd_A),
A_floor)), angles cumsum(angles * dt) (ours: cumsum(pi tanh(angles) dt) mod 2 pi) and the update
h_t = alpha h_{t-1} + dt (1 - tr/2) x_t B_t + dt (tr/2) x_{t-1} B_{t-1} with tr = sigmoid(trap) (ours:
lambda dt x_t k_t + (1 - lambda) dt alpha x_{t-1} k_{t-1}); its MIMO keeps no headdim in the state. So
the outputs are first checked equal where the two definitions meet: the scan op (their
``ssm_scan_siso``, our ``mamba3_siso_combined``) in float64 on inputs rotated by the same angles through
their ``apply_rope`` (adjacent pairs, as ours), with the trapezoid at its Euler end (their trap logit
-30, ours +30: both h_t = alpha h_{t-1} + dt x_t B_t^T) and the D skip; their CPU scan computes in
float32 whatever the input, so the run stops if they differ by more than 1e-5 (relative). The timed layers then do the same amount of work at the shape above.

Install the comparator beside (not into) this environment, e.g.::

    python -m pip install --target /tmp/mamba3-ssm-0.2.1 --no-deps mamba3-ssm==0.2.1 einops==0.8.2

Usage::

    python benchmarks/bench_mamba3_cpu.py --comparator-path /tmp/mamba3-ssm-0.2.1 [--seqlen 2048]
        [--repeats 3] [--write-doc]

Their layer keeps every timestep's tensors for the backward pass (about 4.5 MB per token at this shape,
~10 GB at seqlen 2048): the script checks the available memory first and stops, saying so, when it is
short. Exit status: 0 after a run, 1 when the outputs differ, 2 when the comparator or the memory is
missing.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _docsection import replace_section

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)
DOC = os.path.join(REPO, "docs", "benchmarks.md")
COMPARATOR = "mamba3-ssm"
COMPARATOR_VERSION = "0.2.1"
BYTES_PER_TOKEN = 4.5e6  # their layer's autograd memory per token at d_model 768, d_state 128 (measured)


def available_bytes():
    """MemAvailable from /proc/meminfo (None where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_equal(theirs_ops):
    """Max abs difference between their scan and ours at the configuration where both define the same
    recurrence (float64, small shape)."""
    import torch

    from mamba_ssm.ops.triton.mamba3.mamba3_siso_combined import mamba3_siso_combined

    g = torch.Generator().manual_seed(0)
    b, l, h, p, n, a = 2, 37, 3, 8, 16, 4
    f = torch.float64
    x = torch.randn(b, l, h, p, generator=g, dtype=f)
    K = torch.randn(b, l, 1, n, generator=g, dtype=f)
    Q = torch.randn(b, l, 1, n, generator=g, dtype=f)
    kb = 1 + 0.2 * torch.randn(h, n, generator=g, dtype=f)
    qb = 1 + 0.2 * torch.randn(h, n, generator=g, dtype=f)
    dt = torch.nn.functional.softplus(torch.randn(b, l, h, generator=g, dtype=f) - 1)
    adt = -torch.rand(b, l, h, generator=g, dtype=f) * dt
    ang = torch.randn(b, l, h, a, generator=g, dtype=f)
    D = torch.randn(h, generator=g, dtype=f)
    ours = mamba3_siso_combined(
        Q,
        K,
        x,
        adt.transpose(1, 2),
        dt.transpose(1, 2),
        torch.full((b, h, l), 30.0, dtype=f),
        qb,
        kb,
        ang,
        D=D,
        chunk_size=8,
    )
    theta = torch.cumsum(math.pi * torch.tanh(ang) * dt.unsqueeze(-1), dim=1)
    Kb, Qb = K + kb, Q + qb  # (b, l, h, n)
    B_proj = torch.cat([theirs_ops.apply_rope(Kb[..., : 2 * a], theta), Kb[..., 2 * a :]], dim=-1)
    C_proj = torch.cat([theirs_ops.apply_rope(Qb[..., : 2 * a], theta), Qb[..., 2 * a :]], dim=-1)
    theirs = theirs_ops.ssm_scan_siso(x, B_proj, C_proj, adt, dt, torch.full((b, l, h), -30.0, dtype=f), D)
    return float((ours - theirs).abs().max()), float(ours.abs().max())


def build(theirs_layer_cls, d_model, d_state, headdim, seqlen):
    import torch

    from mamba_ssm.modules.mamba3 import Mamba3

    torch.manual_seed(0)
    ours = Mamba3(d_model, d_state=d_state, expand=2, headdim=headdim, chunk_size=64)
    theirs = theirs_layer_cls(d_model, d_state=d_state, expand=2, headdim=headdim)
    shared = {k: v for k, v in ours.state_dict().items() if k in theirs.state_dict()}
    missing = [k for k, v in theirs.state_dict().items() if k not in shared or shared[k].shape != v.shape]
    if missing:
        raise SystemExit(f"bench_mamba3_cpu: the layers' parameters differ: {missing}")
    theirs.load_state_dict(shared, strict=False)
    u = torch.randn(1, seqlen, d_model)
    dy = torch.randn(1, seqlen, d_model)
    return ours, theirs, u, dy


def sample(layer, u, dy):
    """(wall s, CPU s) of one forward+backward."""
    x = u.detach().clone().requires_grad_(True)
    w0, c0 = time.perf_counter(), time.process_time()
    layer(x).backward(dy)
    w1, c1 = time.perf_counter(), time.process_time()
    layer.zero_grad(set_to_none=True)
    return w1 - w0, c1 - c0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--comparator-path", help="folder holding mamba3_ssm (pip install --target); default: importable"
    )
    ap.add_argument("--seqlen", type=int, default=2048)
    ap.add_argument("--d-model", type=int, default=768)
    ap.add_argument("--d-state", type=int, default=128)
    ap.add_argument("--headdim", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3, help="interleaved rounds after one warm-up each (3)")
    ap.add_argument("--write-doc", action="store_true", help="put the table into docs/benchmarks.md")
    args = ap.parse_args(argv)
    if args.comparator_path:
        sys.path.insert(0, args.comparator_path)
    try:
        from importlib import metadata

        version = metadata.version(COMPARATOR)
        from mamba3_ssm import Mamba3 as TheirMamba3
        from mamba3_ssm import ops as their_ops
    except Exception as exc:  # noqa: BLE001
        print(
            f"bench_mamba3_cpu: {COMPARATOR} is not importable ({type(exc).__name__}: {exc}). Install it beside "
            f"this environment: python -m pip install --target /tmp/mamba3-ssm-{COMPARATOR_VERSION} --no-deps "
            f"{COMPARATOR}=={COMPARATOR_VERSION} einops==0.8.2, then pass --comparator-path "
            f"/tmp/mamba3-ssm-{COMPARATOR_VERSION}",
            file=sys.stderr,
        )
        return 2
    if version != COMPARATOR_VERSION:
        print(f"bench_mamba3_cpu: note: {COMPARATOR} {version}, not {COMPARATOR_VERSION}", file=sys.stderr)
    import torch

    torch.set_num_threads(1)
    err, scale = check_equal(their_ops)
    print(f"outputs at the matching configuration: max abs difference {err:.3g} (max |y| {scale:.3g})")
    if not err <= 1e-5 * max(1.0, scale):
        print("bench_mamba3_cpu: the outputs differ; not timing", file=sys.stderr)
        return 1
    need = BYTES_PER_TOKEN * args.seqlen + 2e9
    avail = available_bytes()
    if avail is not None and avail < need:
        print(
            f"bench_mamba3_cpu: {COMPARATOR}'s backward at seqlen {args.seqlen} needs about {need / 1e9:.1f} GB, "
            f"{avail / 1e9:.1f} GB are available; pass a smaller --seqlen",
            file=sys.stderr,
        )
        return 2
    ours, theirs, u, dy = build(TheirMamba3, args.d_model, args.d_state, args.headdim, args.seqlen)
    load_start = os.getloadavg()[0]
    times = {"ours": [], "theirs": []}
    sample(ours, u, dy)
    sample(theirs, u, dy)
    for r in range(args.repeats):
        order = ("ours", "theirs") if r % 2 == 0 else ("theirs", "ours")
        for name in order:
            times[name].append(sample(ours if name == "ours" else theirs, u, dy))
            w, c = times[name][-1]
            print(f"round {r + 1}: {name} {w:.2f} s wall / {c:.2f} s CPU", flush=True)
    med = {
        k: (statistics.median(t[0] for t in v), statistics.median(t[1] for t in v)) for k, v in times.items()
    }
    (ow, oc), (tw, tc) = med["ours"], med["theirs"]
    shape = (
        f"batch 1, seqlen {args.seqlen}, d_model {args.d_model}, {2 * args.d_model // args.headdim} heads x headdim "
        f"{args.headdim}, d_state {args.d_state}, SISO, fp32"
    )
    goal = "met" if tc / oc >= 3 else "NOT met"
    table = (
        f"Outputs checked equal first: max abs difference {err:.2g}, max |y| {scale:.2g} (the scan op on float64 "
        f"inputs, theirs computing in float32; Euler end of the trapezoid, same rotation). Load average (1 min) at the start / end: {load_start:.1f} / "
        f"{os.getloadavg()[0]:.1f}; medians of {args.repeats} interleaved rounds after one warm-up each, one "
        f"torch thread.\n\n"
        "| layer fwd+bwd | shape | ours wall / CPU (s) | mamba3-ssm 0.2.1 wall / CPU (s) | speed-up wall / CPU | goal |\n"
        "| --- | --- | --- | --- | --- | --- |\n"
        f"| Mamba3 | {shape} | {ow:.2f} / {oc:.2f} | {tw:.2f} / {tc:.2f} | {tw / ow:.1f}x / {tc / oc:.1f}x | "
        f">= 3x (CPU): {goal} |\n"
    )
    print(table)
    if args.write_doc:
        begin, end = "<!-- bench_mamba3_cpu:begin -->", "<!-- bench_mamba3_cpu:end -->"
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        host = (
            f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, Python "
            f"{platform.python_version()}, {COMPARATOR} {version}"
        )
        cmd = "python benchmarks/bench_mamba3_cpu.py " + " ".join(argv if argv is not None else sys.argv[1:])
        section = (
            f"{begin}\n## Mamba-3 layer on the CPU: ours vs mamba3-ssm 0.2.1 (`benchmarks/bench_mamba3_cpu.py`)\n\n"
            f"Command: `{cmd}`; machine: {host}; date: {stamp}.\n\n{table}{end}\n"
        )
        replace_section(DOC, begin, end, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
