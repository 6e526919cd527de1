"""Give a verified index wheel the version pip expects from the sdist being built.

Why: index wheels carry the variant in their local version label, in the file name and METADATA alike
(``mamba_ssm-2.4.0+cu13torch2.14cxx11abitrue-...whl``). pip accepts such a wheel when our sdist's
build returns it, and stores it in its wheel cache under the sdist's link. The next time pip resolves
that sdist by name (another venv, a reinstall), it takes the cached wheel and checks its metadata
against the sdist's version, and refuses it::

    Discarding file:///.../mamba_ssm-2.4.0.tar.gz: Requested mamba-ssm==2.4.0 from
    .../pip/wheels/.../mamba_ssm-2.4.0+cu13torch2.14cxx11abitrue-...whl has inconsistent version:
    expected '2.4.0', but metadata has '2.4.0+cu13torch2.14cxx11abitrue'
    ERROR: No matching distribution found for mamba-ssm==2.4.0

(reproduced with pip 23.2.1 and 26.3; uv 0.13 accepts either). So by default (``MAMBA_PREBUILT_LABEL``
unset or ``sdist``) the wheel handed to pip carries exactly the sdist's version: only the dist-info
folder name, METADATA's ``Version:`` line and RECORD change, every file of the package stays
byte-identical (same RECORD hashes), and ``<dist-info>/mamba_ssm_variant.json`` names the index wheel
and its sha256. ``MAMBA_PREBUILT_LABEL=keep`` hands over the index wheel unchanged (uv, or a pip run
with ``--no-cache-dir``). A cached wheel that later lands in a venv with another torch is caught by the
loader's compatibility rule (the build info inside ``_C``), and doctor names the fix.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import tempfile
import zipfile
from typing import Optional

from packaging.utils import parse_wheel_filename
from packaging.version import Version

__all__ = ["VARIANT_FILE", "relabel_wheel"]

VARIANT_FILE = "mamba_ssm_variant.json"


def _hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def relabel_wheel(src: str, version: str, out_dir: str, sha256: Optional[str] = None) -> str:
    """Write a copy of wheel ``src`` whose version is ``version`` (e.g. ``"2.4.0.dev0"``) into
    ``out_dir`` and return its path; returns ``src`` itself when the versions already agree.

    Raises ValueError naming the wheel when it has no METADATA/RECORD or a malformed name.
    """
    name = os.path.basename(src)
    _dist, old, build, _tags = parse_wheel_filename(name)
    new = Version(version)
    if new == old and str(new) == str(old):
        return src
    parts = name[:-4].split("-")
    dist_part = parts[0]
    tag_part = "-".join(parts[-3:])
    new_name = f"{dist_part}-{new}-{tag_part}.whl"
    if build:
        new_name = f"{dist_part}-{new}-{parts[2]}-{tag_part}.whl"
    old_di, new_di = f"{dist_part}-{parts[1]}.dist-info", f"{dist_part}-{new}.dist-info"
    os.makedirs(out_dir, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{new_name}.", suffix=".part", dir=out_dir)
    os.close(fd)
    try:
        with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w") as zout:
            infos = zin.infolist()
            names = [i.filename for i in infos]
            if f"{old_di}/METADATA" not in names or f"{old_di}/RECORD" not in names:
                raise ValueError(f"{src}: no {old_di}/METADATA or RECORD; not a wheel of version {old}")
            rows = []
            for info in infos:
                data = zin.read(info.filename)
                path = info.filename
                if path.startswith(old_di + "/"):
                    path = new_di + path[len(old_di) :]
                if path == f"{new_di}/RECORD":
                    continue
                if path == f"{new_di}/METADATA":
                    lines = data.decode("utf-8").split("\n")
                    for i, line in enumerate(lines):
                        if line.startswith("Version:"):
                            lines[i] = f"Version: {new}"
                            break
                        if not line.strip():  # end of the header block
                            raise ValueError(f"{src}: METADATA has no Version header")
                    data = "\n".join(lines).encode("utf-8")
                out = zipfile.ZipInfo(path, info.date_time)
                # each member keeps the index wheel's compression (deflated stays deflated): the
                # installer's wheel cache keeps this copy, and stored it was 3x the index wheel's size
                out.compress_type, out.external_attr = info.compress_type, info.external_attr
                zout.writestr(out, data)
                if not path.endswith("/"):  # directory entries (auditwheel writes them) are not RECORD rows
                    rows.append([path, _hash(data), str(len(data))])
            variant = json.dumps(
                {"index_wheel": name, "sha256": sha256, "version": str(old), "installed_as": str(new)},
                indent=1,
                sort_keys=True,
            ).encode()
            vinfo = zipfile.ZipInfo(f"{new_di}/{VARIANT_FILE}", infos[0].date_time)
            vinfo.compress_type, vinfo.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
            zout.writestr(vinfo, variant)
            rows.append([vinfo.filename, _hash(variant), str(len(variant))])
            rows.append([f"{new_di}/RECORD", "", ""])
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows(rows)
            rinfo = zipfile.ZipInfo(f"{new_di}/RECORD", infos[0].date_time)
            rinfo.compress_type, rinfo.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
            zout.writestr(rinfo, buf.getvalue())
        dest = os.path.join(out_dir, new_name)
        os.replace(tmp, dest)
        return dest
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
