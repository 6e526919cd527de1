"""A wheel download shows its progress: bytes and rate (issue 36, item 2). The wheel comes from a loopback
server that sends it in 64 KiB pieces every 0.1 s (about 0.6 MiB/s), so the download lasts ~2 s; the lines
``install-kernels`` and the resolver print are checked against the file's real size and the time this
test measured."""

from __future__ import annotations

import http.server
import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from helpers import one_wheel_index

from mamba_ssm._install import fetch

PIECE = 64 * 1024
PAUSE = 0.1


def paced_server(root: str) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            from urllib.parse import unquote

            local = os.path.join(root, unquote(self.path.lstrip("/")))
            if not os.path.isfile(local):
                return self.send_error(404)
            with open(local, "rb") as fh:
                data = fh.read()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            for i in range(0, len(data), PIECE):
                self.wfile.write(data[i : i + PIECE])
                self.wfile.flush()
                time.sleep(PAUSE)
            return None

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


MIB = 2**20
LINE = re.compile(r"^downloading (\S+): ([\d.]+) MiB of ([\d.]+) MiB \((\d+)%\) at ([\d.]+) MiB/s$")
DONE = re.compile(r"^downloaded (\S+): ([\d.]+) MiB in ([\d.]+) s \(([\d.]+) MiB/s\)$")


def test_wheel_download_prints_bytes_and_rate(tmp_path, monkeypatch):
    root, entry = one_wheel_index(tmp_path / "index", noise=1_200_000)
    size = os.path.getsize(os.path.join(str(root), entry.relpath))
    assert size == entry.size and size > 10 * PIECE
    monkeypatch.setattr(fetch, "PROGRESS_EVERY", 0.3)
    httpd = paced_server(str(root))
    lines: list[str] = []
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/" + entry.relpath.replace("+", "%2B")
        start = time.monotonic()
        path = fetch.fetch_wheel(
            url, entry.filename, entry.sha256, entry.size, cache=str(tmp_path / "c"), log=lines.append
        )
        took = time.monotonic() - start
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert os.path.getsize(path) == size
    assert lines[0] == f"downloading {entry.filename} ({size / MIB:.1f} MiB)", lines
    steps = [LINE.match(line) for line in lines[1:-1]]
    assert len(steps) >= 3 and all(steps), lines  # ~2 s of download, a line every 0.3 s
    got = [float(m.group(2)) for m in steps if m]
    assert got == sorted(got) and got[0] > 0 and got[-1] <= size / MIB + 0.05, lines
    for m in steps:
        assert m is not None and m.group(1) == entry.filename and float(m.group(3)) == round(size / MIB, 1)
        # the share against the shown MiB, rounded to 0.05 MiB either way
        share = 100 * float(m.group(2)) / (size / MIB)
        assert abs(int(m.group(4)) - share) <= 1 + 5 / (size / MIB), m.group(0)
    paced = PIECE / MIB / PAUSE  # what the server sends at most: ~0.62 MiB/s
    for m in steps:
        assert 0.1 * paced <= float(m.group(5)) <= 1.5 * paced, (m.group(0), paced)
    done = DONE.match(lines[-1])
    assert done, lines
    assert float(done.group(2)) == round(size / MIB, 1)
    assert abs(float(done.group(3)) - took) <= 0.5 + 0.2 * took, (done.group(0), took)
    assert abs(float(done.group(4)) - size / MIB / took) <= 0.3 * size / MIB / took, (done.group(0), took)
