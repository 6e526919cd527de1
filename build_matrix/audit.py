"""``python -m build_matrix audit WHEEL [--cell ID]``: check a built wheel against its cell.

Every check that fails adds one finding naming what is wrong (exit 1); all checks run, so one audit
lists every problem.  The checks:

1. file name: a mamba_ssm wheel with a variant label; its VariantKey equals the cell's (torch
   series, accelerator family, C++ ABI, ``cpXY-abi3`` tags, the cell's platform) and the platform tag is
   a manylinux tag (the wheel was repaired); the abi3 tag is the cell's (its torch's limited API);
2. METADATA ``Version`` == the file name's version (normalised, local label included); WHEEL ``Tag``
   lines and ``Root-Is-Purelib: false``; RECORD lists every file with the right sha256 and size;
3. shared objects: exactly one ``mamba_ssm/_C.abi3.so``; nothing bundled whose name matches torch,
   c10, the CUDA/ROCm runtimes, cuDNN/NCCL or libgomp (those come from torch at run time);
   ``auditwheel show`` accepts the platform tag; ``abi3audit`` finds only stable-ABI symbols, none
   newer than the tag's Python;
4. SASS and PTX inside ``_C`` (``cuobjdump --list-elf/--list-ptx``, else the ELF ``.nv_fatbin``
   section parsed here) == the cell's archs (or ``--archs``); a CPU cell has no fatbin at all;
5. build info (``read_build_info``, without loading the library) == the cell: torch version, CUDA /
   HIP, C++ ABI, archs, ``cpXY-abi3``, platform, kernels, package version; and the compatibility rule
   (``buildinfo.incompatibilities``) accepts every torch build the cell serves;
6. size <= the cell's budget (matrix.toml ``[size_budget_mib]``);
   a stable-ABI cell's ``_C`` (``build_matrix/stable_abi.py``): no undefined mangled ``c10`` / ``at`` /
   ``torch`` / ``caffe2`` symbol, and every C shim function it imports exported by the floor torch;
7. runtime (unless --no-runtime): a fresh venv whose torch comes from ``--torch-from`` (a ``.pth``
   file, no reinstall), the wheel installed with ``--no-deps``; ``python -m mamba_ssm doctor --json``
   must report ``_C`` loaded; one ``selective_scan_fn`` call and one ``causal_conv1d_fn`` call on CPU
   with ``MAMBA_SSM_BACKEND=compiled`` must run the compiled kernels and match float64 references
   computed by the audit itself.
"""

from __future__ import annotations

import argparse
import base64
import csv
import glob
import hashlib
import io
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from packaging.version import InvalidVersion, Version

from mamba_ssm._compat import archs as compat_archs
from mamba_ssm._compat import buildinfo, variant, versions

from . import matrix as mx
from .layout import CELLS_HOME, EXCLUDE_PATTERNS

#: Where the audit says what it does (the CLI prints it; the build passes its log).
Say = Callable[[str], None]

SO_NAME = "mamba_ssm/_C.abi3.so"


@dataclass
class AuditReport:
    wheel: str
    cell: Optional[str]
    findings: List[str] = field(default_factory=list)  # what is wrong (empty: passed)
    passed: List[str] = field(default_factory=list)  # names of the checks that passed
    facts: Dict[str, Any] = field(default_factory=dict)  # what was measured (archs, size, tag ...)

    @property
    def ok(self) -> bool:
        return not self.findings

    def check(self, name: str, problems: Sequence[str]) -> None:
        if problems:
            self.findings += [f"{name}: {p}" for p in problems]
        else:
            self.passed.append(name)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "wheel": self.wheel,
            "cell": self.cell,
            "ok": self.ok,
            "findings": self.findings,
            "passed": self.passed,
            "facts": self.facts,
        }


