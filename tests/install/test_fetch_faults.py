"""Faults on a loopback HTTP(S) server (127.0.0.1 only, every wait bounded): each has a defined
outcome, and no partial file is ever left in the cache."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from helpers import cache_files, env_dict, one_wheel_index, serving

from mamba_ssm._install.environment import Environment
from mamba_ssm._install.fetch import FetchError, HttpSettings, fetch_bytes, fetch_wheel
from mamba_ssm._install.resolve import resolve

V = "2.4.0.dev0"
FAST = HttpSettings(connect_timeout=2.0, read_timeout=0.5, retries=2, backoff=0.01)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def index(tmp_path):
    return one_wheel_index(tmp_path / "index", padding=300_000)


def wheel_path(entry):
    return "/" + entry.relpath.replace("+", "%2B")


def get(server, entry, cache, settings=FAST):
    return fetch_wheel(
        server.url + entry.relpath.replace("+", "%2B"),
        entry.filename,
        entry.sha256,
        entry.size,
        cache=str(cache),
        settings=settings,
        sleep=lambda s: None,
    )


def test_download_ok_then_reused_from_cache(index, tmp_path):
    root, entry = index
    with serving(str(root)) as srv:
        path = get(srv, entry, tmp_path / "c")
        again = get(srv, entry, tmp_path / "c")
    assert path == again and srv.hits[wheel_path(entry)] == 1
    with open(path, "rb") as fh:
        assert hashlib.sha256(fh.read()).hexdigest() == entry.sha256


@pytest.mark.parametrize(
    "fault,kind,attempts",
    [
        ("404", "not-found", 1),  # never retried
        ("500", "http", 3),  # transient: 1 + 2 retries
        ("reset", "network", 3),
        ("truncate", "truncated", 3),
        ("stall", "timeout", 3),
        ("corrupt", "hash", 1),  # a wrong sha256 is never retried
    ],
)
def test_wheel_faults(index, tmp_path, fault, kind, attempts):
    root, entry = index
    with serving(str(root)) as srv:
        srv.stall_s = 2.0
        srv.faults[wheel_path(entry)] = fault
        t0 = time.monotonic()
        with pytest.raises(FetchError) as err:
            get(srv, entry, tmp_path / "c")
        elapsed = time.monotonic() - t0
    if fault == "reset":  # an RST after part of the body reads as a reset or as a short body
        assert err.value.kind in ("network", "truncated") and err.value.transient, str(err.value)
    else:
        assert err.value.kind == kind, str(err.value)
    assert srv.hits[wheel_path(entry)] == attempts
    assert cache_files(tmp_path / "c") == []  # no partial or unverified file anywhere
    assert elapsed < 15


def test_transient_500_once_then_success(index, tmp_path):
    root, entry = index
    with serving(str(root)) as srv:
        srv.faults[wheel_path(entry)] = "500-once"
        path = get(srv, entry, tmp_path / "c")
    assert srv.hits[wheel_path(entry)] == 2 and os.path.getsize(path) == entry.size


def test_size_over_the_manifest_is_refused(index, tmp_path):
    root, entry = index
    with serving(str(root)) as srv, pytest.raises(FetchError) as err:
        fetch_wheel(
            srv.url + entry.relpath.replace("+", "%2B"),
            entry.filename,
            entry.sha256,
            entry.size - 1,
            cache=str(tmp_path / "c"),
            settings=FAST,
            sleep=lambda s: None,
        )
    assert err.value.kind == "size" and cache_files(tmp_path / "c") == []


def _resolve(url, tmp_path, **kw):
    env = Environment.from_dict(env_dict())
    return resolve(
        V, index=url, env=env, environ={}, settings=FAST, pinned=None, cache=str(tmp_path / "c"), **kw
    )


def test_resolve_end_to_end_over_http(index, tmp_path):
    root, entry = index
    with serving(str(root)) as srv:
        res = _resolve(srv.url, tmp_path)
    assert res.status == "prebuilt" and os.path.basename(res.wheel_path) == entry.filename


def test_malformed_manifest(index, tmp_path):
    root, _entry = index
    (root / "manifest.json").write_text('{"schema": 1, "wheels": [{"filename": ')
    with serving(str(root)) as srv:
        res = _resolve(srv.url, tmp_path)
    assert res.status == "error" and res.error_kind == "manifest" and "not valid JSON" in res.message
    assert cache_files(tmp_path / "c") == []


def test_manifest_404_is_an_index_error_not_a_crash(index, tmp_path):
    root, _entry = index
    with serving(str(root)) as srv:
        srv.faults["/manifest.json"] = "404"
        res = _resolve(srv.url, tmp_path)
    assert res.status == "error" and res.error_kind == "index-not-found" and srv.hits["/manifest.json"] == 1


def test_manifest_path_traversal_is_refused(index, tmp_path):
    root, entry = index
    data = json.loads((root / "manifest.json").read_text())
    data["wheels"][0]["filename"] = "../../../evil/" + entry.filename
    (root / "manifest.json").write_text(json.dumps(data))
    with serving(str(root)) as srv:
        res = _resolve(srv.url, tmp_path)
    assert res.status == "error" and res.error_kind == "manifest" and "not a plain file" in res.message
    assert not (tmp_path / "evil").exists() and cache_files(tmp_path / "c") == []
    with pytest.raises(FetchError):  # and the download function refuses such a name by itself
        fetch_wheel(
            "http://127.0.0.1:9/x", "../x.whl", entry.sha256, 1, cache=str(tmp_path / "c"), settings=FAST
        )


def test_wrong_sha256_in_manifest_discards_the_download(index, tmp_path):
    root, _entry = index
    data = json.loads((root / "manifest.json").read_text())
    data["wheels"][0]["sha256"] = "0" * 64
    (root / "manifest.json").write_text(json.dumps(data))
    with serving(str(root)) as srv:
        res = _resolve(srv.url, tmp_path)
    assert res.status == "error" and res.error_kind == "fetch-hash" and res.wheel_path is None
    assert cache_files(tmp_path / "c") == []


def _self_signed(tmp_path):
    if not shutil.which("openssl"):
        pytest.skip("the openssl CLI is needed to make a self-signed certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    return ctx, cert


def test_https_with_an_untrusted_certificate_fails_then_works_with_ssl_cert_file(index, tmp_path):
    root, entry = index
    ctx, cert = _self_signed(tmp_path)
    with serving(str(root), tls=ctx) as srv:
        with pytest.raises(FetchError) as err:
            fetch_bytes(srv.url + "manifest.json", 1 << 20, FAST, environ={}, sleep=lambda s: None)
        assert (
            err.value.kind == "tls" and srv.hits.get("/manifest.json", 0) == 0
        )  # refused before any request
        res = _resolve(srv.url, tmp_path)
        assert res.status == "error" and res.error_kind == "index-tls" and "SSL_CERT_FILE" in res.message
        env = Environment.from_dict(env_dict())
        ok = resolve(
            V,
            index=srv.url,
            env=env,
            environ={"SSL_CERT_FILE": str(cert)},
            settings=FAST,
            pinned=None,
            cache=str(tmp_path / "c2"),
        )
    assert ok.status == "prebuilt", ok.message


def test_proxy_from_the_environment_is_used(index, tmp_path, monkeypatch):
    root, entry = index
    with serving(str(root)) as proxy:
        monkeypatch.setenv("http_proxy", proxy.url)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        body = fetch_bytes(
            "http://mamba-index.invalid/manifest.json", 1 << 20, FAST, environ={}, sleep=lambda s: None
        )
        assert json.loads(body)["wheels"][0]["filename"] == entry.filename
        assert proxy.hits == {"http://mamba-index.invalid/manifest.json": 1}
        monkeypatch.setenv("no_proxy", "mamba-index.invalid")
        with pytest.raises(FetchError) as err:  # bypassing the proxy: the name does not resolve
            fetch_bytes(
                "http://mamba-index.invalid/manifest.json", 1 << 20, FAST, environ={}, sleep=lambda s: None
            )
    assert err.value.kind == "dns"


def test_two_installs_at_once_download_once(index, tmp_path):
    root, entry = index
    with serving(str(root)) as srv:
        srv.faults[wheel_path(entry)] = "slow"
        url = srv.url + entry.relpath.replace("+", "%2B")
        args = [
            sys.executable,
            os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "fetch_wheel_child.py"),
            REPO,
            url,
            entry.filename,
            entry.sha256,
            str(entry.size),
            str(tmp_path / "c"),
        ]
        procs = [
            subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        outs = [p.communicate(timeout=60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    paths = {o[0].strip() for o in outs}
    assert len(paths) == 1 and srv.hits[wheel_path(entry)] == 1
    assert cache_files(tmp_path / "c") == [entry.filename]


def test_lock_without_filelock_uses_fcntl_and_times_out(tmp_path, monkeypatch):
    """pip's isolated build env has no filelock: the stdlib fallback must still exclude."""
    import threading

    from mamba_ssm._install.fetch import file_lock

    monkeypatch.setitem(sys.modules, "filelock", None)  # import filelock -> ImportError
    lock = str(tmp_path / "x.lock")
    held, release = threading.Event(), threading.Event()

    def holder():
        with file_lock(lock):
            held.set()
            release.wait(10)

    t = threading.Thread(target=holder)
    t.start()
    assert held.wait(10)
    with pytest.raises(TimeoutError, match="x.lock"), file_lock(lock, timeout=0.3):
        pass
    release.set()
    t.join(10)
    with file_lock(lock, timeout=2):  # free again
        pass
