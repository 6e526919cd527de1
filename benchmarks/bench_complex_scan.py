"""Complex A in the selective scan: what it costs the build, and how its CPU paths run.

Build (``--build``, needs an in-place build's ``build/temp*/build.ninja``, i.e. after ``bash ci/test.sh``
or ``python setup.py build_ext --inplace``): each complex-A translation unit (the CUDA kernels
``scan_complex_{fwd,bwd}_{fp32,fp16,bf16}.cu`` and the CPU kernel ``scan_complex_cpu{,_avx2}.cpp``; the
ops are templates in ``binding_complex_ops.h``, compiled into the binding units) and, for scale, its
real-A counterpart is compiled again with its exact ninja command into a scratch file,
``--build-repeats`` times, interleaved; reported: the median CPU time
(user + system of the compiler processes, getrusage) and the size of the object and of its device code
(the ``.nv_fatbin`` section). The ``.so`` figures are the sections of ``mamba_ssm/_C.abi3.so`` against a
``_C`` built without the complex files (``--base-so``).

Speed (default): fp32, variable B and C, D, z, delta_bias, softplus, 1 thread, process CPU time,
interleaved rounds, medians: the compiled complex-A CPU kernel, the complex PyTorch fallback and, for
scale, the compiled real-A kernel at the same shape, forward and forward+backward. Each implementation's
forward is first checked against a complex128 per-timestep loop (max error / output scale).

    python benchmarks/bench_complex_scan.py [--repeats 5] [--build [--build-repeats 1] --base-so PATH] [--write-doc]
"""

from __future__ import annotations

import argparse
import datetime
import glob
import os
import platform
import re
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _docsection import replace_section

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

import torch  # noqa: E402

DOC = os.path.join(REPO, "docs", "benchmarks.md")
BEGIN, END = "<!-- bench_complex_scan:begin -->", "<!-- bench_complex_scan:end -->"
SHAPES = [(2, 64, 16, 1024), (1, 512, 16, 2048)]
# (complex-A unit, its real-A counterpart or None)
UNITS = [
    ("scan_complex_fwd_fp32.cu", "scan_fwd_fp32.cu"),
    ("scan_complex_fwd_fp16.cu", "scan_fwd_fp16.cu"),
    ("scan_complex_fwd_bf16.cu", "scan_fwd_bf16.cu"),
    ("scan_complex_bwd_fp32.cu", "scan_bwd_fp32.cu"),
    ("scan_complex_bwd_fp16.cu", "scan_bwd_fp16.cu"),
    ("scan_complex_bwd_bf16.cu", "scan_bwd_bf16.cu"),
    ("scan_complex_cpu.cpp", "scan_cpu.cpp"),
    ("scan_complex_cpu_avx2.cpp", "scan_cpu_avx2.cpp"),
]


# ------------------------------------------------------------------------------------------ build
def ninja_commands() -> dict:
    """{source basename: shell command} from the in-place build's build.ninja (variables expanded)."""
    paths = glob.glob(os.path.join(REPO, "build", "temp*", "build.ninja"))
    if not paths:
        raise SystemExit("no build/temp*/build.ninja: run an in-place build first (bash ci/test.sh)")
    with open(paths[0]) as f:
        text = f.read()
    var = dict(re.findall(r"^(\w+) = (.*)$", text, re.MULTILINE))
    rules = dict(re.findall(r"^rule (\w+)\n(?:  .*\n)*?  command = (.*)$", text, re.MULTILINE))
    out = {}
    for _target, rule, src in re.findall(r"^build (\S+): (\w+) (\S+)$", text, re.MULTILINE):
        if rule not in rules:
            continue
        names = {**var, "in": src, "out": "{out}", "out_d": "{out}.d"}
        cmd = rules[rule].replace("$out.d", "$out_d")
        out[os.path.basename(src)] = re.sub(r"\$(\w+)", lambda m, names=names: names.get(m[1], ""), cmd)
    return out


def compile_cpu_seconds(cmd: str, out: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd.replace("{out}", shlex.quote(out)), shell=True, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def section_sizes(path: str) -> dict:
    out = subprocess.run(["size", "-A", path], capture_output=True, text=True, check=True).stdout
    return {m[0]: int(m[1]) for m in re.findall(r"^(\.\S+)\s+(\d+)", out, re.MULTILINE)}


def measure_build(repeats: int, base_so: str | None, emit) -> dict:
    cmds = ninja_commands()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):
            for unit, real in UNITS:
                for src in (unit, real):
                    if src is None or src not in cmds:
                        continue
                    obj = os.path.join(tmp, src + ".o")
                    row = rows.setdefault(src, {"cpu": []})
                    row["cpu"].append(compile_cpu_seconds(cmds[src], obj))
                    row["obj"] = os.path.getsize(obj)
                    row["fatbin"] = section_sizes(obj).get(".nv_fatbin", 0)
    for src, row in rows.items():
        row["cpu_s"] = statistics.median(row.pop("cpu"))
        emit({"kind": "unit", "src": src, **row})
    so = {"now": section_sizes(os.path.join(REPO, "mamba_ssm", "_C.abi3.so"))}
    so["now"]["file"] = os.path.getsize(os.path.join(REPO, "mamba_ssm", "_C.abi3.so"))
    if base_so:
        so["base"] = section_sizes(base_so)
        so["base"]["file"] = os.path.getsize(base_so)
    return {"units": rows, "so": so}