# ------------------------------------------------------------------------------------ SASS / PTX
def find_cuobjdump(torch_from: Optional[Path] = None) -> Optional[str]:
    """cuobjdump: $CUOBJDUMP, PATH, $CUDA_HOME/bin, /usr/local/cuda*/bin, or triton's copy."""
    cands = [os.environ.get("CUOBJDUMP"), shutil.which("cuobjdump")]
    if os.environ.get("CUDA_HOME"):
        cands.append(os.path.join(os.environ["CUDA_HOME"], "bin", "cuobjdump"))
    cands += sorted(glob.glob("/usr/local/cuda*/bin/cuobjdump"), reverse=True)
    prefixes = [sys.prefix] + ([str(torch_from)] if torch_from else [])
    for prefix in prefixes:
        cands += glob.glob(
            os.path.join(
                prefix, "lib", "python3*", "site-packages", "triton", "backends", "nvidia", "bin", "cuobjdump"
            )
        )
    for c in cands:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def archs_by_cuobjdump(so: Path, cuobjdump: str) -> Tuple[List[str], List[str]]:
    """(SASS, PTX) listed by cuobjdump, e.g. (["sm_90"], ["compute_90"]).  A file without any
    device code gives ([], []); other failures raise RuntimeError with cuobjdump's message."""
    sass: set[str] = set()
    ptx: set[str] = set()
    for flag, out_set, prefix in (("--list-elf", sass, "sm_"), ("--list-ptx", ptx, "compute_")):
        proc = subprocess.run([cuobjdump, flag, str(so)], capture_output=True, text=True)
        text = proc.stdout + proc.stderr
        if proc.returncode != 0:
            if "does not contain device code" in text or "no device code" in text.lower():
                continue
            raise RuntimeError(f"{cuobjdump} {flag} {so}: {text.strip()[:300]}")
        for m in re.finditer(r"\.sm_(\d+[af]?)\.(?:cubin|ptx)", text):
            out_set.add(prefix + m.group(1))
    return sorted(sass, key=_arch_key), sorted(ptx, key=_arch_key)


def _arch_key(name: str) -> Tuple[int, str]:
    m = re.search(r"(\d+)", name)
    return (int(m.group(1)) if m else 0, name)


_FATBIN_MAGIC = 0xBA55ED50


def archs_by_elf(so: Path) -> Tuple[List[str], List[str]]:
    """(SASS, PTX) from the ``.nv_fatbin`` section, parsed without CUDA tools.

    The fat binary is a sequence of containers (magic 0xBA55ED50, u16 version, u16 header size,
    u64 payload size), each holding entries (u16 kind: 1 PTX / 2 ELF; u16; u32 header size; u64
    payload size; ...; u32 arch at byte 28, e.g. 90).  No section: ([], []).
    """
    from elftools.elf.elffile import ELFFile  # pyelftools (auditwheel's dependency)

    sass, ptx = set(), set()
    with open(so, "rb") as fh:
        elf = ELFFile(fh)
        sec = elf.get_section_by_name(".nv_fatbin")
        if sec is None:
            return [], []
        data = sec.data()
    pos = 0
    while pos + 16 <= len(data):
        magic, _ver, hsize, fsize = struct.unpack_from("<IHHQ", data, pos)
        if magic != _FATBIN_MAGIC:
            pos += 8  # containers are 8-byte aligned; skip padding
            continue
        entry, end = pos + hsize, pos + hsize + fsize
        while entry + 32 <= end:
            kind, _u, ehsize, esize = struct.unpack_from("<HHIQ", data, entry)
            arch = struct.unpack_from("<I", data, entry + 28)[0]
            if kind == 2:
                sass.add(f"sm_{arch}")
            elif kind == 1:
                ptx.add(f"compute_{arch}")
            if ehsize == 0:
                break
            entry += ehsize + esize
        pos = end
    return sorted(sass, key=_arch_key), sorted(ptx, key=_arch_key)


def has_fatbin(so: Path) -> bool:
    from elftools.elf.elffile import ELFFile

    with open(so, "rb") as fh:
        return ELFFile(fh).get_section_by_name(".nv_fatbin") is not None


# ----------------------------------------------------------------------------------- wheel pieces
def _dist_info(names: List[str]) -> Optional[str]:
    tops = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")}
    return next(iter(tops)) if len(tops) == 1 else None


