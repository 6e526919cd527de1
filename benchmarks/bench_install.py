"""Benchmark of the install-time resolver (issue 5): goals <= 15 s and <= 1 s.

1. Wall time of the end-to-end install of our sdist through the resolver, torch already present: a
   fresh venv (torch shared through a .pth file; venv creation not timed), ``pip install
   SDIST`` with build isolation (pip's HTTP cache warm, a new sdist path per run so that its wheel
   cache never skips the build), MAMBA_WHEEL_INDEX on a loopback HTTP server serving
   the host-cell wheel, an empty resolver cache. Also without build isolation and with uv.
2. The resolver's own time: ``setup_hook.resolve_prebuilt`` in-process (detect the target in a
   subprocess, read the manifest, select, download + verify the wheel, give it the sdist's version);
   by default the probe reads torch without importing it. Also with ``MAMBA_PROBE_IMPORT_TORCH=1``,
   minus the wall time of ``python -c "import torch"``: the overhead beyond that one import.

    python benchmarks/bench_install.py [--wheel WHEEL] [--repeat 3] [--out docs/benchmarks.md]

The wheel: --wheel, else the newest dist/cells/*cu13torch2.14*.whl, else build/resolver_e2e_wheel/.
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests", "install"))

from helpers import serving  # noqa: E402  (the loopback server of the tests)

from build_matrix.index import build_index, pin_sdist  # noqa: E402


def find_wheel(given):
    if given:
        return given
    for pattern in (
        "dist/cells/mamba_ssm-*+cu13torch2.14*.whl",
        "build/resolver_e2e_wheel/mamba_ssm-*.whl",
        "build/main_job/cells/mamba_ssm-*.whl",
    ):
        found = sorted(glob.glob(os.path.join(REPO, pattern)), key=os.path.getmtime)
        if found:
            return found[-1]
    raise SystemExit("no host-cell wheel: pass --wheel (python -m build_matrix build --host makes one)")


def run(cmd, env=None, timeout=900):
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return dt, proc


def fresh_venv(path):
    subprocess.run([sys.executable, "-m", "venv", path], check=True)
    py = os.path.join(path, "bin", "python")
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with open(os.path.join(site, "_shared_torch.pth"), "w") as fh:
        fh.write(sysconfig.get_paths()["purelib"] + "\n")
    return py


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wheel")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", help="append the results to this markdown file (e.g. docs/benchmarks.md)")
    args = ap.parse_args(argv)
    wheel = find_wheel(args.wheel)
    work = tempfile.mkdtemp(prefix="bench_install_")
    try:
        run(
            [
                sys.executable,
                "-m",
                "build",
                "--sdist",
                "--no-isolation",
                "-o",
                os.path.join(work, "sdist"),
                REPO,
            ]
        )
        sdist = glob.glob(os.path.join(work, "sdist", "*.tar.gz"))[0]
        manifest = build_index(os.path.join(work, "index"), add=[wheel])
        pin_sdist(sdist, manifest)
        version = "2.4.0.dev0"
        results = {}
        with serving(os.path.join(work, "index")) as srv:
            path = ":".join(p for p in os.environ["PATH"].split(":") if "cuda" not in p)
            base_env = dict(
                os.environ,
                PATH=path,
                CUDA_HOME="/nonexistent",
                CC="false",
                CXX="false",
                MAMBA_WHEEL_INDEX=srv.url,
            )
            base_env.pop("VIRTUAL_ENV", None)
            uv = shutil.which("uv") or os.path.join(sys.prefix, "bin", "uv")
            modes = {
                "pip, build isolation": lambda py: [py, "-m", "pip", "install", sdist],
                "pip --no-build-isolation": lambda py: [
                    py,
                    "-m",
                    "pip",
                    "install",
                    "--no-deps",
                    "--no-build-isolation",
                    sdist,
                ],
                "uv pip install": lambda py: [uv, "pip", "install", "--python", py, "--no-deps", sdist],
            }
            pip_cache = os.path.join(work, "pip-cache")  # pip's HTTP cache warm, as on a used machine
            for label, cmd in modes.items():
                if label.startswith("uv") and not os.path.exists(uv):
                    continue
                times = []
                for i in range(args.repeat + 1):  # run 0 warms pip's / uv's HTTP caches, not counted
                    py = fresh_venv(os.path.join(work, f"v-{len(results)}-{i}"))
                    env = dict(
                        base_env,
                        MAMBA_SSM_CACHE_DIR=os.path.join(work, f"cache-{len(results)}-{i}"),
                        PIP_CACHE_DIR=pip_cache,
                        UV_CACHE_DIR=os.path.join(work, "uv-cache"),
                    )
                    if "no-build-isolation" in label:
                        run(
                            [py, "-m", "pip", "install", "-q", "setuptools>=70", "wheel", "packaging>=24"],
                            env=env,
                        )
                    # a new path per run: pip's wheel cache (keyed by the sdist's link) never short-cuts the build
                    fresh = os.path.join(work, f"sdist-{len(results)}-{i}")
                    os.makedirs(fresh)
                    fresh = shutil.copy(sdist, fresh)
                    dt, _ = run([a.replace(sdist, fresh) for a in cmd(py)], env=env)
                    print(f"[bench] install ({label}) run {i}: {dt:.1f} s", flush=True)
                    if i:
                        times.append(dt)
                results[label] = times

            # 2. the resolver's overhead beyond one torch import
            from mamba_ssm._install import setup_hook as hook

            torch_times, resolve_times, import_times = [], [], []
            for i in range(args.repeat):  # interleaved, so that load from other jobs hits all alike
                torch_times.append(run([sys.executable, "-c", "import torch"])[0])
                os.environ["MAMBA_WHEEL_INDEX"] = srv.url
                for mode, sink in (("0", resolve_times), ("1", import_times)):
                    os.environ["MAMBA_PROBE_IMPORT_TORCH"] = mode
                    os.environ["MAMBA_SSM_CACHE_DIR"] = os.path.join(work, f"hook-cache-{i}-{mode}")
                    t0 = time.perf_counter()
                    outcome = hook.resolve_prebuilt(version)
                    sink.append(time.perf_counter() - t0)
                    assert outcome.wheel_path and outcome.status == "prebuilt", outcome.message
            os.environ.pop("MAMBA_PROBE_IMPORT_TORCH", None)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    t_torch, t_res = statistics.median(torch_times), statistics.median(resolve_times)
    overhead = [r - t for r, t in zip(import_times, torch_times)]
    lines = [
        "",
        "## Install-time resolver (benchmarks/bench_install.py)",
        "",
        f"Command: `python benchmarks/bench_install.py --repeat {args.repeat}`; machine: {platform.node()}, "
        f"{os.cpu_count()} CPUs (shared), Python {platform.python_version()}, no GPU; date: "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Wheel: `{os.path.basename(wheel)}` "
        f"({os.path.getsize(wheel) / 1e6:.1f} MB) served on 127.0.0.1. Medians of {args.repeat} runs after one warm-up run; "
        f"the machine is shared with other jobs (see the torch import time).",
        "",
        "| measurement | median | runs | goal |",
        "| --- | --- | --- | --- |",
    ]
    for label, times in results.items():
        lines.append(
            f"| end-to-end sdist install, {label} (torch present) | {statistics.median(times):.1f} s | "
            f"{', '.join(f'{t:.1f}' for t in times)} | <= 15 s |"
        )
    lines.append(
        f"| `import torch` in a fresh interpreter | {t_torch:.2f} s | "
        f"{', '.join(f'{t:.2f}' for t in torch_times)} | |"
    )
    lines.append(
        f"| `resolve_prebuilt` (detect + manifest + select + download/verify + relabel), default: "
        f"no torch import | {t_res:.2f} s | {', '.join(f'{t:.2f}' for t in resolve_times)} | <= 1 s |"
    )
    lines.append(
        f"| `resolve_prebuilt` with MAMBA_PROBE_IMPORT_TORCH=1 (the probe imports torch) | "
        f"{statistics.median(import_times):.2f} s | {', '.join(f'{t:.2f}' for t in import_times)} | |"
    )
    lines.append(
        f"| ... its overhead beyond that one torch import (per pair) | {statistics.median(overhead):.2f} s | "
        f"{', '.join(f'{t:.2f}' for t in overhead)} | <= 1 s |"
    )
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:  # replace this benchmark's section (between its markers) or append it
        begin, end = "<!-- bench_install:begin -->", "<!-- bench_install:end -->"
        block = f"{begin}{text}{end}\n"
        old = open(args.out).read() if os.path.exists(args.out) else "# Benchmarks\n"
        if begin in old and end in old:
            new = old[: old.index(begin)] + block + old[old.index(end) + len(end) + 1 :]
        else:
            new = old.rstrip("\n") + "\n\n" + block
        with open(args.out, "w") as fh:
            fh.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