# ------------------------------------------------------------------------------------------ speed
def make_inputs(batch, dim, n, seqlen):
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g)
    A = torch.complex(
        -(0.05 + torch.rand(dim, n, generator=g)), torch.pi * torch.arange(n).float().expand(dim, n)
    )
    return {
        "u": r(batch, dim, seqlen),
        "delta": torch.rand(batch, dim, seqlen, generator=g) - 1.0,
        "A": A,
        "B": r(batch, n, 2 * seqlen),
        "C": r(batch, n, 2 * seqlen),
        "D": r(dim),
        "z": r(batch, dim, seqlen),
        "delta_bias": 0.2 * r(dim),
    }


def loop128(inp):
    """complex128 per-timestep loop (the forward check)."""
    u, dt = (
        inp["u"].double(),
        torch.nn.functional.softplus(inp["delta"].double() + inp["delta_bias"].double()[:, None]),
    )
    A = inp["A"].to(torch.complex128)
    pair = lambda X: torch.complex(X.double()[..., 0::2], X.double()[..., 1::2])
    B, C = pair(inp["B"]), pair(inp["C"])
    h = torch.zeros(u.shape[0], u.shape[1], A.shape[1], dtype=torch.complex128)
    ys = []
    for t in range(u.shape[-1]):
        h = torch.exp(dt[..., t, None] * A) * h + (dt[..., t] * u[..., t])[..., None] * B[:, None, :, t]
        ys.append(2 * (h * C[:, None, :, t]).sum(-1).real)
    y = torch.stack(ys, -1) + inp["D"].double()[:, None] * u
    return y * torch.nn.functional.silu(inp["z"].double())


def implementations():
    from mamba_ssm import _loader

    _loader.load()
    from mamba_ssm._families.selective_scan import compiled, compiled_complex
    from mamba_ssm._families.selective_scan import torch_complex as torch_scan_complex
    from mamba_ssm._families.selective_scan import torch_impl as torch_scan

    names = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")

    def call(fn):
        return lambda inp: fn(*[inp[k] for k in names], delta_softplus=True)

    def real_inputs(inp):  # the same shape with a real A and real (re only) B, C: the real kernel's scale
        return dict(
            inp,
            A=inp["A"].real.contiguous(),
            B=inp["B"][..., 0::2].contiguous(),
            C=inp["C"][..., 0::2].contiguous(),
        )

    impls = [("torch fallback", call(torch_scan_complex.selective_scan), None)]
    if compiled_complex.available():
        impls.insert(0, ("compiled kernel", call(compiled_complex.selective_scan), None))
        impls.append(("compiled real-A kernel", call(compiled.selective_scan), real_inputs))
    impls.append(("real-A torch fallback", call(torch_scan.selective_scan), real_inputs))
    return impls


def timed(fn):
    c0, w0 = time.process_time(), time.perf_counter()
    fn()
    return (time.process_time() - c0) * 1e3, (time.perf_counter() - w0) * 1e3


def measure_speed(repeats, emit):
    torch.set_num_threads(1)
    rows = []
    for shape in SHAPES:
        inp = make_inputs(*shape)
        impls = implementations()
        if shape == SHAPES[0]:
            ref = loop128(inp)
            scale = ref.abs().max().item()
            for name, fn, prep in impls:
                if prep is None:
                    err = (fn(inp).double() - ref).abs().max().item() / scale
                    emit({"kind": "check", "impl": name, "shape": shape, "rel_err": err})
                    assert err < 1e-4, f"{name}: forward off the complex128 loop by {err:.2e} of the scale"
        prepared = {name: (fn, prep(inp) if prep else inp) for name, fn, prep in impls}

        def fwd(fn, x):
            return lambda: fn(x)

        def fwd_bwd(fn, x):
            def run():
                leaves = {k: (v.detach().requires_grad_() if v is not None else None) for k, v in x.items()}
                fn(leaves).sum().backward()

            return run

        for mode, make in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
            times = {name: [] for name in prepared}
            for fn, x in prepared.values():
                make(fn, x)()  # warm-up
            for _ in range(repeats):
                for name, (fn, x) in prepared.items():
                    times[name].append(timed(make(fn, x)))
            for name, ts in times.items():
                row = {
                    "kind": "speed",
                    "shape": shape,
                    "mode": mode,
                    "impl": name,
                    "cpu_ms": statistics.median(t[0] for t in ts),
                    "wall_ms": statistics.median(t[1] for t in ts),
                }
                rows.append(row)
                emit(row)
    return rows


