"""Kernel benchmark: the selective-scan kernels of mamba_ssm._C against the PyTorch implementations.

``--device cuda`` (the GPU run of benchmarks/gpu_check.sh; issue 3's shape): batch 8, dim 2048,
d_state 16, seqlen 4096, fp32 and bf16, Mamba's call (variable B/C, D, z, delta_bias, softplus), forward
and forward+backward:

* median time (CUDA events) of the compiled kernel and of the PyTorch fallback
  (mamba_ssm._families.selective_scan.torch_impl.selective_scan), and the speed-up;
* achieved bandwidth = the bytes the op must move at least (read u, delta, z, B, C; write out; for the
  backward also read dout and write du, ddelta, dz, dB, dC) / time;
* the device copy bandwidth measured here (a 2 GiB device-to-device copy: read + write bytes / time), for
  the goal "forward at >= 50% of copy bandwidth".

``--device cpu`` (this machine's row): batch 2, dim 64, d_state 16, fp32, seqlen 1024/2048/8192: the
compiled CPU kernel against the per-timestep einsum loop (an einsum per step, as in the public
walkthrough), forward and forward+backward. Goals: >= 20x forward, >= 10x forward+backward.

Usage::

    python benchmarks/bench_kernel.py --device cpu  [--repeats 5] [--out DIR] [--write-doc]
    python benchmarks/bench_kernel.py --device cuda [--repeats 20] [--out DIR] [--write-doc]

Prints a Markdown table; ``--out DIR`` also writes ``bench_kernel_<device>.json`` and ``.md`` there as
each row completes; ``--write-doc`` puts the table into docs/benchmarks.md between the
``bench_kernel:<device>`` markers.
"""

from __future__ import annotations

import argparse
import datetime
import json
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

import torch  # noqa: E402

DOC = os.path.join(REPO, "docs", "benchmarks.md")


def load_backends():
    from mamba_ssm import _loader

    result = _loader.load()
    if not result.loaded:
        raise SystemExit(
            f"mamba_ssm._C is not loaded: {result.reason}. Build it first: "
            "MAMBA_FORCE_BUILD=TRUE python setup.py build_ext --inplace"
        )
    from mamba_ssm._families.selective_scan import compiled

    try:
        from mamba_ssm._families.selective_scan import torch_impl as torch_scan
    except Exception as exc:  # noqa: BLE001 - the fallback is another part's module
        print(f"[bench] PyTorch fallback unavailable ({exc}); its columns are left out", file=sys.stderr)
        torch_scan = None
    return compiled, torch_scan


def make_inputs(batch, dim, d_state, seqlen, dtype, device, requires_grad):
    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape, dt=dtype, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device=device, dtype=dt)

    u = rnd(batch, dim, seqlen)
    delta = (torch.rand(batch, dim, seqlen, generator=g) * 0.1 - 2.0).to(device=device, dtype=dtype)
    A = -(torch.arange(1, d_state + 1, dtype=torch.float32).repeat(dim, 1)).to(
        device
    )  # Mamba's S4D-real init
    B = rnd(batch, d_state, seqlen)
    C = rnd(batch, d_state, seqlen)
    D = torch.ones(dim, device=device)
    z = rnd(batch, dim, seqlen)
    delta_bias = (torch.rand(dim, generator=g) * 0.1).to(device)
    args = [u, delta, A, B, C, D, z, delta_bias]
    if requires_grad:
        args = [x.requires_grad_() for x in args]
    return args


