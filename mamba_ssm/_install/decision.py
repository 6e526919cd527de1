"""The recorded install-time decision, where ``python -m mamba_ssm doctor`` finds it.

pip and uv hide build output unless ``-v``, so what the resolver chose and why is written as JSON to
``<cache>/decisions/<key>.json``, where ``<cache>`` is ``MAMBA_SSM_DECISION_DIR``, else the resolver's
cache (``MAMBA_SSM_CACHE_DIR``, ``$XDG_CACHE_HOME/mamba-ssm``, ``~/.cache/mamba-ssm``) and ``<key>``
is derived from the target environment's ``sys.prefix`` (realpath). The build runs in pip's isolated
environment but records for the target's prefix, which is the ``sys.prefix`` doctor later runs with.

Record keys: ``schema`` (1), ``time`` (UTC ISO 8601), ``prefix``, ``package_version``,
``final_mode`` (``prebuilt`` | ``deferred`` | ``source`` | ``python`` | ``error`` |
``install-kernels``), ``status``, ``wheel`` (file name or null), ``sha256``, ``index``,
``environment`` (one-line summary), ``decision`` (``Decision.to_dict()`` or null), ``message``.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from typing import Any, Dict, Mapping, Optional

from .fetch import cache_dir

__all__ = ["decision_path", "write_decision", "read_decision", "SCHEMA"]

SCHEMA = 1


def _key(prefix: str) -> str:
    return hashlib.sha256(os.path.realpath(prefix).encode("utf-8", "surrogateescape")).hexdigest()[:20]


def decision_path(prefix: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> str:
    """Where the decision for the environment at ``prefix`` (default ``sys.prefix``) is kept."""
    environ = os.environ if environ is None else environ
    folder = environ.get("MAMBA_SSM_DECISION_DIR") or os.path.join(cache_dir(environ), "decisions")
    return os.path.join(folder, _key(prefix or sys.prefix) + ".json")


def write_decision(record: Dict[str, Any], prefix: Optional[str] = None,
                   environ: Optional[Mapping[str, str]] = None) -> str:
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


def read_decision(prefix: Optional[str] = None, environ: Optional[Mapping[str, str]] = None) -> Optional[Dict[str, Any]]:
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
