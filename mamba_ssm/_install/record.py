"""The install record: what the resolver and setup.py decided for an install, where ``python -m
mamba_ssm doctor`` and the loader's fix texts find it.

pip and uv hide build output unless ``-v``, so the decision is written as JSON to
``<cache>/decisions/<key>.json``, where ``<cache>`` is ``MAMBA_SSM_DECISION_DIR``, else the resolver's
cache (``MAMBA_SSM_CACHE_DIR``, ``$XDG_CACHE_HOME/mamba-ssm``, ``~/.cache/mamba-ssm``) and ``<key>`` is
derived from the target environment's ``sys.prefix`` (realpath). The build runs in pip's isolated
environment but records for the target's prefix, which is the ``sys.prefix`` doctor later runs with.

JSON keys (schema 1), the fields of :class:`InstallRecord`: ``schema``, ``time`` (UTC ISO 8601),
``prefix``, ``package_version``, ``final_mode`` (:class:`InstallMode`), ``status``
(:class:`ResolutionStatus`), ``wheel`` (file name or null), ``installed_wheel``, ``sha256``, ``index``,
``environment`` (one-line summary), ``target_python``, ``decision`` (:class:`SelectionSummary` or null),
``message``, ``error_kind`` (:class:`ErrorKind`), ``gpu_unservable``, ``requested``, ``build``
(:class:`BuildNote`) and ``install`` (:class:`InstallIdentity`). Keys and values this version does
not know (a record written by another version) are kept in ``extra``, shown by doctor and written
back unchanged.

A record must never be presented for an install it does not describe (a later ``pip install`` that did
not go through the resolver, a venv deleted and recreated at the same path). So each record names the
install it belongs to, in ``install``:

* ``{"install_id": "<uuid hex>"}``: setup.py (every wheel-building path) makes a fresh id per wheel,
  puts it in the wheel as ``<dist-info>/mamba_ssm_install.json`` (:data:`INSTALL_ID_FILE`; the
  dist-info only: the prebuilt wheel's package files stay byte-identical to the index wheel's) and
  records it.
* ``{"dist_info": "<path>", "record_mtime_ns": N}``: ``install-kernels`` records, after pip has
  installed the wheel, the installed dist-info folder and its RECORD's mtime.

:func:`ownership` checks that against the ``mamba_ssm-*.dist-info`` next to this package; doctor shows
a record that does not match as belonging to an earlier install.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping, NamedTuple

from .._compat.textenum import TextEnum
from .fetch import FetchErrorKind, cache_dir

__all__ = [
    "INSTALL_ID_FILE",
    "SCHEMA",
    "BuildNote",
    "ErrorKind",
    "ErrorStage",
    "InstallIdentity",
    "InstallMode",
    "InstallRecord",
    "Ownership",
    "RecordError",
    "Rejection",
    "ResolutionStatus",
    "SelectionStatus",
    "SelectionSummary",
    "current_record",
    "dist_info_identity",
    "install_id_file_bytes",
    "installed_dist_infos",
    "new_install_id",
    "ownership",
    "read_record",
    "record_path",
    "requested_message",
    "write_record",
]

SCHEMA = 1
INSTALL_ID_FILE = "mamba_ssm_install.json"


class InstallMode(TextEnum):
    """What the install finally did (``final_mode``)."""

    PREBUILT = "prebuilt"  # the verified index wheel was installed
    DEFERRED = "deferred"  # torch was being installed by the same command: pure Python, kernels later
    SOURCE = "source"  # mamba_ssm._C built from source
    PYTHON = "python"  # the pure-Python package
    ERROR = "error"  # the install failed (MAMBA_FALLBACK=error, a failed source build)
    INSTALL_KERNELS = "install-kernels"  # `python -m mamba_ssm install-kernels` installed the kernels
    NO_CANDIDATE = "no-candidate"  # install-kernels found no fitting wheel and installed nothing


class ResolutionStatus(TextEnum):
    """What the resolver found (``status``)."""

    PREBUILT = "prebuilt"  # a verified wheel
    DEFERRED = "deferred"  # no torch in the target yet
    NO_CANDIDATE = "no-candidate"  # the index has no fitting wheel
    ERROR = "error"  # detection, the index or the download failed (``error_kind`` says which)
    REQUESTED = "requested"  # not asked: MAMBA_SKIP_CUDA_BUILD / MAMBA_FORCE_BUILD chose the mode


def requested_message(reason: str) -> str:
    """The message of a record whose mode the user set (status ``requested``): ``reason`` names the
    variable(s) as set; the resolver did not run, so the record holds no decision of its."""
    return f"{reason}: the resolver was not asked (no prebuilt wheel looked for)."


class SelectionStatus(TextEnum):
    """The outcome of selecting a wheel from the index's manifest."""

    CHOSEN = "chosen"
    NO_CANDIDATE = "no-candidate"
    NO_TORCH = "no-torch"


