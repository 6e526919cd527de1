"""Downloads for the resolver: timeouts, retries with backoff, proxies, CA bundles, size + sha256
checks, a cache shared by concurrent installs.

* Timeouts: ``MAMBA_HTTP_CONNECT_TIMEOUT`` (s, default 15) for the connection, then
  ``MAMBA_HTTP_READ_TIMEOUT`` (s, default 60) for each read, so a stalled server fails instead of
  hanging the install.
* A deadline for the whole file besides the per-read timeout, so a server that drips bytes slower than
  any useful rate cannot hold the install: ``MAMBA_HTTP_CONNECT_TIMEOUT + MAMBA_HTTP_READ_TIMEOUT + size
  / MAMBA_HTTP_MIN_RATE`` seconds (floor rate in bytes/s, default 20000, i.e. 20 kB/s; 0 turns it off). ``size`` is
  the wheel's size from the manifest, the manifest's Content-Length, else its 16 MiB limit.
* Retries: ``MAMBA_HTTP_RETRIES`` (default 3) more attempts, waiting ``MAMBA_HTTP_BACKOFF`` x 2^n
  seconds (default 1), on transient faults only: connection reset/refused, timeouts, truncated
  bodies (shorter than their Content-Length), a body the caller cannot parse, HTTP 5xx/408/429. On
  429/503 a ``Retry-After`` (seconds or an HTTP date) is honoured up to ``MAMBA_HTTP_RETRY_AFTER_MAX``
  seconds (default 120); a longer one ends the download at once, saying so. Never retried: 404 (or
  other 4xx), a TLS failure, a DNS failure, a size overrun, a sha256 mismatch, the deadline, and local
  errors (ENOSPC, a read-only cache: kind ``local``, naming the folder and its free space).
* Proxies: ``HTTPS_PROXY``/``HTTP_PROXY``/``NO_PROXY`` (urllib's ProxyHandler reads them). CA bundles:
  the system store plus ``SSL_CERT_FILE`` and ``PIP_CERT`` when set.
* Wheels go to ``<cache>/wheels/<sha256>/<file>``; a download is written to a temp file in that folder
  and renamed only after its size and sha256 match, under a file lock (``filelock`` when importable,
  else ``fcntl.flock``), so two installs at once download once and nothing half-written is ever left
  where it could be used. The cache is ``MAMBA_SSM_CACHE_DIR``, else ``$XDG_CACHE_HOME/mamba-ssm``,
  else ``~/.cache/mamba-ssm``.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import socket
import ssl
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional, TypeVar

from .._compat.textenum import TextEnum

__all__ = [
    "FetchError",
    "HttpSettings",
    "cache_dir",
    "fetch_bytes",
    "fetch_wheel",
    "file_lock",
    "index_url",
    "join_url",
    "local_error",
    "sha256_file",
]

_T = TypeVar("_T")
CHUNK = 1 << 20
USER_AGENT = "mamba-ssm-resolver/1"


class FetchErrorKind(TextEnum):
    """Why a download failed for good (the resolver records it in ``error_kind``)."""

    NOT_FOUND = "not-found"  # HTTP 404/410, no such file
    HTTP = "http"  # another HTTP error status
    NETWORK = "network"  # the connection failed or broke
    TIMEOUT = "timeout"  # no data within the read timeout
    DEADLINE = "deadline"  # the whole download took longer than its deadline
    TRUNCATED = "truncated"  # the body ended early
    INVALID = "invalid"  # a body the caller could not use
    TLS = "tls"  # certificate verification or another TLS failure
    DNS = "dns"  # the host name does not resolve
    SIZE = "size"  # more bytes than expected or allowed
    HASH = "hash"  # the sha256 differs from the expected one
    URL = "url"  # a malformed URL or an unsafe file name
    LOCAL = "local"  # writing the cache failed
    OS = "os"  # another OS error while fetching (recorded by the resolver)
    METADATA = "metadata"  # the file's contents disagree with its name (recorded by the resolver)


class FetchError(RuntimeError):
    """A download failed for good: ``kind`` says why; the message names the URL.
    ``retry_after``: the seconds an HTTP 429/503 asked to wait, or None."""

    def __init__(
        self,
        kind: FetchErrorKind,
        url: str,
        message: str,
        transient: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{url}: {message}")
        self.kind, self.url, self.transient, self.retry_after = kind, url, transient, retry_after


@dataclass
class HttpSettings:
    """Timeouts in seconds, the number of retries after the first attempt, the backoff base (s), the
    floor rate of a download in bytes/s (0: no deadline) and the longest Retry-After honoured (s)."""

    connect_timeout: float = 15.0
    read_timeout: float = 60.0
    retries: int = 3
    backoff: float = 1.0
    min_rate: float = 20_000.0
    retry_after_max: float = 120.0

    def deadline_for(self, size: int) -> Optional[float]:
        """Seconds a download of ``size`` bytes may take in all (the connect and one read timeout, plus
        the size at the floor rate), or None without a floor rate."""
        if self.min_rate <= 0:
            return None
        return self.connect_timeout + self.read_timeout + size / self.min_rate

    @classmethod
    def from_env(cls, environ: Optional[Mapping[str, str]] = None) -> HttpSettings:
        """Read ``MAMBA_HTTP_*``; a value that is not a number raises ValueError naming it."""
        environ = os.environ if environ is None else environ
        out = cls()
        for name, attr, conv in (
            ("MAMBA_HTTP_CONNECT_TIMEOUT", "connect_timeout", float),
            ("MAMBA_HTTP_READ_TIMEOUT", "read_timeout", float),
            ("MAMBA_HTTP_RETRIES", "retries", int),
            ("MAMBA_HTTP_BACKOFF", "backoff", float),
            ("MAMBA_HTTP_MIN_RATE", "min_rate", float),
            ("MAMBA_HTTP_RETRY_AFTER_MAX", "retry_after_max", float),
        ):
            if environ.get(name):
                try:
                    setattr(out, attr, conv(environ[name]))
                except ValueError:
                    raise ValueError(f"{name}={environ[name]!r} is not a number") from None
        return out


def cache_dir(environ: Optional[Mapping[str, str]] = None) -> str:
    """The resolver's cache folder (see the module docstring); not created here."""
    environ = os.environ if environ is None else environ
    if environ.get("MAMBA_SSM_CACHE_DIR"):
        return environ["MAMBA_SSM_CACHE_DIR"]
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mamba-ssm")