def _record_problems(zf: zipfile.ZipFile, dist_info: str) -> List[str]:
    problems = []
    try:
        rows = list(csv.reader(io.StringIO(zf.read(f"{dist_info}/RECORD").decode())))
    except KeyError:
        return [f"{dist_info}/RECORD is missing"]
    listed: Dict[str, List[str]] = {}
    for row in rows:
        if row:
            listed[row[0]] = row
    for name in zf.namelist():
        if name.endswith("/"):
            continue
        entry = listed.get(name)
        if entry is None:
            problems.append(f"{name} is in the wheel but not in RECORD")
            continue
        if name == f"{dist_info}/RECORD":
            continue
        algo, _, digest = entry[1].partition("=")
        data = zf.read(name)
        if algo != "sha256":
            problems.append(f"RECORD entry of {name} has no sha256 ({entry[1]!r})")
            continue
        actual = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if actual != digest:
            problems.append(f"{name}: sha256 in RECORD ({digest}) != the file's ({actual})")
        if entry[2] and int(entry[2]) != len(data):
            problems.append(f"{name}: size in RECORD ({entry[2]}) != the file's ({len(data)})")
    for name in listed:
        if name not in zf.namelist():
            problems.append(f"RECORD lists {name}, which is not in the wheel")
    return problems


def _metadata_field(text: str, name: str) -> List[str]:
    return [
        line.split(":", 1)[1].strip()
        for line in text.splitlines()
        if line.lower().startswith(name.lower() + ":")
    ]


# ------------------------------------------------------------------------------------------ audit
def cell_for_wheel(plan: mx.Plan, wheel: Path) -> mx.Cell:
    """The cell a wheel belongs to, from its local version label and platform tag."""
    key = variant.VariantKey.from_wheel_filename(wheel.name)
    arch = "aarch64" if key.platform_tag.endswith("aarch64") else "x86_64"
    return plan.cell(f"{key.local_label}-{arch}")