class ErrorStage(TextEnum):
    """Where the resolver failed."""

    DETECT = "detect"  # the target interpreter could not be probed
    INDEX = "index"  # the wheel index could not be used (bad location, or reading its manifest failed)
    MANIFEST = "manifest"  # the manifest was read but refused
    FETCH = "fetch"  # the chosen wheel could not be downloaded, saved or trusted


class ErrorKind(str):  # noqa: SLOT000 - carries its stage and cause (a str subclass can slot nothing)
    """``<stage>`` or ``<stage>-<cause>`` (``"detect"``, ``"index-dns"``, ``"fetch-local"``): the
    stage (:class:`ErrorStage`) and, for index reads and downloads, the :class:`FetchErrorKind`."""

    stage: ErrorStage
    cause: FetchErrorKind | None

    def __new__(cls, stage: ErrorStage, cause: FetchErrorKind | None = None) -> ErrorKind:  # noqa: PYI034
        self = super().__new__(cls, f"{stage}-{cause}" if cause is not None else str(stage))
        self.stage, self.cause = stage, cause
        return self

    @classmethod
    def parse(cls, text: str) -> ErrorKind:
        """``"index-dns"`` -> ``ErrorKind(INDEX, DNS)``; ValueError naming the text when unknown."""
        stage, _, cause = text.partition("-")
        return cls(
            ErrorStage.parse(stage, "error_kind"),
            FetchErrorKind.parse(cause, "error_kind") if cause else None,
        )

    def __getnewargs__(self) -> tuple[ErrorStage, FetchErrorKind | None]:  # type: ignore[override]  # copy / pickle
        return self.stage, self.cause

    @property
    def index_unreachable(self) -> bool:
        """The wheel index or the download failed (no network, DNS, TLS, a bad index), not this
        machine's cache."""
        if self.stage is ErrorStage.INDEX:
            return True
        return self.stage is ErrorStage.FETCH and self.cause not in (FetchErrorKind.LOCAL, FetchErrorKind.OS)


class Rejection(NamedTuple):
    """A wheel of the index that does not fit, and why (one sentence, or several joined by ``; ``)."""

    filename: str
    reason: str


