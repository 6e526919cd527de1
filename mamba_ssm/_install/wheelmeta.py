"""What a wheel says about itself inside, checked against its file name and a target.

A wheel's file name is only a label: the bytes that matter are the ``.dist-info/WHEEL`` tags, the
``.dist-info/METADATA`` name, version and Requires-Python (the core metadata spec), and the build info
embedded in ``mamba_ssm/_C*.so`` (docs/architecture.md). ``python -m build_matrix index`` refuses a
wheel whose contents disagree with its name (:func:`disagreements`), and the resolver checks the
downloaded wheel again, after its sha256, before pip gets it (:func:`disagreements` +
:func:`target_problems` + the manifest entry's build info), so a wheel that says aarch64 inside an
x86_64 name, or requires another Python, is never installed.

Standard library + ``packaging`` only.
"""

from __future__ import annotations

import email.parser
import json
import os
import re
import shutil
import tempfile
import zipfile
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

__all__ = [
    "WheelMeta",
    "disagreements",
    "platform_arch",
    "read_wheel_meta",
    "requires_python_problem",
    "target_problems",
]

_ARCH_RE = re.compile(r"(x86_64|aarch64|i686|ppc64le|s390x|armv7l|riscv64|arm64|universal2)$")


@dataclass
class WheelMeta:
    """The wheel's own statements: METADATA ``Name``/``Version``/``Requires-Python``, the ``Tag:``
    lines of WHEEL, and the ``_C`` build info (a dict of the build-info JSON, or None: no ``_C``)."""

    name: Optional[str]
    version: Optional[str]
    requires_python: Optional[str]
    wheel_tags: List[str] = field(default_factory=list)
    build_info: Optional[Dict[str, Any]] = None
    compiled_module: Optional[str] = None  # the archive path of mamba_ssm/_C*.so


def _dist_info_file(names: List[str], leaf: str) -> Optional[str]:
    return next((n for n in names if n.count("/") == 1 and n.endswith(f".dist-info/{leaf}")), None)


def read_wheel_meta(path: str, scratch: Optional[str] = None) -> WheelMeta:
    """Read :class:`WheelMeta` from the wheel at ``path`` (the ``_C`` is copied to a temporary file
    in ``scratch``, default the system temp dir, to read its build info without loading it).

    Raises ValueError naming the file when it is not a wheel (no METADATA / WHEEL), or its build info
    is unreadable.
    """
    from .._compat.buildinfo import BuildInfoError, read_build_info

    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise ValueError(f"{path}: not a readable wheel ({exc})") from None
    with zf:
        names = zf.namelist()
        meta_name, wheel_name = _dist_info_file(names, "METADATA"), _dist_info_file(names, "WHEEL")
        if meta_name is None or wheel_name is None:
            raise ValueError(f"{path}: no .dist-info/METADATA or .dist-info/WHEEL: not a wheel")
        meta = email.parser.Parser().parsestr(zf.read(meta_name).decode("utf-8", "replace"))
        wheel = email.parser.Parser().parsestr(zf.read(wheel_name).decode("utf-8", "replace"))
        out = WheelMeta(
            meta.get("Name"),
            meta.get("Version"),
            meta.get("Requires-Python"),
            [t.strip() for t in (wheel.get_all("Tag") or [])],
        )
        so = sorted(n for n in names if re.match(r"^mamba_ssm/_C[^/]*\.so$", n))
        if so:
            out.compiled_module = so[0]
            fd, tmp = tempfile.mkstemp(prefix=".buildinfo-", suffix=".so", dir=scratch)
            try:
                with os.fdopen(fd, "wb") as dst, zf.open(so[0]) as src:
                    shutil.copyfileobj(src, dst, 1 << 20)
                try:
                    out.build_info = json.loads(read_build_info(tmp).to_json())
                except BuildInfoError as exc:
                    raise ValueError(
                        f"{path}: {so[0]}: {str(exc).replace(tmp, 'the compiled module')}"
                    ) from None
            finally:
                os.unlink(tmp)
    return out


def platform_arch(platform: str) -> Optional[str]:
    """The CPU architecture a platform tag (``manylinux_2_28_x86_64``) or a sysconfig platform
    (``linux-x86_64``) names, or None."""
    m = _ARCH_RE.search(platform.replace("-", "_"))
    return m.group(1) if m else None


def disagreements(meta: WheelMeta, filename: str) -> List[str]:
    """Where the wheel's contents contradict its file name ``filename``: the METADATA name and
    version, the WHEEL tags, the build info's package version and CPU architecture. Empty when none.
    """
    problems: List[str] = []
    name, version, _build, tags = parse_wheel_filename(filename)
    if meta.name is None or canonicalize_name(meta.name) != name:
        problems.append(f"METADATA Name {meta.name!r} is not the file name's {name!r}")
    try:
        same = meta.version is not None and Version(meta.version) == version
    except InvalidVersion:
        same = False
    if not same:
        problems.append(
            f"METADATA version {meta.version!r} differs from the file name's {str(version)!r} "
            f"(strict installers reject such a wheel)"
        )
    named = sorted(str(t) for t in tags)
    inside = sorted(set(meta.wheel_tags))
    if inside != named:
        problems.append(f"WHEEL says Tag {', '.join(inside) or '(none)'}, the file name {', '.join(named)}")
    info = meta.build_info
    if info:
        built_arch = platform_arch(str(info.get("platform") or ""))
        name_archs = {a for a in (platform_arch(t.platform) for t in tags) if a}
        if built_arch and name_archs and built_arch not in name_archs:
            problems.append(
                f"the compiled module was built for {info.get('platform')} ({built_arch}), the file name "
                f"says {', '.join(sorted(name_archs))}"
            )
        pv = info.get("package_version")
        try:
            if pv and Version(str(pv)).public != version.public:
                problems.append(
                    f"the compiled module's build info names version {pv}, the file name {version}"
                )
        except InvalidVersion:
            problems.append(f"the compiled module's build info names version {pv!r}, not PEP 440")
    if meta.requires_python:
        try:
            SpecifierSet(meta.requires_python)
        except InvalidSpecifier:
            problems.append(f"METADATA Requires-Python {meta.requires_python!r} is not a version specifier")
    return problems


def requires_python_problem(spec: Optional[str], python_version: str) -> Optional[str]:
    """Why a wheel requiring ``spec`` (Requires-Python) cannot serve Python ``python_version``, or None."""
    if not spec:
        return None
    try:
        ok = SpecifierSet(spec).contains(python_version, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return f"Requires-Python {spec!r} is not a valid specifier"
    return (
        None
        if ok
        else f"it requires Python {spec} (METADATA Requires-Python), the target is {python_version}"
    )


def target_problems(meta: WheelMeta, python_version: str, machine: Optional[str]) -> List[str]:
    """Why the wheel's contents cannot serve a target of ``python_version`` on ``machine``: its
    Requires-Python, and its build info's architecture. Empty when none."""
    problems = []
    why = requires_python_problem(meta.requires_python, python_version)
    if why:
        problems.append(why)
    info = meta.build_info
    built_arch = platform_arch(str(info.get("platform") or "")) if info else None
    if (
        built_arch
        and machine
        and platform_arch(machine.lower())
        and platform_arch(machine.lower()) != built_arch
    ):
        problems.append(f"the compiled module was built for {built_arch}, the target is {machine}")
    return problems
