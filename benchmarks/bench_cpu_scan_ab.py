#!/usr/bin/env python
"""A/B of two builds of the compiled CPU selective scan: the same calls timed in alternating child
processes, one per build and round, so that load changes hit both alike (two builds of ``mamba_ssm._C``
cannot share one process: they register the same ops).

Each of ``--a`` and ``--b`` is a checkout (or package copy) whose ``mamba_ssm`` has an in-place
``_C`` (``python setup.py build_ext --inplace`` or ``bash ci/test.sh``). Per round and build, one child
imports ``mamba_ssm`` from that folder, runs ``selective_scan_fn`` forward (no autograd) and
forward+backward (all five inputs require grad) ``--calls`` times per shape and ISA (``MAMBA_SSM_CPU_ISA``
set around each call, as bench_cpu_scan.py does) with ``--threads`` torch threads, and reports the minimum
process CPU time and wall time of each. With ``--load`` a busy-looping process (bench_cpu_scan.py's
``Busy``) runs beside every child. The report is the median over rounds of each build, and B / A.

    python benchmarks/bench_cpu_scan_ab.py --a /path/to/old --b . [--rounds 9] [--shapes 2,64,16,8192]
        [--threads 2 --load]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

DEFAULT_SHAPES = "2,64,16,1024;2,64,16,8192;1,1536,16,2048"


class Busy:
    """A process spinning on one core (another job loading the machine) while the block runs."""

    def __enter__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.2)

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


def child(args: argparse.Namespace) -> None:
    """One round of one build: prints {key: [cpu seconds, wall seconds]} as JSON."""
    sys.path.insert(0, args.child)
    import torch

    import mamba_ssm
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn

    if os.path.dirname(os.path.abspath(mamba_ssm.__file__)) != os.path.join(
        os.path.abspath(args.child), "mamba_ssm"
    ):
        raise SystemExit(f"bench_cpu_scan_ab: imported mamba_ssm from {mamba_ssm.__file__}, not {args.child}")
    # After mamba_ssm is imported from the child's folder: bench_cpu_scan puts its own checkout on sys.path.
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_cpu_scan import make_inputs

    torch.set_num_threads(args.threads)
    out = {}
    for spec in args.shapes.split(";"):
        batch, dim, d_state, seqlen = (int(v) for v in spec.split(","))
        u, delta, A, B, C = make_inputs(batch, dim, d_state, seqlen)
        leaves = [x.clone().requires_grad_() for x in (u, delta, A, B, C)]
        for isa in args.isas.split(","):
            os.environ["MAMBA_SSM_CPU_ISA"] = isa
            for mode in ("fwd", "fwd+bwd"):
                best, best_wall = float("inf"), float("inf")
                for _ in range(args.calls + 1):  # the first call warms up
                    t0, w0 = time.process_time(), time.perf_counter()
                    if mode == "fwd":
                        with torch.no_grad():
                            selective_scan_fn(u, delta, A, B, C)
                    else:
                        for x in leaves:
                            x.grad = None
                        y = selective_scan_fn(*leaves)
                        y.backward(torch.ones_like(y))
                    best = min(best, time.process_time() - t0)
                    best_wall = min(best_wall, time.perf_counter() - w0)
                out[f"{spec}|{isa}|{mode}"] = [best, best_wall]
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", help="checkout A (the baseline)")
    ap.add_argument("--b", help="checkout B")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--calls", type=int, default=3, help="calls per measurement in a child (minimum kept)")
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="semicolon-separated B,D,N,L")
    ap.add_argument("--isas", default="avx512,avx2")
    ap.add_argument("--threads", type=int, default=1, help="torch threads in the children")
    ap.add_argument("--load", action="store_true", help="a busy-looping process beside every child")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    if not args.a or not args.b:
        raise SystemExit("bench_cpu_scan_ab: give both --a and --b (checkouts with an in-place mamba_ssm._C)")
    for name, path in (("--a", args.a), ("--b", args.b)):
        if not os.path.isdir(os.path.join(path, "mamba_ssm")):
            raise SystemExit(f"bench_cpu_scan_ab: {name} {path} has no mamba_ssm folder")
    runs: dict[str, list[dict]] = {"a": [], "b": []}
    load = [os.getloadavg()[0]]
    for r in range(args.rounds):
        for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
            cmd = [sys.executable, os.path.abspath(__file__), "--child", getattr(args, side)]
            cmd += ["--shapes", args.shapes, "--isas", args.isas, "--calls", str(args.calls)]
            cmd += ["--threads", str(args.threads)]
            with Busy() if args.load else contextlib.nullcontext():
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SystemExit(
                    f"bench_cpu_scan_ab: child for {getattr(args, side)} failed:\n{proc.stderr[-3000:]}"
                )
            runs[side].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    load.append(os.getloadavg()[0])
    busy = ", a busy-looping process beside each child" if args.load else ""
    print(
        f"A = {args.a}, B = {args.b}; {args.rounds} rounds; {args.threads} thread(s){busy}; "
        f"load average {load[0]:.1f} -> {load[1]:.1f}"
    )
    print(
        "| shape (B,D,N,L) | ISA | pass | A ms CPU | B ms CPU | B / A CPU | A ms wall | B ms wall | B / A wall |"
    )
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key in runs["a"][0]:
        a, b = ([statistics.median(x[key][i] for x in runs[side]) * 1e3 for i in (0, 1)] for side in "ab")
        spec, isa, mode = key.split("|")
        print(
            f"| ({spec.replace(',', ', ')}) | {isa} | {mode} | {a[0]:.2f} | {b[0]:.2f} | {b[0] / a[0]:.2f} "
            f"| {a[1]:.2f} | {b[1]:.2f} | {b[1] / a[1]:.2f} |"
        )


if __name__ == "__main__":
    main()