@dataclass(frozen=True)
class SelectionSummary:
    """What selection decided, as recorded (``decision``): the chosen wheel's file name, the other
    compatible ones (best first), the rejected ones (nearest first), what a fitting wheel would be,
    notes, what the index's wheels serve, and the GPUs no build for the target's torch can run on."""

    status: SelectionStatus | None = None
    chosen: str | None = None
    candidates: tuple[str, ...] = ()
    rejected: tuple[Rejection, ...] = ()
    looked_for: str = ""
    notes: tuple[str, ...] = ()
    served: tuple[str, ...] = ()
    gpu_unservable: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The JSON object."""
        return {
            "served": list(self.served),
            "gpu_unservable": list(self.gpu_unservable),
            "status": None if self.status is None else str(self.status),
            "chosen": self.chosen,
            "candidates": list(self.candidates),
            "rejected": [{"filename": r.filename, "reason": r.reason} for r in self.rejected],
            "looked_for": self.looked_for,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SelectionSummary:
        """From the JSON object (tolerant: a value this version does not know is left out)."""
        rejected = []
        for item in data.get("rejected") or []:
            if isinstance(item, Mapping):
                rejected.append(Rejection(str(item.get("filename", "?")), str(item.get("reason", "?"))))
            else:
                rejected.append(Rejection(str(item), "?"))
        return cls(
            status=SelectionStatus.lookup(data.get("status")),
            chosen=_text(data.get("chosen")),
            candidates=tuple(str(c) for c in data.get("candidates") or []),
            rejected=tuple(rejected),
            looked_for=str(data.get("looked_for") or ""),
            notes=tuple(str(n) for n in data.get("notes") or []),
            served=tuple(str(s) for s in data.get("served") or []),
            gpu_unservable=tuple(str(g) for g in data.get("gpu_unservable") or []),
        )


@dataclass(frozen=True)
class BuildNote:
    """What setup.py built when no prebuilt wheel was used (``build``): the mode, why, how long and
    which kernels, and whether the build failed."""

    mode: str
    reason: str
    seconds: float
    kernels: tuple[str, ...] = ()
    failed: bool = False

    def to_dict(self) -> dict[str, Any]:
        """The JSON object."""
        return {
            "mode": self.mode,
            "reason": self.reason,
            "seconds": self.seconds,
            "kernels": list(self.kernels),
            "failed": self.failed,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BuildNote:
        """From the JSON object."""
        return cls(
            mode=str(data.get("mode")),
            reason=str(data.get("reason") or ""),
            seconds=float(data.get("seconds") or 0.0),
            kernels=tuple(str(k) for k in data.get("kernels") or []),
            failed=bool(data.get("failed")),
        )


@dataclass(frozen=True)
class InstallIdentity:
    """Which install a record describes: setup.py's ``install_id``, or the dist-info folder and its
    RECORD's mtime that install-kernels saw."""

    install_id: str | None = None
    dist_info: str | None = None
    record_mtime_ns: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (unset fields left out)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InstallIdentity:
        """From the JSON object."""
        mtime = data.get("record_mtime_ns")
        return cls(
            install_id=_text(data.get("install_id")),
            dist_info=_text(data.get("dist_info")),
            record_mtime_ns=mtime if isinstance(mtime, int) else None,
        )


def _text(value: object) -> str | None:
    return None if value is None else str(value)


_SIMPLE = (
    "time",
    "prefix",
    "package_version",
    "wheel",
    "installed_wheel",
    "sha256",
    "index",
    "environment",
    "target_python",
    "requested",
)