def index_url(value: str) -> str:
    """Normalise an index location: a URL (http, https, file) or a local path, ending in ``/``."""
    if "://" not in value:
        value = urllib.parse.urljoin("file:", urllib.request.pathname2url(os.path.abspath(value)))
    scheme = urllib.parse.urlsplit(value).scheme
    if scheme not in ("http", "https", "file"):
        raise ValueError(f"index URL {value!r}: scheme {scheme!r} is not http, https or file")
    return value if value.endswith("/") else value + "/"


def join_url(base: str, relpath: str) -> str:
    """``base`` (ending in ``/``) + a relative path of plain components, each percent-quoted."""
    parts = relpath.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"relative path {relpath!r} has an empty, '.' or '..' component")
    return base + "/".join(urllib.parse.quote(p) for p in parts)


def _ssl_context(environ: Mapping[str, str]) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    # OpenSSL's default paths already read this process's SSL_CERT_FILE: each bundle is loaded once
    # (a large corporate bundle takes a second or more to parse).
    default = os.environ.get("SSL_CERT_FILE")
    loaded = {os.path.realpath(default)} if default and os.path.isfile(default) else set()
    for var in ("SSL_CERT_FILE", "PIP_CERT"):
        path = environ.get(var)
        if path and os.path.isfile(path) and os.path.realpath(path) not in loaded:
            ctx.load_verify_locations(cafile=path)
            loaded.add(os.path.realpath(path))
    return ctx


