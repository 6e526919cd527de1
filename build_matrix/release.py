"""``python -m build_matrix release``: the publishing steps of the release workflow, and all of them
at once on this machine (``--dry-run``).

Where a release puts things (``<index base>`` is one setting, ``vars.MAMBA_WHEEL_INDEX_BASE``,
default the repository's GitHub Pages URL ``https://<owner>.github.io/<repo>/``)::

    <server>/<owner>/<repo>/releases/download/v<version>/<wheel>     Release assets: every wheel, and
                                    mamba-ssm-index.tar.gz            this release's index (below)
    <index base>/v<version>/manifest.json                            GitHub Pages: per release, the
    <index base>/v<version>/<label>/mamba-ssm/index.html              manifest and the PEP 503 roots,
                                                                      linking to the Release assets
    PyPI: the sdist, carrying mamba_ssm/_install/pinned_hashes.json (every wheel's sha256 and size)
          and mamba_ssm/_install/release_index.json (index URL, wheels URL, the manifest's sha256)

A Pages deploy replaces the whole site, so ``site`` rebuilds it from the index asset of every release
(each sdist keeps pointing at its own version's root). Steps (workflow jobs, in order):

* ``urls``: the version (the tag must be ``v<version>``), the index and wheels URLs (``KEY=value``
  lines for ``$GITHUB_OUTPUT``);
* ``index``: the wheels' manifest and PEP 503 pages for one release -> ``mamba-ssm-index.tar.gz``;
* ``site``: every release's index tarball -> the Pages tree (``v<version>/`` each, a top page);
* ``sdist``: the sdist, built after the index from a clean copy of the sources, both files inside;
* ``verify-pin``: fetch the deployed ``manifest.json``; its sha256 and every wheel's must be the ones
  in the sdist (the gate before trusted publishing).

``--dry-run --out DIR [--base-url URL]``: everything that does not need GitHub, for the host cell:
build + audit the wheel (``build --host``), ``DIR/releases/download/v<version>/`` (the Release
assets), ``DIR/pages/`` (the site, with every earlier dry-run release in DIR), ``DIR/sdist/`` and
``DIR/pypi/simple/mamba-ssm/`` (a PEP 503 page of the sdists, standing in for PyPI). Serving DIR at
URL (default ``http://127.0.0.1:8000/``) gives what a user reaches: ``pip install --index-url
URL/pypi/simple/ mamba-ssm``.
"""

from __future__ import annotations

import hashlib
import html
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Dict, List, Optional

from ._compat_loader import REPO_ROOT

INDEX_ASSET = "mamba-ssm-index.tar.gz"
RELEASE_FILE = "release.json"  # inside an index tree: version, URLs
SDIST_RELEASE_FILE = "mamba_ssm/_install/release_index.json"
SDIST_PINS_FILE = "mamba_ssm/_install/pinned_hashes.json"
_VERSION_RE = re.compile(r'^__version__ = "([^"]+)"$', re.MULTILINE)


class ReleaseError(RuntimeError):
    """A release step cannot proceed; the message names the value and the fix."""


def source_version(root: Path = REPO_ROOT) -> str:
    """``__version__`` of ``mamba_ssm/_version.py`` (read as text: no import)."""
    m = _VERSION_RE.search((root / "mamba_ssm" / "_version.py").read_text())
    if not m:
        raise ReleaseError(f'{root}/mamba_ssm/_version.py has no __version__ = "..." line')
    return m.group(1)


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------------------ urls
def pages_url(repository: str) -> str:
    """GitHub Pages URL of ``owner/repo``: ``https://<owner lowercased>.github.io/<repo>/`` (the bare
    host for the ``<owner>.github.io`` repository itself)."""
    owner, _, repo = repository.partition("/")
    if not owner or not repo:
        raise ReleaseError(f"repository {repository!r} is not OWNER/REPO")
    host = f"{owner.lower()}.github.io"
    return f"https://{host}/" if repo.lower() == host else f"https://{host}/{repo}/"


