"""Test helpers for the resolver: fabricated wheels, declared environments, a loopback HTTP server
with injectable faults. Nothing here uses the code under test to compute expected values."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import http.server
import json
import os
import socket
import ssl
import threading
import time
import zipfile
from typing import Dict, Iterator, List, Optional, Sequence

from packaging import tags as ptags


def build_info(
    torch="2.14.1+cu130",
    cuda="13.0",
    hip=None,
    abi=True,
    sass=("sm_90",),
    ptx=(),
    gfx=(),
    nvcc="13.0",
    version="2.4.0.dev0",
) -> dict:
    """A build-info record with the architecture doc's keys."""
    return {
        "package_version": version,
        "torch_version": torch,
        "torch_cuda": cuda,
        "torch_hip": hip,
        "nvcc_version": nvcc if cuda else None,
        "hipcc_version": None,
        "cxx11_abi": abi,
        "sass_archs": list(sass),
        "ptx_archs": list(ptx),
        "gfx_archs": list(gfx),
        "python_tag": "cp39-abi3",
        "platform": "linux-x86_64",
        "git_commit": None,
        "kernels": ["cpu", "cuda"] if cuda else (["cpu", "hip"] if hip else ["cpu"]),
        "schema": 1,
    }


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(
    folder: str,
    label: str,
    info: Optional[dict],
    platform: str = "linux_x86_64",
    version: str = "2.4.0.dev0",
    python_tag: str = "cp39",
    abi_tag: str = "abi3",
    padding: int = 0,
    noise: int = 0,
    wheel_tag: Optional[str] = None,
    requires_python: Optional[str] = ">=3.9",
    meta_name: str = "mamba-ssm",
    requires_dist: Sequence[str] = (),
) -> str:
    """Write a valid wheel ``mamba_ssm-<version>+<label>-<py>-<abi>-<platform>.whl`` whose
    ``mamba_ssm/_C.abi3.so`` is a byte blob carrying ``info`` between the build-info markers
    (``padding`` extra zero bytes make it bigger uncompressed, ``noise`` random bytes bigger on disk).
    ``wheel_tag`` overrides the WHEEL ``Tag:`` line (default: the file name's), ``requires_python`` the
    METADATA Requires-Python (None: absent), ``meta_name`` its Name, ``requires_dist`` its Requires-Dist
    lines. Returns its path."""
    full = f"{version}+{label}" if label else version
    from packaging.version import Version

    norm = str(Version(full))
    dist = f"mamba_ssm-{norm}.dist-info"
    files: Dict[str, bytes] = {"mamba_ssm/__init__.py": b"__version__ = %r\n" % norm}
    if info is not None:
        blob = (
            b"\x7fELF-fake"
            + os.urandom(64)
            + b"MAMBA_SSM_BUILD_INFO_BEGIN"
            + json.dumps(info).encode()
            + b"MAMBA_SSM_BUILD_INFO_END"
            + b"\0" * padding
            + os.urandom(noise)
        )
        files["mamba_ssm/_C.abi3.so"] = blob
    files[f"{dist}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {meta_name}\nVersion: {norm}\n"
        + (f"Requires-Python: {requires_python}\n" if requires_python else "")
        + "".join(f"Requires-Dist: {r}\n" for r in requires_dist)
    ).encode()
    files[f"{dist}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: false\n"
        f"Tag: {wheel_tag or f'{python_tag}-{abi_tag}-{platform}'}\n"
    ).encode()
    record = [_record_line(n, d) for n, d in files.items()] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = os.path.join(folder, f"mamba_ssm-{norm}-{python_tag}-{abi_tag}-{platform}.whl")
    os.makedirs(folder, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, d in files.items():
            zf.writestr(n, d)
    return path


def one_wheel_index(root, label: str = "cu13torch2.14cxx11abiTRUE", **make_kw):
    """``root`` as an index holding one manylinux_2_28_x86_64 wheel (``make_wheel`` keywords pass
    through); returns ``(root, entry)``, the entry checked against the file's own sha256 and size."""
    from build_matrix.index import build_index

    make_wheel(str(root), label, build_info(), platform="manylinux_2_28_x86_64", **make_kw)
    entry = build_index(str(root)).wheels[0]
    with open(os.path.join(str(root), entry.relpath), "rb") as fh:
        data = fh.read()
    assert hashlib.sha256(data).hexdigest() == entry.sha256 and len(data) == entry.size
    return root, entry


def cache_files(cache) -> List[str]:
    """Every file under ``cache`` but the lock files: a fault must leave no partial file there."""
    out: List[str] = []
    for _dirpath, _dirs, files in os.walk(cache):
        out += [f for f in files if not f.endswith(".lock")]
    return out


def tags_of(
    python=(3, 11), platforms=("manylinux_2_36_x86_64", "manylinux_2_28_x86_64", "linux_x86_64")
) -> List[str]:
    """Wheel tags a CPython of ``python`` accepts on ``platforms`` (packaging.tags directly)."""
    plats = list(platforms)
    out = [str(t) for t in ptags.cpython_tags(python_version=python, platforms=plats)]
    return out + [str(t) for t in ptags.compatible_tags(python_version=python, platforms=plats)]


def env_dict(
    torch="2.14.1+cu130",
    cuda="13.0",
    hip=None,
    abi=True,
    gpus=(),
    driver=None,
    python=(3, 11),
    platforms=("manylinux_2_36_x86_64", "manylinux_2_28_x86_64", "linux_x86_64"),
) -> dict:
    """A declared-environment dict (the --env-json shape)."""
    return {
        "python_version": f"{python[0]}.{python[1]}.0",
        "tags": tags_of(python, platforms),
        "torch": None if torch is None else {"version": torch, "cuda": cuda, "hip": hip, "cxx11_abi": abi},
        "gpus": [dict(g) for g in gpus],
        "driver_version": driver,
    }


# ----------------------------------------------------------------------------- loopback server
class FaultServer:
    """A threaded HTTP server on 127.0.0.1 serving ``root``; ``faults[path] = kind`` injects:
    ``404``, ``500``, ``500-once`` (then normal), ``reset``, ``truncate``, ``truncate-once``, ``stall``,
    ``corrupt`` (same size, other bytes), ``slow`` (1 s before the answer), ``drip`` (one byte every
    ``drip_s`` seconds), ``429-once`` / ``503-once`` (with ``Retry-After: retry_after``, then normal),
    ``429`` (always, same header), ``half-once`` (the first half of the body, announced as the whole
    body, then normal). ``hits[path]`` counts requests."""

    def __init__(self, root: str, tls: Optional[ssl.SSLContext] = None):
        self.root = root
        self.faults: Dict[str, str] = {}
        self.hits: Dict[str, int] = {}
        self.stall_s = 5.0
        self.drip_s = 0.05
        self.retry_after = "1"
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_GET(self):
                path = self.path.split("?", 1)[0]
                server.hits[path] = server.hits.get(path, 0) + 1
                fault = server.faults.get(path)
                if fault in ("500-once", "429-once", "503-once", "truncate-once", "half-once"):
                    server.faults.pop(path)
                    fault = fault[: -len("-once")]
                if fault == "404":
                    return self.send_error(404)
                if fault == "500":
                    return self.send_error(500)
                if fault in ("429", "503"):
                    self.send_response(int(fault))
                    self.send_header("Retry-After", server.retry_after)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                from urllib.parse import unquote

                rel = path.split("://", 1)[1].split("/", 1)[1] if "://" in path else path  # proxy requests
                local = os.path.join(server.root, unquote(rel.lstrip("/")))
                if os.path.isdir(local):
                    local = os.path.join(local, "index.html")
                if not os.path.isfile(local):
                    return self.send_error(404)
                with open(local, "rb") as fh:
                    data = fh.read()
                if fault == "reset":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 3])
                    self.wfile.flush()
                    sock = self.connection
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    sock.close()
                    return None
                if fault == "slow":
                    time.sleep(1.0)
                if fault == "half":
                    data = data[: len(data) // 2]
                if fault == "drip":
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    try:
                        for i in range(len(data)):
                            self.wfile.write(data[i : i + 1])
                            self.wfile.flush()
                            time.sleep(server.drip_s)
                    except OSError:  # the client gave up
                        pass
                    return None
                if fault == "corrupt":
                    data = bytes(b ^ 0xFF for b in data)
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if fault == "truncate":
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return None
                if fault == "stall":
                    self.wfile.write(data[:10])
                    self.wfile.flush()
                    time.sleep(server.stall_s)
                    return None
                self.wfile.write(data)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https" if tls is not None else "http"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"{self.scheme}://127.0.0.1:{port}/"

    def __enter__(self) -> FaultServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@contextlib.contextmanager
def serving(root: str, tls: Optional[ssl.SSLContext] = None) -> Iterator[FaultServer]:
    with FaultServer(root, tls) as srv:
        yield srv