def audit_wheel(
    wheel: Path,
    cell: mx.Cell,
    archs: Optional[str] = None,
    torch_from: Optional[Path] = None,
    runtime: bool = True,
    log: Optional[Callable[[str], None]] = None,
    runtime_from: Optional[Path] = None,
) -> AuditReport:
    """Run every check (module docstring) and return the report; never raises for a bad wheel.
    ``torch_from``: the venv of the torch the wheel was built with; ``runtime_from``: the venv whose
    torch the runtime check runs under (default ``torch_from``; a torch the module serves, for a
    stable CUDA module built with a torch of another CUDA major)."""
    wheel = Path(wheel).resolve()
    rep = AuditReport(wheel=str(wheel), cell=cell.id)
    say = log or (lambda _t: None)

    # 1. file name
    problems = []
    try:
        key = variant.VariantKey.from_wheel_filename(wheel.name)
        fname_version = variant.split_wheel_filename(wheel.name)[1]
    except ValueError as exc:
        rep.check("file name", [str(exc)])
        return rep
    want = cell.variant_key(platform_tag=key.platform_tag)
    if key != want:
        problems.append(
            f"variant {key.local_label} ({key.tags}) != the cell's {want.local_label} ({want.tags})"
        )
    if not re.match(r"^(manylinux_\d+_\d+|manylinux2014|musllinux_\d+_\d+)_", key.platform_tag.split(".")[0]):
        problems.append(
            f"platform tag {key.platform_tag!r} is not a manylinux tag: the wheel was not "
            f"repaired (auditwheel repair)"
        )
    elif not key.platform_tag.endswith(cell.platform):
        problems.append(f"platform tag {key.platform_tag!r} is not for {cell.platform}")
    rep.facts["platform_tag"] = key.platform_tag
    rep.check("file name", problems)

    try:
        zf = zipfile.ZipFile(wheel)
    except (OSError, zipfile.BadZipFile) as exc:
        rep.check("zip", [f"{wheel} is not a readable zip: {exc}"])
        return rep
    with zf:
        names = zf.namelist()
        dist_info = _dist_info(names)
        # 2. metadata
        problems = []
        if dist_info is None:
            problems.append("no single *.dist-info directory")
        else:
            meta = zf.read(f"{dist_info}/METADATA").decode("utf-8", "replace")
            mversions = _metadata_field(meta, "Version")
            try:
                if len(mversions) != 1:
                    problems.append(f"METADATA has {len(mversions)} Version fields")
                elif (
                    Version(mversions[0]) != Version(fname_version)
                    or Version(mversions[0]).local != Version(fname_version).local
                ):
                    problems.append(
                        f"METADATA Version {mversions[0]!r} != file name version {fname_version!r} "
                        f"(strict installers reject the wheel; set MAMBA_LOCAL_VERSION at build "
                        f"time instead of renaming the file)"
                    )
            except InvalidVersion as exc:
                problems.append(f"unparsable version: {exc}")
            rep.facts["version"] = mversions[0] if mversions else None
            wheel_txt = zf.read(f"{dist_info}/WHEEL").decode()
            tags = _metadata_field(wheel_txt, "Tag")
            fname_tags = {f"{key.python_tag}-{key.abi_tag}-{p}" for p in key.platform_tag.split(".")}
            if set(tags) != fname_tags:
                problems.append(f"WHEEL Tag lines {sorted(tags)} != the file name's {sorted(fname_tags)}")
            if _metadata_field(wheel_txt, "Root-Is-Purelib") != ["false"]:
                problems.append("WHEEL Root-Is-Purelib is not false (a platform wheel must say false)")
            problems += _record_problems(zf, dist_info)
        rep.check("metadata", problems)

        # 3. shared objects
        problems = []
        sos = [n for n in names if re.search(r"\.so(\.\d+)*$", n)]
        if cell.toolkit_kind and SO_NAME not in sos:
            problems.append(f"{SO_NAME} is missing (a pure-Python wheel cannot serve cell {cell.id})")
        others = [n for n in sos if n != SO_NAME]
        for n in others:
            base = n.rsplit("/", 1)[-1]
            bad = [
                p
                for p in EXCLUDE_PATTERNS
                if fnmatch(base, p) or fnmatch(re.sub(r"-[0-9a-f]{8}", "", base), p)
            ]
            if bad:
                problems.append(
                    f"{n} is bundled: it matches {bad[0]} (torch / GPU runtime libraries come from "
                    f"torch at run time and must never be grafted; auditwheel repair --exclude)"
                )
            else:
                problems.append(f"{n}: unexpected extra shared object (only {SO_NAME} belongs in the wheel)")
        rep.facts["bundled"] = others
        rep.check("shared objects", problems)

        tmp = Path(tempfile.mkdtemp(prefix="mamba-audit-"))
        try:
            so = None
            if SO_NAME in names:
                zf.extract(SO_NAME, tmp)
                so = tmp / SO_NAME
            size = wheel.stat().st_size
            rep.facts["size_mib"] = round(size / 2**20, 2)
            rep.check(
                "size",
                []
                if size <= cell.size_budget_mib * 2**20
                else [
                    f"{size / 2**20:.1f} MiB > budget {cell.size_budget_mib:g} MiB ([size_budget_mib] in matrix.toml)"
                ],
            )
            if so is not None:
                _check_device_code(rep, so, cell, archs, torch_from, say)
                _check_build_info(rep, so, cell, archs, key, fname_version)
                if cell.torch_abi == "stable":
                    _check_stable_symbols(rep, so, cell)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    _check_auditwheel_show(rep, wheel, key)
    _check_abi3audit(rep, wheel, key)
    if runtime and rep.ok:
        _check_runtime(rep, wheel, cell, runtime_from or torch_from, say)
    elif runtime:
        rep.facts["runtime"] = "skipped: earlier checks failed"
    return rep


