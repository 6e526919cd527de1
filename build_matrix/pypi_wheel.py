"""``python -m build_matrix pypi-wheel``: the wheel PyPI serves for one platform (matrix.toml ``[pypi]``),
merged from the stable-ABI cells' audited wheels, and its audit.

The merged wheel ``mamba_ssm-<version>-cp310-abi3-manylinux_2_28_<arch>.whl`` (no local version label)
holds the cells' Python files (identical in every cell: they are built from one source tree), no
top-level ``mamba_ssm/_C*.so``, and one compiled module per ``[pypi] modules`` family::

    mamba_ssm/_kernels/cpu/_C.abi3.so     <- the cputorch<floor>stable-<arch> cell's mamba_ssm/_C.abi3.so
    mamba_ssm/_kernels/cu12/_C.abi3.so    <- cu12torch<floor>stable-<arch>
    mamba_ssm/_kernels/cu13/_C.abi3.so    <- cu13torch<floor>stable-<arch>

each unchanged (its embedded build info and device code are the cell's), plus
``mamba_ssm/_install/release_index.json`` copied byte for byte from the release's sdist (so ``python -m
mamba_ssm install-kernels`` reaches the same index from a wheel install). METADATA is the cells' (they
must agree; ``Requires-Dist: torch>=<floor>`` and the package's other dependencies, as setup.py declares
them) with the public version; WHEEL is the cells' (tag ``cp310-abi3-<platform tag>``). The ``wheel``
package writes the archive and its RECORD, and reads the cells' wheels checking their RECORD hashes.

A cell wheel that grafted a library (``*.libs/``) is refused: a module moved under ``_kernels/<family>/``
would lose its ``$ORIGIN`` RPATH, and torch brings every library the modules need.

The audit (also after every merge): file name and tags, METADATA / WHEEL / RECORD, exactly the
modules' shared objects, per module the cell audit's device-code (cuobjdump / the ELF fat binary),
build-info and stable-ABI symbol checks, its DT_NEEDED (``libcudart.so.<major>`` for a CUDA module,
no CUDA library for the CPU one, no RPATH into the wheel), ``auditwheel show`` (the manylinux tag, only
libraries torch provides), ``abi3audit`` and the size budget (``[pypi] size_budget_mib``).
"""

from __future__ import annotations

import argparse
import calendar
import dataclasses
import json
import os
import re
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import Version

from mamba_ssm._install.record import INSTALL_ID_FILE

from . import matrix as mx
from .audit import AuditReport

KERNELS_DIR = "mamba_ssm/_kernels"
MODULE_NAME = "_C.abi3.so"
RELEASE_INDEX = "mamba_ssm/_install/release_index.json"
_TOP_SO = re.compile(r"^mamba_ssm/_C[^/]*\.so$")


class MergeError(Exception):
    """The cells' wheels cannot be merged; the message names the file, the value and the fix."""


def module_path(family: str) -> str:
    """``mamba_ssm/_kernels/<family>/_C.abi3.so``."""
    return f"{KERNELS_DIR}/{family}/{MODULE_NAME}"


# ------------------------------------------------------------------------------------ cell wheels
def _cell_wheel_problem(path: Path, cell: mx.Cell, exact_tag: bool = True) -> Optional[str]:
    """Why ``path`` is not a wheel of ``cell`` (its local label and platform tag), or None.
    ``exact_tag=False``: any manylinux tag of the cell's platform (a build outside the builder images,
    e.g. ``manylinux_2_34`` on a newer glibc)."""
    try:
        name, version, build, tags = parse_wheel_filename(path.name)
    except InvalidWheelFilename as exc:
        return f"{path.name} is not a wheel file name ({exc})"
    if name != "mamba-ssm" or build:
        return f"{path.name} is not a mamba-ssm wheel without a build tag"
    if (version.local or "") != cell.label.lower():
        return (
            f"{path.name} has the local label {version.local!r}, cell {cell.id} builds {cell.label.lower()!r}"
        )
    want = f"{cell.python_tag}-{cell.abi_tag}-{cell.platform_tag}"
    got = sorted(str(t) for t in tags)
    if exact_tag and got != [want]:
        return f"{path.name} is tagged {got}, cell {cell.id} is {want}"
    pattern = rf"{cell.python_tag}-{cell.abi_tag}-manylinux_\d+_\d+_{cell.platform}"
    if not exact_tag and (len(got) != 1 or not re.fullmatch(pattern, got[0])):
        return f"{path.name} is tagged {got}, not one manylinux tag of cell {cell.id} ({cell.platform})"
    return None


