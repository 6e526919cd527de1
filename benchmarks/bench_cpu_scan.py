#!/usr/bin/env python
"""CPU selective scan (issues 13 and 21): the compiled kernel (each instruction-set build the CPU runs),
the PyTorch fallback, the per-timestep loop and ``mambapy`` (PyPI) side by side, in one process,
interleaved, after a float64 correctness check.

For every shape (batch, dim, d_state, seqlen) in (2,64,16,L) for L in 1024/2048/8192, (8,768,16,512) and
(1,1536,16,2048), fp32, variable B and C, no D/z/delta_bias/softplus (the call the earlier measurements
used, which every comparator supports), and for each thread count (``--threads``, default 1 and 2):

* the forward output of every implementation is first compared with a float64 per-timestep loop
  (max error relative to the output's scale; a failure stops the run);
* forward (no autograd) and forward+backward (all five inputs require grad), timed round-robin: each
  round runs every implementation once, in an order shuffled per round (seeded), so load changes and
  what a call leaves behind for the next one (OpenMP workers still spinning, freed memory faulted in
  again: +50-100% CPU time for a 2-thread fallback forward at (2,64,16,1024) that always ran right after
  mambapy) fall on them alike; medians of process CPU time (the primary figure on a shared machine) and
  wall time;
* the compiled kernel once per build in ``--isas`` (default: every build this CPU runs of avx512 and
  avx2), as ``compiled-<isa>`` rows: ``MAMBA_SSM_CPU_ISA`` is set around each call (the library reads
  it at every call), so the builds are timed in the same rounds; an AVX-512 machine measures its AVX2
  build this way;
* glibc's allocator fixed for the timing (``--malloc steady``, the default; the script re-runs itself with
  the settings, which glibc reads at process start): blocks under 32 MiB (MALLOC_MMAP_THRESHOLD_) come
  from the heap, which is never trimmed (MALLOC_TRIM_THRESHOLD_), so a call reuses the memory the last
  one freed. With glibc's default, dynamic threshold, whether an implementation's buffers are faulted in
  afresh depends on what ran before it: mambapy's forward at (2,64,16,1024) took 20-60 ms from run to run
  for about 20 ms of work. ``--malloc default`` keeps glibc's behaviour;
* peak memory (1-thread rows): in a child process per measurement, the rise of its RSS above the level
  just before one call (after a warm-up call), sampled every 0.2 ms by a thread reading /proc/self/statm
  (the only measure that sees the kernels' own malloc'ed buffers; torch has no CPU allocator
  statistics), with glibc's mmap threshold fixed at 128 KiB (MALLOC_MMAP_THRESHOLD_) so that freed
  buffers leave the RSS at once;
* ops: the number of ATen ops one call dispatches (a TorchDispatchMode counting every op, views
  included), for the fallback and mambapy;
* at one thread, ``torch.exp(x, out=buf)`` over batch*dim*seqlen*d_state fp32 elements, timed in the
  same rounds (torch's own kernel for its CPU capability, named in the report): the goals are the
  compiled forward at <= 0.45x of it (AVX-512) and <= 0.5x (AVX2) at (1,1536,16,2048); on an AVX-512
  CPU, ``ATEN_CPU_CAPABILITY=avx2`` caps torch's exp too, for the AVX2 goal like for like;
* bf16 inputs to the compiled forward and backward: peak extra memory in units of one input (u's bytes).

With ``--load`` a busy-looping child process runs during every timed measurement, 1 and 2 threads alike
(the issue's "another process loading the second core", compared like for like); with
``--load-threads 2`` only during the 2-thread rows (1 thread alone, 2 threads with the other core
loaded). The machine's load average is recorded at the start and end either way.

``mambapy`` is a benchmark-only dependency (not in ci/requirements-dev.txt): install it next to the dev
torch, e.g. ``python -m venv /tmp/mvenv && echo $(python -c 'import site; print(site.getsitepackages()[0])')
> /tmp/mvenv/lib/python3.11/site-packages/dev.pth && /tmp/mvenv/bin/pip install --no-deps mambapy==1.2.0``
and run this script with ``--mambapy-path /tmp/mvenv/lib/python3.11/site-packages``; without it the
mambapy columns are left out.

    python benchmarks/bench_cpu_scan.py [--threads 1,2] [--repeats 5] [--isas avx512,avx2] [--load] [--write-doc]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _docsection import replace_section

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import torch  # noqa: E402

DOC = os.path.join(REPO, "docs", "benchmarks.md")
BEGIN, END = "<!-- bench_cpu_scan:begin -->", "<!-- bench_cpu_scan:end -->"
SHAPES = [(2, 64, 16, 1024), (2, 64, 16, 2048), (2, 64, 16, 8192), (8, 768, 16, 512), (1, 1536, 16, 2048)]
GOAL_SHAPE = (1, 1536, 16, 2048)


# ------------------------------------------------------------------------------------------ inputs
def make_inputs(batch, dim, d_state, seqlen, dtype=torch.float32):
    """u, delta, A, B, C as in bench_fallback.py / bench_kernel.py (variable B/C, Mamba-like ranges)."""
    g = torch.Generator().manual_seed(0)
    u = torch.randn(batch, dim, seqlen, generator=g)
    delta = 0.1 * torch.rand(batch, dim, seqlen, generator=g)
    A = -torch.rand(dim, d_state, generator=g) - 0.5
    B = torch.randn(batch, d_state, seqlen, generator=g)
    C = torch.randn(batch, d_state, seqlen, generator=g)
    return [u.to(dtype), delta.to(dtype), A, B.to(dtype), C.to(dtype)]


def loop_scan(u, delta, A, B, C):
    """The per-timestep loop: one state update and one einsum per step (bench_fallback.py's loop)."""
    delta_a = torch.exp(torch.einsum("bdl,dn->bdln", delta, A))
    delta_bu = torch.einsum("bdl,bnl,bdl->bdln", delta, B, u)
    x = u.new_zeros(u.shape[0], u.shape[1], A.shape[1])
    ys = []
    for a_t, bu_t, c_t in zip(delta_a.unbind(2), delta_bu.unbind(2), C.unbind(2)):
        x = a_t * x + bu_t
        ys.append(torch.einsum("bdn,bn->bd", x, c_t))
    return torch.stack(ys, dim=2)


# ------------------------------------------------------------------------------------------ implementations
class Impl:
    """name, fn(*inputs) -> out (batch, dim, seqlen), and prepare(inputs) -> the inputs fn takes."""

    def __init__(self, name, fn, prepare=None, finish=None):
        self.name, self.fn = name, fn
        self.prepare = prepare or (lambda xs: xs)
        self.finish = finish or (lambda y: y)


ISA_ENV = "MAMBA_SSM_CPU_ISA"


def with_isa(isa, fn):
    """fn with ``MAMBA_SSM_CPU_ISA=isa`` around each call (the library reads it at every call), restored
    after."""

    def run(*args):
        before = os.environ.get(ISA_ENV)
        os.environ[ISA_ENV] = isa
        try:
            return fn(*args)
        finally:
            if before is None:
                del os.environ[ISA_ENV]
            else:
                os.environ[ISA_ENV] = before

    return run


def load_compiled():
    """Loads mamba_ssm._C (its ops then exist under torch.ops.mamba_ssm), or exits saying how to build it."""
    from mamba_ssm import _loader

    result = _loader.load()
    if not result.loaded:
        raise SystemExit(
            f"mamba_ssm._C is not loaded: {result.reason}. Build it first: "
            "MAX_JOBS=1 bash ci/test.sh tests/kernels/test_cpu_kernel.py"
        )


def runnable_isas(wanted):
    """The builds in ``wanted`` this CPU runs (cpu_isa() under the forced value names that build)."""
    out = []
    for isa in wanted:
        if with_isa(isa, torch.ops.mamba_ssm.cpu_isa)() == isa:
            out.append(isa)
        else:
            print(f"[bench] this CPU cannot run the {isa} build; its rows are left out", file=sys.stderr)
    return out


def implementations(names, mambapy_path, isas=()):
    """Impl objects for ``names``; "compiled" becomes one ``compiled-<isa>`` per build in ``isas`` (or
    one "compiled" row running the widest build when ``isas`` is empty), "compiled-<isa>" that one."""
    out = []
    compiled_names = [n for n in names if n == "compiled" or n.startswith("compiled-")]
    if compiled_names:
        load_compiled()
        from mamba_ssm._families.selective_scan import compiled

        def scan(*a):
            return compiled.selective_scan(*a)

        for name in compiled_names:
            if name == "compiled" and not isas:
                out.append(Impl("compiled", scan))
            for isa in isas if name == "compiled" else [name.split("-", 1)[1]]:
                out.append(Impl(f"compiled-{isa}", with_isa(isa, scan)))
    if "fallback" in names:
        from mamba_ssm._families.selective_scan import torch_impl as torch_scan

        out.append(Impl("fallback", lambda *a: torch_scan.selective_scan(*a)))
    if "loop" in names:
        out.append(Impl("loop", loop_scan))
    if "mambapy" in names:
        if mambapy_path and mambapy_path not in sys.path:
            sys.path.append(mambapy_path)
        try:
            from mambapy.mamba import MambaBlock
        except ImportError as exc:
            print(f"[bench] mambapy not importable ({exc}); its columns are left out", file=sys.stderr)
        else:
            # mambapy's selective scan (the Blelloch pscan; `self` is unused): x, delta (B, L, ED),
            # A (ED, N), B, C (B, L, N), D (ED); its layout is made outside the timed call.
            def prep(xs):
                u, delta, A, B, C = xs
                D = torch.zeros(u.shape[1])
                return [
                    u.transpose(1, 2).contiguous(),
                    delta.transpose(1, 2).contiguous(),
                    A,
                    B.transpose(1, 2).contiguous(),
                    C.transpose(1, 2).contiguous(),
                    D,
                ]

            out.append(
                Impl(
                    "mambapy",
                    lambda *a: MambaBlock.selective_scan(None, *a),
                    prep,
                    lambda y: y.transpose(1, 2),
                )
            )
    return out


# ------------------------------------------------------------------------------------------ measuring
class OpCounter(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def _rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_rise(fn):
    """Bytes: the peak RSS during fn() (sampled every 0.2 ms, and read once more with fn's result still
    alive) minus the RSS just before it."""
    base = _rss()
    peak = [base]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], _rss())
            time.sleep(0.0002)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        result = fn()  # kept alive for the last reading: the output (and gradients) count
        peak[0] = max(peak[0], _rss())
        del result
    finally:
        stop.set()
        th.join()
    return max(0, peak[0] - base)