def _expected_archs(cell: mx.Cell, archs: Optional[str]) -> Tuple[List[str], List[str]]:
    if cell.toolkit_kind != "cuda":
        return [], []
    if archs:
        spec = compat_archs.parse_arch_list(archs)
        return list(spec.sass), list(spec.ptx)
    return list(cell.sass), list(cell.ptx)


def _check_device_code(
    rep: AuditReport, so: Path, cell: mx.Cell, archs: Optional[str], torch_from: Optional[Path], say: Say
) -> None:
    want_sass, want_ptx = _expected_archs(cell, archs)
    problems = []
    cuobjdump = find_cuobjdump(torch_from)
    try:
        if cuobjdump and has_fatbin(so):
            sass, ptx = archs_by_cuobjdump(so, cuobjdump)
            how = "cuobjdump"
        else:
            sass, ptx = archs_by_elf(so)
            how = "ELF .nv_fatbin"
    except Exception as exc:  # noqa: BLE001 - any failure to read device code is a finding
        rep.check("device code", [f"cannot list the SASS/PTX of {SO_NAME}: {exc}"])
        return
    rep.facts.update(sass=sass, ptx=ptx, device_code_by=how)
    if sorted(sass) != sorted(want_sass):
        problems.append(f"SASS in {SO_NAME} is {sass or 'none'}, the plan says {want_sass or 'none'} ({how})")
    if sorted(ptx) != sorted(want_ptx):
        problems.append(f"PTX in {SO_NAME} is {ptx or 'none'}, the plan says {want_ptx or 'none'} ({how})")
    rep.check("device code", problems)


def _check_build_info(
    rep: AuditReport,
    so: Path,
    cell: mx.Cell,
    archs: Optional[str],
    key: variant.VariantKey,
    fname_version: str,
) -> None:
    problems = []
    try:
        info = buildinfo.read_build_info(so)
    except ValueError as exc:
        rep.check("build info", [str(exc)])
        return
    rep.facts["build_info"] = json.loads(info.to_json())
    # a stable cell may be built against any torch build it serves from its floor on (Cell.torch_mismatch)
    want_torch = f"{cell.torch_version}+{cell.build_against}"
    mismatch = cell.torch_mismatch(info.torch_version)
    if mismatch:
        problems.append(
            f"built against torch {info.torch_version}, the cell says {want_torch}"
            + (f" or another build it serves ({mismatch})" if cell.torch_abi == "stable" else "")
        )
    if bool(info.cxx11_abi) != cell.cxx11abi:
        problems.append(f"cxx11_abi {info.cxx11_abi} != the cell's {cell.cxx11abi}")
    if (info.torch_abi, info.torch_abi_floor) != (cell.torch_abi, cell.torch_abi_floor):
        problems.append(
            f"torch_abi {info.torch_abi} (floor {info.torch_abi_floor}) != the cell's {cell.torch_abi} "
            f"(floor {cell.torch_abi_floor}): build with MAMBA_TORCH_STABLE_ABI={cell.torch_abi_env}"
        )
    want_sass, want_ptx = _expected_archs(cell, archs)
    if sorted(info.sass_archs) != sorted(want_sass) or sorted(info.ptx_archs) != sorted(want_ptx):
        problems.append(
            f"build info archs {info.sass_archs + info.ptx_archs} != the plan's {want_sass + want_ptx}"
        )
    if info.python_tag != f"{cell.python_tag}-{cell.abi_tag}":
        problems.append(f"python_tag {info.python_tag!r} != {cell.python_tag}-{cell.abi_tag}")
    if info.platform.replace("-", "_") != f"linux_{cell.platform}":
        problems.append(f"platform {info.platform!r} != linux-{cell.platform}")
    want_kernels = {"cuda": ["cpu", "cuda"], "rocm": ["cpu", "hip"], "cpu": ["cpu"]}[cell.toolkit_kind]
    if sorted(info.kernels) != sorted(want_kernels):
        problems.append(f"kernels {info.kernels} != {want_kernels}")
    try:
        if Version(info.package_version).public != Version(fname_version).public:
            problems.append(f"package_version {info.package_version!r} != the wheel's {fname_version!r}")
    except InvalidVersion:
        problems.append(f"package_version {info.package_version!r} is not PEP 440")
    if cell.toolkit_kind == "cuda" and (
        not info.nvcc_version or not info.nvcc_version.startswith(cell.toolkit_version.split(".")[0] + ".")
    ):
        problems.append(
            f"nvcc_version {info.nvcc_version!r} is not from toolkit {cell.toolkit} ({cell.toolkit_version})"
        )
    # THE compatibility rule accepts every torch build the cell serves (a stable cell: in every series
    # it serves, from the floor on).
    served = [f"{s}.0" for s in cell.serves_series] if cell.torch_abi == "stable" else [cell.torch_version]
    for release in served:
        for acc in cell.serves:
            av = mx.accelerator_version(acc) or (0, 0)
            cuda = f"{av[0]}.{av[1]}" if acc.startswith("cu") else None
            hip = f"{av[0]}.{av[1]}.0" if acc.startswith("rocm") else None
            runtime = versions.TorchBuild(f"{release}+{acc}", cuda, hip, cell.cxx11abi)
            for why in buildinfo.incompatibilities(info, runtime):
                problems.append(
                    f"the cell serves torch {runtime.version} but the compatibility rule says: {why}"
                )
    rep.check("build info", problems)


