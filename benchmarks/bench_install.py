"""Benchmark of the install-time resolver (issue 5): goals <= 15 s and <= 1 s.

1. Wall time of the end-to-end install of our sdist through the resolver, torch already present: a
   fresh venv (torch shared through a .pth file; venv creation not timed), ``pip install
   --no-cache-dir SDIST`` with build isolation, MAMBA_WHEEL_INDEX on a loopback HTTP server serving
   the host-cell wheel, an empty resolver cache. Also without build isolation and with uv.
2. The resolver's own overhead beyond one torch import: ``setup_hook.resolve_prebuilt`` in-process
   (detect the target in a subprocess, read the manifest, select, download + verify the wheel, give it
   the sdist's version), minus the wall time of ``python -c "import torch"`` (the probe's one import).

    python benchmarks/bench_install.py [--wheel WHEEL] [--repeat 3] [--out docs/benchmarks.md]

The wheel: --wheel, else the newest dist/cells/*cu13torch2.14*.whl, else build/resolver_e2e_wheel/.
"""
from __future__ import annotations

import argparse
import glob
import importlib.util
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
sys.path.insert(0, os.path.join(REPO, "tests", "resolver"))

from build_matrix.index import build_index, pin_sdist  # noqa: E402
from helpers import serving  # noqa: E402  (the loopback server of the tests)


def find_wheel(given):
    if given:
        return given
    for pattern in ("dist/cells/mamba_ssm-*+cu13torch2.14*.whl", "build/resolver_e2e_wheel/mamba_ssm-*.whl",
                    "build/main_job/cells/mamba_ssm-*.whl"):
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
    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
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
        run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", os.path.join(work, "sdist"), REPO])
        sdist = glob.glob(os.path.join(work, "sdist", "*.tar.gz"))[0]
        manifest = build_index(os.path.join(work, "index"), add=[wheel])
        pin_sdist(sdist, manifest)
        version = "2.4.0.dev0"
        results = {}
        with serving(os.path.join(work, "index")) as srv:
            path = ":".join(p for p in os.environ["PATH"].split(":") if "cuda" not in p)
            base_env = dict(os.environ, PATH=path, CUDA_HOME="/nonexistent", CC="false", CXX="false",
                            MAMBA_WHEEL_INDEX=srv.url)
            base_env.pop("VIRTUAL_ENV", None)
            uv = shutil.which("uv") or os.path.join(sys.prefix, "bin", "uv")
            modes = {
                "pip, build isolation": lambda py: [py, "-m", "pip", "install", "--no-cache-dir", sdist],
                "pip --no-build-isolation": lambda py: [py, "-m", "pip", "install", "--no-cache-dir", "--no-deps",
                                                        "--no-build-isolation", sdist],
                "uv pip install": lambda py: [uv, "pip", "install", "--python", py, "--no-cache", "--no-deps", sdist],
            }
            for label, cmd in modes.items():
                if label.startswith("uv") and not os.path.exists(uv):
                    continue
                times = []
                for i in range(args.repeat):
                    py = fresh_venv(os.path.join(work, f"v-{len(results)}-{i}"))
                    if "no-build-isolation" in label:
                        run([py, "-m", "pip", "install", "-q", "setuptools>=70", "wheel", "packaging>=24"], env=base_env)
                    env = dict(base_env, MAMBA_SSM_CACHE_DIR=os.path.join(work, f"cache-{label[:3]}-{i}"))
                    dt, _ = run(cmd(py), env=env)
                    times.append(dt)
                    print(f"[bench] install ({label}) run {i + 1}: {dt:.1f} s", flush=True)
                results[label] = times

            # 2. the resolver's overhead beyond one torch import
            torch_times = [run([sys.executable, "-c", "import torch"])[0] for _ in range(args.repeat)]
            spec = importlib.util.spec_from_file_location(
                "bench_setup_hook", os.path.join(REPO, "mamba_ssm", "_install", "setup_hook.py"))
            hook = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(hook)
            resolve_times = []
            for i in range(args.repeat):
                os.environ["MAMBA_SSM_CACHE_DIR"] = os.path.join(work, f"hook-cache-{i}")
                os.environ["MAMBA_WHEEL_INDEX"] = srv.url
                t0 = time.perf_counter()
                outcome = hook.resolve_prebuilt(version)
                resolve_times.append(time.perf_counter() - t0)
                assert outcome.wheel_path and outcome.status == "prebuilt", outcome.message
    finally:
        shutil.rmtree(work, ignore_errors=True)

    t_torch, t_res = statistics.median(torch_times), statistics.median(resolve_times)
    lines = [
        "",
        "## Install-time resolver (benchmarks/bench_install.py)",
        "",
        f"Command: `python benchmarks/bench_install.py --repeat {args.repeat}`; machine: {platform.node()}, "
        f"{os.cpu_count()} CPUs (shared), Python {platform.python_version()}, no GPU; date: "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Wheel: `{os.path.basename(wheel)}` "
        f"({os.path.getsize(wheel) / 1e6:.1f} MB) served on 127.0.0.1. Medians of {args.repeat} runs.",
        "",
        "| measurement | median | runs | goal |",
        "| --- | --- | --- | --- |",
    ]
    for label, times in results.items():
        lines.append(f"| end-to-end sdist install, {label} (torch present) | {statistics.median(times):.1f} s | "
                     f"{', '.join(f'{t:.1f}' for t in times)} | <= 15 s |")
    lines.append(f"| `import torch` in a fresh interpreter | {t_torch:.2f} s | "
                 f"{', '.join(f'{t:.2f}' for t in torch_times)} | |")
    lines.append(f"| `resolve_prebuilt` (detect + manifest + select + download/verify + relabel) | {t_res:.2f} s | "
                 f"{', '.join(f'{t:.2f}' for t in resolve_times)} | |")
    lines.append(f"| resolver overhead beyond one torch import | {t_res - t_torch:.2f} s | | <= 1 s |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