def _opener(environ: Mapping[str, str], url: str) -> urllib.request.OpenerDirector:
    if urllib.parse.urlsplit(url).scheme == "file":  # no TLS (and no CA bundle to parse) for a local index
        return urllib.request.build_opener()
    return urllib.request.build_opener(
        urllib.request.ProxyHandler(),  # HTTPS_PROXY / HTTP_PROXY / NO_PROXY from the environment
        urllib.request.HTTPSHandler(context=_ssl_context(environ)),
    )


def _classify(exc: BaseException, url: str) -> FetchError:
    if isinstance(exc, FetchError):
        return exc
    if isinstance(exc, urllib.error.HTTPError):
        code = exc.code
        retry_after = (
            _retry_after(exc.headers.get("Retry-After") if exc.headers else None)
            if code in (429, 503)
            else None
        )
        with contextlib.suppress(Exception):
            exc.close()  # the error holds the connection open
        if code in (404, 410):
            return FetchError(FetchErrorKind.NOT_FOUND, url, f"HTTP {code} (not on the index)")
        transient = code >= 500 or code in (408, 429)
        return FetchError(
            FetchErrorKind.HTTP, url, f"HTTP {code} {exc.reason}", transient, retry_after=retry_after
        )
    reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(reason, ssl.SSLError):  # SSLCertVerificationError included
        return FetchError(
            FetchErrorKind.TLS,
            url,
            f"TLS failure ({reason}); if a proxy or private CA re-signs traffic, point SSL_CERT_FILE or "
            f"PIP_CERT at its CA bundle",
        )
    if isinstance(reason, FileNotFoundError):
        return FetchError(FetchErrorKind.NOT_FOUND, url, f"no such file ({reason.strerror})")
    if isinstance(reason, socket.gaierror):
        return FetchError(
            FetchErrorKind.DNS,
            url,
            f"cannot resolve the host ({reason}); offline? set MAMBA_WHEEL_INDEX "
            f"to a local mirror (`python -m build_matrix mirror`, from the sdist or a "
            f"checkout; the resolver's message says how)",
        )
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return FetchError(FetchErrorKind.TIMEOUT, url, f"timed out ({reason or 'no data'})", True)
    if isinstance(reason, http.client.IncompleteRead):
        return FetchError(
            FetchErrorKind.TRUNCATED, url, f"the body ended early ({len(reason.partial)} bytes read)", True
        )
    if isinstance(reason, (ConnectionError, http.client.HTTPException, OSError)):
        return FetchError(FetchErrorKind.NETWORK, url, f"{type(reason).__name__}: {reason}", True)
    return FetchError(FetchErrorKind.NETWORK, url, f"{type(reason).__name__}: {reason}", False)


def _retry_after(value: Optional[str]) -> Optional[float]:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date, RFC 9110 10.2.3), or None."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        import email.utils

        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    import datetime

    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds())


def _socket_of(resp: Any) -> Any:
    """The socket under an HTTP response (None for a file:// one): its read timeout is set per read."""
    with contextlib.suppress(AttributeError):
        return resp.fp.raw._sock
    return None


def _open(url: str, settings: HttpSettings, environ: Mapping[str, str]) -> Any:
    # http(s) or file only: index_url() refuses any other scheme
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})  # noqa: S310
    resp = _opener(environ, url).open(req, timeout=settings.connect_timeout)
    sock = _socket_of(resp)
    with contextlib.suppress(AttributeError, OSError):  # reads get their own timeout
        sock.settimeout(settings.read_timeout)
    return resp