def _check_stable_symbols(rep: AuditReport, so: Path, cell: mx.Cell) -> None:
    """A stable-ABI ``_C`` imports no libtorch C++ symbol and only C shim functions its floor exports."""
    from . import stable_abi

    undefined = stable_abi.undefined_symbols(so)
    rep.facts["stable_abi"] = {
        "floor": cell.torch_abi_floor,
        "shim_imports": len(stable_abi.shim_imports(undefined)),
        "torch_cpp_imports": len(stable_abi.torch_cpp_imports(undefined)),
    }
    rep.check("stable ABI symbols", stable_abi.check(so, cell.torch_abi_floor or ""))


def _check_auditwheel_show(rep: AuditReport, wheel: Path, key: variant.VariantKey) -> None:
    """``auditwheel show --json``: the glibc symbol versions allow the file name's manylinux tag, and
    every external library is one torch provides at run time (the exclusion list), nothing else."""
    proc = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", "--json", str(wheel)], capture_output=True, text=True
    )
    try:
        show = json.loads(proc.stdout)
    except ValueError:
        rep.check("auditwheel show", [f"auditwheel show failed: {(proc.stdout + proc.stderr).strip()[:300]}"])
        return
    problems = []
    sym_tag = show.get("sym_tag")
    rep.facts["auditwheel_sym_tag"] = sym_tag
    rep.facts["external_libs"] = sorted(show.get("external_libs") or {})
    tags = key.platform_tag.split(".")
    if sym_tag not in tags:
        problems.append(
            f"auditwheel show: the symbol versions allow {sym_tag!r}, the file name says {key.platform_tag!r}"
        )
    for lib in sorted(show.get("external_libs") or {}):
        if not any(fnmatch(lib, p) for p in EXCLUDE_PATTERNS):
            problems.append(
                f"auditwheel show: depends on {lib}, which torch does not provide and the wheel "
                f"does not bundle (repair without --exclude for it, or drop the dependency)"
            )
    rep.check("auditwheel show", problems)