def release_urls(
    repository: str,
    server_url: str = "https://github.com",
    index_base: str = "",
    ref: str = "",
    version: Optional[str] = None,
) -> Dict[str, str]:
    """The release's version, tag, index URL (``<index base>/v<version>/``) and wheels URL (the tag's
    Release assets). ``ReleaseError`` when a tag ``ref`` is not ``v<version>``."""
    version = version or source_version()
    tag = f"v{version}"
    if ref.startswith("refs/tags/") and ref[len("refs/tags/") :] != tag:
        raise ReleaseError(
            f"the tag {ref[len('refs/tags/') :]!r} is not v + the package version ({tag}, from "
            f"mamba_ssm/_version.py): tag the commit whose _version.py says the release's version"
        )
    base = (index_base or "").strip() or pages_url(repository)
    base = base if base.endswith("/") else base + "/"
    return {
        "version": version,
        "tag": tag,
        "index_url": f"{base}{tag}/",
        "wheels_url": f"{server_url.rstrip('/')}/{repository}/releases/download/{tag}/",
    }


# ----------------------------------------------------------------------------------------- index
def write_release_index(version: str, wheels: List[Path], wheels_url: str, out: Path) -> Path:
    """The index of one release: ``out/tree/`` (manifest.json, PEP 503 pages whose links point at
    ``wheels_url``, release.json) and ``out/mamba-ssm-index.tar.gz`` of it. Returns the tarball.
    ``ReleaseError`` when a wheel is of another version."""
    from packaging.version import Version

    from .index import wheel_entry, write_index

    tree = out / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    entries, requires = [], {}
    for w in sorted(wheels):
        meta: dict = {}
        entry = wheel_entry(str(w), meta)
        if Version(entry.version).public != Version(version).public:
            raise ReleaseError(f"{w.name} is version {entry.version}, the release is {version}")
        entries.append(entry)
        if meta.get("requires_python"):
            requires[entry.filename] = meta["requires_python"]
    if not entries:
        raise ReleaseError("no wheels for the index")
    write_index(str(tree), entries, requires, file_base=wheels_url)
    manifest_sha = _sha256_bytes((tree / "manifest.json").read_bytes())
    (tree / RELEASE_FILE).write_text(
        json.dumps(
            {"version": version, "wheels_url": wheels_url, "manifest_sha256": manifest_sha},
            indent=1,
            sort_keys=True,
        )
        + "\n"
    )
    tarball = out / INDEX_ASSET
    with tarfile.open(tarball, "w:gz") as tf:
        for p in sorted(tree.rglob("*")):
            tf.add(p, arcname=str(p.relative_to(tree)), recursive=False)
    return tarball


def _read_index_tar(tarball: Path) -> Dict[str, bytes]:
    """The files of an index tarball (plain relative names only: anything else is refused)."""
    files = {}
    with tarfile.open(tarball, "r:gz") as tf:
        for m in tf.getmembers():
            if m.isdir():
                continue
            parts = Path(m.name).parts
            if not m.isfile() or m.name.startswith("/") or ".." in parts:
                raise ReleaseError(f"{tarball}: unsafe member {m.name!r}")
            files[m.name] = tf.extractfile(m).read()
    for need in ("manifest.json", RELEASE_FILE):
        if need not in files:
            raise ReleaseError(f"{tarball}: no {need} (not a {INDEX_ASSET})")
    return files


