"""The wheel index: one PEP 503 root per wheel variant plus ``manifest.json`` for the resolver.

``python -m build_matrix index DIR`` gathers every ``mamba_ssm-*.whl`` under DIR (and ``--add``
files), files each under ``DIR/<local label>/mamba-ssm/``, and writes::

    DIR/manifest.json                           (mamba_ssm._install.manifest, schema 1)
    DIR/index.html                              links to each variant root
    DIR/<label>/index.html                      PEP 503 root
    DIR/<label>/mamba-ssm/index.html            PEP 503 project page, links with #sha256= fragments

so ``pip install --index-url DIR/cu13torch2.14cxx11abiTRUE/ mamba-ssm`` works by hand, like PyTorch's
per-CUDA indexes. Each manifest entry carries the build info read from the wheel's ``_C`` (without
loading it) and its SASS/PTX/gfx archs. ``--pin FILE`` also writes ``{"wheels": {file: {sha256,
size}}}``: at release that goes to ``mamba_ssm/_install/pinned_hashes.json`` inside the sdist, so the
resolver checks each wheel against a hash that did not come from the host that served it.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import shutil
import urllib.parse
from typing import Any, Dict, Iterable, List, Optional

from packaging.utils import parse_wheel_filename

from mamba_ssm._compat.variant import VariantError, VariantKey
from mamba_ssm._install.manifest import PROJECT, Manifest, WheelEntry
from mamba_ssm._install.wheelmeta import disagreements, read_wheel_meta

__all__ = ["IndexError_", "build_index", "wheel_entry", "write_index", "write_pins"]


class IndexError_(ValueError):  # noqa: N801 - the builtin IndexError is another thing
    """A wheel that cannot go into the index; names the file and the reason."""


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def wheel_entry(
    path: str, meta_out: Optional[Dict[str, Any]] = None, allow_unrepaired: bool = False
) -> WheelEntry:
    """The manifest entry of one wheel file. Raises IndexError_ naming the file when its name is
    not a variant wheel of mamba_ssm, when its contents disagree with the name (METADATA name and
    version, WHEEL tags, the ``_C`` build info's version and architecture, a Requires-Python that is
    not a specifier: ``mamba_ssm._install.wheelmeta.disagreements``), or when it is an unrepaired
    ``linux_*`` wheel (auditwheel never checked its libraries; ``allow_unrepaired`` accepts it, for a
    local test index only)."""
    name = os.path.basename(path)
    try:
        key = VariantKey.from_wheel_filename(name)
    except VariantError as exc:
        raise IndexError_(f"{path}: {exc}") from None
    try:
        meta = read_wheel_meta(path)
    except ValueError as exc:
        raise IndexError_(str(exc)) from None
    if meta_out is not None:
        meta_out.update(
            version=meta.version, requires_python=meta.requires_python, build_info=meta.build_info
        )
    problems = disagreements(meta, name)
    if problems:
        raise IndexError_(f"{path}: " + "; ".join(problems))
    plats = sorted({t.platform for t in parse_wheel_filename(name)[3]})
    if not allow_unrepaired and any(p.startswith("linux_") for p in plats):
        raise IndexError_(
            f"{path}: platform tag {', '.join(plats)} is an unrepaired wheel (auditwheel repair gives it a "
            f"manylinux/musllinux tag after checking its libraries); refusing it (--allow-unrepaired for a "
            f"local test index)"
        )
    from packaging.version import Version

    info = meta.build_info
    entry = WheelEntry(
        filename=name,
        sha256=_sha256(path),
        size=os.path.getsize(path),
        variant=key.local_label,
        version=str(Version(name.split("-")[1])),
        sass_archs=list(info.get("sass_archs") or []) if info else [],
        ptx_archs=list(info.get("ptx_archs") or []) if info else [],
        gfx_archs=list(info.get("gfx_archs") or []) if info else [],
        build_info=info,
        requires_python=meta.requires_python,
    )
    return WheelEntry.from_dict(entry.to_dict(), where=name)  # the resolver's own validation


def _page(title: str, links: Iterable[str]) -> str:
    body = "\n".join(f"    {link}<br/>" for link in links)
    return (
        f'<!DOCTYPE html>\n<html>\n  <head><meta name="pypi:repository-version" content="1.0">'
        f"<title>{html.escape(title)}</title></head>\n  <body>\n{body}\n  </body>\n</html>\n"
    )


def write_index(
    root: str,
    entries: List[WheelEntry],
    requires_python: Optional[Dict[str, str]] = None,
    file_base: Optional[str] = None,
) -> Manifest:
    """Write the pages and ``manifest.json`` for ``entries`` (whose files already lie at
    ``root/<variant>/mamba-ssm/<filename>``, or, with ``file_base``, are served at
    ``<file_base><filename>``: the release's GitHub Release assets, linked absolutely). Returns the
    manifest."""
    requires_python = requires_python or {}
    entries = sorted(entries, key=lambda e: (e.variant, e.filename))
    variants: Dict[str, List[WheelEntry]] = {}
    for e in entries:
        variants.setdefault(e.variant, []).append(e)
    for variant, wheels in variants.items():
        proj = os.path.join(root, variant, PROJECT)
        os.makedirs(proj, exist_ok=True)
        links = []
        for w in wheels:
            rp = requires_python.get(w.filename) or w.requires_python
            attr = f' data-requires-python="{html.escape(rp)}"' if rp else ""
            href = (file_base or "") + urllib.parse.quote(w.filename)
            links.append(
                f'<a href="{html.escape(href)}#sha256={w.sha256}"{attr}>{html.escape(w.filename)}</a>'
            )
        with open(os.path.join(proj, "index.html"), "w") as fh:
            fh.write(_page(f"Links for {PROJECT}", links))
        with open(os.path.join(root, variant, "index.html"), "w") as fh:
            fh.write(_page("Simple index", [f'<a href="{PROJECT}/">{PROJECT}</a>']))
    with open(os.path.join(root, "index.html"), "w") as fh:
        fh.write(
            _page(
                "mamba-ssm wheel variants",
                [f'<a href="{urllib.parse.quote(v)}/">{html.escape(v)}</a>' for v in sorted(variants)],
            )
        )
    manifest = Manifest(wheels=entries)
    tmp = os.path.join(root, ".manifest.json.part")
    with open(tmp, "w") as fh:
        fh.write(manifest.to_json())
    os.replace(tmp, os.path.join(root, "manifest.json"))
    return manifest


def write_pins(manifest: Manifest, path: str) -> str:
    """Write the sha256 pins of ``manifest`` (``mamba_ssm/_install/pinned_hashes.json`` at release)."""
    data = {"wheels": {w.filename: {"sha256": w.sha256, "size": w.size} for w in manifest.wheels}}
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    return path


def build_index(
    root: str,
    add: Iterable[str] = (),
    pin: Optional[str] = None,
    move: bool = True,
    allow_unrepaired: bool = False,
) -> Manifest:
    """Gather the wheels under ``root`` plus ``add``, place them, write pages and the manifest.

    Wheels already at ``root/<label>/mamba-ssm/`` stay; others under ``root`` are moved there (copied
    with ``move=False``); ``add`` files are copied. Raises IndexError_ naming a bad wheel (see
    :func:`wheel_entry`; ``allow_unrepaired`` lets ``linux_*`` wheels in, for a local test index).
    """
    root = os.path.abspath(root)
    os.makedirs(root, exist_ok=True)
    found = []
    for dirpath, _dirs, files in os.walk(root):
        found += [
            (os.path.join(dirpath, f), True)
            for f in files
            if f.endswith(".whl") and f.lower().startswith("mamba_ssm-")
        ]
    found += [(os.path.abspath(p), False) for p in add]
    entries: Dict[str, WheelEntry] = {}
    rp: Dict[str, str] = {}
    for path, inside in found:
        meta: Dict[str, Any] = {}
        entry = wheel_entry(path, meta, allow_unrepaired=allow_unrepaired)
        dest = os.path.join(root, entry.variant, PROJECT, entry.filename)
        if os.path.abspath(path) != dest:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            if inside and move:
                os.replace(path, dest)
            else:
                shutil.copyfile(path, dest)
        prev = entries.get(entry.filename)
        if prev is not None and prev.sha256 != entry.sha256:
            raise IndexError_(f"two different wheels are named {entry.filename} ({path})")
        entries[entry.filename] = entry
        req = meta.get("requires_python")
        if req:
            rp[entry.filename] = req
    manifest = write_index(root, list(entries.values()), rp)
    if pin:
        write_pins(manifest, pin)
    return manifest


def pin_sdist(sdist: str, manifest: Manifest) -> str:
    """Add ``mamba_ssm/_install/pinned_hashes.json`` (the manifest's sha256 and sizes) to a built
    ``.tar.gz`` sdist, rewriting it atomically; the release does this before publishing the sdist.
    Returns the sdist path. Raises IndexError_ when the archive is not an sdist of mamba_ssm."""
    import io
    import tarfile

    data = json.dumps(
        {"wheels": {w.filename: {"sha256": w.sha256, "size": w.size} for w in manifest.wheels}},
        indent=1,
        sort_keys=True,
    ).encode()
    with tarfile.open(sdist, "r:gz") as src:
        members = src.getmembers()
        tops = {m.name.split("/", 1)[0] for m in members}
        if len(tops) != 1 or not any(m.name.endswith("/setup.py") for m in members):
            raise IndexError_(f"{sdist}: not an sdist (one top folder with setup.py expected)")
        top = tops.pop()
        target = f"{top}/mamba_ssm/_install/pinned_hashes.json"
        tmp = sdist + ".part"
        with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as dst:
            for m in members:
                if m.name == target:
                    continue
                dst.addfile(m, src.extractfile(m) if m.isfile() else None)
            info = tarfile.TarInfo(target)
            info.size, info.mode, info.mtime = (
                len(data),
                0o644,
                int(max((m.mtime for m in members), default=0)),
            )
            dst.addfile(info, io.BytesIO(data))
    os.replace(tmp, sdist)
    return sdist
