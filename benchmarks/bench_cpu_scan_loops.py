#!/usr/bin/env python
"""The CPU selective scan's step loops one by one (issue 21's backward goal): where a compiled forward
and backward spend their time, per instruction set, torch-free.

Builds ``benchmarks/cpu_scan_loops.cpp`` with the system C++ compiler (``$CXX``, default ``g++``; the
same ``-O3`` as the extension) once per instruction set this CPU runs (AVX-512, AVX2), and runs it: for a
segment of ``--seqlen`` timesteps of four channels sharing variable B and C at d_state 16 it times the
forward's steps (``fwd``), the backward's recompute (``rec``) and reverse pass (``rev``), and the decays
alone (``exp``: 2^(dt A log2 e) for every timestep and state), in interleaved rounds, minimum process
CPU time, as nanoseconds per unit (one timestep of one channel, all of d_state).

What the figures say: over these loops alone, forward+backward / forward = 1 + (rec + rev) / fwd (the
whole ops add per-call work, rows, transposes, allocation, to both sides); a backward that recomputes the
states evaluates every decay again, so ``rec`` costs about a ``fwd``, and ``exp`` is the part of ``fwd``
and ``rec`` that only storing the decays (16 floats per unit, d_state times the input) would remove.

    python benchmarks/bench_cpu_scan_loops.py [--seqlen 2048] [--rounds 7] [--write-doc]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _docsection import replace_section

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(REPO, "benchmarks", "cpu_scan_loops.cpp")
DOC = os.path.join(REPO, "docs", "benchmarks.md")
BEGIN, END = "<!-- bench_cpu_scan_loops:begin -->", "<!-- bench_cpu_scan_loops:end -->"
#: ISA -> (the compile definition, the /proc/cpuinfo flags it needs).
ISAS = {
    "avx512": ("LOOPS_AVX512", ("avx512f", "avx512dq", "avx512bw", "avx512vl", "avx2", "fma")),
    "avx2": ("LOOPS_AVX2", ("avx2", "fma")),
}


def cpu_flags() -> set[str]:
    """The flags of the first processor in /proc/cpuinfo (empty off Linux)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def build(isa: str, out_dir: str) -> str:
    """Compiles the loop harness for ``isa``; returns the executable's path. Raises SystemExit with the
    compiler's message when it fails."""
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        raise SystemExit(
            f"bench_cpu_scan_loops: no C++ compiler {cxx!r} on PATH; set CXX to one (g++ or clang++)"
        )
    exe = os.path.join(out_dir, f"cpu_scan_loops_{isa}")
    cmd = [
        cxx,
        "-O3",
        "-std=c++17",
        "-I",
        os.path.join(REPO, "csrc"),
        f"-D{ISAS[isa][0]}=1",
        SOURCE,
        "-o",
        exe,
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench_cpu_scan_loops: {' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    return exe


def run(exe: str, seqlen: int, rounds: int) -> dict:
    """One run of the harness: its JSON line as a dict."""
    proc = subprocess.run([exe, str(seqlen), str(rounds)], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def load_average() -> float:
    return os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")


def report(rows: list[dict], cmdline: str, load: tuple[float, float]) -> str:
    """The markdown section for docs/benchmarks.md."""
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        BEGIN,
        "## CPU selective scan: the step loops one by one (bench_cpu_scan_loops.py)",
        "",
        f"Command: `{cmdline}`; date: {now}; host {platform.node() or 'unknown'} ({platform.machine()}); "
        f"load average (1 min) {load[0]:.1f} at the start, {load[1]:.1f} at the end. One thread, process CPU "
        "time, minimum of interleaved rounds, nanoseconds per unit (one timestep of one channel, d_state 16, "
        "variable B and C, the segment in cache).",
        "",
        "| ISA | seqlen | lanes a pass | fwd | rec | rev | exp | exp / fwd | 1 + (rec + rev) / fwd |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r['isa']} | {r['seqlen']} | {r['lanes_per_pass']} | {r['fwd_ns']:.2f} | {r['rec_ns']:.2f} | "
            f"{r['rev_ns']:.2f} | {r['exp_ns']:.2f} | {r['exp_ns'] / r['fwd_ns']:.2f} | "
            f"{1 + (r['rec_ns'] + r['rev_ns']) / r['fwd_ns']:.2f} |"
        )
    lines += [
        "",
        "`1 + (rec + rev) / fwd` is forward+backward / forward (bench_cpu_scan.py's ratio) as these loops "
        "alone give it: the whole ops add per-call work (rows, transposes, the epilogue, allocation) to both "
        "sides. A backward that recomputes the states evaluates every decay again, so `rec` costs about a "
        "`fwd`; `exp / fwd` is the share of the forward that is the decays 2^(dt A log2 e), which only "
        "storing them would spare the backward (d_state floats per timestep and channel: 16x u at d_state "
        "16, 201 MB at (1, 1536, 16, 2048)).",
        END,
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seqlen", type=int, default=2048, help="timesteps of the segment (default 2048)")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved rounds (minimum reported)")
    ap.add_argument("--isas", default="avx512,avx2", help="instruction sets to build (those the CPU runs)")
    ap.add_argument("--write-doc", action="store_true", help="update docs/benchmarks.md")
    args = ap.parse_args()
    if args.seqlen < 1 or args.rounds < 1:
        raise SystemExit(
            f"bench_cpu_scan_loops: --seqlen {args.seqlen} and --rounds {args.rounds} must be >= 1"
        )
    flags = cpu_flags()
    wanted = [s.strip() for s in args.isas.split(",") if s.strip()]
    unknown = [s for s in wanted if s not in ISAS]
    if unknown:
        raise SystemExit(f"bench_cpu_scan_loops: unknown ISA {unknown}; choose from {sorted(ISAS)}")
    isas = [s for s in wanted if all(f in flags for f in ISAS[s][1])]
    for s in wanted:
        if s not in isas:
            print(f"skipping {s}: this CPU lacks {[f for f in ISAS[s][1] if f not in flags]}")
    if not isas:
        raise SystemExit("bench_cpu_scan_loops: this CPU runs none of the requested ISAs")
    load0 = load_average()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for isa in isas:
            row = run(build(isa, tmp), args.seqlen, args.rounds)
            rows.append(row)
            print(json.dumps(row), flush=True)
    load1 = load_average()
    cmdline = "python benchmarks/bench_cpu_scan_loops.py " + " ".join(sys.argv[1:])
    text = report(rows, cmdline.strip(), (load0, load1))
    print(text)
    if args.write_doc:
        replace_section(DOC, BEGIN, END, text)


if __name__ == "__main__":
    main()
