"""Build benchmark: a clean source build of mamba_ssm._C for sm_90 only (plus the CPU kernel), MAX_JOBS=2.

Measures, for a fresh copy of the project (no objects from earlier builds):

* wall time of ``python setup.py build_ext --inplace`` (MAMBA_FORCE_BUILD=TRUE MAMBA_CUDA_ARCHS=90);
* CPU time of everything it ran (user + system of all waited-for child processes, getrusage);
* peak resident memory of the largest single process of the build (ru_maxrss of the children, MiB);
* the size of ``mamba_ssm/_C.abi3.so`` (MB = 10^6 bytes, as upstream's 47.9 MB was quoted);
* a second, incremental run with nothing changed (what ci/test.sh pays on every run);

once per binding (``--torch-abi both``, the default: the classic ATen binding, ``MAMBA_TORCH_STABLE_ABI=0``,
then the LibTorch stable-ABI one, floor 2.10), each in its own fresh copy, one after the other.

Goals (issue 3): wall <= 90 s (1/3 of upstream 2.3.2.post1's 4 min 38 s for sm_90 on this 2-core
machine) and .so <= 24 MB (half of upstream's 47.9 MB).

Usage::

    CUDA_HOME=/usr/local/cuda-13.0 python benchmarks/bench_build.py [--jobs 2] [--archs 90] [--torch-abi both]
        [--no-write]

Writes its section of docs/benchmarks.md (between the bench_build markers) unless --no-write.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(REPO, "docs", "benchmarks.md")
BEGIN, END = "<!-- bench_build:begin -->", "<!-- bench_build:end -->"
GOAL_WALL_S = 90.0
GOAL_SIZE_MB = 24.0


def copy_project(dest: str) -> None:
    """Copy the checkout's tracked and unignored files (what a clean clone has) to ``dest``."""
    out = subprocess.run(
        ["git", "-C", REPO, "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True, check=True
    ).stdout.decode()
    for rel in out.split("\0"):
        src = os.path.join(REPO, rel)
        if not rel or not os.path.isfile(src):
            continue
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            shutil.copy2(src, target)
        except FileNotFoundError:  # removed since listed
            continue


def timed_build(proj: str, env: dict) -> dict:
    """Run the in-place build once; wall/CPU/peak RSS from getrusage of the children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=proj,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-6000:])
        raise SystemExit(f"build failed with exit code {p.returncode}")
    return {
        "wall_s": wall,
        "cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "peak_rss_mib": after.ru_maxrss / 1024.0,  # KiB on Linux; max over all children so far
        "log": p.stdout,
    }


def _first_line(cmd) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return "n/a"
    lines = [l for l in out.splitlines() if l.strip()]
    return lines[0].strip() if lines else "n/a"


def machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"model name\s*:\s*(.+)", f.read())
            cpu = m.group(1).strip() if m else cpu
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    import torch

    nvcc = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "nvcc")
    nvcc_line = [
        l
        for l in subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.splitlines()
        if "release" in l
    ]
    return (
        f"{cpu}, {cores} cores, {mem} RAM, {platform.system()} {platform.release()}; "
        f"{_first_line(['gcc', '--version'])}; {nvcc_line[0].strip() if nvcc_line else 'nvcc n/a'}; "
        f"torch {torch.__version__}; Python {platform.python_version()}"
    )


def write_section(text: str) -> None:
    os.makedirs(os.path.dirname(DOC), exist_ok=True)
    try:
        with open(DOC) as f:
            doc = f.read()
    except FileNotFoundError:
        doc = "# Benchmarks\n\nEach section is written by the script it names.\n"
    block = f"{BEGIN}\n{text.rstrip()}\n{END}"
    if BEGIN in doc and END in doc:
        doc = doc[: doc.index(BEGIN)] + block + doc[doc.index(END) + len(END) :]
    else:
        doc = doc.rstrip() + "\n\n" + block + "\n"
    tmp = DOC + ".tmp"
    with open(tmp, "w") as f:
        f.write(doc)
    os.replace(tmp, DOC)


def build_once(env: dict, keep: bool) -> dict:
    """A clean build then an incremental one of a fresh copy; the measures and the build info."""
    tmp = tempfile.mkdtemp(prefix="mamba-bench-build-")
    proj = os.path.join(tmp, "proj")
    try:
        copy_project(proj)
        load_before = os.getloadavg()[0]
        clean = timed_build(proj, env)
        load_after = os.getloadavg()[0]
        so = os.path.join(proj, "mamba_ssm", "_C.abi3.so")
        size_mb = os.path.getsize(so) / 1e6
        n_tu = len(re.findall(r"^\[\d+/\d+\]", clean["log"], flags=re.MULTILINE))
        sys.path.insert(0, REPO)
        from mamba_ssm._compat.buildinfo import read_build_info

        info = read_build_info(so)
        incr = timed_build(proj, env)
    finally:
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return dict(clean=clean, incr=incr, size_mb=size_mb, n_tu=n_tu, info=info, load=(load_before, load_after))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=2, help="MAX_JOBS for the build (default 2)")
    ap.add_argument("--archs", default="90", help="MAMBA_CUDA_ARCHS (default 90)")
    ap.add_argument(
        "--torch-abi",
        choices=("both", "classic", "stable"),
        default="both",
        help="which binding(s) to build (MAMBA_TORCH_STABLE_ABI 0 / 2.10; default both)",
    )
    ap.add_argument("--no-write", action="store_true", help="print only; do not update docs/benchmarks.md")
    ap.add_argument("--keep", action="store_true", help="keep the scratch projects")
    args = ap.parse_args(argv)

    env = dict(os.environ, MAMBA_FORCE_BUILD="TRUE", MAMBA_CUDA_ARCHS=args.archs, MAX_JOBS=str(args.jobs))
    env.setdefault("CUDA_HOME", "/usr/local/cuda-13.0")
    env["CCACHE_DISABLE"] = "1"  # torch's cpp_extension prepends ccache when installed: measure real compiles
    for var in ("TORCH_CUDA_ARCH_LIST", "MAMBA_SKIP_CUDA_BUILD", "CFLAGS", "CXXFLAGS"):
        env.pop(var, None)
    kinds = ("classic", "stable") if args.torch_abi == "both" else (args.torch_abi,)
    runs = {}
    for kind in kinds:
        runs[kind] = build_once(
            dict(env, MAMBA_TORCH_STABLE_ABI="0" if kind == "classic" else "2.10"), args.keep
        )
        r = runs[kind]
        print(
            f"{kind}: clean {r['clean']['wall_s']:.1f} s wall, {r['clean']['cpu_s']:.1f} s CPU, "
            f"{r['size_mb']:.2f} MB ({r['info'].describe_abi()})",
            flush=True,
        )

    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    ok_wall = all(r["clean"]["wall_s"] <= GOAL_WALL_S for r in runs.values())
    ok_size = all(r["size_mb"] <= GOAL_SIZE_MB for r in runs.values())
    archs = shlex.quote(args.archs)  # '80;90+PTX' pasted unquoted would end the command at ';'
    cmd = (
        f"CUDA_HOME={shlex.quote(env['CUDA_HOME'])} python benchmarks/bench_build.py --jobs {args.jobs} "
        f"--archs {archs} --torch-abi {args.torch_abi}"
    )

    def row(name, fmt, goal="", upstream=""):
        return f"| {name} | " + " | ".join(fmt(runs[k]) for k in kinds) + f" | {goal} | {upstream} |"

    first = runs[kinds[0]]
    loads = "; ".join(f"{k} {runs[k]['load'][0]:.1f} / {runs[k]['load'][1]:.1f}" for k in kinds)
    text = f"""## Source build of mamba_ssm._C (`benchmarks/bench_build.py`)

Command: `{cmd}`
Machine: {machine()}
Date: {date}

Clean build (ccache disabled) of a fresh copy of the project per binding, `MAMBA_FORCE_BUILD=TRUE
MAMBA_CUDA_ARCHS={archs} MAX_JOBS={args.jobs} MAMBA_TORCH_STABLE_ABI=0|2.10 python setup.py build_ext --inplace`
({first["n_tu"]} ninja steps; kernels {", ".join(first["info"].kernels)}; SASS {", ".join(first["info"].sass_archs) or "-"};
PTX {", ".join(first["info"].ptx_archs) or "-"}), the bindings one after the other.

| measure | {" | ".join(f"{k} ({runs[k]['info'].describe_abi().split(' (built')[0]})" for k in kinds)} | goal | upstream 2.3.2.post1 (sm_90, same machine) |
| --- | {" | ".join("---" for _ in kinds)} | --- | --- |
{row("wall time, clean build", lambda r: f"{r['clean']['wall_s']:.1f} s", f"<= {GOAL_WALL_S:.0f} s ({'met' if ok_wall else 'NOT met'})", "278 s")}
{row("CPU time (user+sys, all processes)", lambda r: f"{r['clean']['cpu_s']:.1f} s", "", "about 420 s")}
{row("peak RSS of the largest process", lambda r: f"{r['clean']['peak_rss_mib']:.0f} MiB")}
{row("`_C.abi3.so` size", lambda r: f"{r['size_mb']:.2f} MB", f"<= {GOAL_SIZE_MB:.0f} MB ({'met' if ok_size else 'NOT met'})", "47.9 MB")}
{row("incremental rebuild, nothing changed", lambda r: f"{r['incr']['wall_s']:.1f} s wall, {r['incr']['cpu_s']:.1f} s CPU")}

Load average (1 min) before / after each clean build: {loads}. The machine's cores are shared with other
work, so wall time depends on that load; CPU time much less (on an idle machine the wall time of a
MAX_JOBS={args.jobs} build is about CPU time / {args.jobs} plus the serial steps). Both bindings compile the
same kernel translation units; they differ in the binding's (the stable one includes only torch's
header-only stable API, the classic one ATen's per-op headers).
"""
    print(text)
    if not args.no_write:
        write_section(text)
        print(f"written to {DOC}")
    return 0 if (ok_wall and ok_size) else 1


if __name__ == "__main__":
    sys.exit(main())