@dataclass(frozen=True)
class InstallRecord:
    """One install's record (the JSON keys in the module docstring). ``path`` is where it was read
    from (None before it is written); ``extra`` holds what this version does not know."""

    final_mode: InstallMode | None = None
    status: ResolutionStatus | None = None
    package_version: str | None = None
    message: str = ""
    wheel: str | None = None
    installed_wheel: str | None = None
    sha256: str | None = None
    index: str | None = None
    environment: str | None = None
    target_python: str | None = None
    selection: SelectionSummary | None = None
    error_kind: ErrorKind | None = None
    gpu_unservable: tuple[str, ...] = ()
    requested: str | None = None
    build: BuildNote | None = None
    install: InstallIdentity | None = None
    time: str | None = None
    prefix: str | None = None
    schema: int = SCHEMA
    path: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kernels_deferred(self) -> bool:
        """The kernels were deferred: torch was being installed by the same command, so the pure-Python
        package was installed and ``python -m mamba_ssm install-kernels`` adds the kernels."""
        return self.final_mode is InstallMode.DEFERRED or self.status is ResolutionStatus.DEFERRED

    def status_text(self) -> str | None:
        """The resolver status as recorded (a value another version wrote is shown as written)."""
        if self.status is not None:
            return str(self.status)
        raw = self.extra.get("status")
        return None if raw is None else str(raw)

    def failed_attempt(self) -> bool:
        """Whether this records an install attempt that failed (``final_mode`` ``error``) and so names no
        install."""
        return self.final_mode is InstallMode.ERROR and self.install is None

    def final_mode_text(self) -> str | None:
        """``final_mode`` as recorded (a value another version wrote is shown as written)."""
        if self.final_mode is not None:
            return str(self.final_mode)
        raw = self.extra.get("final_mode")
        return None if raw is None else str(raw)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (what is written; ``path`` too once read)."""
        out: dict[str, Any] = {"schema": self.schema}
        for name in _SIMPLE:
            out[name] = getattr(self, name)
        out.update(
            final_mode=None if self.final_mode is None else str(self.final_mode),
            status=None if self.status is None else str(self.status),
            message=self.message,
            decision=None if self.selection is None else self.selection.to_dict(),
            error_kind=None if self.error_kind is None else str(self.error_kind),
            gpu_unservable=list(self.gpu_unservable),
        )
        if self.build is not None:
            out["build"] = self.build.to_dict()
        if self.install is not None:
            out["install"] = self.install.to_dict()
        if self.path is not None:
            out["path"] = self.path
        for key, value in self.extra.items():
            if out.get(key) is None:
                out[key] = value
        return out

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> InstallRecord:
        """From the JSON object; tolerant of another version's record (see ``extra``)."""
        extra: dict[str, Any] = {}
        known = set(_SIMPLE) | {"schema", "final_mode", "status", "message", "decision", "error_kind"}
        known |= {"gpu_unservable", "build", "install", "path"}
        for key, value in data.items():
            if key not in known:
                extra[key] = value
        final_mode = InstallMode.lookup(data.get("final_mode"))
        status = ResolutionStatus.lookup(data.get("status"))
        error_kind = None
        if data.get("error_kind"):
            try:
                error_kind = ErrorKind.parse(str(data["error_kind"]))
            except ValueError:
                extra["error_kind"] = data["error_kind"]
        for key, parsed in (("final_mode", final_mode), ("status", status)):
            if parsed is None and data.get(key) is not None:
                extra[key] = data[key]
        selection, build, install = data.get("decision"), data.get("build"), data.get("install")
        schema = data.get("schema")
        return cls(
            final_mode=final_mode,
            status=status,
            message=str(data.get("message") or ""),
            selection=SelectionSummary.from_dict(selection) if isinstance(selection, Mapping) else None,
            error_kind=error_kind,
            gpu_unservable=tuple(str(g) for g in data.get("gpu_unservable") or []),
            build=BuildNote.from_dict(build) if isinstance(build, Mapping) else None,
            install=InstallIdentity.from_dict(install) if isinstance(install, Mapping) and install else None,
            schema=schema if isinstance(schema, int) else SCHEMA,
            path=_text(data.get("path")),
            extra=extra,
            **{name: _text(data.get(name)) for name in _SIMPLE},
        )

    @classmethod
    def from_json(cls, text: str) -> InstallRecord:
        """Parse a record's JSON text; :class:`RecordError` when it is not a JSON object."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise RecordError(f"unreadable decision record ({exc})") from None
        if not isinstance(data, dict):
            raise RecordError("decision record is not a JSON object")
        return cls.from_dict(data)


class RecordError(ValueError):
    """A record file exists but cannot be read; ``path`` names it."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


def _key(prefix: str) -> str:
    return hashlib.sha256(os.path.realpath(prefix).encode("utf-8", "surrogateescape")).hexdigest()[:20]