# ------------------------------------------------------------------------------------------ timing
def time_cuda(fn, repeats, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


CLOCK = {"fn": time.perf_counter}


def time_cpu(fn, repeats, warmup=1):
    """Median ms by the chosen clock: wall (perf_counter) or this process's CPU time (process_time,
    robust on a shared, loaded machine when run with --threads 1)."""
    clock = CLOCK["fn"]
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = clock()
        fn()
        times.append((clock() - t0) * 1e3)
    return statistics.median(times)


def copy_bandwidth_gbs(device, nbytes=2 << 30, repeats=10):
    """Device-to-device copy: (read + write bytes) / time, GB/s (10^9 bytes)."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    ms = time_cuda(lambda: dst.copy_(src), repeats)  # noqa: F821 - run before the del below
    del src, dst
    return 2 * nbytes / (ms * 1e-3) / 1e9


# ------------------------------------------------------------------------------------------ the ops
def fwd_fn(backend, args, softplus=True):
    def run():
        with torch.no_grad():
            return backend.selective_scan(*args, delta_softplus=softplus)

    return run


def fwd_bwd_fn(backend, args, softplus=True):
    leaves = [x for x in args if x is not None]

    def run():
        for x in leaves:
            x.grad = None
        out = backend.selective_scan(*args, delta_softplus=softplus)
        out.backward(torch.ones_like(out))

    return run


def loop_scan(u, delta, A, B, C):
    """The per-timestep loop: one state update and one einsum per step (variable B/C; the same loop as
    benchmarks/bench_fallback.py, so the ratios are comparable)."""
    delta_a = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    delta_bu = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    h = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    ys = []
    for t in range(u.shape[2]):
        h = delta_a[:, :, t] * h + delta_bu[:, :, t]
        ys.append(torch.einsum("bdn,bn->bd", h, C[:, :, t]))
    return torch.stack(ys, dim=2)


class LoopBackend:
    @staticmethod
    def selective_scan(u, delta, A, B, C, *unused, delta_softplus=False):
        return loop_scan(u, delta, A, B, C)


def min_bytes(batch, dim, d_state, seqlen, itemsize, backward):
    """Bytes the op must move at least: per-channel streams (u, delta, z, out) and B, C."""
    seq = batch * dim * seqlen * itemsize
    bc = 2 * batch * d_state * seqlen * itemsize
    fwd = 4 * seq + bc
    if not backward:
        return fwd
    # backward: read u, delta, z, dout, B, C; write du, ddelta, dz, dB, dC (fp32 accumulators counted once)
    return fwd + 7 * seq + 2 * bc


# ------------------------------------------------------------------------------------------ runs
def run_cuda(args_ns, emit):
    compiled, torch_scan = load_backends()
    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(device)
    copy_gbs = copy_bandwidth_gbs(device)
    emit({"kind": "copy_bandwidth", "gpu": props.name, "GB/s": round(copy_gbs, 1)})
    batch, dim, d_state, seqlen = 8, 2048, 16, 4096
    for dtype in (torch.float32, torch.bfloat16):
        itemsize = torch.empty((), dtype=dtype).element_size()
        for backward in (False, True):
            args = make_inputs(batch, dim, d_state, seqlen, dtype, device, requires_grad=backward)
            make = fwd_bwd_fn if backward else fwd_fn
            ms = time_cuda(make(compiled, args), args_ns.repeats)
            row = {
                "kind": "gpu",
                "dtype": str(dtype).replace("torch.", ""),
                "pass": "fwd+bwd" if backward else "fwd",
                "shape": f"B={batch} D={dim} N={d_state} L={seqlen}",
                "kernel_ms": round(ms, 3),
            }
            nbytes = min_bytes(batch, dim, d_state, seqlen, itemsize, backward)
            row["GB/s"] = round(nbytes / (ms * 1e-3) / 1e9, 1)
            row["of_copy_bw"] = round(row["GB/s"] / copy_gbs, 3)
            if torch_scan is not None:
                try:
                    fb_ms = time_cuda(make(torch_scan, args), max(3, args_ns.repeats // 4), warmup=1)
                    row["fallback_ms"] = round(fb_ms, 3)
                    row["speedup_vs_fallback"] = round(fb_ms / ms, 1)
                except Exception as exc:  # noqa: BLE001 - report, keep going
                    row["fallback_error"] = f"{type(exc).__name__}: {exc}"[:200]
            emit(row)
            del args
            torch.cuda.empty_cache()


def cpu_inputs(seqlen, requires_grad):
    """bench_fallback.py's inputs: fp32 u, delta, A, B, C (variable B/C); no D, z, delta_bias, softplus."""
    batch, dim, d_state = 2, 64, 16
    g = torch.Generator().manual_seed(0)
    u = torch.randn(batch, dim, seqlen, generator=g)
    delta = 0.1 * torch.rand(batch, dim, seqlen, generator=g)
    A = -torch.rand(dim, d_state, generator=g) - 0.5
    B = torch.randn(batch, d_state, seqlen, generator=g)
    C = torch.randn(batch, d_state, seqlen, generator=g)
    args = [u, delta, A, B, C]
    if requires_grad:
        args = [x.requires_grad_() for x in args]
    return args + [None, None, None]


def run_cpu(args_ns, emit):
    compiled, torch_scan = load_backends()
    emit(
        {
            "kind": "cpu_info",
            "isa": torch.ops.mamba_ssm.cpu_isa(),
            "threads": torch.get_num_threads(),
            "clock": args_ns.clock,
            "machine": platform.processor() or platform.machine(),
            "loadavg": os.getloadavg()[0],
        }
    )
    for seqlen in (1024, 2048, 8192):
        for backward in (False, True):
            args = cpu_inputs(seqlen, backward)
            make = fwd_bwd_fn if backward else fwd_fn
            # The loop is slow (seconds for fwd+bwd at L=8192): one untimed warm-up only for the forward.
            loop_ms = time_cpu(
                make(LoopBackend, args, False),
                1 if backward else max(1, args_ns.repeats // 2),
                warmup=0 if backward else 1,
            )
            ms = time_cpu(make(compiled, args, False), args_ns.repeats)
            row = {
                "kind": "cpu",
                "pass": "fwd+bwd" if backward else "fwd",
                "shape": f"B=2 D=64 N=16 L={seqlen}",
                "loop_ms": round(loop_ms, 2),
                "kernel_ms": round(ms, 2),
                "speedup_vs_loop": round(loop_ms / ms, 1),
                "goal": ">= 10x" if backward else ">= 20x",
            }
            if torch_scan is not None:
                try:
                    row["fallback_ms"] = round(
                        time_cpu(make(torch_scan, args, False), max(1, args_ns.repeats // 2)), 2
                    )
                except Exception as exc:  # noqa: BLE001
                    row["fallback_error"] = f"{type(exc).__name__}: {exc}"[:200]
            emit(row)


def to_markdown(rows, device):
    lines = []
    if device == "cuda":
        copy = [r for r in rows if r["kind"] == "copy_bandwidth"]
        if copy:
            lines.append(
                f"GPU: {copy[0]['gpu']}; measured device copy bandwidth {copy[0]['GB/s']} GB/s "
                "(goal: forward >= 50% of it).\n"
            )
        lines.append("| dtype | pass | shape | kernel ms | GB/s | of copy bw | fallback ms | speed-up |")
        lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in rows:
            if r["kind"] == "gpu":
                lines.append(
                    f"| {r['dtype']} | {r['pass']} | {r['shape']} | {r['kernel_ms']} | {r['GB/s']} | "
                    f"{r['of_copy_bw']:.0%} | {r.get('fallback_ms', '-')} | "
                    f"{r.get('speedup_vs_fallback', '-')}x |"
                )
    else:
        info = [r for r in rows if r["kind"] == "cpu_info"]
        if info:
            lines.append(
                f"CPU kernel ISA: {info[0]['isa']}; torch threads: {info[0]['threads']}; clock: "
                f"{info[0]['clock']}; load average at start: {info[0]['loadavg']:.1f}.\n"
            )
        lines.append(
            "| pass | shape | per-timestep loop ms | CPU kernel ms | speed-up | goal | fallback ms |"
        )
        lines.append("| --- | --- | --- | --- | --- | --- | --- |")
        for r in rows:
            if r["kind"] == "cpu":
                lines.append(
                    f"| {r['pass']} | {r['shape']} | {r['loop_ms']} | {r['kernel_ms']} | "
                    f"{r['speedup_vs_loop']}x | {r['goal']} | {r.get('fallback_ms', '-')} |"
                )
    return "\n".join(lines) + "\n"


def write_doc(markdown, device, command):
    begin, end = f"<!-- bench_kernel:{device}:begin -->", f"<!-- bench_kernel:{device}:end -->"
    title = (
        "GPU kernel (bench_kernel.py --device cuda)"
        if device == "cuda"
        else "CPU kernel (bench_kernel.py --device cpu)"
    )
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    host = f"{platform.node()}, {os.cpu_count()} CPUs, torch {torch.__version__}, Python {platform.python_version()}"
    section = (
        f"{begin}\n### {title}\n\nCommand: `{command}`; machine: {host}; date: {stamp}.\n\n{markdown}{end}\n"
    )
    replace_section(DOC, begin, end, section)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), required=True)
    ap.add_argument("--repeats", type=int, default=None, help="timed repetitions (median reported)")
    ap.add_argument("--out", help="folder for bench_kernel_<device>.json/.md, written as rows complete")
    ap.add_argument("--write-doc", action="store_true", help="update docs/benchmarks.md")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads for the CPU run")
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="CPU run: wall time, or process CPU time (use with --threads 1 on a busy machine)",
    )
    ns = ap.parse_args(argv)
    if ns.threads:
        torch.set_num_threads(ns.threads)
    if ns.clock == "cpu":
        CLOCK["fn"] = time.process_time
    if ns.repeats is None:
        ns.repeats = 20 if ns.device == "cuda" else 5
    if ns.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: no GPU visible to torch")
    rows = []

    def emit(row):
        rows.append(row)
        print(json.dumps(row), flush=True)
        if ns.out:
            os.makedirs(ns.out, exist_ok=True)
            with open(os.path.join(ns.out, f"bench_kernel_{ns.device}.json"), "w") as f:
                json.dump(rows, f, indent=1)
            with open(os.path.join(ns.out, f"bench_kernel_{ns.device}.md"), "w") as f:
                f.write(to_markdown(rows, ns.device))

    (run_cuda if ns.device == "cuda" else run_cpu)(ns, emit)
    markdown = to_markdown(rows, ns.device)
    print(markdown)
    if ns.write_doc:
        write_doc(markdown, ns.device, "python benchmarks/bench_kernel.py " + " ".join(argv or sys.argv[1:]))


if __name__ == "__main__":
    main()