def _stream(
    url: str,
    sink: Callable[[bytes], None],
    max_bytes: int,
    exact: Optional[int],
    settings: HttpSettings,
    environ: Mapping[str, str],
) -> int:
    """One attempt: stream ``url`` into ``sink``; returns the byte count. Raises FetchError.

    ``exact``: the size the body must have (a wheel), else the Content-Length, when sent, must be met.
    The whole attempt has a deadline (``HttpSettings.deadline_for``); ``sink`` raising FetchError (a
    local write error) ends it unchanged."""
    start = time.monotonic()
    deadline = budget = None
    trimmed = False  # the last read's timeout was cut short by the deadline
    total, expected = 0, exact
    try:
        with _open(url, settings, environ) as resp:
            length = resp.headers.get("Content-Length") if hasattr(resp, "headers") else None
            announced = int(length) if length is not None and length.strip().isdigit() else None
            if announced is not None and exact is not None and announced != exact:
                raise FetchError(
                    FetchErrorKind.SIZE, url, f"the server announces {length} bytes, the index says {exact}"
                )
            if announced is not None and announced > max_bytes:
                raise FetchError(
                    FetchErrorKind.SIZE,
                    url,
                    f"the server announces {announced} bytes, over the {max_bytes} limit",
                )
            expected = exact if exact is not None else announced
            budget = settings.deadline_for(expected if expected is not None else max_bytes)
            deadline = None if budget is None else start + budget
            sock = _socket_of(resp)
            read = getattr(resp, "read1", None) or resp.read  # read1: at most one socket read per call
            while True:
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise _past_deadline(url, budget, total, expected, settings)
                    if sock is not None:
                        trimmed = left < settings.read_timeout
                        with contextlib.suppress(OSError):
                            sock.settimeout(left if trimmed else settings.read_timeout)
                chunk = read(CHUNK)
                if not chunk:
                    break
                total += len(chunk)
                if total > max_bytes:
                    raise FetchError(
                        FetchErrorKind.SIZE, url, f"more than {max_bytes} bytes (the expected size): refusing"
                    )
                sink(chunk)
    except FetchError:
        raise
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
        if isinstance(exc, ValueError) and not isinstance(exc, urllib.error.URLError):
            raise FetchError(FetchErrorKind.URL, url, f"bad URL ({exc})") from None
        timed_out = isinstance(exc, (socket.timeout, TimeoutError)) or isinstance(
            getattr(exc, "reason", None), (socket.timeout, TimeoutError)
        )
        if deadline is not None and timed_out and (trimmed or time.monotonic() >= deadline):
            raise _past_deadline(url, budget, total, expected, settings) from None
        raise _classify(exc, url) from None
    if expected is not None and total < expected:
        raise FetchError(
            FetchErrorKind.TRUNCATED, url, f"the body ended after {total} of {expected} bytes", True
        )
    return total


def _past_deadline(
    url: str, budget: float | None, total: int, expected: Optional[int], settings: HttpSettings
) -> FetchError:
    of = f" of {expected}" if expected is not None else ""
    budget = budget or 0.0  # called only with a deadline
    return FetchError(
        FetchErrorKind.DEADLINE,
        url,
        f"still downloading after {budget:.0f} s ({total}{of} bytes received; the deadline is "
        f"MAMBA_HTTP_CONNECT_TIMEOUT={settings.connect_timeout:g} s + MAMBA_HTTP_READ_TIMEOUT="
        f"{settings.read_timeout:g} s + size / MAMBA_HTTP_MIN_RATE={settings.min_rate:g} bytes/s): the server is "
        f"too slow, giving up",
    )


def local_error(exc: OSError, folder: str) -> FetchError:
    """A write into the cache failed (ENOSPC, EROFS, EACCES, ...): kind ``local``, never retried;
    names the folder and the free space on its filesystem."""
    try:
        import shutil

        free = f"{shutil.disk_usage(folder).free / 1e6:.1f} MB free there"
    except OSError:
        free = "free space unknown"
    return FetchError(
        FetchErrorKind.LOCAL,
        folder,
        f"could not write the download into the cache ({exc.strerror or exc}; {free}): free space, or set "
        f"MAMBA_SSM_CACHE_DIR to a writable folder with room for the wheel",
    )


