"""The recorded install-time decision, where ``python -m mamba_ssm doctor`` finds it.

pip and uv hide build output unless ``-v``, so what the resolver chose and why is written as JSON to
``<cache>/decisions/<key>.json``, where ``<cache>`` is ``MAMBA_SSM_DECISION_DIR``, else the resolver's
cache (``MAMBA_SSM_CACHE_DIR``, ``$XDG_CACHE_HOME/mamba-ssm``, ``~/.cache/mamba-ssm``) and ``<key>``
is derived from the target environment's ``sys.prefix`` (realpath). The build runs in pip's isolated
environment but records for the target's prefix, which is the ``sys.prefix`` doctor later runs with.

Record keys: ``schema`` (1), ``time`` (UTC ISO 8601), ``prefix``, ``package_version``,
``final_mode`` (``prebuilt`` | ``deferred`` | ``source`` | ``python`` | ``error`` |
``install-kernels``), ``status``, ``wheel`` (file name or null), ``sha256``, ``index``,
``environment`` (one-line summary), ``decision`` (``Decision.to_dict()`` or null), ``message``,
``install`` (which install the record describes, see below).

A record must never be presented for an install it does not describe (a later ``pip install`` that did
not go through the resolver, a venv deleted and recreated at the same path). So each record names the
install it belongs to, in ``install``:

* ``{"install_id": "<uuid hex>"}``: setup.py (every wheel-building path) makes a fresh id per wheel,
  puts it in the wheel as ``<dist-info>/mamba_ssm_install.json`` (``INSTALL_ID_FILE``; the dist-info
  only: the prebuilt wheel's package files stay byte-identical to the index wheel's) and records it.
* ``{"dist_info": "<path>", "record_mtime_ns": N}``: ``install-kernels`` records, after pip has
  installed the wheel, the installed dist-info folder and its RECORD's mtime.

``record_belongs_to_install(record)`` checks that against the ``mamba_ssm-*.dist-info`` next to this
package; doctor shows a record that does not match as belonging to an earlier install.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
import uuid
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .fetch import cache_dir

__all__ = [
    "decision_path",
    "write_decision",
    "read_decision",
    "SCHEMA",
    "INSTALL_ID_FILE",
    "new_install_id",
    "install_id_file_bytes",
    "installed_dist_infos",
    "dist_info_identity",
    "record_belongs_to_install",
]

SCHEMA = 1


def _key(prefix: str) -> str:
    return hashlib.sha256(os.path.realpath(prefix).encode("utf-8", "surrogateescape")).hexdigest()[:20]


def decision_path(prefix: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> str:
    """Where the decision for the environment at ``prefix`` (default ``sys.prefix``) is kept."""
    environ = os.environ if environ is None else environ
    folder = environ.get("MAMBA_SSM_DECISION_DIR") or os.path.join(cache_dir(environ), "decisions")
    return os.path.join(folder, _key(prefix or sys.prefix) + ".json")


def write_decision(
    record: Dict[str, Any], prefix: Optional[str] = None, environ: Optional[Mapping[str, str]] = None
) -> str:
    """Write ``record`` (keys above; ``schema``, ``time`` and ``prefix`` are filled in) atomically;
    returns the path. Raises OSError when the folder cannot be written."""
    prefix = os.path.realpath(prefix or sys.prefix)
    path = decision_path(prefix, environ)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    data = dict(record)
    data.setdefault("schema", SCHEMA)
    data.setdefault("time", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    data["prefix"] = prefix
    fd, tmp = tempfile.mkstemp(prefix=".decision.", suffix=".part", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1, sort_keys=True)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def read_decision(
    prefix: Optional[str] = None, environ: Optional[Mapping[str, str]] = None
) -> Optional[Dict[str, Any]]:
    """The decision recorded for ``prefix`` (default: this interpreter's ``sys.prefix``), or None
    when none was recorded. An unreadable record returns ``{"error": reason, "path": path}``."""
    path = decision_path(prefix, environ)
    try:
        with open(path) as fh:
            data = json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        return {"error": f"unreadable decision record ({exc})", "path": path}
    if not isinstance(data, dict):
        return {"error": "decision record is not a JSON object", "path": path}
    data["path"] = path
    return data


INSTALL_ID_FILE = "mamba_ssm_install.json"


def new_install_id() -> str:
    """A fresh id (32 hex digits) naming one wheel build and so the install made from it."""
    return uuid.uuid4().hex


def install_id_file_bytes(install_id: str) -> bytes:
    """The content of ``<dist-info>/mamba_ssm_install.json`` for ``install_id``."""
    return (json.dumps({"install_id": install_id}, sort_keys=True) + "\n").encode("utf-8")


def _site_dir() -> str:
    # <site>/mamba_ssm/_install/decision.py -> <site>
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def installed_dist_infos(site_dir: Optional[str] = None) -> List[str]:
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


def dist_info_identity(site_dir: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """``{"dist_info": path, "record_mtime_ns": N}`` for the installed distribution (what
    install-kernels records after pip has installed the wheel), or None when there is none."""
    for path in installed_dist_infos(site_dir):
        try:
            return {"dist_info": path, "record_mtime_ns": os.stat(os.path.join(path, "RECORD")).st_mtime_ns}
        except OSError:
            continue
    return None


def _installed_ids(site_dir: Optional[str]) -> List[str]:
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


def record_belongs_to_install(
    record: Optional[Mapping[str, Any]], site_dir: Optional[str] = None
) -> Tuple[bool, str]:
    """Whether ``record`` describes the mamba-ssm installed next to this package: ``(True, "")`` or
    ``(False, why)``. A record without an ``install`` identity (written before records carried one)
    cannot be tied to this install and counts as an earlier install's."""
    if not record:
        return False, "nothing recorded"
    ident = record.get("install")
    if not isinstance(ident, Mapping) or not ident:
        return False, "the record names no install (written by an older mamba-ssm)"
    if ident.get("install_id"):
        ids = _installed_ids(site_dir)
        if ident["install_id"] in ids:
            return True, ""
        if not installed_dist_infos(site_dir):
            return False, "no installed mamba-ssm distribution (dist-info) next to the package"
        return False, (
            f"the installed distribution carries install id {ids[0]}"
            if ids
            else "the installed distribution was not built by the resolver path that wrote the record"
        )
    if ident.get("dist_info"):
        now = dist_info_identity(site_dir)
        if (
            now
            and os.path.realpath(now["dist_info"]) == os.path.realpath(str(ident["dist_info"]))
            and now["record_mtime_ns"] == ident.get("record_mtime_ns")
        ):
            return True, ""
        return False, "the installed distribution was reinstalled after the record was written"
    return False, "the record's install identity is not understood"