def make_call(impl, inputs, backward):
    if not backward:

        def run():
            with torch.no_grad():
                return impl.fn(*inputs)

        return run
    leaves = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]

    def run():
        for x in leaves:
            x.grad = None
        y = impl.fn(*leaves)
        y.backward(torch.ones_like(y))
        return y  # the gradients stay on the leaves until the next call

    return run


def timed(fn):
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return (time.process_time() - c0) * 1e3, (time.perf_counter() - w0) * 1e3


def check_forward(impls, inputs, shape):
    """Every implementation's forward against the float64 loop; returns {name: relative max error}."""
    ref = loop_scan(*[x.double() for x in inputs])
    scale = ref.abs().max().item()
    errs = {}
    for impl in impls:
        with torch.no_grad():
            out = impl.finish(impl.fn(*impl.prepare(inputs))).double()
        err = (out - ref).abs().max().item() / scale
        errs[impl.name] = err
        if not err < 1e-3:
            raise SystemExit(
                f"{impl.name} at {shape}: forward off the float64 loop by {err:.2e} of the output "
                "scale; not timing a wrong result"
            )
    return errs


class Busy:
    """A child process spinning on one core (another job loading the machine)."""

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(0.2)
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()
        return False


def measure_shape(impls, shape, threads, repeats, loop_repeats, emit, mambapy_path=None):
    torch.set_num_threads(threads)
    batch, dim, d_state, seqlen = shape
    inputs = make_inputs(*shape)
    errs = check_forward(impls, inputs, shape) if threads == 1 else {}
    exp_x = torch.randn(batch * dim * seqlen * d_state) if shape == GOAL_SHAPE and threads == 1 else None
    exp_buf = torch.empty_like(exp_x) if exp_x is not None else None
    for backward in (False, True):
        mode = "fwd+bwd" if backward else "fwd"
        calls = {impl.name: make_call(impl, impl.prepare(inputs), backward) for impl in impls}
        if exp_x is not None and not backward:
            calls["exp"] = lambda: torch.exp(exp_x, out=exp_buf)
        times = {name: [] for name in calls}
        for name, fn in calls.items():  # warm-up (not the slow loop: nothing to warm)
            if name != "loop":
                fn()
        order = random.Random(f"{shape}{threads}{mode}")
        for r in range(repeats):
            names = list(calls)
            order.shuffle(names)
            for name in names:
                if name == "loop" and r >= loop_repeats:
                    continue
                times[name].append(timed(calls[name]))
        for impl in impls:
            t = times[impl.name]
            row = {
                "kind": "time",
                "shape": list(shape),
                "threads": threads,
                "pass": mode,
                "impl": impl.name,
                "cpu_ms": round(statistics.median(x[0] for x in t), 2),
                "wall_ms": round(statistics.median(x[1] for x in t), 2),
                "runs": len(t),
                "loadavg": round(os.getloadavg()[0], 2),
            }
            if threads == 1:
                mem = measure_memory(impl.name, shape, mode, mambapy_path)
                if mem:
                    row["peak_mib"] = round(mem["peak_bytes"] / 2**20, 1)
            if impl.name in errs:
                row["fwd_rel_err"] = float(f"{errs[impl.name]:.2e}")
            if impl.name in ("fallback", "mambapy"):
                counter = OpCounter()
                with counter:
                    calls[impl.name]()
                row["ops"] = counter.count
            emit(row)
        if "exp" in times:
            t = times["exp"]
            emit(
                {
                    "kind": "exp",
                    "shape": list(shape),
                    "threads": threads,
                    "elements": exp_x.numel(),
                    "cpu_ms": round(statistics.median(x[0] for x in t), 2),
                    "wall_ms": round(statistics.median(x[1] for x in t), 2),
                    "runs": len(t),
                }
            )