def find_cell_wheels(
    pw: mx.PypiWheel, plan: mx.Plan, folder: Path, version: Optional[str] = None, exact_tag: bool = True
) -> Dict[str, Path]:
    """{family: cell wheel} for every module of ``pw`` found in ``folder`` (of ``version``'s public
    version when given). ``MergeError`` when a folder holds two wheels of one cell."""
    found: Dict[str, Path] = {}
    for fam, cell_id in pw.modules:
        cell = plan.cell(cell_id)
        hits = []
        for p in sorted(folder.glob("mamba_ssm-*.whl")):
            if _cell_wheel_problem(p, cell, exact_tag) is None and (
                version is None or parse_wheel_filename(p.name)[1].public == Version(version).public
            ):
                hits.append(p)
        if len(hits) > 1:
            raise MergeError(
                f"{folder} holds {len(hits)} wheels of cell {cell_id}: {', '.join(h.name for h in hits)}; "
                "keep the one of this release"
            )
        if hits:
            found[fam] = hits[0]
    return found


def _read_wheel(path: Path) -> Tuple[Dict[str, Tuple[zipfile.ZipInfo, bytes]], str]:
    """{name: (zip info, bytes)} of every member (RECORD hashes checked by ``wheel``) and the
    ``.dist-info`` directory. ``MergeError`` naming the file when it is not a valid wheel."""
    from wheel.wheelfile import WheelError, WheelFile

    try:
        with WheelFile(path) as wf:
            members = {i.filename: (i, wf.read(i.filename)) for i in wf.infolist() if not i.is_dir()}
            return members, wf.dist_info_path
    except (WheelError, zipfile.BadZipFile, OSError, KeyError) as exc:
        raise MergeError(f"{path} is not a valid wheel (RECORD checked): {exc}") from None


def _requires_dist(metadata: bytes) -> List[str]:
    from packaging.metadata import Metadata

    meta = Metadata.from_email(metadata, validate=False)
    return sorted(str(r) for r in (meta.requires_dist or []))


def _torch_floor_problem(requires: Sequence[str], floor: str) -> Optional[str]:
    """Why ``requires`` (Requires-Dist) is not exactly one ``torch>=<floor>`` (None when it is)."""
    torch = []
    for r in requires:
        try:
            req = Requirement(r)
        except InvalidRequirement:
            return f"Requires-Dist {r!r} does not parse"
        if req.name == "torch":
            torch.append(req)
    if len(torch) != 1 or torch[0].specifier != SpecifierSet(f">={floor}") or torch[0].marker:
        return f"Requires-Dist on torch is {[str(t) for t in torch]}, the stable-ABI floor says ['torch>={floor}']"
    return None


def _public_metadata(metadata: bytes, public: str) -> bytes:
    """METADATA with its ``Version`` header set to ``public`` (only that line changes)."""
    head, sep, body = metadata.partition(b"\n\n")
    lines = head.split(b"\n")
    hits = [i for i, line in enumerate(lines) if line.lower().startswith(b"version:")]
    if len(hits) != 1:
        raise MergeError(f"METADATA has {len(hits)} Version headers, expected one")
    lines[hits[0]] = b"Version: " + public.encode()
    return b"\n".join(lines) + sep + body