def assemble_site(indexes: Path, out: Path) -> List[str]:
    """The Pages tree from every ``mamba-ssm-index.tar.gz`` under ``indexes``: ``out/v<version>/``
    each, a top ``index.html`` linking them, ``.nojekyll``. Returns the versions, newest first."""
    from packaging.version import Version

    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    versions = []
    for tarball in sorted(indexes.rglob(INDEX_ASSET)):
        files = _read_index_tar(tarball)
        version = json.loads(files[RELEASE_FILE])["version"]
        if version in versions:
            raise ReleaseError(f"two index assets for version {version} ({tarball})")
        versions.append(version)
        for name, data in files.items():
            dest = out / f"v{version}" / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
    versions.sort(key=Version, reverse=True)
    links = "\n".join(f'    <a href="v{html.escape(v)}/">v{html.escape(v)}</a><br/>' for v in versions)
    (out / "index.html").write_text(
        "<!DOCTYPE html>\n<html>\n  <head><title>mamba-ssm wheel indexes</title></head>\n  <body>\n"
        f"{links}\n  </body>\n</html>\n"
    )
    (out / ".nojekyll").write_text("")
    return versions


# ----------------------------------------------------------------------------------------- sdist
def build_release_sdist(index_tar: Path, index_url: str, out: Path, version: Optional[str] = None) -> Path:
    """The sdist, built from a clean copy of the sources after the index, with the wheels' pins and
    ``release_index.json`` (index URL, wheels URL, the manifest's sha256) inside. ``version``
    replaces ``_version.py``'s (dry runs). Returns the .tar.gz."""
    from mamba_ssm._install.manifest import Manifest

    from .sdist_check import build_sdist

    files = _read_index_tar(index_tar)
    release = json.loads(files[RELEASE_FILE])
    manifest = Manifest.from_json(files["manifest.json"].decode(), source=str(index_tar))
    pins = {"wheels": {w.filename: {"sha256": w.sha256, "size": w.size} for w in manifest.wheels}}
    record = {
        "index_url": index_url,
        "wheels_url": release["wheels_url"],
        "manifest_sha256": release["manifest_sha256"],
        "version": release["version"],
    }
    extra = {
        SDIST_PINS_FILE: json.dumps(pins, indent=1, sort_keys=True) + "\n",
        SDIST_RELEASE_FILE: json.dumps(record, indent=1, sort_keys=True) + "\n",
    }
    if version:
        extra["mamba_ssm/_version.py"] = _VERSION_RE.sub(
            f'__version__ = "{version}"', (REPO_ROOT / "mamba_ssm" / "_version.py").read_text()
        )
    with tempfile.TemporaryDirectory(prefix="mamba-release-sdist-") as work:
        sdist = build_sdist(Path(work), extra_files=extra)
        out.mkdir(parents=True, exist_ok=True)
        dest = out / sdist.name
        shutil.copyfile(sdist, dest)
    return dest


def _sdist_member(sdist: Path, rel: str) -> bytes:
    with tarfile.open(sdist, "r:gz") as tf:
        for m in tf.getmembers():
            if m.isfile() and m.name.split("/", 1)[-1] == rel:
                return tf.extractfile(m).read()
    raise ReleaseError(f"{sdist} has no {rel}: it was not built by `release sdist`")


def verify_pin(sdist: Path, index_url: str, retries: int = 0, delay: float = 15.0) -> str:
    """Fetch ``<index_url>manifest.json`` (retrying: a Pages deploy takes a while to show) and check
    it is the one pinned into ``sdist``: same URL recorded, same sha256, every wheel's sha256 and size.
    Returns a one-line summary; ``ReleaseError`` naming the difference."""
    from mamba_ssm._install.manifest import Manifest

    record = json.loads(_sdist_member(sdist, SDIST_RELEASE_FILE))
    pins = json.loads(_sdist_member(sdist, SDIST_PINS_FILE))["wheels"]
    index_url = index_url if index_url.endswith("/") else index_url + "/"
    if record["index_url"] != index_url:
        raise ReleaseError(f"{sdist.name} records the index {record['index_url']}, not {index_url}")
    url = index_url + "manifest.json"
    for attempt in range(retries + 1):
        try:
            with urllib.request.urlopen(url, timeout=30) as resp:
                raw = resp.read()
        except OSError as exc:
            why = f"{url}: {exc}"
        else:
            got = _sha256_bytes(raw)
            if got == record["manifest_sha256"]:
                break
            why = f"{url} has sha256 {got}, the sdist pins {record['manifest_sha256']}"
        if attempt < retries:
            time.sleep(delay)
    else:
        raise ReleaseError(f"the deployed manifest is not the pinned one: {why}")
    manifest = Manifest.from_json(raw.decode(), source=url)
    served = {w.filename: {"sha256": w.sha256, "size": w.size} for w in manifest.wheels}
    if served != pins:
        raise ReleaseError(
            f"the manifest's wheels differ from the sdist's pins: "
            f"{sorted(set(served) ^ set(pins)) or 'same names, other hashes'}"
        )
    return f"verify-pin: {url} (sha256 {record['manifest_sha256'][:16]}...) matches {sdist.name}: {len(pins)} wheels"


