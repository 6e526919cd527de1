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
          and mamba_ssm/_install/release_index.json (index URL, wheels URL, the manifest's sha256),
          and one wheel per [pypi] platform merged from the stable cells (build_matrix/pypi_wheel.py),
          carrying the same release_index.json

A Pages deploy replaces the whole site, so ``site`` rebuilds it from the index asset of every release
(each sdist keeps pointing at its own version's root). Steps (workflow jobs, in order):

* ``urls``: the version (the tag must be ``v<version>``), the index and wheels URLs (``KEY=value``
  lines for ``$GITHUB_OUTPUT``);
* ``index``: the wheels' manifest and PEP 503 pages for one release -> ``mamba-ssm-index.tar.gz``;
* ``site``: every release's index tarball -> the Pages tree (``v<version>/`` each, a top page);
* ``sdist``: the sdist, built after the index from a clean copy of the sources, both files inside;
* ``verify-pin``: fetch the deployed ``manifest.json``; its sha256 and every wheel's must be the ones
  in the sdist (the gate before trusted publishing).

``--dry-run --out DIR [--base-url URL]``: everything that does not need GitHub, for this machine's
platform: build + audit the stable cells of the PyPI wheel's modules (matrix.toml ``[pypi]``; the host
cell is one, ``build --host``) into ``DIR/cells/v<version>/``, ``DIR/releases/download/v<version>/``
(the Release assets: those cells and the index), ``DIR/pages/`` (the site, with every earlier dry-run
release in DIR), ``DIR/sdist/``, the PyPI wheel merged from the cells (``pypi_wheel``, audited) beside
them, and ``DIR/pypi/simple/mamba-ssm/`` (a PEP 503 page of the sdists and PyPI wheels, standing in for
PyPI). Serving DIR at URL (default ``http://127.0.0.1:8000/``) gives what a user reaches: ``pip install
--index-url URL/pypi/simple/ mamba-ssm`` (the PyPI wheel; ``--no-binary mamba-ssm``: the sdist and its
resolver).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import html
import json
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
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence

from .layout import REPO_ROOT

if TYPE_CHECKING:
    from .matrix import Cell

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
        meta: Dict[str, Any] = {}
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
            member = tf.extractfile(m)
            if member is None:
                raise ReleaseError(f"{tarball}: {m.name!r} cannot be read")
            files[m.name] = member.read()
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
            member = tf.extractfile(m) if m.isfile() and m.name.split("/", 1)[-1] == rel else None
            if member is not None:
                return member.read()
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
            with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310 - an http(s) or file index
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


def torch_venv_here(cell: Cell, python_minor: str = "3.11") -> Optional[Path]:
    """A venv under ``$MAMBA_DEV_HOME`` (``build.dev_torch_venvs``) whose torch can build the stable
    ``cell`` (``Cell.torch_mismatch``); so a dry run reuses a multi-GB torch already here instead of
    downloading it into the cell's venv. A torch the cell serves first, then the shared dev venv's (a
    CUDA torch of another major, for a stable CUDA cell), then any other."""
    from .build import dev_torch_venvs
    from .layout import SHARED_TORCH_VENV

    fits = [
        (v, version) for v, version in dev_torch_venvs(python_minor) if cell.torch_mismatch(version) is None
    ]
    fits.sort(key=lambda item: (not cell.serves_torch(item[1]), item[0] != SHARED_TORCH_VENV))
    return fits[0][0] if fits else None


def _build_cell(
    cell_id: Optional[str],
    out: Path,
    archs: str,
    version: str,
    torch_from: Optional[Path],
    say: Callable[[str], None],
) -> Path:
    """``python -m build_matrix build`` of one cell (``None``: the host cell) into ``out``; its wheel.
    ``ReleaseError`` with the build's last output when it fails or is refused."""
    cmd = [sys.executable, "-m", "build_matrix", "build"]
    cmd += ["--cell", cell_id] if cell_id else ["--host"]
    cmd += ([] if archs == "full" else ["--archs", archs]) + ["--out", str(out), "--version", version]
    if torch_from is not None:
        cmd += ["--torch-from", str(torch_from)]
    say(f"[release] build + audit {cell_id or 'the host cell'}: {' '.join(cmd[1:])}")
    proc = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ReleaseError(
            f"build {cell_id or '--host'} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}"
        )
    return Path(proc.stdout.strip().splitlines()[-1])


def dry_run(
    out: Path,
    base_url: str = "http://127.0.0.1:8000/",
    version: Optional[str] = None,
    archs: str = "90",
    wheel: Optional[Path] = None,
    say: Callable[[str], None] = print,
    modules: Optional[List[str]] = None,
    cell_wheels: Sequence[Path] = (),
    torch_from: Optional[Dict[str, Path]] = None,
) -> Dict[str, Any]:
    """Every release step that does not need GitHub, for this machine's platform, into ``out`` (module
    docstring): the cells of the PyPI wheel's ``modules`` (default: every ``[pypi]`` module; the host
    cell among them), the Release assets and index of those cells, the Pages site, the sdist, the PyPI
    wheel merged from the cells (``pypi_wheel.merge``, audited) beside them, and the PyPI stand-in
    page listing the sdist and that wheel. ``wheel``: the audited host cell wheel to use instead of
    building it; ``cell_wheels``: other cells' wheels built elsewhere; ``torch_from``: {family: venv}
    whose torch builds that family's cell (any torch build the stable cell serves)."""
    import platform as _platform

    from . import matrix as mx
    from . import pypi_wheel

    base_url = base_url if base_url.endswith("/") else base_url + "/"
    version = version or source_version()
    tag = f"v{version}"
    urls = {
        "version": version,
        "tag": tag,
        "index_url": f"{base_url}pages/{tag}/",
        "wheels_url": f"{base_url}releases/download/{tag}/",
    }
    plan = mx.load_plan()
    try:
        pw = plan.pypi_wheel(_platform.machine())
    except mx.MatrixError as exc:
        raise ReleaseError(str(exc)) from None
    families = [f for f, _ in pw.modules]
    wanted = list(modules) if modules else families
    bad = [m for m in wanted if m not in families]
    if bad or "cpu" not in wanted:
        raise ReleaseError(
            f"--modules {','.join(wanted)}: each must be one of the [pypi] modules {', '.join(families)}, cpu among them"
        )
    assets = out / "releases" / "download" / tag
    cells_dir = out / "cells" / tag
    from .tools import MissingTools, check_tools

    try:  # before the builds compile for minutes (each build checks them again, with its toolkit)
        check_tools()
    except MissingTools as exc:
        raise ReleaseError(f"build: {exc}") from None
    from .build import host_cell_id

    host_id = host_cell_id(plan)
    given: Dict[str, Path] = {}
    for w in [*cell_wheels, *([wheel] if wheel else [])]:
        fam = next(
            (
                f
                for f, cid in pw.modules
                if pypi_wheel._cell_wheel_problem(Path(w), plan.cell(cid), False) is None
            ),
            None,
        )
        if fam is None:
            raise ReleaseError(f"{Path(w).name} is the wheel of no [pypi] module's cell on {pw.platform}")
        given[fam] = Path(w)
    built: Dict[str, Path] = {}
    for fam in wanted:
        if fam in given:
            built[fam] = given[fam]
            continue
        cell_id = pw.cell_of(fam)
        venv = (torch_from or {}).get(fam)
        if venv is None and cell_id != host_id:
            venv = torch_venv_here(plan.cell(cell_id))
        built[fam] = _build_cell(
            None if cell_id == host_id and venv is None else cell_id, cells_dir, archs, version, venv, say
        )
    host_wheel = built.get(plan.cell(host_id).family) or next(iter(built.values()))
    shutil.rmtree(assets, ignore_errors=True)
    assets.mkdir(parents=True)
    for w in built.values():
        shutil.copyfile(w, assets / w.name)
    with tempfile.TemporaryDirectory(prefix="mamba-release-index-") as tmp:
        tarball = write_release_index(
            version, [assets / w.name for w in built.values()], urls["wheels_url"], Path(tmp)
        )
        shutil.copyfile(tarball, assets / INDEX_ASSET)
    say(f"[release] Release assets: {assets}")
    versions = assemble_site(out / "releases" / "download", out / "pages")
    say(f"[release] Pages tree: {out / 'pages'} (releases {', '.join(versions)})")
    sdist = build_release_sdist(assets / INDEX_ASSET, urls["index_url"], out / "sdist", version=version)
    missing = [f for f in families if f not in built]
    try:
        # built here, not in the manylinux_2_28 builder images: the cells carry this glibc's tag
        pypi = pypi_wheel.merge(
            pw,
            plan,
            built,
            cells_dir,
            pypi_wheel.sdist_release_index(sdist),
            allow_missing=missing,
            exact_tag=False,
        )
    except pypi_wheel.MergeError as exc:
        raise ReleaseError(f"the PyPI wheel: {exc}") from None
    from packaging.utils import parse_wheel_filename

    pw = dataclasses.replace(pw, platform_tag=next(iter(parse_wheel_filename(pypi.name)[3])).platform)
    report = pypi_wheel.audit_pypi_wheel(
        pypi, pw, plan, None if archs == "full" else archs, allow_missing=missing
    )
    if not report.ok:
        raise ReleaseError(f"the PyPI wheel {pypi.name} fails its audit:\n  " + "\n  ".join(report.findings))
    say(
        f"[release] PyPI wheel: {pypi} ({report.facts['size_mib']} MiB; modules {', '.join(built)}"
        + (f"; left out: {', '.join(missing)}" if missing else "")
        + ")"
    )
    (out / "pypi-wheels" / tag).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pypi, out / "pypi-wheels" / tag / pypi.name)
    write_pypi_page(
        sorted((out / "sdist").glob("mamba_ssm-*.tar.gz"))
        + sorted((out / "pypi-wheels").glob("*/mamba_ssm-*.whl")),
        out / "pypi",
    )
    say(f"[release] sdist: {sdist}; PyPI stand-in (the sdist and the PyPI wheel): {out / 'pypi' / 'simple'}")
    return dict(
        urls,
        sdist=str(sdist),
        wheel=str(assets / host_wheel.name),
        cells={fam: str(assets / w.name) for fam, w in built.items()},
        pypi_wheel=str(pypi),
        pypi_modules=list(built),
        pypi_missing=missing,
        pypi_audit=report.facts,
    )


# ------------------------------------------------------------------------------------------- CLI
def register(sub: Any) -> None:
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
    p.add_argument(
        "--archs",
        default="90",
        help="(--dry-run) CUDA archs of the CUDA cells (default 90, for time); 'full': each cell's own list "
        "(matrix.toml [[toolkit]] sass + ptx), as the release builds them",
    )
    p.add_argument("--wheel", type=Path, help="(--dry-run) an audited host wheel to use instead of building")
    p.add_argument(
        "--modules",
        help="(--dry-run) the PyPI wheel's modules to build, e.g. cpu,cu13 (default: every [pypi] module; "
        "one this machine cannot build must come from --cell-wheel)",
    )
    p.add_argument(
        "--cell-wheel",
        type=Path,
        action="append",
        default=[],
        help="(--dry-run) an audited stable cell's wheel built elsewhere (repeatable)",
    )
    p.add_argument(
        "--torch-from",
        action="append",
        default=[],
        metavar="FAMILY=VENV",
        help="(--dry-run) build that module's cell with this venv's torch (any build the stable cell serves, "
        "e.g. cu12=<venv with PyPI's torch 2.10.0, +cu128>)",
    )
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


def main(args: argparse.Namespace) -> int:
    try:
        if args.dry_run:
            if args.step or not args.out:
                raise ReleaseError("--dry-run takes --out DIR and no step")
            torch_from = {}
            for item in args.torch_from:
                fam, sep, venv = item.partition("=")
                if not sep or not venv:
                    raise ReleaseError(f"--torch-from {item!r} is not FAMILY=VENV (e.g. cu12=/path/to/venv)")
                torch_from[fam] = Path(venv)
            res = dry_run(
                args.out,
                args.base_url,
                args.version,
                args.archs,
                args.wheel,
                modules=[m for m in (args.modules or "").split(",") if m] or None,
                cell_wheels=args.cell_wheel,
                torch_from=torch_from,
            )
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
