"""The wheel index's ``manifest.json`` and the sha256 values pinned into the sdist.

Index layout (written by ``python -m build_matrix index DIR``)::

    DIR/manifest.json
    DIR/index.html                                   links to each variant root
    DIR/<local label>/index.html                     PEP 503 root: links to mamba-ssm/
    DIR/<local label>/mamba-ssm/index.html           PEP 503 project page (#sha256= fragments)
    DIR/<local label>/mamba-ssm/<wheel file>

so ``pip install --index-url DIR/cu13torch2.14cxx11abiTRUE/ mamba-ssm`` works by hand too. A wheel's
URL is always derived from the index base, its variant folder and its file name (never taken from
the manifest), and every name is checked, so a manifest cannot point the resolver elsewhere or make
it write outside its cache.

Manifest schema 1::

    {"schema": 1, "project": "mamba-ssm",
     "wheels": [{"filename": str, "sha256": 64 hex, "size": int bytes, "variant": local label,
                 "version": str, "sass_archs": [...], "ptx_archs": [...], "gfx_archs": [...],
                 "build_info": {the build-info JSON of the wheel's _C, or null for a pure-Python wheel},
                 "requires_python": the wheel's METADATA Requires-Python (e.g. ">=3.9"), or null}]}

``requires_python`` was added within schema 1 (an older resolver ignores the key; an older manifest
without it means "not recorded").
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from packaging.tags import Tag
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from .._compat.buildinfo import BuildInfo

__all__ = [
    "MAX_MANIFEST_BYTES",
    "PINNED_HASHES_FILE",
    "SCHEMA",
    "Manifest",
    "ManifestError",
    "Pin",
    "WheelEntry",
    "load_pinned_hashes",
]

SCHEMA = 1
PROJECT = "mamba-ssm"
MAX_MANIFEST_BYTES = 16 * 1024 * 1024
#: Written at release into the sdist (``build_matrix index --pin``); read by the resolver.
PINNED_HASHES_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pinned_hashes.json")

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+!-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ManifestError(ValueError):
    """A manifest (or pinned-hash file) that is malformed or unsafe; names the entry and the field."""


def _safe_component(value: Any, what: str) -> str:
    if not isinstance(value, str) or not _SAFE_NAME.match(value) or ".." in value:
        raise ManifestError(
            f"{what} {value!r} is not a plain file/folder name (letters, digits, '_', '.', '+', '!', '-'; "
            f"no '/', '\\\\' or '..'): refusing the manifest"
        )
    return value


@dataclass
class WheelEntry:
    """One wheel of the index. ``size`` in bytes; ``sha256`` lower-case hex; ``variant`` the local
    version label and folder name (``cu13torch2.14cxx11abiTRUE``); ``build_info`` a dict of the
    build-info JSON keys (docs/architecture.md) or None for a pure-Python wheel."""

    filename: str
    sha256: str
    size: int
    variant: str
    version: str
    sass_archs: List[str] = field(default_factory=list)
    ptx_archs: List[str] = field(default_factory=list)
    gfx_archs: List[str] = field(default_factory=list)
    build_info: Optional[Dict[str, Any]] = None
    requires_python: Optional[str] = None

    @property
    def relpath(self) -> str:
        """The wheel's path under the index base: ``<variant>/mamba-ssm/<filename>``."""
        return f"{self.variant}/{PROJECT}/{self.filename}"

    @property
    def tags(self) -> frozenset[Tag]:
        """The wheel's tags (a frozenset of ``packaging.tags.Tag``)."""
        return parse_wheel_filename(self.filename)[3]

    def to_dict(self) -> Dict[str, Any]:
        """The manifest entry's JSON object."""
        return asdict(self)

    def build(self) -> BuildInfo | None:
        """The wheel's build info, typed (None for a pure-Python wheel).

        Raises:
            BuildInfoError: the recorded build info is not a valid record.
        """
        if self.build_info is None:
            return None
        return BuildInfo.from_json(json.dumps(self.build_info))

    @classmethod
    def from_dict(cls, data: Any, where: str = "entry") -> WheelEntry:
        """Validate one manifest entry. Raises ManifestError naming ``where`` and the field."""
        if not isinstance(data, Mapping):
            raise ManifestError(f"{where}: expected an object, got {type(data).__name__}")
        filename = _safe_component(data.get("filename"), f"{where}: filename")
        if not filename.endswith(".whl"):
            raise ManifestError(f"{where}: filename {filename!r} is not a wheel (.whl)")
        try:
            name, version, _build, _tags = parse_wheel_filename(filename)
        except InvalidWheelFilename as exc:
            raise ManifestError(f"{where}: filename {filename!r} is not a valid wheel name ({exc})") from None
        if canonicalize_name(name) != canonicalize_name(PROJECT):
            raise ManifestError(f"{where}: {filename!r} is a wheel of {name!r}, not of {PROJECT}")
        sha = data.get("sha256")
        if not isinstance(sha, str) or not _SHA256.match(sha.lower()):
            raise ManifestError(f"{where} ({filename}): sha256 {sha!r} is not 64 hex digits")
        size = data.get("size")
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise ManifestError(f"{where} ({filename}): size {size!r} is not a positive integer (bytes)")
        variant = _safe_component(data.get("variant"), f"{where} ({filename}): variant")
        if (version.local or "") != variant.lower():
            raise ManifestError(
                f"{where}: variant {variant!r} is not the local label of {filename!r} ({version.local!r})"
            )
        lists = {}
        for key in ("sass_archs", "ptx_archs", "gfx_archs"):
            value = data.get(key) or []
            if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
                raise ManifestError(f"{where} ({filename}): {key} {value!r} is not a list of strings")
            lists[key] = value
        info = data.get("build_info")
        if info is not None and not isinstance(info, Mapping):
            raise ManifestError(f"{where} ({filename}): build_info must be an object or null")
        req = data.get("requires_python")
        if req is not None:
            from packaging.specifiers import InvalidSpecifier, SpecifierSet

            bad = not isinstance(req, str)
            if not bad:
                try:
                    SpecifierSet(req)
                except InvalidSpecifier:
                    bad = True
            if bad:
                raise ManifestError(
                    f"{where} ({filename}): requires_python {req!r} is not a version specifier string or null"
                )
        return cls(
            filename=filename,
            sha256=sha.lower(),
            size=size,
            variant=variant,
            version=str(version),
            build_info=dict(info) if info is not None else None,
            requires_python=req or None,
            **lists,
        )


