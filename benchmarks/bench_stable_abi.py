"""Per-call cost of the stable-ABI binding of mamba_ssm._C against the classic one (issue 18's goal: at
most 1 us more per call, no measurable change in generate tokens/s), on the CPU:

* ``causal_conv1d_update``, batch 1 (dim 1536 = the 130M model's d_inner, width 4, fp32 state): the op
  a decode step calls once per layer;
* ``selective_scan_fwd`` at (batch 1, dim 16, seqlen 16, d_state 8) with D, z, delta_bias and variable
  B/C: a call so small that the binding's fixed cost dominates;
* the same scan through the public ``selective_scan_fn`` (Python wrapper, no grad);
* one decode step of the 130M-shape Mamba-1 model (d_model 768, 24 layers, vocab 50277; random
  weights, fp32, batch 1) after a 16-token prompt: ``MambaLMHeadModel`` with ``InferenceParams``.

Both modules are built here, CPU kernels only, against the torch running this script, from two copies of
the checkout (``MAMBA_TORCH_STABLE_ABI=0`` and the default stable floor 2.10); ``--stable-dir`` /
``--classic-dir`` reuse such copies (e.g. from ``--keep``). Each measurement runs in a subprocess (one
``_C`` per process: both register the ``mamba_ssm`` ops), the two kinds alternating for ``--rounds``
rounds (the order flips every round). A round times ``--calls`` calls after a warm-up in 20 runs and keeps
the fastest run's wall and CPU time per call (a run the scheduler interrupted on the shared machine is
slower, never faster); decode steps are timed one by one and the round keeps the median step. The table
gives each kind's median over the rounds, the difference in microseconds and the ratio stable / classic.
One intra-op thread in both.

    python benchmarks/bench_stable_abi.py               # build both, measure, print
    python benchmarks/bench_stable_abi.py --write       # also replace its section of docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "benchmarks"))
DOC = os.path.join(REPO, "docs", "benchmarks.md")
BEGIN, END = "<!-- bench_stable_abi:begin -->", "<!-- bench_stable_abi:end -->"

BUILD_CPU_ONLY = os.path.join(REPO, "benchmarks", "build_cpu_only.py")
WORKER = os.path.join(REPO, "benchmarks", "stable_abi_worker.py")

METRICS = [
    ("causal_conv1d_update", "`causal_conv1d_update` op, batch 1, dim 1536, width 4"),
    ("selective_scan_fwd", "`selective_scan_fwd` op, (1, 16, 16, 8)"),
    ("selective_scan_fn", "`selective_scan_fn`, (1, 16, 16, 8), no grad"),
    ("decode_step_130m", "decode step, 130M-shape Mamba-1, batch 1"),
]


def _copy(dest: str) -> None:
    from bench_build import copy_project

    copy_project(dest)


def build(kind: str, dest: str) -> None:
    """A CPU-only _C of ``kind`` in a fresh copy at ``dest`` (against this Python's torch)."""
    _copy(dest)
    env = dict(
        os.environ,
        MAMBA_TORCH_STABLE_ABI="0" if kind == "classic" else "2.10",
        MAX_JOBS=os.environ.get("MAX_JOBS", "2"),
    )
    p = subprocess.run(
        [sys.executable, BUILD_CPU_ONLY], check=False, cwd=dest, env=env, capture_output=True, text=True
    )
    if p.returncode != 0:
        raise SystemExit(f"the {kind} build failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")


def measure(proj: str, calls: int, steps: int) -> dict:
    env = dict(os.environ, MAMBA_SSM_BACKEND="auto", OMP_NUM_THREADS="1")
    p = subprocess.run(
        [sys.executable, WORKER, str(calls), str(steps)],
        check=False,
        cwd=proj,
        env=env,
        capture_output=True,
        text=True,
    )
    if p.returncode != 0:
        raise SystemExit(f"the worker in {proj} failed:\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--stable-dir", help="a copy of the checkout with a stable-ABI _C built in place")
    ap.add_argument("--classic-dir", help="a copy of the checkout with a classic _C built in place")
    ap.add_argument("--keep", action="store_true", help="keep the built copies (their paths are printed)")
    ap.add_argument("--write", action="store_true", help="replace the section of docs/benchmarks.md")
    args = ap.parse_args(argv)

    import torch

    tmp = tempfile.mkdtemp(prefix="mamba-bench-stable-")
    dirs = {"classic": args.classic_dir, "stable": args.stable_dir}
    try:
        for kind in ("classic", "stable"):
            if not dirs[kind]:
                dirs[kind] = os.path.join(tmp, kind)
                build(kind, dirs[kind])
                print(f"built the {kind} _C in {dirs[kind]}", flush=True)
        load_before = _load()
        results = {"classic": [], "stable": []}
        for r in range(args.rounds):
            for kind in ("classic", "stable") if r % 2 == 0 else ("stable", "classic"):
                results[kind].append(measure(dirs[kind], args.calls, args.steps))
            print(
                f"round {r + 1}/{args.rounds}: "
                + ", ".join(
                    f"{k} conv update {results[k][-1]['causal_conv1d_update'][0]:.2f} us" for k in results
                ),
                flush=True,
            )
        load_after = _load()
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")

    def med(kind, key, i):
        return statistics.median(x[key][i] for x in results[kind])

    lines = [
        (
            "| call | classic wall | stable wall | stable - classic | stable / classic | classic CPU | stable CPU "
            "| CPU difference |"
        ),
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key, name in METRICS:
        cw, sw, cc, sc = (
            med("classic", key, 0),
            med("stable", key, 0),
            med("classic", key, 1),
            med("stable", key, 1),
        )
        unit, scale = ("ms", 1e-3) if key == "decode_step_130m" else ("us", 1.0)
        lines.append(
            f"| {name} | {cw * scale:.3g} {unit} | {sw * scale:.3g} {unit} | {(sw - cw):+.2f} us | {sw / cw:.3f} "
            f"| {cc * scale:.3g} {unit} | {sc * scale:.3g} {unit} | {(sc - cc):+.2f} us |"
        )
    table = "\n".join(lines)
    abis = {k: results[k][0]["abi"] for k in results}
    header = (
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()} "
        f"{os.cpu_count()} cores, torch {torch.__version__}, 1 intra-op thread, load avg (1/5/15 min) "
        f"{load_before} before, {load_after} after; median of {args.rounds} interleaved rounds of {args.calls} "
        f"calls ({args.steps} decode steps) per kind. classic: {abis['classic']}; stable: {abis['stable']}"
    )
    print(header)
    print(table)
    if args.write:
        from _docsection import replace_section

        section = (
            f"{BEGIN}\n## Stable-ABI binding vs classic: per-call cost on the CPU (`benchmarks/bench_stable_abi.py`)\n\n"
            f"Command: `python benchmarks/bench_stable_abi.py --rounds {args.rounds} --calls {args.calls} --steps "
            f"{args.steps} --write`\n\n{header}\n\n{table}\n{END}\n"
        )
        replace_section(DOC, BEGIN, END, section)
        print(f"written to {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