def merge(
    pw: mx.PypiWheel,
    plan: mx.Plan,
    cell_wheels: Dict[str, Path],
    out_dir: Path,
    release_index: Optional[bytes] = None,
    allow_missing: Sequence[str] = (),
    exact_tag: bool = True,
) -> Path:
    """Merge the cells' wheels (``{family: path}``) into the PyPI wheel of ``pw`` in ``out_dir``
    (module docstring); returns its path. ``release_index``: the bytes of the sdist's
    ``release_index.json``. ``allow_missing``: families left out (a dry run on a machine that cannot
    build them); every other module must be given. ``exact_tag=False``: the cells may carry another
    manylinux tag than ``[platforms]``'s (built outside the builder images; the merged wheel then carries
    theirs, which must be one). Raises ``MergeError`` naming the wheel and value."""
    from wheel.wheelfile import WheelFile

    want = [fam for fam, _ in pw.modules]
    unknown = sorted(set(cell_wheels) - set(want))
    missing = [f for f in want if f not in cell_wheels and f not in allow_missing]
    if unknown:
        raise MergeError(f"no [pypi] module {unknown} on {pw.platform} (modules: {', '.join(want)})")
    if missing:
        raise MergeError(
            f"no cell wheel for module(s) {', '.join(missing)} of the {pw.platform} PyPI wheel: build "
            + ", ".join(f"`python -m build_matrix build --cell {pw.cell_of(f)}`" for f in missing)
        )
    if "cpu" not in cell_wheels:
        raise MergeError("the CPU module is required (CPU and ROCm torch builds load it)")
    order = [f for f in want if f in cell_wheels]
    read: Dict[str, Tuple[Dict[str, Tuple[zipfile.ZipInfo, bytes]], str]] = {}
    publics, platform_tags = set(), set()
    for fam in order:
        path = Path(cell_wheels[fam])
        why = _cell_wheel_problem(path, plan.cell(pw.cell_of(fam)), exact_tag)
        if why:
            raise MergeError(f"module {fam}: {why}")
        _n, version, _b, file_tags = parse_wheel_filename(path.name)
        publics.add(version.public)
        platform_tags.add(next(iter(file_tags)).platform)
        read[fam] = _read_wheel(path)
    if len(publics) != 1:
        raise MergeError(
            f"the cells' wheels are of different versions {sorted(publics)}: build them from one tree"
        )
    if len(platform_tags) != 1:
        raise MergeError(f"the cells' wheels carry different platform tags {sorted(platform_tags)}")
    public = publics.pop()
    pw = dataclasses.replace(pw, platform_tag=platform_tags.pop())

    base_members, base_info = read["cpu"]
    base_files: Dict[str, Tuple[zipfile.ZipInfo, bytes]] = {}
    sos: Dict[str, Tuple[zipfile.ZipInfo, bytes]] = {}
    for fam in order:
        members, info = read[fam]
        name = cell_wheels[fam].name
        tops = [n for n in members if _TOP_SO.match(n)]
        others = [n for n in members if n.endswith(".so") or ".so." in n.rsplit("/", 1)[-1]]
        others = [n for n in others if n not in tops]
        if len(tops) != 1 or others:
            raise MergeError(
                f"{name}: expected one mamba_ssm/_C*.so and no other shared object, found {tops + others}"
                + (
                    " (a library grafted by auditwheel repair: torch brings it; repair with --exclude)"
                    if others
                    else ""
                )
            )
        sos[fam] = members[tops[0]]
        files = {n: v for n, v in members.items() if n != tops[0] and not n.startswith(info + "/")}
        if fam == "cpu":
            base_files = files
            continue
        differ = sorted(
            n
            for n in set(files) | set(base_files)
            if n not in files or n not in base_files or files[n][1] != base_files[n][1]
        )
        if differ:
            raise MergeError(
                f"{name} and {cell_wheels['cpu'].name} differ in {differ[:5]}: the cells must be built from "
                "one source tree (same commit and --version)"
            )
    meta: Dict[str, bytes] = {}
    for fam in order:
        members, info = read[fam]
        meta[fam] = members[f"{info}/METADATA"][1]
        wheel_txt = members[f"{info}/WHEEL"][1].decode()
        tags = sorted(
            line.split(":", 1)[1].strip() for line in wheel_txt.splitlines() if line.startswith("Tag:")
        )
        if tags != [pw.tags] or "Root-Is-Purelib: false" not in wheel_txt:
            raise MergeError(
                f"{cell_wheels[fam].name}: WHEEL says Tag {tags} (Root-Is-Purelib false expected), the "
                f"PyPI wheel is {pw.tags}"
            )
    requires = {fam: _requires_dist(m) for fam, m in meta.items()}
    if len({tuple(r) for r in requires.values()}) != 1:
        raise MergeError(f"the cells' Requires-Dist differ: {requires}: build them from one tree")
    why = _torch_floor_problem(requires["cpu"], pw.torch_floor)
    if why:
        raise MergeError(why)
    metadata = _public_metadata(meta["cpu"], public)

    out_dir.mkdir(parents=True, exist_ok=True)
    dest = out_dir / pw.filename(public)
    dist_info = f"mamba_ssm-{public}.dist-info"
    if release_index is not None:
        index_info = zipfile.ZipInfo(RELEASE_INDEX, date_time=next(iter(base_files.values()))[0].date_time)
        index_info.external_attr = 0o644 << 16
        base_files[RELEASE_INDEX] = (index_info, release_index)
    # written under its final name (WheelFile names the dist-info and RECORD after it) in a private
    # folder, then renamed into place: a reader of out_dir never sees a partial wheel
    # RECORD gets the newest member's time stamp (wheel reads SOURCE_DATE_EPOCH), so the same cells give
    # the same bytes
    newest = max(zi.date_time for zi, _ in [*base_files.values(), *sos.values()])
    saved = os.environ.get("SOURCE_DATE_EPOCH")
    os.environ["SOURCE_DATE_EPOCH"] = str(calendar.timegm((*newest, 0, 0, 0)))
    with tempfile.TemporaryDirectory(prefix=".pypi-wheel-", dir=out_dir) as work:
        part = Path(work) / dest.name
        try:
            with WheelFile(part, "w") as wf:
                for name in sorted(base_files):
                    zi, data = base_files[name]
                    wf.writestr(_copy_info(zi, name), data)
                for fam in order:
                    zi, data = sos[fam]
                    wf.writestr(_copy_info(zi, module_path(fam)), data)
                for name, (zi, data) in sorted(base_members.items()):
                    # the cell's install id (setup.py's, one per built wheel) describes no install of this one
                    if not name.startswith(base_info + "/") or name in (
                        f"{base_info}/RECORD",
                        f"{base_info}/{INSTALL_ID_FILE}",
                    ):
                        continue
                    rel = name[len(base_info) + 1 :]
                    wf.writestr(_copy_info(zi, f"{dist_info}/{rel}"), metadata if rel == "METADATA" else data)
        finally:
            if saved is None:
                os.environ.pop("SOURCE_DATE_EPOCH", None)
            else:
                os.environ["SOURCE_DATE_EPOCH"] = saved
        part.replace(dest)
    return dest