@dataclass
class Manifest:
    """The parsed manifest: its wheels, in file order."""

    wheels: List[WheelEntry]
    schema: int = SCHEMA
    project: str = PROJECT

    def to_json(self) -> str:
        return json.dumps(
            {"schema": self.schema, "project": self.project, "wheels": [w.to_dict() for w in self.wheels]},
            indent=1,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: Any, source: str = "manifest") -> Manifest:
        """Parse and validate (bytes or str). Raises ManifestError naming ``source`` and the fault."""
        if isinstance(text, (bytes, bytearray)):
            if len(text) > MAX_MANIFEST_BYTES:
                raise ManifestError(f"{source}: {len(text)} bytes, over the {MAX_MANIFEST_BYTES} limit")
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ManifestError(f"{source}: not UTF-8 ({exc})") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ManifestError(f"{source}: not valid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise ManifestError(f"{source}: expected a JSON object, got {type(data).__name__}")
        schema = data.get("schema")
        if schema != SCHEMA:
            raise ManifestError(f"{source}: schema {schema!r} is not {SCHEMA} (a newer resolver may read it)")
        wheels = data.get("wheels")
        if not isinstance(wheels, list):
            raise ManifestError(f"{source}: 'wheels' must be a list, got {type(wheels).__name__}")
        entries = [WheelEntry.from_dict(w, f"{source}: wheels[{i}]") for i, w in enumerate(wheels)]
        seen = set()
        for e in entries:
            if e.filename in seen:
                raise ManifestError(f"{source}: {e.filename!r} is listed twice")
            seen.add(e.filename)
        return cls(wheels=entries, schema=schema, project=data.get("project", PROJECT))


@dataclass(frozen=True)
class Pin:
    """A wheel's sha256 (lower-case hex) and size in bytes (None: not recorded), pinned into the sdist."""

    sha256: str
    size: int | None = None


def load_pinned_hashes(path: str | None = None) -> dict[str, Pin] | None:
    """The hashes pinned into the sdist at release (``pinned_hashes.json``: ``{"wheels": {filename:
    {"sha256": hex, "size": bytes}}}``) by file name, or None when the file is absent (a development
    checkout: the manifest's own hashes are used).

    Raises ManifestError when the file exists but is malformed (a broken sdist must not silently
    disable the check).
    """
    path = PINNED_HASHES_FILE if path is None else path
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ManifestError(f"{path}: pinned hashes are not valid JSON ({exc})") from None
    wheels = data.get("wheels") if isinstance(data, dict) else None
    if not isinstance(wheels, dict):
        raise ManifestError(f'{path}: expected {{"wheels": {{filename: {{sha256, size}}}}}}')
    out = {}
    for name, rec in wheels.items():
        _safe_component(name, f"{path}: filename")
        if not isinstance(rec, dict) or not _SHA256.match(str(rec.get("sha256", "")).lower()):
            raise ManifestError(f"{path}: {name}: sha256 missing or not 64 hex digits")
        size = rec.get("size")
        out[name] = Pin(rec["sha256"].lower(), size if isinstance(size, int) else None)
    return out