# --------------------------------------------------------------------------------------- dry run
def write_pypi_page(sdists: List[Path], root: Path) -> Path:
    """``root/simple/mamba-ssm/index.html`` (PEP 503) listing ``sdists`` (copied next to it)."""
    proj = root / "simple" / "mamba-ssm"
    proj.mkdir(parents=True, exist_ok=True)
    links = []
    for s in sorted(sdists):
        if s.parent != proj:
            shutil.copyfile(s, proj / s.name)
        digest = _sha256_bytes((proj / s.name).read_bytes())
        links.append(
            f'    <a href="{urllib.parse.quote(s.name)}#sha256={digest}">{html.escape(s.name)}</a><br/>'
        )
    (proj / "index.html").write_text(
        "<!DOCTYPE html>\n<html>\n  <body>\n" + "\n".join(links) + "\n  </body>\n</html>\n"
    )
    (root / "simple" / "index.html").write_text(
        '<!DOCTYPE html>\n<html><body><a href="mamba-ssm/">mamba-ssm</a></body></html>\n'
    )
    return proj


def dry_run(
    out: Path,
    base_url: str = "http://127.0.0.1:8000/",
    version: Optional[str] = None,
    archs: str = "90",
    wheel: Optional[Path] = None,
    say=print,
) -> Dict[str, str]:
    """Every release step that does not need GitHub, for the host cell, into ``out`` (module
    docstring). ``wheel``: use this audited host wheel instead of building (its version must match)."""
    base_url = base_url if base_url.endswith("/") else base_url + "/"
    version = version or source_version()
    tag = f"v{version}"
    urls = {
        "version": version,
        "tag": tag,
        "index_url": f"{base_url}pages/{tag}/",
        "wheels_url": f"{base_url}releases/download/{tag}/",
    }
    assets = out / "releases" / "download" / tag
    if wheel is None:
        from .tools import MissingTools, check_tools

        try:  # before the build compiles for minutes (the build checks them again, with its toolkit)
            check_tools()
        except MissingTools as exc:
            raise ReleaseError(f"build --host: {exc}") from None
        cells = out / "cells" / tag
        cmd = [
            sys.executable,
            "-m",
            "build_matrix",
            "build",
            "--host",
            "--archs",
            archs,
            "--out",
            str(cells),
            "--version",
            version,
        ]
        say(f"[release] build + audit the host cell: {' '.join(cmd[1:])}")
        proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ReleaseError(
                f"build --host failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}"
            )
        wheel = Path(proc.stdout.strip().splitlines()[-1])
    shutil.rmtree(assets, ignore_errors=True)
    assets.mkdir(parents=True)
    shutil.copyfile(wheel, assets / Path(wheel).name)
    with tempfile.TemporaryDirectory(prefix="mamba-release-index-") as tmp:
        tarball = write_release_index(version, [assets / Path(wheel).name], urls["wheels_url"], Path(tmp))
        shutil.copyfile(tarball, assets / INDEX_ASSET)
    say(f"[release] Release assets: {assets}")
    versions = assemble_site(out / "releases" / "download", out / "pages")
    say(f"[release] Pages tree: {out / 'pages'} (releases {', '.join(versions)})")
    sdist = build_release_sdist(assets / INDEX_ASSET, urls["index_url"], out / "sdist", version=version)
    write_pypi_page(sorted((out / "sdist").glob("mamba_ssm-*.tar.gz")), out / "pypi")
    say(f"[release] sdist: {sdist}; PyPI stand-in: {out / 'pypi' / 'simple'}")
    return dict(urls, sdist=str(sdist), wheel=str(assets / Path(wheel).name))