def _copy_info(src: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    """A member ``name`` with ``src``'s time stamp and permissions, deflated."""
    zi = zipfile.ZipInfo(name, date_time=src.date_time)
    zi.external_attr = src.external_attr
    zi.compress_type = zipfile.ZIP_DEFLATED
    return zi


# ------------------------------------------------------------------------------------------ audit
def elf_dynamic(so: Path) -> Tuple[List[str], List[str]]:
    """(DT_NEEDED, DT_RPATH + DT_RUNPATH entries) of a shared object, read with pyelftools."""
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    needed: List[str] = []
    paths: List[str] = []
    with open(so, "rb") as fh:
        for sec in ELFFile(fh).iter_sections():
            if not isinstance(sec, DynamicSection):
                continue
            for tag in sec.iter_tags():
                if tag.entry.d_tag == "DT_NEEDED":
                    needed.append(tag.needed)
                elif tag.entry.d_tag == "DT_RPATH":
                    paths += tag.rpath.split(":")
                elif tag.entry.d_tag == "DT_RUNPATH":
                    paths += tag.runpath.split(":")
    return needed, [p for p in paths if p]


def needed_problems(needed: Sequence[str], paths: Sequence[str], cell: mx.Cell) -> List[str]:
    """What is wrong with a module's DT_NEEDED / RPATH for its cell: a CUDA module links the CUDA
    runtime of its toolkit's major (``libcudart.so.13``) and no other; the CPU module no CUDA library;
    no module looks for libraries inside the wheel (nothing is vendored: torch brings them)."""
    problems = []
    cudart = sorted(n for n in needed if n.startswith("libcudart.so"))
    if cell.toolkit_kind == "cuda":
        want = f"libcudart.so.{cell.toolkit_version.split('.')[0]}"
        if cudart != [want]:
            problems.append(f"links {cudart or 'no CUDA runtime'}, toolkit {cell.toolkit} means [{want!r}]")
    else:
        cuda = sorted(n for n in needed if re.match(r"lib(cudart|cuda|torch_cuda|c10_cuda|nvrtc|cublas)", n))
        if cuda:
            problems.append(f"the {cell.family} module links CUDA libraries {cuda}")
    inside = [p for p in paths if "$ORIGIN" in p or ".libs" in p]
    if inside:
        problems.append(
            f"RPATH/RUNPATH {inside} points into the wheel: a vendored library (torch brings them)"
        )
    return problems


def audit_pypi_wheel(
    wheel: Path,
    pw: mx.PypiWheel,
    plan: mx.Plan,
    archs: Optional[str] = None,
    allow_missing: Sequence[str] = (),
) -> AuditReport:
    """Every check of the module docstring on a merged wheel; never raises for a bad wheel. Its tags
    must be ``pw``'s (``dataclasses.replace(pw, platform_tag=...)`` for a wheel merged with
    ``exact_tag=False``).
    ``archs``: the CUDA archs its modules were built for when reduced (``--archs``), else the cells'.
    ``allow_missing``: modules a dry run left out."""
    from . import audit

    wheel = Path(wheel).resolve()
    rep = AuditReport(wheel=str(wheel), cell=f"pypi-{pw.platform}")
    try:
        _name, version, build, tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        rep.check("file name", [str(exc)])
        return rep
    problems = []
    if version.local or build:
        problems.append(
            f"{wheel.name}: version {version} has a local label or a build tag; PyPI refuses a local label"
        )
    if {str(t) for t in tags} != {pw.tags}:
        problems.append(f"{wheel.name} is tagged {sorted(map(str, tags))}, the [pypi] wheel is {pw.tags}")
    rep.check("file name", problems)
    rep.facts.update(version=str(version), tags=pw.tags, size_mib=round(wheel.stat().st_size / 2**20, 2))
    key = plan.cell(pw.cell_of("cpu")).variant_key(platform_tag=pw.platform_tag)
    with zipfile.ZipFile(wheel) as zf, tempfile.TemporaryDirectory(prefix="mamba-pypi-audit-") as tmp:
        names = zf.namelist()
        dist_info = audit._dist_info(names)
        problems = []
        if dist_info != f"mamba_ssm-{version}.dist-info":
            problems.append(f"dist-info directory {dist_info!r} is not mamba_ssm-{version}.dist-info")
        else:
            meta = zf.read(f"{dist_info}/METADATA")
            mversion = audit._metadata_field(meta.decode(), "Version")
            if mversion != [str(version)]:
                problems.append(f"METADATA Version {mversion} != the file name's {version}")
            requires = _requires_dist(meta)
            rep.facts["requires_dist"] = requires
            why = _torch_floor_problem(requires, pw.torch_floor)
            if why:
                problems.append(why)
            wheel_txt = zf.read(f"{dist_info}/WHEEL").decode()
            if audit._metadata_field(wheel_txt, "Tag") != [pw.tags]:
                problems.append(f"WHEEL Tag {audit._metadata_field(wheel_txt, 'Tag')} != [{pw.tags!r}]")
            if audit._metadata_field(wheel_txt, "Root-Is-Purelib") != ["false"]:
                problems.append("WHEEL Root-Is-Purelib is not false")
            problems += audit._record_problems(zf, dist_info)
        rep.check("metadata", problems)

        want_modules = [f for f, _ in pw.modules if f not in allow_missing]
        sos = sorted(n for n in names if n.endswith(".so") or ".so." in n.rsplit("/", 1)[-1])
        problems = []
        if sos != sorted(module_path(f) for f in want_modules):
            problems.append(f"shared objects {sos} != the modules {[module_path(f) for f in want_modules]}")
        if any(n.startswith(KERNELS_DIR + "/") and n.endswith(".py") for n in names):
            problems.append(
                f"{KERNELS_DIR}/ holds Python files: the loader loads the modules by path, not as a package"
            )
        if RELEASE_INDEX not in names:
            problems.append(f"{RELEASE_INDEX} is missing (install-kernels reads the release's index from it)")
        rep.check("shared objects", problems)
        rep.facts["modules"] = {}
        for fam in want_modules:
            if module_path(fam) not in names:
                continue
            cell = plan.cell(pw.cell_of(fam))
            zf.extract(module_path(fam), tmp)
            so = Path(tmp) / module_path(fam)
            sub = AuditReport(wheel=str(wheel), cell=cell.id)
            audit._check_device_code(sub, so, cell, archs, None, lambda _t: None)
            audit._check_build_info(sub, so, cell, archs, key, str(version))
            audit._check_stable_symbols(sub, so, cell)
            needed, paths = elf_dynamic(so)
            sub.check("DT_NEEDED", needed_problems(needed, paths, cell))
            info = sub.facts.get("build_info", {})
            rep.facts["modules"][fam] = {
                "cell": cell.id,
                "size_mib": round(so.stat().st_size / 2**20, 2),
                "needed": needed,
                "sass": sub.facts.get("sass"),
                "ptx": sub.facts.get("ptx"),
                "torch_version": info.get("torch_version"),
                "nvcc_version": info.get("nvcc_version"),
                "torch_abi_floor": info.get("torch_abi_floor"),
            }
            rep.findings += [f"{fam}: {f}" for f in sub.findings]
            rep.passed += [f"{fam}: {p}" for p in sub.passed]
    size = wheel.stat().st_size
    rep.check(
        "size",
        []
        if size <= pw.size_budget_mib * 2**20
        else [
            (
                f"{size / 2**20:.1f} MiB > [pypi] size_budget_mib {pw.size_budget_mib:g} (PyPI's file limit): "
                "trim the CUDA modules' archs (e.g. PTX only for the oldest) in matrix.toml [[toolkit]]"
            )
        ],
    )
    audit._check_auditwheel_show(rep, wheel, key)
    audit._check_abi3audit(rep, wheel, key)
    return rep


# -------------------------------------------------------------------------------------------- CLI
def sdist_release_index(sdist: Path) -> bytes:
    """``mamba_ssm/_install/release_index.json`` of a release's sdist, byte for byte."""
    with tarfile.open(sdist, "r:gz") as tf:
        for m in tf.getmembers():
            if m.isfile() and m.name.split("/", 1)[-1] == RELEASE_INDEX:
                fh = tf.extractfile(m)
                if fh is not None:
                    return fh.read()
    raise MergeError(f"{sdist} has no {RELEASE_INDEX}: it was not built by `release sdist`")


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    import platform

    p = sub.add_parser(
        "pypi-wheel",
        help="merge the stable-ABI cells' wheels into the PyPI wheel of a platform ([pypi]) and audit it",
    )
    p.add_argument("--matrix", type=Path, default=mx.MATRIX_PATH, help=argparse.SUPPRESS)
    p.add_argument("--data", type=Path, default=mx.DATA_PATH, help=argparse.SUPPRESS)
    p.add_argument("--pyproject", type=Path, default=mx.PYPROJECT_PATH, help=argparse.SUPPRESS)
    p.add_argument(
        "--platform", default=platform.machine(), help="x86_64 or aarch64 (default: this machine's)"
    )
    p.add_argument("--cells", type=Path, help="folder holding the cells' audited wheels")
    p.add_argument(
        "--sdist", type=Path, help="the release's sdist: its release_index.json goes into the wheel"
    )
    p.add_argument("--out", type=Path, help="where the PyPI wheel goes")
    p.add_argument("--archs", help="the CUDA archs the modules were built for when reduced (audit)")
    p.add_argument(
        "--allow-missing",
        action="append",
        default=[],
        metavar="FAMILY",
        help="leave out this module (a dry run on a machine that cannot build it); never for a release",
    )
    p.add_argument(
        "--any-manylinux",
        action="store_true",
        help="accept the cells' own manylinux tag (built outside the builder images, e.g. manylinux_2_34 "
        "here); the wheel carries it. A release takes [platforms]' tag only",
    )
    p.add_argument("--audit", type=Path, metavar="WHEEL", help="audit this PyPI wheel only (no merge)")
    p.add_argument("--json", action="store_true", help="print the audit report as JSON")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    plan = mx.load_plan(args.matrix, args.data, args.pyproject)
    if not plan.ok:
        print("pypi-wheel: the matrix does not validate; run `python -m build_matrix plan`", file=sys.stderr)
        return 1
    try:
        pw = plan.pypi_wheel(args.platform)
        if args.audit:
            wheel = args.audit
        else:
            if not (args.cells and args.out):
                raise MergeError(
                    "give --cells DIR and --out DIR (and --sdist for the release index), or --audit WHEEL"
                )
            cells = find_cell_wheels(pw, plan, args.cells, exact_tag=not args.any_manylinux)
            other_tag = set(find_cell_wheels(pw, plan, args.cells, exact_tag=False)) - set(cells)
            if other_tag:
                raise MergeError(
                    f"the cell wheels of {', '.join(sorted(other_tag))} in {args.cells} carry another manylinux tag "
                    f"than {pw.platform_tag} (built outside the builder images): --any-manylinux merges them as they are"
                )
            index = sdist_release_index(args.sdist) if args.sdist else None
            wheel = merge(
                pw, plan, cells, args.out, index, args.allow_missing, exact_tag=not args.any_manylinux
            )
        if args.any_manylinux:
            pw = dataclasses.replace(
                pw, platform_tag=next(iter(parse_wheel_filename(wheel.name)[3])).platform
            )
    except (MergeError, mx.MatrixError) as exc:
        print(f"pypi-wheel: {exc}", file=sys.stderr)
        return 2
    rep = audit_pypi_wheel(wheel, pw, plan, args.archs, args.allow_missing)
    if args.json:
        print(json.dumps(rep.to_dict(), indent=1))
    else:
        for f in rep.findings:
            print(f"pypi-wheel audit: {f}", file=sys.stderr)
        print(wheel)
    return 0 if rep.ok else 1


__all__ = [
    "KERNELS_DIR",
    "RELEASE_INDEX",
    "MergeError",
    "audit_pypi_wheel",
    "elf_dynamic",
    "find_cell_wheels",
    "merge",
    "module_path",
    "needed_problems",
    "sdist_release_index",
]
