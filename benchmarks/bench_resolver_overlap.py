"""Does reading the manifest while detection runs still save time? (issue 15)

The resolver used to read ``manifest.json`` in a background thread while detection probed the target
interpreter; that thread crashed the build process at exit when it was abandoned. This measures what
the overlap is worth now, interleaved, on the prebuilt path (the only path that needs both):

* ``sequential``: ``detect()`` then ``fetch_bytes(manifest)`` (what ``resolve()`` does now);
* ``overlapped``: the fetch in a thread started before ``detect()``, joined after it (the safe form
  of the old overlap).

The index is served on 127.0.0.1; ``--delay-ms`` makes the server wait before answering, standing in
for a remote index's round trips. Wall time (median of ``--repeat`` interleaved pairs) and CPU time
(this process + its waited-for children) per variant, and the ratio overlapped/sequential.

Usage::

    python benchmarks/bench_resolver_overlap.py [--repeat 15] [--delay-ms 0 100 300] [--write]

Writes its section of docs/benchmarks.md (between the bench_resolver_overlap markers) with --write.
"""

from __future__ import annotations

import argparse
import datetime
import http.server
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
DOC = os.path.join(REPO, "docs", "benchmarks.md")
BEGIN, END = "<!-- bench_resolver_overlap:begin -->", "<!-- bench_resolver_overlap:end -->"

from mamba_ssm._install.environment import detect  # noqa: E402
from mamba_ssm._install.fetch import HttpSettings, fetch_bytes  # noqa: E402


def _server(root: str, delay: list):
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=root, **k)

        def log_message(self, *a):
            pass

        def do_GET(self):
            time.sleep(delay[0])
            return super().do_GET()

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def sequential(url: str, environ) -> None:
    detect(python=sys.executable, environ=environ)
    fetch_bytes(url, 1 << 24, HttpSettings(retries=0), environ)


def overlapped(url: str, environ) -> None:
    box = {}
    t = threading.Thread(
        target=lambda: box.update(raw=fetch_bytes(url, 1 << 24, HttpSettings(retries=0), environ))
    )
    t.start()
    try:
        detect(python=sys.executable, environ=environ)
    finally:
        t.join()
    assert "raw" in box


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--delay-ms", type=float, nargs="+", default=[0.0, 100.0, 300.0])
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    environ = dict(os.environ, MAMBA_SSM_NO_NVML="1")
    rows = []
    with tempfile.TemporaryDirectory() as root:
        with open(os.path.join(root, "manifest.json"), "w") as fh:
            json.dump({"schema": 1, "project": "mamba-ssm", "wheels": []}, fh)
        delay = [0.0]
        httpd = _server(root, delay)
        url = f"http://127.0.0.1:{httpd.server_address[1]}/manifest.json"
        t0 = time.perf_counter()
        detect(python=sys.executable, environ=environ)  # warm-up (page cache)
        t_detect = time.perf_counter() - t0
        for ms in args.delay_ms:
            delay[0] = ms / 1000.0
            wall = {"sequential": [], "overlapped": []}
            cpu = {"sequential": [], "overlapped": []}
            for i in range(args.repeat):
                order = (sequential, overlapped) if i % 2 == 0 else (overlapped, sequential)
                for fn in order:
                    c0, w0 = _cpu(), time.perf_counter()
                    fn(url, environ)
                    wall[fn.__name__].append(time.perf_counter() - w0)
                    cpu[fn.__name__].append(_cpu() - c0)
            s, o = statistics.median(wall["sequential"]), statistics.median(wall["overlapped"])
            rows.append(
                (ms, s, o, statistics.median(cpu["sequential"]), statistics.median(cpu["overlapped"]))
            )
            print(
                f"delay {ms:g} ms: sequential {s * 1000:.0f} ms, overlapped {o * 1000:.0f} ms, "
                f"ratio {o / s:.2f}, saved {1000 * (s - o):.0f} ms",
                flush=True,
            )
        httpd.shutdown()
    load = os.getloadavg()[0]
    lines = [
        BEGIN,
        "## Resolver: manifest read after detection (`benchmarks/bench_resolver_overlap.py`)",
        "",
        f"Command: `python benchmarks/bench_resolver_overlap.py --repeat {args.repeat} --delay-ms "
        f"{' '.join(f'{m:g}' for m in args.delay_ms)} --write`  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} CPU(s), Python {platform.python_version()}; "
        f"load average at the end {load:.1f} (the machine is shared)  ",
        f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC  ",
        f"Detection alone (first call): {t_detect * 1000:.0f} ms. Medians of {args.repeat} interleaved pairs; "
        "index on 127.0.0.1 (http), the server waiting `delay` before each answer.",
        "",
        "| server delay | sequential wall | overlapped wall | overlapped / sequential | saved | CPU seq / ovl |",
        "| ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for ms, s, o, cs, co in rows:
        lines.append(
            f"| {ms:g} ms | {s * 1000:.0f} ms | {o * 1000:.0f} ms | {o / s:.2f} | {1000 * (s - o):.0f} ms "
            f"| {cs * 1000:.0f} / {co * 1000:.0f} ms |"
        )
    lines += [
        "",
        "The overlap can save at most the shorter of detection and the manifest read (detection no longer",
        "imports torch: ~0.1-0.2 s), once per install, on the prebuilt path only: about 0.1 s of an sdist",
        "install that takes 1.5-9 s (bench_install above). On the deferred and detection-error paths the",
        "read is not needed: a joined prefetch would make them wait for it (up to the connect timeout and",
        "retries when the network is down), an abandoned one crashed the process at exit (issue 15). So",
        "`resolve()` reads the manifest after detection, in the calling thread, and only when it is needed.",
        END,
    ]
    if args.write:
        text = open(DOC).read() if os.path.exists(DOC) else "# Benchmarks\n"
        block = "\n".join(lines)
        if BEGIN in text:
            text = text[: text.index(BEGIN)] + block + text[text.index(END) + len(END) :]
        else:
            text = text.rstrip("\n") + "\n\n" + block + "\n"
        with open(DOC, "w") as fh:
            fh.write(text)
    else:
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
