"""Issue 11, item 4: every download has a bounded outcome (loopback server on 127.0.0.1, bounded waits).

* a server that drips bytes (each read well inside the per-read timeout) is cut off at the deadline
  ``connect_timeout + read_timeout + size / min_rate``, for a wheel and for the manifest;
* 429/503 with Retry-After: the wait is the server's (seconds or an HTTP date), up to the cap; beyond
  the cap the download ends at once, saying so;
* the manifest: a body shorter than its Content-Length, or half a JSON document, is fetched again;
* a local error writing the cache (ENOSPC on a small tmpfs; EFBIG under RLIMIT_FSIZE where mounting is
  not allowed) is not retried, names the cache folder and its free space, and leaves no partial file.
"""

from __future__ import annotations

import email.utils
import os
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
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def index(tmp_path):
    return one_wheel_index(tmp_path / "index", noise=300_000)  # 300 kB that deflate cannot shrink


def quoted(entry):
    return entry.relpath.replace("+", "%2B")


def test_a_dripping_server_is_cut_off_at_the_deadline(index, tmp_path):
    root, entry = index
    # 0.5 s connect and per-read timeouts, 1 MB/s floor: deadline 1 + size/1e6 (~1.3 s); the drip
    # (20 B/s) would take over four hours for this 300 kB wheel
    settings = HttpSettings(connect_timeout=0.5, read_timeout=0.5, retries=2, backoff=0.01, min_rate=1e6)
    budget = settings.deadline_for(entry.size)
    with serving(str(root)) as srv:
        srv.faults["/" + quoted(entry)] = "drip"
        t0 = time.monotonic()
        with pytest.raises(FetchError) as err:
            fetch_wheel(
                srv.url + quoted(entry),
                entry.filename,
                entry.sha256,
                entry.size,
                cache=str(tmp_path / "c"),
                settings=settings,
                sleep=lambda s: None,
            )
        elapsed = time.monotonic() - t0
        assert srv.hits["/" + quoted(entry)] == 1  # a deadline is not retried
    assert err.value.kind == "deadline" and "MAMBA_HTTP_MIN_RATE" in str(err.value), str(err.value)
    assert budget <= elapsed < budget + 1.5
    assert cache_files(tmp_path / "c") == []


def test_the_manifest_download_has_a_deadline_too(index, tmp_path):
    root, _entry = index
    size = os.path.getsize(root / "manifest.json")
    settings = HttpSettings(connect_timeout=0.5, read_timeout=0.5, retries=0, min_rate=2 * size)  # ~1.5 s
    budget = settings.deadline_for(size)
    with serving(str(root)) as srv:
        srv.faults["/manifest.json"] = "drip"
        t0 = time.monotonic()
        with pytest.raises(FetchError) as err:
            fetch_bytes(srv.url + "manifest.json", 1 << 24, settings, environ={}, sleep=lambda s: None)
        elapsed = time.monotonic() - t0
    assert err.value.kind == "deadline" and budget <= elapsed < budget + 1.5


def test_the_deadline_scales_with_the_size_and_is_configurable(monkeypatch):
    assert HttpSettings().deadline_for(24_000_000) == pytest.approx(15 + 60 + 24_000_000 / 20_000)
    s = HttpSettings.from_env(
        {"MAMBA_HTTP_MIN_RATE": "1000", "MAMBA_HTTP_READ_TIMEOUT": "5", "MAMBA_HTTP_CONNECT_TIMEOUT": "2"}
    )
    assert s.deadline_for(10_000) == pytest.approx(17.0)
    assert HttpSettings.from_env({"MAMBA_HTTP_MIN_RATE": "0"}).deadline_for(10**9) is None
    with pytest.raises(ValueError, match="MAMBA_HTTP_MIN_RATE"):
        HttpSettings.from_env({"MAMBA_HTTP_MIN_RATE": "fast"})


@pytest.mark.parametrize("code", ["429", "503"])
@pytest.mark.parametrize("form", ["seconds", "http-date"])
def test_retry_after_is_honoured(index, tmp_path, code, form):
    root, entry = index
    waits = []
    with serving(str(root)) as srv:
        srv.retry_after = "7" if form == "seconds" else email.utils.formatdate(time.time() + 30, usegmt=True)
        srv.faults["/manifest.json"] = f"{code}-once"
        body = fetch_bytes(
            srv.url + "manifest.json",
            1 << 24,
            HttpSettings(retries=3, backoff=0.01),
            environ={},
            sleep=waits.append,
        )
        assert srv.hits["/manifest.json"] == 2
    assert entry.filename.encode() in body
    if form == "seconds":
        assert waits == [7.0]
    else:  # the date is 30 s ahead (to the second)
        assert len(waits) == 1 and 27.0 <= waits[0] <= 31.0


