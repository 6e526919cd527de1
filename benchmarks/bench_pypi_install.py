"""Install time of the per-platform PyPI wheel against the sdist path, interleaved (issue 32).

A finished ``python -m build_matrix release --dry-run --out DIR`` folder is served on 127.0.0.1: its
PEP 503 page ``DIR/pypi/simple/mamba-ssm/`` stands in for PyPI (the sdist and the PyPI wheel), and
``DIR/pages/v<version>/`` is our wheel index. Each round, in a seeded random order, into a fresh venv
that shares this interpreter's torch (2.14.1+cu130) through a .pth file (venv creation not timed):

* ``wheel``: ``pip install --index-url <stand-in> mamba-ssm==<version>`` (pip takes the PyPI wheel);
* ``sdist``: the same with ``--no-binary mamba-ssm --no-build-isolation`` (pip builds the sdist with the
  venv's setuptools; its setup hook asks our index, downloads the cell wheel and installs it: the path
  every install took before the PyPI wheel, without the isolated build's own downloads).

pip's configuration is switched off (only the stand-in is asked) and its HTTP cache is off, so every
run downloads what it installs. Prints the medians and the sdist/wheel ratio per round; with
``--write-doc`` replaces its section of docs/benchmarks.md.

    python benchmarks/bench_pypi_install.py DIR [--rounds 5] [--write-doc]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import glob
import http.server
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _docsection import replace_section  # noqa: E402
from venvs import fresh_venv  # noqa: E402  (the tests' venv sharing this torch through a .pth file)

BEGIN, END = "<!-- bench_pypi_install:begin -->", "<!-- bench_pypi_install:end -->"


@contextlib.contextmanager
def serving(root: str, port: int):
    """``root`` on 127.0.0.1:``port`` (text/html pages, as pip requires of a PEP 503 index); yields its URL."""
    handler = type("Quiet", (http.server.SimpleHTTPRequestHandler,), {"log_message": lambda self, *a: None})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(handler, directory=root))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


def torch_venv(path: str) -> str:
    """A fresh venv sharing this interpreter's torch (tests/venvs.py); the setuptools ``venv`` seeds is
    older than torch's requirement (>=77), so it is removed and the shared one counts."""
    py, _ = fresh_venv(path)
    subprocess.run([py, "-m", "pip", "uninstall", "-y", "-q", "setuptools"], check=True, capture_output=True)
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
    release = os.path.join(args.dry_run, "pages", f"v{version}", "release.json")
    if not os.path.isfile(release):
        raise SystemExit(f"{release} is missing: not a finished dry run")
    with open(release) as fh:
        wheels_url = json.load(fh)["wheels_url"]
    # served where the dry run's --base-url said: the sdist's pinned index and the manifest's links
    port = urllib.parse.urlsplit(wheels_url).port or 80
    work = tempfile.mkdtemp(prefix="bench_pypi_install_")
    rng = random.Random(args.seed)
    times: dict[str, list[float]] = {"wheel": [], "sdist": []}
    ratios: list[float] = []
    load_before = os.getloadavg()[0]
    try:
        with serving(args.dry_run, port) as url:
            env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
            env.update(
                PIP_CONFIG_FILE=os.devnull,
                PIP_NO_CACHE_DIR="1",
                PIP_DISABLE_PIP_VERSION_CHECK="1",
            )
            for name in ("VIRTUAL_ENV", "MAMBA_WHEEL_INDEX"):
                env.pop(name, None)
            stand_in = url + "pypi/simple/"
            for r in range(args.rounds + 1):  # round 0 warms the page cache, not counted
                order = ["wheel", "sdist"]
                rng.shuffle(order)
                got = {}
                for mode in order:
                    py = torch_venv(os.path.join(work, f"{mode}-{r}"))
                    run_env = dict(env, MAMBA_SSM_CACHE_DIR=os.path.join(work, f"cache-{mode}-{r}"))
                    cmd = [py, "-m", "pip", "install", "--index-url", stand_in, f"mamba-ssm=={version}"]
                    if (
                        mode == "sdist"
                    ):  # the sdist's build requirements from the venv (the stand-in has none)
                        cmd[4:4] = ["--no-binary", "mamba-ssm", "--no-build-isolation"]
                    took, said = timed(cmd, run_env)
                    built = "Building wheel" in said or "setup.py" in said
                    if (mode == "sdist") != built:
                        raise SystemExit(
                            f"{mode} run {r}: expected {'a' if mode == 'sdist' else 'no'} build:\n{said}"
                        )
                    site = glob.glob(os.path.join(work, f"{mode}-{r}", "lib", "python3*", "site-packages"))[0]
                    kernels = glob.glob(
                        os.path.join(
                            site, "mamba_ssm", "_C*.so" if mode == "sdist" else "_kernels/cu13/_C*.so"
                        )
                    )
                    if not kernels:  # the sdist's hook must have installed the prebuilt cell wheel
                        raise SystemExit(f"{mode} run {r}: no compiled module installed:\n{said[-3000:]}")
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
            f"| `pip install --no-binary mamba-ssm --no-build-isolation mamba-ssm` (sdist -> setup hook -> our index) | "
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