def measure_bf16(shape, emit):
    """Compiled forward / forward+backward with bf16 inputs: peak extra memory in units of one input."""
    for mode in ("fwd", "fwd+bwd"):
        mem = measure_memory("compiled", shape, mode, None, dtype="bfloat16")
        if mem:
            one, peak = mem["input_bytes"], mem["peak_bytes"]
            emit(
                {
                    "kind": "bf16_memory",
                    "shape": list(shape),
                    "pass": mode,
                    "input_mib": round(one / 2**20, 2),
                    "peak_mib": round(peak / 2**20, 2),
                    "peak_inputs": round(peak / one, 2),
                }
            )


# ------------------------------------------------------------------------------------------ report
def _cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


#: Goals of issue 21 for the compiled forward against one torch.exp over as many elements, per build.
EXP_GOALS = {"avx512": 0.45, "avx2": 0.5}
#: compiled forward+backward / forward (CPU time), every build; fallback / mambapy (CPU time).
FWD_BWD_GOAL, MAMBAPY_GOAL = 2.5, 2.0


def _isa_of(impl):
    return impl.split("-", 1)[1] if "-" in impl else "widest"


def goal_lines(rows, info):
    """The goals of issues 13 and 21, each with the measured figure and met / missed."""

    def find(kind, **kw):
        return [r for r in rows if r["kind"] == kind and all(r.get(k) == v for k, v in kw.items())]

    lines = []
    compiled = sorted({r["impl"] for r in find("time") if r["impl"].startswith("compiled")})
    e = find("exp", shape=list(GOAL_SHAPE), threads=1)
    for impl in compiled:
        c = find("time", shape=list(GOAL_SHAPE), threads=1, impl=impl, **{"pass": "fwd"})
        goal = EXP_GOALS.get(_isa_of(impl), EXP_GOALS.get(info.get("widest", ""), 0.45))
        if e and c:
            q = c[0]["cpu_ms"] / e[0]["cpu_ms"]
            lines.append(
                f"- {impl} forward at {GOAL_SHAPE}, 1 thread: {c[0]['cpu_ms']} ms CPU = **{q:.2f}x** one "
                f"`torch.exp(x, out=buf)` over {e[0]['elements']:,} fp32 elements ({e[0]['cpu_ms']} ms): "
                f"goal <= {goal}x {'met' if q <= goal else f'missed by {q / goal:.2f}x'}"
                + (
                    f" (torch's exp here runs its {info['aten']} kernels; ATEN_CPU_CAPABILITY=avx2 "
                    "compares like for like, as on an AVX2-only CPU)."
                    if _isa_of(impl) == "avx2" and str(info.get("aten", "")).upper().startswith("AVX512")
                    else "."
                )
            )
    for impl in compiled:
        for threads in sorted({r["threads"] for r in find("time", impl=impl)}):
            qs = []
            for f in find("time", impl=impl, threads=threads, **{"pass": "fwd"}):
                fb = find("time", impl=impl, shape=f["shape"], threads=threads, **{"pass": "fwd+bwd"})
                if fb:
                    qs.append((fb[0]["cpu_ms"] / f["cpu_ms"], tuple(f["shape"])))
            if not qs:
                continue
            top = max(qs)
            lines.append(
                f"- {impl} forward+backward / forward (CPU time), {threads} thread(s): "
                + ", ".join(f"{shape} {q:.2f}x" for q, shape in qs)
                + f": goal <= {FWD_BWD_GOAL}x "
                + (
                    "met at every shape."
                    if top[0] <= FWD_BWD_GOAL
                    else f"missed; worst {top[0]:.2f}x at {top[1]}."
                )
            )
    for threads in sorted({r["threads"] for r in find("time", impl="fallback")}):
        rs = []
        for f in find("time", impl="fallback", threads=threads):
            mp = find("time", impl="mambapy", shape=f["shape"], threads=threads, **{"pass": f["pass"]})
            if mp:
                rs.append(
                    (
                        mp[0]["cpu_ms"] / f["cpu_ms"],
                        mp[0]["wall_ms"] / f["wall_ms"],
                        tuple(f["shape"]),
                        f["pass"],
                    )
                )
        if rs:
            low = min(rs)
            busy = info["busy"] or threads in info.get("busy_threads", [])
            loaded = " with the other core loaded" if busy and threads > 1 else ""
            lines.append(
                f"- fallback vs mambapy (CPU time), {threads} thread(s){loaded}: lowest {low[0]:.2f}x "
                f"({low[2]} {low[3]}; wall {low[1]:.2f}x): goal >= {MAMBAPY_GOAL}x "
                + (
                    "met at every shape."
                    if low[0] >= MAMBAPY_GOAL
                    else f"missed by {MAMBAPY_GOAL / low[0]:.2f}x there."
                )
            )
    two_loaded = info["busy"] or 2 in info.get("busy_threads", [])
    ws = []
    for f in find("time", impl="fallback", threads=2):
        one = find("time", impl="fallback", shape=f["shape"], threads=1, **{"pass": f["pass"]})
        if one:
            ws.append((f["wall_ms"] / one[0]["wall_ms"], tuple(f["shape"]), f["pass"]))
    if ws:
        top = max(ws)
        lines.append(
            f"- fallback at 2 threads{' with the other core loaded' if two_loaded else ''}: wall time "
            f"at most {top[0]:.2f}x its 1-thread wall time ({top[1]}, {top[2]}): goal (issue 13) <= 1.5x "
            + ("met." if top[0] <= 1.5 else f"missed by {top[0] / 1.5:.2f}x.")
        )
    for r in find("bf16_memory"):
        goal = (
            " (goal <= 1.5x: " + ("met)" if r["peak_inputs"] <= 1.5 else "missed)")
            if r["pass"] == "fwd"
            else " (du and ddelta, gradients of the size of u, are 2 inputs by themselves)"
        )
        lines.append(
            f"- bf16 compiled {r['pass']} at {tuple(r['shape'])}: peak extra memory {r['peak_mib']} MiB = "
            f"**{r['peak_inputs']}x** one input ({r['input_mib']} MiB){goal}."
        )
    return lines