def test_a_retry_after_beyond_the_cap_ends_the_download_at_once(index, tmp_path):
    root, entry = index
    assert HttpSettings().retry_after_max >= 60
    waits = []
    with serving(str(root)) as srv:
        srv.retry_after = "3600"
        srv.faults["/" + quoted(entry)] = "429"
        with pytest.raises(FetchError) as err:
            fetch_wheel(
                srv.url + quoted(entry),
                entry.filename,
                entry.sha256,
                entry.size,
                cache=str(tmp_path / "c"),
                settings=HttpSettings(retries=3, backoff=0.01),
                sleep=waits.append,
            )
        assert srv.hits["/" + quoted(entry)] == 1
    assert waits == [] and "3600" in str(err.value) and "MAMBA_HTTP_RETRY_AFTER_MAX=120" in str(err.value)
    assert cache_files(tmp_path / "c") == []


def _resolve(url, tmp_path, settings):
    return resolve(
        V,
        index=url,
        env=Environment.from_dict(env_dict()),
        environ={},
        settings=settings,
        pinned=None,
        cache=str(tmp_path / "c"),
        fetch=False,
    )


@pytest.mark.parametrize("fault", ["truncate-once", "half-once"])
def test_a_short_or_half_sent_manifest_is_fetched_again(index, tmp_path, fault):
    root, entry = index
    with serving(str(root)) as srv:
        srv.faults["/manifest.json"] = fault
        res = _resolve(
            srv.url, tmp_path, HttpSettings(connect_timeout=2, read_timeout=2, retries=2, backoff=0.01)
        )
        assert srv.hits["/manifest.json"] == 2
    assert res.status == "prebuilt" and res.entry.filename == entry.filename, res.message


@pytest.mark.parametrize(
    "fault,kind,needle",
    [
        ("truncate", "index-truncated", "after 3 attempts"),  # always short: an index error
        ("half", "manifest", "not valid JSON"),  # always half a document: refused as not JSON
    ],
)
def test_a_manifest_always_broken_is_an_error_after_the_retries(index, tmp_path, fault, kind, needle):
    root, _entry = index
    with serving(str(root)) as srv:
        srv.faults["/manifest.json"] = fault
        res = _resolve(
            srv.url, tmp_path, HttpSettings(connect_timeout=2, read_timeout=2, retries=2, backoff=0.01)
        )
        assert srv.hits["/manifest.json"] == 3
    assert res.status == "error" and res.error_kind == kind and needle in res.message


# ----------------------------------------------------------------------------- local errors
@pytest.fixture
def small_tmpfs(tmp_path):
    """A 64 KiB tmpfs (root and mount permission needed; skipped otherwise)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or proc.returncode})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_enospc_in_the_cache_is_not_retried_and_names_the_folder(index, tmp_path, small_tmpfs):
    root, entry = index
    cache = small_tmpfs / "cache"
    with serving(str(root)) as srv:
        res = resolve(
            V,
            index=srv.url,
            env=Environment.from_dict(env_dict()),
            environ={},
            pinned=None,
            settings=HttpSettings(connect_timeout=2, read_timeout=2, retries=3, backoff=0.01),
            cache=str(cache),
        )
        assert srv.hits["/" + quoted(entry)] == 1  # not retried
    assert res.status == "error" and res.error_kind == "fetch-local", res.message
    assert "No space left on device" in res.message and str(cache) in res.message and "MB free" in res.message
    assert "network" not in res.message and "MAMBA_SSM_CACHE_DIR" in res.message
    assert cache_files(cache) == [] and sorted(os.listdir(small_tmpfs)) == ["cache"]


def test_a_local_write_error_is_not_retried_even_without_mount(index, tmp_path):
    root, entry = index
    cache = tmp_path / "c"
    with serving(str(root)) as srv:
        proc = subprocess.run(
            [
                sys.executable,
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "fetch_wheel_child.py"),
                REPO,
                srv.url + quoted(entry),
                entry.filename,
                entry.sha256,
                str(entry.size),
                str(cache),
                "--settings=2,2,3,0.01",
                "--fsize-limit=65536",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert srv.hits["/" + quoted(entry)] == 1
    assert "KIND=local TRANSIENT=False" in proc.stdout, proc.stdout + proc.stderr
    assert "File too large" in proc.stdout and str(cache / "wheels") in proc.stdout
    assert cache_files(cache) == []