# ------------------------------------------------------------------------------------------ report
def to_markdown(build, speed, info):
    lines = [BEGIN, "## Complex A in the selective scan (`benchmarks/bench_complex_scan.py`)", ""]
    lines += [f"Command: `{info['command']}`", f"Machine: {info['machine']}", f"Date: {info['date']}", ""]
    lines += [
        f"Load average (1 min) before / after: {info['load_before']:.1f} / {info['load_after']:.1f}.",
        "",
    ]
    if speed:
        lines += [
            (
                "Speed: fp32, variable B and C ((re, im) pairs), D, z, delta_bias, softplus, 1 thread; median "
                "process CPU time (wall in brackets) of interleaved rounds. The real-A rows run the same shape "
                "with a real A and real B/C, for scale."
            ),
            "",
            "| batch, dim, d_state, seqlen | mode | implementation | CPU ms (wall ms) | vs compiled kernel |",
            "| --- | --- | --- | ---: | ---: |",
        ]
        for shape in SHAPES:
            for mode in ("fwd", "fwd+bwd"):
                sel = [r for r in speed if r["shape"] == shape and r["mode"] == mode]
                base = next((r["cpu_ms"] for r in sel if r["impl"] == "compiled kernel"), None)
                for r in sel:
                    ratio = f"{r['cpu_ms'] / base:.2f}x" if base else "-"
                    lines.append(
                        f"| {', '.join(map(str, shape))} | {mode} | {r['impl']} | {r['cpu_ms']:.1f} "
                        f"({r['wall_ms']:.1f}) | {ratio} |"
                    )
        lines += [
            "",
            (
                "A complex step costs four real multiplies per product and a sine and cosine per state, "
                "about 4x the real recurrence's arithmetic. The complex kernel's widest build is AVX2+FMA "
                "(used on AVX-512 CPUs too); the real-A kernel runs the widest this CPU has."
            ),
            "",
        ]
    if build:
        lines += [
            (
                "Build: each translation unit compiled again with its ninja command (MAMBA_CUDA_ARCHS=90), "
                "median compiler CPU time; device code = the object's `.nv_fatbin` (sm_90 SASS)."
            ),
            "",
            "| unit | CPU s | object KB | device code KB | real-A counterpart: CPU s, object KB, device KB |",
            "| --- | ---: | ---: | ---: | --- |",
        ]
        units = build["units"]
        tot = [0.0, 0, 0]
        for unit, real in UNITS:
            if unit not in units:
                continue
            u = units[unit]
            tot[0] += u["cpu_s"]
            tot[1] += u["obj"]
            tot[2] += u["fatbin"]
            r = units.get(real)
            rs = f"{real}: {r['cpu_s']:.1f}, {r['obj'] / 1e3:.0f}, {r['fatbin'] / 1e3:.0f}" if r else "-"
            lines.append(
                f"| {unit} | {u['cpu_s']:.1f} | {u['obj'] / 1e3:.0f} | {u['fatbin'] / 1e3:.0f} | {rs} |"
            )
        lines.append(f"| total added | {tot[0]:.1f} | {tot[1] / 1e3:.0f} | {tot[2] / 1e3:.0f} | |")
        lines.append("")
        so = build["so"]
        if "base" in so:
            lines += ["| `_C.abi3.so` | without complex A | with | added |", "| --- | ---: | ---: | ---: |"]
            for key in ("file", ".text", ".nv_fatbin", ".rodata"):
                a, b = so["base"].get(key, 0), so["now"].get(key, 0)
                lines.append(
                    f"| {key} | {a / 1e3:.0f} KB | {b / 1e3:.0f} KB | {(b - a) / 1e3:+.0f} KB ({(b - a) / max(a, 1):+.0%}) |"
                )
            lines.append("")
    lines.append(END)
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5, help="timed rounds of the speed part")
    ap.add_argument("--build-repeats", type=int, default=1, help="compiles of each unit (CPU time is stable)")
    ap.add_argument("--build", action="store_true", help="also measure the build cost (compiles units again)")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--base-so", help="a _C.abi3.so built without the complex-A files, for the .so rows")
    ap.add_argument("--write-doc", action="store_true", help="write the section of docs/benchmarks.md")
    args = ap.parse_args(argv)
    emit = lambda row: print(row, flush=True)
    info = {
        "command": "python benchmarks/bench_complex_scan.py "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}, Python {platform.python_version()}",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "load_before": os.getloadavg()[0],
    }
    speed = None if args.build_only else measure_speed(args.repeats, emit)
    build = measure_build(args.build_repeats, args.base_so, emit) if (args.build or args.build_only) else None
    info["load_after"] = os.getloadavg()[0]
    md = to_markdown(build, speed, info)
    print(md)
    if args.write_doc:
        replace_section(DOC, BEGIN, END, md)


if __name__ == "__main__":
    main()