def _cpu_flags():
    """The vector extensions /proc/cpuinfo lists that the CPU kernel's builds use."""
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    have = [f for f in ("avx2", "fma", "avx512f", "avx512dq", "avx512bw", "avx512vl") if f in flags]
    return "flags " + " ".join(have) if have else "no AVX2 / AVX-512 flags"


def to_markdown(rows, info):
    head = (
        f"CPU: {info['cpu']} ({info['cpus']} CPUs; {info['flags']}); compiled builds timed: "
        f"{info['isas']} (widest this CPU runs: `{info['widest']}`); torch {info['torch']} "
        f"(its own kernels: {info['aten']}); load average (1 min) {info['load_start']:.1f} at the start, "
        f"{info['load_end']:.1f} at the end"
        f"{'; a busy-looping child process ran during every timed row' if info['busy'] else ''}"
        + (
            f"; a busy-looping child process ran during the {', '.join(map(str, info['busy_threads']))}-thread rows"
            if info.get("busy_threads")
            else ""
        )
        + (
            "; glibc's heap reused between calls (`--malloc steady`)"
            if info.get("malloc") == "steady"
            else "; glibc's default allocator behaviour (`--malloc default`)"
        )
        + "; each round in a shuffled order."
    )
    lines = [
        head,
        "",
        "| shape (B,D,N,L) | threads | pass | impl | CPU ms | wall ms | vs mambapy (CPU) | peak MiB | ops | fwd err |",
        "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    rows_t = [r for r in rows if r["kind"] == "time"]
    for r in rows_t:
        mp = [
            m
            for m in rows_t
            if m["impl"] == "mambapy"
            and (m["shape"], m["threads"], m["pass"]) == (r["shape"], r["threads"], r["pass"])
        ]
        ratio = f"{mp[0]['cpu_ms'] / r['cpu_ms']:.1f}x" if mp and r["impl"] != "mambapy" else "-"
        lines.append(
            f"| {tuple(r['shape'])} | {r['threads']} | {r['pass']} | {r['impl']} | {r['cpu_ms']} | "
            f"{r['wall_ms']} | {ratio} | {r.get('peak_mib', '-')} | {r.get('ops', '-')} | "
            f"{r.get('fwd_rel_err', '-')} |"
        )
    lines += ["", "Goals (issues 13 and 21):", ""] + goal_lines(rows, info)
    return "\n".join(lines) + "\n"


def write_doc(markdown, command):
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    section = (
        f"{BEGIN}\n## CPU selective scan: compiled, fallback, loop, mambapy (bench_cpu_scan.py)\n\n"
        f"Command: `{command}`; date: {stamp}; host {platform.node()}, Python {platform.python_version()}.\n"
        "Process CPU time is the primary figure (the machine is shared); every row is a median of "
        "interleaved rounds after a float64 check of the forward (`fwd err`: max error / output scale).\n"
        "Peak MiB: RSS rise during one call in a child process (sampled every 0.2 ms; 1-thread rows). "
        "Ops: ATen ops dispatched per call.\n\n"
        f"{markdown}{END}\n"
    )
    replace_section(DOC, BEGIN, END, section)


def memory_child(spec, mambapy_path):
    """One peak-memory measurement in this (fresh) process: {impl},{B,D,N,L},{fwd|fwd+bwd},{dtype}."""
    name, shape, mode, dtype = spec.split(":")
    shape = tuple(int(v) for v in shape.split(","))
    torch.set_num_threads(1)
    (impl,) = implementations([name], mambapy_path)
    inputs = impl.prepare(make_inputs(*shape, dtype=getattr(torch, dtype)))
    run = make_call(impl, inputs, mode == "fwd+bwd")
    run()  # warm-up: first-call allocations (dispatcher, libraries) are not the op's
    peak = max(peak_rss_rise(run) for _ in range(2))  # the larger reading: a sample can miss a peak
    print(json.dumps({"peak_bytes": peak, "input_bytes": inputs[0].numel() * inputs[0].element_size()}))


def measure_memory(name, shape, mode, mambapy_path, dtype="float32"):
    """Peak RSS rise of one call, in a child process whose glibc returns freed blocks >= 128 KiB to the
    OS at once (MALLOC_MMAP_THRESHOLD_, read at process start): in the timing process glibc's default,
    dynamic threshold keeps freed buffers resident, so RSS would not show a later call's peak (and
    fixing the threshold there would slow the allocation-heavy implementations down)."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    env.pop("MALLOC_TRIM_THRESHOLD_", None)
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--memory-child",
        f"{name}:{','.join(map(str, shape))}:{mode}:{dtype}",
    ]
    if mambapy_path:
        cmd += ["--mambapy-path", mambapy_path]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        print(f"[bench] memory of {name} {shape} {mode}: {proc.stderr.strip()[-300:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


#: glibc allocator settings of the timing process with ``--malloc steady`` (see the module docstring).
STEADY_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(2**40)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds (medians reported)")
    ap.add_argument("--loop-repeats", type=int, default=2, help="rounds that include the slow loop")
    ap.add_argument("--impls", default="compiled,fallback,loop,mambapy")
    ap.add_argument(
        "--isas",
        default="avx512,avx2",
        help="compiled builds to time (those this CPU runs), each as compiled-<isa>; '' for the widest only",
    )
    ap.add_argument("--shapes", help="semicolon-separated B,D,N,L (default: the issue's five)")
    ap.add_argument(
        "--mambapy-path",
        default=os.environ.get("MAMBAPY_PATH"),
        help="a site-packages folder holding mambapy (appended to sys.path)",
    )
    ap.add_argument(
        "--load",
        action="store_true",
        help="a busy child process during every timed row (1 and 2 threads alike)",
    )
    ap.add_argument(
        "--load-threads",
        default="",
        help="comma-separated thread counts whose rows run with the busy child (e.g. 2: the second core "
        "loaded while the 1-thread rows run alone)",
    )
    ap.add_argument("--out", help="write the rows as JSON here as they complete")
    ap.add_argument("--write-doc", action="store_true", help="update docs/benchmarks.md")
    ap.add_argument(
        "--malloc",
        choices=("steady", "default"),
        default="steady",
        help="steady: glibc's heap reused between calls (re-runs the script with STEADY_MALLOC set); "
        "default: glibc's own, dynamic behaviour",
    )
    ap.add_argument("--memory-child", help=argparse.SUPPRESS)  # internal: one memory measurement
    ns = ap.parse_args(argv)
    if ns.memory_child:
        memory_child(ns.memory_child, ns.mambapy_path)
        return 0
    if ns.malloc == "steady" and any(os.environ.get(k) != v for k, v in STEADY_MALLOC.items()):
        args = list(argv if argv is not None else sys.argv[1:])
        sys.stdout.flush()
        os.execve(
            sys.executable,
            [sys.executable, os.path.abspath(__file__), *args],
            {**os.environ, **STEADY_MALLOC},
        )
    shapes = [tuple(int(v) for v in s.split(",")) for s in ns.shapes.split(";")] if ns.shapes else SHAPES
    names = ns.impls.split(",")
    has_compiled = any(n.startswith("compiled") for n in names)
    if has_compiled:
        load_compiled()
    isas = runnable_isas([i for i in ns.isas.split(",") if i]) if has_compiled else []
    impls = implementations(names, ns.mambapy_path, isas)
    rows = []

    def emit(row):
        rows.append(row)
        print(json.dumps(row), flush=True)
        if ns.out:
            with open(ns.out, "w") as f:
                json.dump(rows, f, indent=1)

    loaded = {int(t) for t in ns.load_threads.split(",") if t}
    info = {
        "cpu": _cpu_model(),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "busy": ns.load,
        "busy_threads": sorted(loaded) if not ns.load else [],
        "flags": _cpu_flags(),
        "aten": torch.backends.cpu.get_cpu_capability(),
        "widest": with_isa("", torch.ops.mamba_ssm.cpu_isa)() if has_compiled else "-",
        "isas": ", ".join(isas) if isas else "-",
        "load_start": os.getloadavg()[0],
        "malloc": ns.malloc,
    }
    for threads in (int(t) for t in ns.threads.split(",")):
        for shape in shapes:
            if ns.load or threads in loaded:
                with Busy():
                    measure_shape(impls, shape, threads, ns.repeats, ns.loop_repeats, emit, ns.mambapy_path)
            else:
                measure_shape(impls, shape, threads, ns.repeats, ns.loop_repeats, emit, ns.mambapy_path)
    if has_compiled:
        for shape in (GOAL_SHAPE, (2, 64, 16, 8192)):
            if shape in shapes:
                measure_bf16(shape, emit)
    info["load_end"] = os.getloadavg()[0]
    markdown = to_markdown(rows, info)
    print(markdown)
    if ns.write_doc:
        write_doc(
            markdown,
            "python benchmarks/bench_cpu_scan.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
