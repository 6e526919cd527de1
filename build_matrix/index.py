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

import email.parser
import hashlib
import html
import json
import os
import shutil
import tempfile
import urllib.parse
import zipfile
from typing import Dict, Iterable, List, Optional

from mamba_ssm._compat.buildinfo import BuildInfoError, read_build_info
from mamba_ssm._compat.variant import VariantError, VariantKey
from mamba_ssm._install.manifest import PROJECT, Manifest, WheelEntry

__all__ = ["IndexError_", "wheel_entry", "build_index", "write_index", "write_pins"]


class IndexError_(ValueError):
    """A wheel that cannot go into the index; names the file and the reason."""


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _wheel_meta(path: str) -> Dict[str, Optional[str]]:
    """Version and Requires-Python from the wheel's METADATA, and its _C build info (or None)."""
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        meta_name = next((n for n in names if n.endswith(".dist-info/METADATA") and n.count("/") == 1), None)
        if meta_name is None:
            raise IndexError_(f"{path}: no .dist-info/METADATA, not a wheel")
        meta = email.parser.Parser().parsestr(zf.read(meta_name).decode("utf-8"))
        so = [n for n in names if n.startswith("mamba_ssm/_C") and n.endswith(".so")]
        info = None
        if so:
            with tempfile.TemporaryDirectory() as tmp:
                target = os.path.join(tmp, "_C.so")
                with zf.open(so[0]) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                try:
                    info = json.loads(read_build_info(target).to_json())
                except BuildInfoError as exc:
                    raise IndexError_(f"{path}: {so[0]}: {exc}") from None
    return {"version": meta.get("Version"), "requires_python": meta.get("Requires-Python"), "build_info": info}


def wheel_entry(path: str, meta_out: Optional[dict] = None) -> WheelEntry:
    """The manifest entry of one wheel file. Raises IndexError_ naming the file when its name is
    not a variant wheel of mamba_ssm or METADATA disagrees with the file name."""
    name = os.path.basename(path)
    try:
        key = VariantKey.from_wheel_filename(name)
    except VariantError as exc:
        raise IndexError_(f"{path}: {exc}") from None
    meta = _wheel_meta(path)
    if meta_out is not None:
        meta_out.update(meta)
    file_version = name.split("-")[1]
    from packaging.version import Version

    if meta["version"] is None or Version(meta["version"]) != Version(file_version):
        raise IndexError_(
            f"{path}: METADATA version {meta['version']!r} differs from the file name's {file_version!r} "
            f"(strict installers reject such a wheel)"
        )
    info = meta["build_info"]
    entry = WheelEntry(
        filename=name, sha256=_sha256(path), size=os.path.getsize(path), variant=key.local_label,
        version=str(Version(file_version)),
        sass_archs=list(info.get("sass_archs") or []) if info else [],
        ptx_archs=list(info.get("ptx_archs") or []) if info else [],
        gfx_archs=list(info.get("gfx_archs") or []) if info else [],
        build_info=info,
    )
    return WheelEntry.from_dict(entry.to_dict(), where=name)  # the resolver's own validation


def _page(title: str, links: Iterable[str]) -> str:
    body = "\n".join(f"    {link}<br/>" for link in links)
    return (f"<!DOCTYPE html>\n<html>\n  <head><meta name=\"pypi:repository-version\" content=\"1.0\">"
            f"<title>{html.escape(title)}</title></head>\n  <body>\n{body}\n  </body>\n</html>\n")


def write_index(root: str, entries: List[WheelEntry], requires_python: Optional[Dict[str, str]] = None,
                file_base: Optional[str] = None) -> Manifest:
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
            rp = requires_python.get(w.filename)
            attr = f' data-requires-python="{html.escape(rp)}"' if rp else ""
            href = (file_base or "") + urllib.parse.quote(w.filename)
            links.append(f'<a href="{html.escape(href)}#sha256={w.sha256}"{attr}>{html.escape(w.filename)}</a>')
        with open(os.path.join(proj, "index.html"), "w") as fh:
            fh.write(_page(f"Links for {PROJECT}", links))
        with open(os.path.join(root, variant, "index.html"), "w") as fh:
            fh.write(_page("Simple index", [f'<a href="{PROJECT}/">{PROJECT}</a>']))
    with open(os.path.join(root, "index.html"), "w") as fh:
        fh.write(_page("mamba-ssm wheel variants", [f'<a href="{urllib.parse.quote(v)}/">{html.escape(v)}</a>'
                                                   for v in sorted(variants)]))
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


def build_index(root: str, add: Iterable[str] = (), pin: Optional[str] = None, move: bool = True) -> Manifest:
    """Gather the wheels under ``root`` plus ``add``, place them, write pages and the manifest.

    Wheels already at ``root/<label>/mamba-ssm/`` stay; others under ``root`` are moved there (copied
    with ``move=False``); ``add`` files are copied. Raises IndexError_ naming a bad wheel.
    """
    root = os.path.abspath(root)
    os.makedirs(root, exist_ok=True)
    found = []
    for dirpath, _dirs, files in os.walk(root):
        found += [(os.path.join(dirpath, f), True) for f in files
                  if f.endswith(".whl") and f.lower().startswith("mamba_ssm-")]
    found += [(os.path.abspath(p), False) for p in add]
    entries: Dict[str, WheelEntry] = {}
    rp: Dict[str, str] = {}
    for path, inside in found:
        meta: dict = {}
        entry = wheel_entry(path, meta)
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

    data = json.dumps({"wheels": {w.filename: {"sha256": w.sha256, "size": w.size} for w in manifest.wheels}},
                      indent=1, sort_keys=True).encode()
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
            info.size, info.mode, info.mtime = len(data), 0o644, int(max((m.mtime for m in members), default=0))
            dst.addfile(info, io.BytesIO(data))
    os.replace(tmp, sdist)
    return sdist