def _check_abi3audit(rep: AuditReport, wheel: Path, key: variant.VariantKey) -> None:
    """``abi3audit --report --strict``: every shared object of an abi3 wheel uses only stable-ABI
    symbols, none newer than the tag's Python (``cp310-abi3``: 3.10). Local files only (no network)."""
    if key.abi_tag != "abi3":
        return
    proc = subprocess.run(
        [sys.executable, "-m", "abi3audit", "--report", "--strict", "--summary", str(wheel)],
        capture_output=True,
        text=True,
    )
    try:
        report = json.loads(proc.stdout)
        results = [r["result"] for spec in report["specs"].values() for r in spec.get("wheel", [])]
    except (ValueError, KeyError, TypeError):
        why = (proc.stdout + proc.stderr).strip()[-300:]
        if "No module named abi3audit" in why:
            why = "abi3audit is not installed (pip install abi3audit; ci/requirements-dev.txt has it)"
        rep.check("abi3audit", [f"abi3audit failed: {why}"])
        return
    baseline = f"{key.python_tag[2]}.{key.python_tag[3:]}"
    problems = []
    for r in results:
        if r.get("baseline") != baseline:
            problems.append(
                f"abi3audit read the baseline {r.get('baseline')!r} from the wheel, the tag says {baseline}"
            )
        if not r.get("is_abi3", False) and not r.get("non_abi3_symbols"):
            problems.append(
                "abi3audit: a shared object is not built for the stable ABI (no .abi3.so / limited API)"
            )
        if r.get("non_abi3_symbols"):
            problems.append(
                f"abi3audit: symbols outside the stable ABI: {', '.join(map(str, r['non_abi3_symbols'][:8]))}"
            )
        if r.get("future_abi3_objects") or not r.get("is_abi3_baseline_compatible", True):
            problems.append(
                f"abi3audit: stable-ABI symbols newer than Python {baseline} (the tag promises "
                f"{key.python_tag}-abi3): {r.get('future_abi3_objects')}; computed {r.get('computed')}"
            )
    if proc.returncode != 0 and not problems:
        problems.append(f"abi3audit exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
    rep.facts["abi3audit"] = {
        "objects": len(results),
        "baseline": baseline,
        "computed": sorted({str(r.get("computed")) for r in results}),
        "violations": sum(len(r.get("non_abi3_symbols") or []) for r in results),
    }
    rep.check("abi3audit", problems)


# ------------------------------------------------------------------------------------ runtime check
#: Run by path in the fresh venv (and, with ``--site-dirs``, by the base interpreter).
RUNTIME_CHECK = Path(__file__).resolve().with_name("runtime_check.py")


def _check_runtime(
    rep: AuditReport, wheel: Path, cell: mx.Cell, torch_from: Optional[Path], say: Say
) -> None:
    """Fresh venv + .pth to torch_from's site-packages; install the wheel; doctor + one CPU call."""
    base = Path(torch_from) if torch_from else Path(sys.prefix)
    base_py = base / "bin" / "python"
    if not base_py.exists():
        rep.check("runtime", [f"no Python at {base_py} (--torch-from must be a venv with torch)"])
        return
    tmp = Path(tempfile.mkdtemp(prefix="mamba-audit-venv-"))
    try:
        say(f"runtime check: fresh venv {tmp} (torch from {base} via .pth)")
        venv = tmp / "venv"
        real = subprocess.run(
            [str(base_py), "-c", "import sys; print(sys._base_executable)"], capture_output=True, text=True
        ).stdout.strip() or str(base_py)
        subprocess.run([real, "-m", "venv", "--without-pip", str(venv)], check=True, capture_output=True)
        vpy = venv / "bin" / "python"
        purelib = subprocess.run(
            [str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
        # The base's site directories as its interpreter sees them, not just its own purelib: a cell venv
        # made by `build --host` has no packages of its own, only a .pth naming the shared dev venv, and
        # Python does not follow a .pth found in a directory that a .pth added.
        probe = subprocess.run(
            [str(base_py), str(RUNTIME_CHECK), "--site-dirs"], capture_output=True, text=True, check=False
        )
        try:
            base_site = json.loads(probe.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            rep.check(
                "runtime",
                [
                    (
                        f"could not list the site directories of {base_py}: "
                        f"{(probe.stdout + probe.stderr).strip()[-400:]}"
                    )
                ],
            )
            return
        Path(purelib, "_shared_torch.pth").write_text("".join(d + "\n" for d in base_site["dirs"]))
        # pip from the base when it has one (also through its .pth), else this interpreter's pip installs
        # into the fresh venv (`pip --python`, pip >= 22.3).
        pip = (
            [str(vpy), "-m", "pip"]
            if base_site["pip"]
            else [sys.executable, "-m", "pip", "--python", str(vpy)]
        )
        inst = subprocess.run(
            [*pip, "install", "--no-deps", "--no-index", "-q", str(wheel)],
            capture_output=True,
            text=True,
            cwd=tmp,
        )
        if inst.returncode != 0:
            rep.check(
                "runtime",
                [f"pip install of the wheel into a fresh venv failed: {inst.stderr.strip()[-400:]}"],
            )
            return
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MAMBA_SSM_", "PYTHONPATH"))}
        env.update(MAMBA_SSM_BACKEND="compiled", CUDA_VISIBLE_DEVICES="")
        proc = subprocess.run(
            [str(vpy), str(RUNTIME_CHECK)], capture_output=True, text=True, cwd=tmp, env=env, timeout=600
        )
        try:
            res = json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            rep.check("runtime", [f"the runtime check crashed: {(proc.stdout + proc.stderr).strip()[-600:]}"])
            return
        rep.facts["runtime"] = res
        problems = []
        if res.get("error"):
            problems.append(res["error"])
        if not str(res.get("package_path", "")).startswith(str(venv)):
            problems.append(f"mamba_ssm imported from {res.get('package_path')}, not from the fresh venv")
        if not res.get("doctor_loaded"):
            problems.append(f"doctor reports _C not loaded: {res.get('doctor_reason')}")
        if res.get("backend") != "compiled":
            problems.append(
                f"the CPU selective scan ran on backend {res.get('backend')!r}, not the compiled kernel"
            )
        err = res.get("max_rel_err")
        if err is None or not err <= 1e-4:
            problems.append(
                f"compiled CPU selective_scan_fn differs from the float64 reference: max rel err {err}"
            )
        if res.get("conv_backend") != "compiled":
            problems.append(
                f"the CPU causal conv1d ran on {res.get('conv_backend')!r}, not the compiled kernel"
            )
        err = res.get("conv_max_rel_err")
        if err is None or not err <= 1e-4:
            problems.append(
                f"compiled CPU causal_conv1d_fn differs from the float64 reference: max rel err {err}"
            )
        rep.check("runtime", problems)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def default_torch_venv(cell: mx.Cell) -> Optional[Path]:
    """The venv ``build`` made for this cell (newest first), so ``audit`` after ``build --cell`` in CI
    checks the wheel against the cell's own torch; None falls back to the running interpreter."""
    venvs = sorted(
        CELLS_HOME.glob(f"{cell.id}-py*/venv/bin/python"), key=lambda p: p.stat().st_mtime, reverse=True
    )
    return venvs[0].parent.parent if venvs else None


def main(args: argparse.Namespace) -> int:
    plan = mx.load_plan(args.matrix, args.data, args.pyproject)
    wheel = Path(args.wheel)
    if not wheel.is_file():
        matches = sorted(glob.glob(str(args.wheel)))
        if len(matches) != 1:
            print(f"audit: {args.wheel}: expected one wheel, found {len(matches)}", file=sys.stderr)
            return 2
        wheel = Path(matches[0])
    try:
        cell = plan.cell(args.cell) if args.cell else cell_for_wheel(plan, wheel)
    except ValueError as exc:
        print(f"audit: {wheel.name}: {exc}", file=sys.stderr)
        return 1
    torch_from = Path(args.torch_from) if args.torch_from else default_torch_venv(cell)
    rep = audit_wheel(
        wheel,
        cell,
        archs=args.archs,
        torch_from=torch_from,
        runtime=not args.no_runtime,
        log=lambda t: print(f"[audit] {t}", file=sys.stderr),
    )
    if args.json:
        print(json.dumps(rep.to_dict(), indent=2, default=str))
    else:
        for f in rep.findings:
            print(f"FAIL {f}")
        print(
            f"audit {wheel.name} against {cell.id}: {'passed' if rep.ok else 'FAILED'} "
            f"({len(rep.passed)} checks passed: {', '.join(rep.passed)}; {len(rep.findings)} findings)"
        )
    return 0 if rep.ok else 1
