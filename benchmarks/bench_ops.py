"""Benchmark of the ops of issue 10 against our PyTorch path, in one run, interleaved, as ratios.

    python benchmarks/bench_ops.py --device cpu|cuda [--out DIR] [--reps N] [--only NAME,...]

One entry per op in ``ENTRIES`` (name, devices it runs on, and a ``prepare(device)`` that returns the
variants to time and the bytes each call must move). Each round times every variant once, in turn
(interleaved, so machine noise hits them alike); the median over the rounds is reported, with the CPU
time of the process (``time.process_time``) per call next to the wall time. On CUDA, the achieved
bandwidth of the memory-bound ops is compared with the measured device-to-device copy bandwidth
(``torch.Tensor.copy_`` of 1 GiB). Writes ``bench_ops_<device>.md`` (and ``.json``) into ``--out``.

The Triton rows (SSD, selective_state_update, norms) run on CUDA/ROCm only; on ``--device cpu`` they
print why they are skipped. The causal conv1d rows (mamba_ssm._C's kernels) run on both; their CPU goals
(``--threads 1``): forward (B=8, D=1536, L=2048, width 4, fp32) >= 2x ``F.conv1d(groups=D)`` + SiLU, and
``causal_conv1d_update`` at batch 1 >= 5x our PyTorch path; on CUDA, >= 60 % of copy bandwidth. Issue 10's GPU goals: selective_state_update >= 60 % of copy bandwidth;
SSD fwd+bwd (B=4, L=4096, 32 heads x headdim 64, d_state 128, bf16) >= 10x our PyTorch SSD and faster
than our Mamba-1 scan at equal state size (d_inner 2048 x d_state 128).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from mamba_ssm import _dispatch  # noqa: E402

Variant = Tuple[str, Optional[str], Callable[[], object], int]   # (label, backend forced, call, bytes)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _with_backend(backend: Optional[str], fn: Callable[[], object]) -> Callable[[], object]:
    def call():
        previous = _dispatch.set_backend(backend) if backend else None
        try:
            return fn()
        finally:
            if backend:
                _dispatch.set_backend(previous)
    return call


def copy_bandwidth(device: str) -> Optional[float]:
    """GB/s of a device-to-device copy of 1 GiB (bytes read + written), median of 10."""
    if not device.startswith("cuda"):
        return None
    src = torch.empty(2**28, dtype=torch.float32, device=device)
    dst = torch.empty_like(src)
    times = []
    for _ in range(12):
        _sync(device)
        t0 = time.perf_counter()
        dst.copy_(src)
        _sync(device)
        times.append(time.perf_counter() - t0)
    return 2 * src.numel() * 4 / statistics.median(times[2:]) / 1e9


# ------------------------------------------------------------------------------------------ entries

def _prep_ssd(device: str) -> List[Variant]:
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    b, l, h, p, n = 4, 4096, 32, 64, 128
    dt_ = torch.bfloat16
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(b, l, h, p, device=device, dtype=dt_, generator=g).requires_grad_(True)
    dt = (torch.rand(b, l, h, device=device, generator=g) * 0.1).to(dt_).requires_grad_(True)
    A = (-torch.rand(h, device=device, generator=g) - 0.5).requires_grad_(True)
    B = torch.randn(b, l, 1, n, device=device, dtype=dt_, generator=g).requires_grad_(True)
    C = torch.randn(b, l, 1, n, device=device, dtype=dt_, generator=g).requires_grad_(True)
    dy = torch.randn(b, l, h, p, device=device, dtype=dt_, generator=g)

    def ssd():
        y = mamba_chunk_scan_combined(x, dt, A, B, C, 256)
        y.backward(dy)

    # Mamba-1's scan at the same state size: d_inner = h * p = 2048 channels x d_state 128.
    d = h * p
    u = torch.randn(b, d, l, device=device, dtype=dt_, generator=g).requires_grad_(True)
    delta = (torch.rand(b, d, l, device=device, generator=g) * 0.1).to(dt_).requires_grad_(True)
    A1 = (-torch.rand(d, n, device=device, generator=g) - 0.5).requires_grad_(True)
    B1 = torch.randn(b, n, l, device=device, dtype=dt_, generator=g).requires_grad_(True)
    C1 = torch.randn(b, n, l, device=device, dtype=dt_, generator=g).requires_grad_(True)
    du = torch.randn(b, d, l, device=device, dtype=dt_, generator=g)

    def scan1():
        selective_scan_fn(u, delta, A1, B1, C1).backward(du)

    return [("ssd fwd+bwd triton", "auto", ssd, 0),
            ("ssd fwd+bwd our PyTorch SSD", "torch", ssd, 0),
            ("mamba-1 selective_scan fwd+bwd (compiled), equal state size", "auto", scan1, 0)]


def _prep_state_update(device: str) -> List[Variant]:
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update

    b, h, p, n = 64, 80, 64, 128          # Mamba-2 2.7B decode, batch 64
    g = torch.Generator(device=device).manual_seed(0)
    state = torch.randn(b, h, p, n, device=device, dtype=torch.bfloat16, generator=g)
    x = torch.randn(b, h, p, device=device, dtype=torch.bfloat16, generator=g)
    dt = torch.rand(b, h, device=device, generator=g).to(torch.bfloat16)[:, :, None].expand(b, h, p)
    A = (-torch.rand(h, device=device, generator=g))[:, None, None].expand(h, p, n)
    B = torch.randn(b, 1, n, device=device, dtype=torch.bfloat16, generator=g)
    C = torch.randn(b, 1, n, device=device, dtype=torch.bfloat16, generator=g)
    D = torch.randn(h, device=device, generator=g)[:, None].expand(h, p)
    bias = torch.rand(h, device=device, generator=g)[:, None].expand(h, p)
    moved = 2 * state.numel() * state.element_size()

    def call():
        selective_state_update(state, x, dt, A, B, C, D, None, bias, True)
    return [("selective_state_update triton", "auto", call, moved),
            ("selective_state_update PyTorch", "torch", call, moved)]


def _prep_norm(device: str) -> List[Variant]:
    from mamba_ssm.ops.triton.layer_norm import rms_norm_fn

    rows, n = 16384, 4096
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(rows, n, device=device, dtype=torch.bfloat16, generator=g)
    res = torch.randn(rows, n, device=device, dtype=torch.float32, generator=g)
    w = torch.randn(n, device=device, dtype=torch.bfloat16, generator=g)
    moved = rows * n * (2 + 4 + 2 + 4)     # read x (bf16), residual (fp32); write y (bf16), residual (fp32)

    def call():
        rms_norm_fn(x, w, None, residual=res, prenorm=True, residual_in_fp32=True)
    return [("rms_norm_fn + residual (prenorm) triton", "auto", call, moved),
            ("rms_norm_fn + residual (prenorm) PyTorch", "torch", call, moved)]


def _prep_gated(device: str) -> List[Variant]:
    from mamba_ssm.ops.triton.layernorm_gated import rmsnorm_fn

    rows, n = 16384, 5120
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(rows, n, device=device, dtype=torch.bfloat16, generator=g)
    z = torch.randn(rows, n, device=device, dtype=torch.bfloat16, generator=g)
    w = torch.randn(n, device=device, dtype=torch.bfloat16, generator=g)
    moved = rows * n * 2 * 3

    def call():
        rmsnorm_fn(x, w, None, z=z, group_size=n // 8, norm_before_gate=False)
    return [("gated rmsnorm (8 groups) triton", "auto", call, moved),
            ("gated rmsnorm (8 groups) PyTorch", "torch", call, moved)]


# Causal conv1d (issue 10, item 2): mamba_ssm._C's kernels against PyTorch. CPU goals (one thread):
# forward >= 2x F.conv1d(groups=D)+SiLU; causal_conv1d_update at batch 1 >= 5x our PyTorch path.
CONV_B, CONV_D, CONV_L, CONV_W = 8, 1536, 2048, 4
CONV_STEPS = 200   # decode steps per timed call (one step is a few microseconds)


def _conv_inputs(device: str, requires_grad: bool = False):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(CONV_B, CONV_D, CONV_L, generator=g).to(device).requires_grad_(requires_grad)
    w = (torch.randn(CONV_D, CONV_W, generator=g) * 0.5).to(device).requires_grad_(requires_grad)
    b = (torch.randn(CONV_D, generator=g) * 0.1).to(device).requires_grad_(requires_grad)
    return x, w, b


def _prep_conv_fwd(device: str) -> List[Variant]:
    import torch.nn.functional as F

    from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn

    x, w, b = _conv_inputs(device)
    w3 = w.unsqueeze(1)
    moved = 2 * x.numel() * x.element_size()   # read x, write out

    def ours():
        with torch.no_grad():
            causal_conv1d_fn(x, w, b, activation="silu")

    def conv1d():   # Mamba's own fallback: a padded depthwise conv1d cut to seqlen, then SiLU
        with torch.no_grad():
            F.silu(F.conv1d(x, w3, b, padding=CONV_W - 1, groups=CONV_D)[..., :CONV_L])
    return [("causal_conv1d fwd mamba_ssm._C", "auto", ours, moved),
            ("F.conv1d(groups=D)+SiLU", None, conv1d, moved),
            ("causal_conv1d fwd our PyTorch path", "torch", ours, moved)]


def _prep_conv_fwd_bwd(device: str) -> List[Variant]:
    from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn

    x, w, b = _conv_inputs(device, requires_grad=True)
    dout = torch.randn(x.shape, device=device)
    moved = 5 * x.numel() * x.element_size()   # fwd: read x, write out; bwd: read x and dout, write dx

    def call():
        x.grad = w.grad = b.grad = None
        causal_conv1d_fn(x, w, b, activation="silu").backward(dout)
    return [("causal_conv1d fwd+bwd mamba_ssm._C", "auto", call, moved),
            ("causal_conv1d fwd+bwd our PyTorch path", "torch", call, moved)]


def _prep_conv_update(device: str) -> List[Variant]:
    from mamba_ssm.ops.causal_conv1d import causal_conv1d_update

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, CONV_D, generator=g).to(device)
    w = torch.randn(CONV_D, CONV_W, generator=g).to(device)
    b = torch.randn(CONV_D, generator=g).to(device)
    state = torch.randn(1, CONV_D, CONV_W, generator=g).to(device)
    moved = CONV_STEPS * (2 * x.numel() + 2 * state.numel()) * 4

    def call():
        for _ in range(CONV_STEPS):
            causal_conv1d_update(x, state, w, b, "silu")
    return [(f"causal_conv1d_update batch 1 x{CONV_STEPS} mamba_ssm._C", "auto", call, moved),
            (f"causal_conv1d_update batch 1 x{CONV_STEPS} our PyTorch path", "torch", call, moved)]


#: One entry per op: (name, device types it runs on, prepare). Other ops' entries go in this list too.
ENTRIES: List[Tuple[str, Tuple[str, ...], Callable[[str], List[Variant]]]] = [
    ("ssd_chunk_scan", ("cuda",), _prep_ssd),
    ("selective_state_update", ("cuda",), _prep_state_update),
    ("rms_norm", ("cuda",), _prep_norm),
    ("gated_rms_norm", ("cuda",), _prep_gated),
    ("causal_conv1d", ("cpu", "cuda"), _prep_conv_fwd),
    ("causal_conv1d_fwd_bwd", ("cpu", "cuda"), _prep_conv_fwd_bwd),
    ("causal_conv1d_update", ("cpu", "cuda"), _prep_conv_update),
]


def run_entry(name: str, variants: List[Variant], device: str, reps: int) -> List[Dict[str, object]]:
    calls = [(label, _with_backend(backend, fn), moved) for label, backend, fn, moved in variants]
    for _, call, _ in calls:      # warm-up: compiles the Triton kernels, loads _C
        call()
        _sync(device)
    wall: Dict[str, List[float]] = {label: [] for label, _, _ in calls}
    cpu: Dict[str, List[float]] = {label: [] for label, _, _ in calls}
    for _ in range(reps):
        for label, call, _ in calls:
            _sync(device)
            c0, t0 = time.process_time(), time.perf_counter()
            call()
            _sync(device)
            wall[label].append(time.perf_counter() - t0)
            cpu[label].append(time.process_time() - c0)
    rows = []
    base = statistics.median(wall[calls[0][0]])
    for label, _, moved in calls:
        w = statistics.median(wall[label])
        rows.append({"op": name, "variant": label, "wall_ms": w * 1e3, "cpu_ms": statistics.median(cpu[label]) * 1e3,
                     "ratio_vs_first": w / base, "bytes": moved, "gbps": moved / w / 1e9 if moved else None})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--out", default=".")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="", help="comma-separated entry names")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)
    device = args.device
    if args.threads:
        torch.set_num_threads(args.threads)
    if device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to do for --device cuda", file=sys.stderr)
        return 1
    only = {s for s in args.only.split(",") if s}
    os.makedirs(args.out, exist_ok=True)
    copy = copy_bandwidth(device)
    results: List[Dict[str, object]] = []
    skipped: List[str] = []
    for name, kinds, prepare in ENTRIES:
        if only and name not in only:
            continue
        if device not in kinds:
            skipped.append(f"{name}: runs on {'/'.join(kinds)} only (the Triton kernels target CUDA/ROCm)")
            continue
        try:
            results += run_entry(name, prepare(device), device, args.reps)
        except Exception as exc:  # noqa: BLE001 - one failing entry must not stop the others
            skipped.append(f"{name}: failed: {type(exc).__name__}: {exc}")
        if device == "cuda":
            torch.cuda.empty_cache()
    gpu = torch.cuda.get_device_name() if device == "cuda" else "-"
    lines = [f"# bench_ops --device {device}", "",
             f"date {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; torch {torch.__version__}; device {gpu}; "
             f"threads {torch.get_num_threads()}; load {os.getloadavg()[0]:.1f}; reps {args.reps} (median, interleaved)",
             ""]
    if copy:
        lines += [f"measured copy bandwidth: {copy:.0f} GB/s", ""]
    lines += ["| op | variant | wall ms | CPU ms | time / first row | GB/s | % of copy |", "|---|---|---|---|---|---|---|"]
    for r in results:
        pct = f"{100 * r['gbps'] / copy:.0f} %" if r["gbps"] and copy else "-"
        gbps = f"{r['gbps']:.0f}" if r["gbps"] else "-"
        lines.append(f"| {r['op']} | {r['variant']} | {r['wall_ms']:.3f} | {r['cpu_ms']:.3f} | "
                     f"{r['ratio_vs_first']:.2f} | {gbps} | {pct} |")
    for s in skipped:
        lines.append(f"\nskipped: {s}")
    text = "\n".join(lines) + "\n"
    print(text)
    with open(os.path.join(args.out, f"bench_ops_{device}.md"), "w") as fh:
        fh.write(text)
    with open(os.path.join(args.out, f"bench_ops_{device}.json"), "w") as fh:
        json.dump({"copy_gbps": copy, "results": results, "skipped": skipped}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