def _with_retries(
    url: str,
    attempt: Callable[[], _T],
    settings: HttpSettings,
    sleep: Callable[[float], None],
    log: Optional[Callable[[str], None]],
) -> _T:
    for n in range(settings.retries + 1):
        try:
            return attempt()
        except FetchError as exc:
            if not exc.transient or n == settings.retries:
                if exc.transient and n:
                    raise FetchError(
                        exc.kind,
                        url,
                        f"{str(exc).split(': ', 1)[-1]} (after {n + 1} attempts)",
                        transient=True,
                    ) from None
                raise
            wait = settings.backoff * (2**n)
            if exc.retry_after is not None:
                if exc.retry_after > settings.retry_after_max:
                    raise FetchError(
                        exc.kind,
                        url,
                        f"{str(exc).split(': ', 1)[-1]}; the server asks to retry after "
                        f"{exc.retry_after:g} s, beyond MAMBA_HTTP_RETRY_AFTER_MAX="
                        f"{settings.retry_after_max:g} s: giving up",
                    ) from None
                wait = max(wait, exc.retry_after)
            if log:
                log(f"{exc}; retrying in {wait:g} s ({n + 1}/{settings.retries})")
            sleep(wait)
    raise AssertionError("unreachable")


def fetch_bytes(
    url: str,
    max_bytes: int,
    settings: Optional[HttpSettings] = None,
    environ: Optional[Mapping[str, str]] = None,
    sleep: Callable[[float], None] = time.sleep,
    log: Optional[Callable[[str], None]] = None,
    check: Optional[Callable[[bytes], object]] = None,
) -> bytes:
    """The body of ``url`` (at most ``max_bytes``), with the retries above. Raises FetchError.

    ``check(body)`` raising ValueError (e.g. ``json.loads`` on a half-sent body) counts as a transient
    fault (kind ``invalid``): the body is fetched again."""
    environ = os.environ if environ is None else environ
    settings = settings or HttpSettings.from_env(environ)

    def attempt() -> bytes:
        buf = bytearray()
        _stream(url, buf.extend, max_bytes, None, settings, environ)
        if check is not None:
            try:
                check(bytes(buf))
            except ValueError as exc:
                raise FetchError(
                    FetchErrorKind.INVALID, url, f"the body cannot be used ({exc})", True
                ) from None
        return bytes(buf)

    return _with_retries(url, attempt, settings, sleep, log)