def record_path(prefix: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """Where the record for the environment at ``prefix`` (default ``sys.prefix``) is kept."""
    environ = os.environ if environ is None else environ
    folder = environ.get("MAMBA_SSM_DECISION_DIR") or os.path.join(cache_dir(environ), "decisions")
    return os.path.join(folder, _key(prefix or sys.prefix) + ".json")


def write_record(
    record: InstallRecord, prefix: str | None = None, environ: Mapping[str, str] | None = None
) -> str:
    """Write ``record`` atomically, with ``time`` (unless set) and ``prefix`` filled in; returns the
    path. Raises OSError when the folder cannot be written."""
    prefix = os.path.realpath(prefix or sys.prefix)
    path = record_path(prefix, environ)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    stamped = dataclasses.replace(
        record,
        prefix=prefix,
        path=None,
        time=record.time or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )
    fd, tmp = tempfile.mkstemp(prefix=".decision.", suffix=".part", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(stamped.to_json())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def read_record(prefix: str | None = None, environ: Mapping[str, str] | None = None) -> InstallRecord | None:
    """The record for ``prefix`` (default: this interpreter's ``sys.prefix``), or None when none was
    written.

    Raises:
        RecordError: the file exists but is unreadable or not a JSON object (``path`` names it).
    """
    path = record_path(prefix, environ)
    try:
        with open(path) as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise RecordError(f"unreadable decision record ({exc})", path) from None
    try:
        record = InstallRecord.from_json(text)
    except RecordError as exc:
        raise RecordError(str(exc), path) from None
    return dataclasses.replace(record, path=path)


def new_install_id() -> str:
    """A fresh id (32 hex digits) naming one wheel build and so the install made from it."""
    return uuid.uuid4().hex


def install_id_file_bytes(install_id: str) -> bytes:
    """The content of ``<dist-info>/mamba_ssm_install.json`` for ``install_id``."""
    return (json.dumps({"install_id": install_id}, sort_keys=True) + "\n").encode("utf-8")


def _site_dir() -> str:
    # <site>/mamba_ssm/_install/record.py -> <site>
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def installed_dist_infos(site_dir: str | None = None) -> list[str]:
    """The ``mamba_ssm-*.dist-info`` folders next to the ``mamba_ssm`` package (default: the one this
    module belongs to), newest first; empty for a source checkout or an editable install."""
    site_dir = site_dir or _site_dir()
    try:
        names = os.listdir(site_dir)
    except OSError:
        return []
    found = [
        os.path.join(site_dir, n)
        for n in names
        if n.endswith(".dist-info") and n.split("-", 1)[0].replace(".", "_").lower() == "mamba_ssm"
    ]

    def mtime(path: str) -> float:
        try:
            return os.stat(path).st_mtime
        except OSError:
            return 0.0

    return sorted(found, key=mtime, reverse=True)


def dist_info_identity(site_dir: str | None = None) -> InstallIdentity | None:
    """The installed distribution's dist-info folder and RECORD mtime (what install-kernels records
    after pip has installed the wheel), or None when there is none."""
    for path in installed_dist_infos(site_dir):
        try:
            return InstallIdentity(
                dist_info=path, record_mtime_ns=os.stat(os.path.join(path, "RECORD")).st_mtime_ns
            )
        except OSError:
            continue
    return None


def _installed_ids(site_dir: str | None) -> list[str]:
    ids = []
    for path in installed_dist_infos(site_dir):
        try:
            with open(os.path.join(path, INSTALL_ID_FILE)) as fh:
                value = json.load(fh).get("install_id")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(value, str):
            ids.append(value)
    return ids


class Ownership(NamedTuple):
    """Whether a record describes the installed distribution, and why not."""

    current: bool
    why: str


def ownership(record: InstallRecord, site_dir: str | None = None) -> Ownership:
    """Whether ``record`` describes the mamba-ssm installed next to this package. A record without an
    ``install`` identity counts as an earlier install's: an attempt that failed (``final_mode``
    ``error``) installed nothing, and a record of another kind without one was written before records
    carried one."""
    ident = record.install
    if record.failed_attempt():
        return Ownership(False, "the install attempt that wrote the record failed, so it installed nothing")
    if ident is None:
        return Ownership(False, "the record names no install (written by an older mamba-ssm)")
    if ident.install_id:
        ids = _installed_ids(site_dir)
        if ident.install_id in ids:
            return Ownership(True, "")
        if not installed_dist_infos(site_dir):
            return Ownership(False, "no installed mamba-ssm distribution (dist-info) next to the package")
        return Ownership(
            False,
            f"the installed distribution carries install id {ids[0]}"
            if ids
            else "the installed distribution was not built by the resolver path that wrote the record",
        )
    if ident.dist_info:
        now = dist_info_identity(site_dir)
        if (
            now is not None
            and now.dist_info is not None
            and os.path.realpath(now.dist_info) == os.path.realpath(ident.dist_info)
            and now.record_mtime_ns == ident.record_mtime_ns
        ):
            return Ownership(True, "")
        return Ownership(False, "the installed distribution was reinstalled after the record was written")
    return Ownership(False, "the record's install identity is not understood")


def current_record(prefix: str | None = None, site_dir: str | None = None) -> InstallRecord | None:
    """The record of the installed distribution, or None: nothing recorded, an unreadable record, or
    one written for an earlier install (it says nothing about this one). Never raises."""
    try:
        record = read_record(prefix)
    except RecordError:
        return None
    if record is None or not ownership(record, site_dir).current:
        return None
    return record