# ------------------------------------------------------------------------------------------- CLI
def register(sub) -> None:
    p = sub.add_parser(
        "release",
        help="the release's publishing steps (urls, index, site, sdist, verify-pin) "
        "or all of them here (--dry-run)",
    )
    p.add_argument("--dry-run", action="store_true", help="everything not needing GitHub, for the host cell")
    p.add_argument("--out", type=Path, help="(--dry-run) the folder to serve")
    p.add_argument(
        "--base-url", default="http://127.0.0.1:8000/", help="(--dry-run) where --out will be served"
    )
    p.add_argument("--version", help="(--dry-run) the release's version (default: mamba_ssm/_version.py)")
    p.add_argument("--archs", default="90", help="(--dry-run) CUDA archs of the host build (default 90)")
    p.add_argument("--wheel", type=Path, help="(--dry-run) an audited host wheel to use instead of building")
    steps = p.add_subparsers(dest="step")
    s = steps.add_parser("urls", help="KEY=value lines: version, tag, index_url, wheels_url")
    s.add_argument("--repository", required=True, help="OWNER/REPO")
    s.add_argument("--server-url", default="https://github.com")
    s.add_argument("--index-base", default="", help="the index base URL (default: the Pages URL)")
    s.add_argument("--ref", default="", help="GITHUB_REF (a tag must be v<version>)")
    s = steps.add_parser("index", help="one release's manifest + PEP 503 pages -> mamba-ssm-index.tar.gz")
    s.add_argument("--version", required=True)
    s.add_argument("--wheels", type=Path, required=True, help="folder of the release's wheels")
    s.add_argument("--wheels-url", required=True, help="where the wheels are served (the Release assets)")
    s.add_argument("--out", type=Path, required=True)
    s = steps.add_parser("site", help="every release's index tarball -> the Pages tree")
    s.add_argument("indexes", type=Path)
    s.add_argument("--out", type=Path, required=True)
    s = steps.add_parser("sdist", help="the sdist with the pins and the index URLs, built after the index")
    s.add_argument("--index", type=Path, required=True, help="this release's mamba-ssm-index.tar.gz")
    s.add_argument("--index-url", required=True)
    s.add_argument("--out", type=Path, required=True)
    s = steps.add_parser("verify-pin", help="the deployed manifest is the one pinned into the sdist")
    s.add_argument("sdist", type=Path)
    s.add_argument("--index-url", required=True)
    s.add_argument("--retries", type=int, default=0)
    p.set_defaults(func=main)


def main(args) -> int:
    try:
        if args.dry_run:
            if args.step or not args.out:
                raise ReleaseError("--dry-run takes --out DIR and no step")
            res = dry_run(args.out, args.base_url, args.version, args.archs, args.wheel)
            print(json.dumps(res, indent=1))
        elif args.step == "urls":
            for k, v in release_urls(args.repository, args.server_url, args.index_base, args.ref).items():
                print(f"{k}={v}")
        elif args.step == "index":
            wheels = sorted(args.wheels.glob("mamba_ssm-*.whl"))
            print(write_release_index(args.version, wheels, args.wheels_url, args.out))
        elif args.step == "site":
            print("site: " + ", ".join(assemble_site(args.indexes, args.out)))
        elif args.step == "sdist":
            print(build_release_sdist(args.index, args.index_url, args.out))
        elif args.step == "verify-pin":
            print(verify_pin(args.sdist, args.index_url, args.retries))
        else:
            raise ReleaseError("give a step (urls, index, site, sdist, verify-pin) or --dry-run --out DIR")
    except ReleaseError as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1
    return 0