def sha256_file(path: str) -> str:
    """Hex sha256 of a file."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


@contextlib.contextmanager
def file_lock(path: str, timeout: float = 900.0) -> Iterator[None]:
    """An exclusive inter-process lock on ``path`` (``filelock`` when importable, else fcntl).

    Raises TimeoutError naming the lock file after ``timeout`` seconds.
    """
    try:
        import filelock
    except ImportError:
        pass  # the resolver runs where only the standard library and packaging are sure: fcntl below
    else:
        try:
            with filelock.FileLock(path, timeout=timeout):
                yield
        except filelock.Timeout:
            raise TimeoutError(
                f"could not lock {path} within {timeout:g} s (another install holds it)"
            ) from None
        return
    import fcntl

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"could not lock {path} within {timeout:g} s") from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)


#: Seconds between two progress lines of a wheel download (one line when it starts, one when it ends).
PROGRESS_EVERY = 2.0


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


class _DownloadProgress:
    """Progress of one download attempt through ``log``: ``downloading NAME (SIZE)`` first, then
    ``downloading NAME: GOT of SIZE (P%) at RATE`` every :data:`PROGRESS_EVERY` seconds, and
    ``downloaded NAME: GOT in T s (RATE)`` at the end. Silent when ``log`` is None."""

    def __init__(self, name: str, size: int, log: Optional[Callable[[str], None]]) -> None:
        self.name, self.size, self.log = name, size, log
        self.got = 0
        self.start = self.last = time.monotonic()
        if log:
            log(f"downloading {name} ({_mib(size)})")

    def _rate(self, now: float) -> str:
        return f"{_mib(self.got / max(now - self.start, 1e-6))}/s"

    def add(self, n: int) -> None:
        self.got += n
        now = time.monotonic()
        if self.log and now - self.last >= PROGRESS_EVERY:
            self.last = now
            share = f" ({100 * self.got // self.size}%)" if self.size else ""
            self.log(
                f"downloading {self.name}: {_mib(self.got)} of {_mib(self.size)}{share} at {self._rate(now)}"
            )

    def done(self) -> None:
        now = time.monotonic()
        if self.log:
            self.log(
                f"downloaded {self.name}: {_mib(self.got)} in {now - self.start:.1f} s ({self._rate(now)})"
            )


def _existing_parent(path: str) -> str:
    while path and not os.path.isdir(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def fetch_wheel(
    url: str,
    filename: str,
    sha256: str,
    size: int,
    cache: Optional[str] = None,
    settings: Optional[HttpSettings] = None,
    environ: Optional[Mapping[str, str]] = None,
    sleep: Callable[[float], None] = time.sleep,
    log: Optional[Callable[[str], None]] = None,
) -> str:
    """Download ``url`` into the cache as ``<cache>/wheels/<sha256>/<filename>`` and return that path.

    ``size`` in bytes and ``sha256`` (hex) are what the file must match; a verified cached copy is
    reused. Raises FetchError (``hash``/``size`` when the bytes are wrong: no retry; nothing kept).
    """
    environ = os.environ if environ is None else environ
    settings = settings or HttpSettings.from_env(environ)
    if "/" in filename or "\\" in filename or filename.startswith("."):
        raise FetchError(FetchErrorKind.URL, url, f"unsafe file name {filename!r}")
    folder = os.path.join(cache or cache_dir(environ), "wheels", sha256.lower())
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError as exc:
        raise local_error(exc, _existing_parent(folder)) from None
    dest = os.path.join(folder, filename)
    with file_lock(dest + ".lock"):
        if os.path.isfile(dest):
            if os.path.getsize(dest) == size and sha256_file(dest) == sha256.lower():
                if log:
                    log(f"using the verified cached {dest}")
                return dest
            os.unlink(dest)  # a corrupted cache entry: fetch again

        def attempt() -> str:
            try:
                fd, tmp = tempfile.mkstemp(prefix=f".{filename}.", suffix=".part", dir=folder)
            except OSError as exc:
                raise local_error(exc, folder) from None
            h = hashlib.sha256()
            try:
                try:
                    fh = os.fdopen(fd, "wb")
                except OSError as exc:
                    os.close(fd)
                    raise local_error(exc, folder) from None
                try:
                    progress = _DownloadProgress(filename, size, log)

                    def sink(chunk: bytes) -> None:
                        h.update(chunk)
                        try:
                            fh.write(chunk)
                        except OSError as exc:  # ENOSPC, EDQUOT, EIO: local, not the network
                            raise local_error(exc, folder) from None
                        progress.add(len(chunk))

                    _stream(url, sink, size, size, settings, environ)
                    progress.done()
                    try:
                        fh.flush()
                        os.fsync(fh.fileno())
                    except OSError as exc:
                        raise local_error(exc, folder) from None
                finally:
                    with contextlib.suppress(OSError):  # a full disk fails the close's flush too
                        fh.close()
                got = h.hexdigest()
                if got != sha256.lower():
                    raise FetchError(
                        FetchErrorKind.HASH,
                        url,
                        f"sha256 {got} does not match the expected {sha256.lower()}: the file was discarded",
                    )
                try:
                    os.replace(tmp, dest)
                except OSError as exc:
                    raise local_error(exc, folder) from None
                return dest
            finally:
                if os.path.exists(tmp):
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)

        return _with_retries(url, attempt, settings, sleep, log)
