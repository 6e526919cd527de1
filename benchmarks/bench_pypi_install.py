"""Install time of the per-platform PyPI wheel against the sdist path, interleaved (issue 32).

A finished ``python -m build_matrix release --dry-run --out DIR`` folder is served on 127.0.0.1: its
PEP 503 page ``DIR/pypi/simple/mamba-ssm/`` stands in for PyPI (the sdist and the PyPI wheel), and
``DIR/pages/v<version>/`` is our wheel index. Each round, in a seeded random order, into a fresh venv
that shares this interpreter's torch (2.14.1+cu130) through a .pth file (venv creation not timed):

* ``wheel``: ``pip install --index-url <stand-in> mamba-ssm==<version>`` (pip takes the PyPI wheel);
* ``sdist``: the same with ``--no-binary mamba-ssm`` (pip builds the sdist; its setup hook asks our
  index, downloads the cell wheel and installs it: the path every install took before the PyPI wheel).

pip's configuration is switched off (only the stand-in is asked) and its HTTP cache is off, so every
run downloads what it installs. Prints the medians and the sdist/wheel ratio per round; with
``--write-doc`` replaces its section of docs/benchmarks.md.

    python benchmarks/bench_pypi_install.py DIR [--rounds 5] [--write-doc]
"""

from __future__ import annotations

import argparse
import glob
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "install"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _docsection import replace_section  # noqa: E402
from helpers import serving  # noqa: E402  (the tests' loopback server)

BEGIN, END = "<!-- bench_pypi_install:begin -->", "<!-- bench_pypi_install:end -->"


def fresh_venv(path: str) -> str:
    subprocess.run([sys.executable, "-m", "venv", path], check=True, capture_output=True)
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


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return took, proc.stdout + proc.stderr


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dry_run", help="the --out folder of a finished `build_matrix release --dry-run`")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--write-doc", action="store_true", help="replace this benchmark's section of docs/benchmarks.md"
    )
    args = ap.parse_args(argv)
    project = os.path.join(args.dry_run, "pypi", "simple", "mamba-ssm")
    wheels = glob.glob(os.path.join(project, "mamba_ssm-*.whl"))
    if len(wheels) != 1 or not glob.glob(os.path.join(project, "mamba_ssm-*.tar.gz")):
        raise SystemExit(f"{project} must hold one PyPI wheel and the sdist (run the release dry run first)")
    wheel = wheels[0]
    version = os.path.basename(wheel).split("-")[1]
    pages = glob.glob(os.path.join(args.dry_run, "pages", f"v{version}"))
    if not pages:
        raise SystemExit(f"{args.dry_run}/pages/v{version} is missing: not a finished dry run")
    work = tempfile.mkdtemp(prefix="bench_pypi_install_")
    rng = random.Random(args.seed)
    times: dict[str, list[float]] = {"wheel": [], "sdist": []}
    ratios: list[float] = []
    load_before = os.getloadavg()[0]
    try:
        with serving(args.dry_run) as srv:
            env = dict(
                os.environ,
                PIP_CONFIG_FILE=os.devnull,
                PIP_NO_CACHE_DIR="1",
                PIP_DISABLE_PIP_VERSION_CHECK="1",
                MAMBA_WHEEL_INDEX=f"{srv.url}pages/v{version}/",
            )
            for name in ("VIRTUAL_ENV", "PIP_CONSTRAINT"):
                env.pop(name, None)
            stand_in = srv.url + "pypi/simple/"
            for r in range(args.rounds + 1):  # round 0 warms the page cache, not counted
                order = ["wheel", "sdist"]
                rng.shuffle(order)
                got = {}
                for mode in order:
                    py = fresh_venv(os.path.join(work, f"{mode}-{r}"))
                    run_env = dict(env, MAMBA_SSM_CACHE_DIR=os.path.join(work, f"cache-{mode}-{r}"))
                    cmd = [py, "-m", "pip", "install", "--index-url", stand_in, f"mamba-ssm=={version}"]
                    if mode == "sdist":
                        cmd[4:4] = ["--no-binary", "mamba-ssm"]
                    took, said = timed(cmd, run_env)
                    built = "Building wheel" in said or "setup.py" in said
                    if (mode == "sdist") != built:
                        raise SystemExit(
                            f"{mode} run {r}: expected {'a' if mode == 'sdist' else 'no'} build:\n{said}"
                        )
                    got[mode] = took
                    print(f"[bench] round {r} {mode}: {took:.1f} s", flush=True)
                if r:
                    for mode, t in got.items():
                        times[mode].append(t)
                    ratios.append(got["sdist"] / got["wheel"])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()[0]
    med = {m: statistics.median(t) for m, t in times.items()}
    section = "\n".join(
        [
            BEGIN,
            "## Installing from PyPI: the per-platform wheel against the sdist path (benchmarks/bench_pypi_install.py)",
            "",
            f"Command: `python benchmarks/bench_pypi_install.py DIR --rounds {args.rounds} --write-doc`, DIR a "
            "`python -m build_matrix release --dry-run --out DIR` folder served on 127.0.0.1.",
            f"Machine: {platform.node()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}, "
            f"torch present (2.14.1+cu130 through a .pth file), no GPU; load average {load_before:.1f} before, "
            f"{load_after:.1f} after; date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
            f"Wheel: `{os.path.basename(wheel)}` ({os.path.getsize(wheel) / 1e6:.1f} MB). Fresh venv per run, "
            "pip's cache off; the two modes alternate in a seeded random order each round.",
            "",
            "| mode | median | runs |",
            "| --- | ---: | --- |",
            f"| `pip install mamba-ssm` (the PyPI wheel) | {med['wheel']:.1f} s | "
            + ", ".join(f"{t:.1f}" for t in times["wheel"])
            + " |",
            f"| `pip install --no-binary mamba-ssm mamba-ssm` (sdist -> setup hook -> our index) | "
            f"{med['sdist']:.1f} s | " + ", ".join(f"{t:.1f}" for t in times["sdist"]) + " |",
            "",
            f"sdist/wheel per round: {', '.join(f'{x:.2f}x' for x in ratios)} (median "
            f"{statistics.median(ratios):.2f}x). Goal: the wheel installs in seconds, not minutes.",
            END,
            "",
        ]
    )
    print(section)
    if args.write_doc:
        replace_section(os.path.join(REPO, "docs", "benchmarks.md"), BEGIN, END, section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
