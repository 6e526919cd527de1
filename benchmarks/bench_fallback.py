#!/usr/bin/env python
"""Selective-scan speed on the CPU: the per-timestep loop vs the chunked PyTorch fallback vs the compiled
kernels (issue 2's goal: the fallback at >= 3x the loop at every length, forward and forward+backward).

Shape: fp32, batch 2, dim 64, d_state 16, input-dependent B and C, seqlen 1024 / 2048 / 8192.

* ``loop``: the straightforward scan, one einsum per timestep (what a port without kernels does).
* ``torch``: ``mamba_ssm._families.selective_scan.torch_impl.selective_scan`` (the chunked fallback).
* ``compiled``: ``mamba_ssm._families.selective_scan.compiled.selective_scan`` when ``mamba_ssm._C`` loads (the
  widest build of the CPU kernel this CPU runs).

Measured with bench_cpu_scan.py's machinery, in one process: the forward of each implementation is first
checked against a float64 loop; then forward (no autograd) and forward+backward (all five inputs require
grad) are timed round-robin, every implementation once per round (the loop in the first
``--loop-repeats`` rounds only), so load changes hit them alike; the table gives medians of process CPU
time (the primary figure on a shared machine) and wall time, the speed-ups over the loop in both, and
the peak memory of one call in a child process (RSS rise). The load average is recorded at the start and
the end. GPU timings of the same shape are bench_kernel.py's (``--device cuda``).

    python benchmarks/bench_fallback.py                 # print the table
    python benchmarks/bench_fallback.py --write         # also replace its section in docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_cpu_scan as scan  # (benchmarks/ beside this script; puts the repository on sys.path)
import torch
from _docsection import replace_section

DOC = scan.DOC
BEGIN, END = "<!-- bench_fallback:begin -->", "<!-- bench_fallback:end -->"
BATCH, DIM, D_STATE = 2, 64, 16
#: This script's names for bench_cpu_scan's implementations.
NAMES = {"loop": "loop", "torch": "fallback", "compiled": "compiled"}


def measure(seqlens, impls, threads, repeats, loop_repeats):
    """bench_cpu_scan rows for (BATCH, DIM, D_STATE, L) at each seqlen, all implementations interleaved."""
    rows = []
    names = [NAMES[i] for i in impls]
    if "compiled" in names:
        from mamba_ssm import _loader

        if not _loader.load().loaded:
            print("[bench] mamba_ssm._C is not loaded: the compiled rows are left out", file=sys.stderr)
            names.remove("compiled")
    objs = scan.implementations(names, None)
    for seqlen in seqlens:
        scan.measure_shape(objs, (BATCH, DIM, D_STATE, seqlen), threads, repeats, loop_repeats, rows.append)
    return rows


def to_table(rows, seqlens, impls):
    def find(impl, seqlen, mode):
        got = [
            r
            for r in rows
            if r["kind"] == "time"
            and r["impl"] == NAMES[impl]
            and r["shape"][-1] == seqlen
            and r["pass"] == mode
        ]
        return got[0] if got else None

    lines = [
        (
            "| seqlen | backend | fwd CPU / wall ms | fwd vs loop CPU / wall | fwd+bwd CPU / wall ms | "
            "fwd+bwd vs loop CPU / wall | segment/chunk | peak MiB fwd / fwd+bwd |"
        ),
        "| ---: | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for seqlen in seqlens:
        for impl in impls:
            f, fb = find(impl, seqlen, "fwd"), find(impl, seqlen, "fwd+bwd")
            if f is None or fb is None:
                continue
            cells = []
            for r, mode in ((f, "fwd"), (fb, "fwd+bwd")):
                loop = find("loop", seqlen, mode)
                cells.append(f"{r['cpu_ms']:.1f} / {r['wall_ms']:.1f}")
                cells.append(
                    f"{loop['cpu_ms'] / r['cpu_ms']:.1f}x / {loop['wall_ms'] / r['wall_ms']:.1f}x"
                    if loop
                    else "-"
                )
            plan = "-"
            if impl == "torch":
                from mamba_ssm._families.selective_scan import torch_impl as torch_scan

                plan = "{}/{}".format(*torch_scan.plan_chunks(BATCH, DIM, D_STATE, seqlen))
            peak = f"{f.get('peak_mib', '-')} / {fb.get('peak_mib', '-')}"
            lines.append(f"| {seqlen} | {impl} | " + " | ".join(cells) + f" | {plan} | {peak} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seqlens", default="1024,2048,8192")
    parser.add_argument("--impls", default="loop,torch,compiled")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds (medians reported)")
    parser.add_argument("--loop-repeats", type=int, default=3, help="rounds that include the slow loop")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads for every measurement")
    parser.add_argument(
        "--write", action="store_true", help="replace this script's section of docs/benchmarks.md"
    )
    args = parser.parse_args(argv)
    seqlens = [int(s) for s in args.seqlens.split(",")]
    impls = args.impls.split(",")
    for impl in impls:
        if impl not in NAMES:
            parser.error(f"--impls: {impl!r} is not one of {', '.join(NAMES)}")
    load_start = os.getloadavg()[0]
    rows = measure(seqlens, impls, args.threads, args.repeats, args.loop_repeats)
    load_end = os.getloadavg()[0]
    table = to_table(rows, seqlens, impls)
    print(table)
    if args.write:
        command = "python benchmarks/bench_fallback.py " + " ".join(
            argv if argv is not None else sys.argv[1:]
        )
        isa = (
            torch.ops.mamba_ssm.cpu_isa()
            if "compiled" in impls and hasattr(torch.ops.mamba_ssm, "cpu_isa")
            else "-"
        )
        section = "\n".join(
            [
                BEGIN,
                "## Selective scan: per-timestep loop vs PyTorch fallback vs compiled kernels (bench_fallback.py)",
                "",
                f"Command: `{command.strip()}`  ",
                (
                    f"Machine: {scan._cpu_model()}, {os.cpu_count()} CPU(s) ({scan._cpu_flags()}); compiled kernel "
                    f"build `{isa}`; torch {torch.__version__}, {args.threads} thread(s); load average (1 min) "
                    f"{load_start:.1f} at the start, {load_end:.1f} at the end (the machine is shared)  "
                ),
                (
                    f"Date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; "
                    f"Python {platform.python_version()}  "
                ),
                (
                    f"Shape: fp32, batch {BATCH}, dim {DIM}, d_state {D_STATE}, variable B and C; medians of "
                    f"{args.repeats} interleaved rounds ({args.loop_repeats} for the loop) after a warm-up."
                ),
                "",
                table,
                "",
                (
                    "Process CPU time is the primary figure (other jobs share the machine's cores); speed-ups are "
                    "the loop's time over the row's, in CPU and in wall time. Peak memory: the RSS rise during one "
                    "call in a child process."
                ),
                (
                    "Goal (issue 2): the fallback at >= 3x the loop at every length on CPU, forward and "
                    "forward+backward."
                ),
                END,
                "",
            ]
        )
        replace_section(DOC, BEGIN, END, section)
        print(f"wrote {DOC}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
