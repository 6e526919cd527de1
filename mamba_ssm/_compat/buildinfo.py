"""The build-info record every ``mamba_ssm/_C`` carries, and THE compatibility rule.

setup.py writes ``mamba_ssm_build_info.h`` (``render_header``) defining ``MAMBA_SSM_BUILD_INFO_JSON``;
the binding embeds ``"MAMBA_SSM_BUILD_INFO_BEGIN" MAMBA_SSM_BUILD_INFO_JSON "MAMBA_SSM_BUILD_INFO_END"``
in a used static array. ``read_build_info`` finds it in the file's bytes, so the loader, the audit and
doctor judge a library without dlopen'ing it.

Pure Python (no torch), loadable by path from setup.py.
"""

from __future__ import annotations

import json
import mmap
import os
from dataclasses import asdict, dataclass, field, fields
from typing import List, Optional, Tuple

from packaging.version import InvalidVersion, Version

from .versions import TorchAbi, TorchBuild, parse_cuda_version

__all__ = [
    "BEGIN_MARKER",
    "END_MARKER",
    "SCHEMA",
    "STABLE_ABI_MIN_FLOOR",
    "BuildInfo",
    "BuildInfoError",
    "describe_torch_abi",
    "find_build_info",
    "incompatibilities",
    "parse_floor",
    "read_build_info",
    "render_header",
]

SCHEMA = 1
BEGIN_MARKER = b"MAMBA_SSM_BUILD_INFO_BEGIN"
END_MARKER = b"MAMBA_SSM_BUILD_INFO_END"
_MAX_JSON = 64 * 1024

#: The lowest floor of the stable-ABI binding (csrc/binding_api_stable.h uses the torch 2.10 stable API),
#: and the floor a build gets by default when its torch is at least this.
STABLE_ABI_MIN_FLOOR = "2.10"


def parse_floor(text: object) -> Tuple[int, int]:
    """A stable-ABI floor ``"2.10"`` -> ``(2, 10)``.

    Raises ``ValueError`` naming the text unless it is ``MAJOR.MINOR`` (digits only).
    """
    parts = str(text).strip().split(".")
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        raise ValueError(f"stable-ABI floor {text!r} is not MAJOR.MINOR (e.g. '2.10')")
    return int(parts[0]), int(parts[1])


class BuildInfoError(ValueError):
    """The build info is absent from a file or cannot be read; the message names the file/text."""


@dataclass
class BuildInfo:
    """What one ``mamba_ssm/_C`` was built with and for (see docs/architecture.md).

    ``torch_version`` is the full version (``"2.14.1+cu130"``); ``torch_cuda`` / ``torch_hip`` are
    ``torch.version.cuda`` / ``.hip`` of that torch (None for CPU); ``sass_archs`` like ``["sm_90"]``,
    ``ptx_archs`` like ``["compute_90"]``, ``gfx_archs`` like ``["gfx90a"]``; ``kernels`` like
    ``["cpu", "cuda"]``. ``torch_abi`` (:class:`TorchAbi`) is ``"classic"`` (ATen: only the torch minor it
    was built against) or ``"stable"`` (the LibTorch stable ABI: every torch from ``torch_abi_floor``, e.g.
    ``"2.10"``, on); a build info without these keys (older builds) is classic. ``nvcc_version`` is the
    compiler's ``"12.4"``: the CUDA runtime a module with CUDA kernels links (``libcudart.so.12``), which
    for a stable-ABI build may be of another major than ``torch_cuda`` (``cuda_runtime_version``).
    """

    package_version: str
    torch_version: str
    torch_cuda: Optional[str] = None
    torch_hip: Optional[str] = None
    nvcc_version: Optional[str] = None
    hipcc_version: Optional[str] = None
    cxx11_abi: bool = True
    sass_archs: List[str] = field(default_factory=list)
    ptx_archs: List[str] = field(default_factory=list)
    gfx_archs: List[str] = field(default_factory=list)
    python_tag: str = "cp39-abi3"
    platform: str = "linux-x86_64"
    git_commit: Optional[str] = None
    kernels: List[str] = field(default_factory=lambda: ["cpu"])
    schema: int = SCHEMA
    torch_abi: TorchAbi = TorchAbi.CLASSIC
    torch_abi_floor: Optional[str] = None

    def to_json(self) -> str:
        """Compact JSON with sorted keys (one line; embeddable in a C string literal)."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> BuildInfo:
        """Parse and validate; unknown keys (a newer schema's additions) are ignored.

        Raises ``BuildInfoError`` naming what is missing or of the wrong type.
        """
        if isinstance(text, (bytes, bytearray)):
            try:
                text = bytes(text).decode("utf-8")
            except UnicodeDecodeError as e:
                raise BuildInfoError(f"build info is not UTF-8: {e}") from None
        try:
            data = json.loads(text)
        except ValueError as e:
            raise BuildInfoError(f"build info is not valid JSON ({e}): {str(text)[:200]!r}") from None
        if not isinstance(data, dict):
            raise BuildInfoError(f"build info must be a JSON object, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        for key in ("package_version", "torch_version"):
            if not isinstance(data.get(key), str) or not data[key]:
                raise BuildInfoError(f"build info lacks {key!r} (a non-empty string): {data!r}"[:400])
        schema = data.get("schema", SCHEMA)
        if not isinstance(schema, int) or schema < 1:
            raise BuildInfoError(f"build info has schema {schema!r}; expected an int >= 1")
        for key in ("sass_archs", "ptx_archs", "gfx_archs", "kernels"):
            if key in data and not (
                isinstance(data[key], list) and all(isinstance(x, str) for x in data[key])
            ):
                raise BuildInfoError(f"build info {key!r} must be a list of strings, got {data[key]!r}")
        if "cxx11_abi" in data and not isinstance(data["cxx11_abi"], bool):
            raise BuildInfoError(f"build info 'cxx11_abi' must be true/false, got {data['cxx11_abi']!r}")
        raw_abi, floor = data.get("torch_abi", TorchAbi.CLASSIC), data.get("torch_abi_floor")
        abi = TorchAbi.lookup(raw_abi)
        if abi is None:
            raise BuildInfoError(
                f"build info 'torch_abi' must be one of {', '.join(TorchAbi.choices())}, got {raw_abi!r}"
            )
        if abi is TorchAbi.STABLE:
            try:
                parse_floor(floor)
            except ValueError as e:
                raise BuildInfoError(f"build info of a stable-ABI build: 'torch_abi_floor' {e}") from None
        elif floor is not None:
            raise BuildInfoError(
                f"build info 'torch_abi_floor' is {floor!r} but torch_abi is classic (expected null)"
            )
        try:
            Version(data["torch_version"])
        except InvalidVersion:
            raise BuildInfoError(
                f"build info torch_version {data['torch_version']!r} is not a PEP 440 version"
            ) from None
        return cls(**{k: v for k, v in data.items() if k in known} | {"torch_abi": abi})

    @property
    def torch_build(self) -> TorchBuild:
        """The torch this library was built against, as a ``TorchBuild``."""
        return TorchBuild(self.torch_version, self.torch_cuda, self.torch_hip, self.cxx11_abi)

    @property
    def cuda_runtime_version(self) -> Optional[str]:
        """The CUDA version (``"12.4"``) whose runtime this build's CUDA kernels need; None without CUDA.

        A stable-ABI build depends on torch only through the LibTorch stable C shim, so the torch whose
        headers compiled it may run another CUDA major; its kernels and ``libcudart.so.<major>`` are
        nvcc's: ``nvcc_version``. A classic build links torch's CUDA libraries, whose major nvcc's must
        equal (the preflight's check): ``torch_cuda``. A record without ``nvcc_version`` reads
        ``torch_cuda`` (the preflight kept the two majors equal when such records were written).
        """
        if self.is_stable_abi and "cuda" in self.kernels and self.nvcc_version:
            return self.nvcc_version
        return self.torch_cuda

    @property
    def is_stable_abi(self) -> bool:
        """Built on the LibTorch stable ABI (serves every torch from ``torch_abi_floor`` on)."""
        return self.torch_abi == TorchAbi.STABLE

    def describe_abi(self) -> str:
        """The torch ABI in words (``describe_torch_abi``)."""
        return describe_torch_abi(self.torch_abi, self.torch_abi_floor, self.torch_version, self.cxx11_abi)


def describe_torch_abi(
    torch_abi: str, floor: Optional[str], torch_version: object, cxx11_abi: Optional[bool]
) -> str:
    """A build's torch ABI in words: ``stable ABI, torch >= 2.10 (built with 2.13.0)`` or ``classic ABI,
    torch 2.14 only (built with 2.14.1+cu130, cxx11abi TRUE)`` (the build-info values; doctor passes
    them from the JSON). An unreadable torch version is shown as it is."""
    try:
        public, major_minor = Version(str(torch_version)).public, TorchBuild(str(torch_version)).major_minor
    except (InvalidVersion, ValueError):
        public = major_minor = str(torch_version)
    if torch_abi == TorchAbi.STABLE:
        return f"stable ABI, torch >= {floor} (built with {public})"
    abi = "?" if cxx11_abi is None else ("TRUE" if cxx11_abi else "FALSE")
    return f"classic ABI, torch {major_minor} only (built with {torch_version}, cxx11abi {abi})"


def find_build_info(data: bytes | mmap.mmap) -> Optional[bytes]:
    """The JSON bytes between the markers in ``data`` (bytes or mmap), or None when absent.

    The marker text can also occur on its own (e.g. in this module's bytecode); only an occurrence
    directly followed by ``{`` counts.
    """
    start = 0
    while True:
        i = data.find(BEGIN_MARKER, start)
        if i < 0:
            return None
        j = i + len(BEGIN_MARKER)
        if data[j : j + 1] == b"{":
            k = data.find(END_MARKER, j, j + _MAX_JSON)
            if k < 0:
                return None
            return bytes(data[j:k])
        start = j


def read_build_info(path: str | os.PathLike[str]) -> BuildInfo:
    """Read the build info embedded in the shared object at ``path`` without loading it.

    Raises ``BuildInfoError`` naming the path when the file cannot be read, carries no markers (not a
    mamba_ssm build, or built without ``mamba_ssm_build_info.h``) or the JSON is corrupt.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                raise BuildInfoError(f"{path}: empty file, no build info (reinstall mamba-ssm)")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                raw = find_build_info(m)
    except OSError as e:
        raise BuildInfoError(f"{path}: cannot read build info ({e})") from None
    if raw is None:
        raise BuildInfoError(
            f"{path}: no MAMBA_SSM_BUILD_INFO block found; this is not a mamba_ssm._C built by this "
            "package's setup.py (rebuild or reinstall mamba-ssm)"
        )
    try:
        return BuildInfo.from_json(raw)
    except BuildInfoError as e:
        raise BuildInfoError(f"{path}: corrupt build info: {e}") from None


def render_header(info: BuildInfo) -> str:
    """The C header text defining ``MAMBA_SSM_BUILD_INFO_JSON`` as a string literal of ``info``'s JSON.

    Non-ASCII and special characters are escaped (octal, so no hex escape swallows following digits).
    """
    js = info.to_json()
    out = []
    for ch in js.encode("utf-8"):
        c = chr(ch)
        if c in ('"', "\\"):
            out.append("\\" + c)
        elif 0x20 <= ch < 0x7F and c != "?":  # '?' escaped to avoid trigraphs
            out.append(c)
        else:
            out.append(f"\\{ch:03o}")
    literal = "".join(out)
    return (
        "/* Generated by setup.py: the build info of mamba_ssm._C. Do not edit. */\n"
        "#pragma once\n"
        f'#define MAMBA_SSM_BUILD_INFO_JSON "{literal}"\n'
    )


def incompatibilities(build: BuildInfo, runtime: TorchBuild) -> List[str]:
    """Why a library built as ``build`` must not be loaded into ``runtime`` torch; empty when compatible.

    The rule (one for the loader, the resolver and the audit). A classic build: the same torch
    major.minor (for a pre-release, nightly, NGC or source-built torch on either side: the exact same
    version string); the same C++ ABI (skipped when the runtime's is unknown); the same CUDA major (or
    both without CUDA); the same ROCm major.minor (or both without ROCm). A stable-ABI build
    (``torch_abi == "stable"``): any torch whose major.minor is at least ``torch_abi_floor`` (nightlies
    included); with CUDA kernels, the CUDA major of the runtime they link (``cuda_runtime_version``:
    nvcc's, whatever the CUDA of the torch whose headers compiled it); with HIP kernels, the same ROCm major.minor; a
    CPU-only one under any torch (a CUDA or ROCm torch included: its CPU kernels run there). GPU coverage
    is ``archs.coverage``'s business.

    Each entry is one sentence naming both values and the fix.
    """
    problems: List[str] = []
    fix = (
        "install the mamba-ssm wheel built for this torch (python -m mamba_ssm install-kernels) or "
        "rebuild from source (python -m mamba_ssm doctor prints the pinned command)"
    )
    if build.is_stable_abi:
        return _stable_incompatibilities(build, runtime, fix)
    built = build.torch_build
    if built.needs_exact_match or runtime.needs_exact_match:
        if build.torch_version != runtime.version:
            which = "a pre-release/nightly/NGC/source" if runtime.needs_exact_match else "such a"
            problems.append(
                f"built against torch {build.torch_version} but running torch {runtime.version}; with "
                f"{which} torch only the exact same torch build is compatible: {fix}"
            )
    elif built.major_minor != runtime.major_minor:
        problems.append(
            f"built against torch {built.major_minor} ({build.torch_version}) but running torch "
            f"{runtime.major_minor} ({runtime.version}); torch's C++ ABI changes between minor versions: {fix}"
        )
    if runtime.cxx11_abi is not None and bool(build.cxx11_abi) != bool(runtime.cxx11_abi):
        problems.append(
            f"built with _GLIBCXX_USE_CXX11_ABI={int(bool(build.cxx11_abi))} but torch uses "
            f"_GLIBCXX_USE_CXX11_ABI={int(bool(runtime.cxx11_abi))}: {fix}"
        )
    b_cuda, r_cuda = built.cuda_major, runtime.cuda_major
    if b_cuda != r_cuda:
        b = f"CUDA {built.cuda_version}" if b_cuda is not None else "a torch without CUDA"
        r = f"CUDA {runtime.cuda_version}" if r_cuda is not None else "without CUDA"
        problems.append(f"built against {b} but torch runs {r} (CUDA major must match): {fix}")
    b_rocm, r_rocm = built.rocm_version, runtime.rocm_version
    if b_rocm != r_rocm:
        b = f"ROCm {b_rocm}" if b_rocm else "a torch without ROCm"
        r = f"ROCm {r_rocm}" if r_rocm else "without ROCm"
        problems.append(f"built against {b} but torch runs {r} (ROCm major.minor must match): {fix}")
    return problems


def _stable_incompatibilities(build: BuildInfo, runtime: TorchBuild, fix: str) -> List[str]:
    """``incompatibilities`` for a stable-ABI build (see there)."""
    problems: List[str] = []
    floor = parse_floor(build.torch_abi_floor)
    if tuple(runtime.release[:2]) < floor:
        problems.append(
            f"built on the stable ABI for torch >= {build.torch_abi_floor} (with {build.torch_version}) but "
            f"running torch {runtime.version}, older than that floor: {fix}"
        )
    built = build.torch_build
    cuda = build.cuda_runtime_version
    try:
        cuda_major: Optional[int] = parse_cuda_version(cuda)[0] if cuda else None
    except ValueError:
        cuda_major = None  # unreadable: matches no CUDA torch, so the rule below refuses it
    if "cuda" in build.kernels and (cuda_major is None or cuda_major != runtime.cuda_major):
        r = f"CUDA {runtime.cuda_version}" if runtime.cuda_major is not None else "without CUDA"
        problems.append(
            f"built with CUDA kernels for CUDA {cuda} "
            + (f"(libcudart.so.{cuda_major})" if cuda_major is not None else "(an unreadable CUDA version)")
            + f" but torch {runtime.version} "
            f"runs {r} (a stable-ABI build still needs the same CUDA major): {fix}"
        )
    if "hip" in build.kernels and built.rocm_version != runtime.rocm_version:
        r = f"ROCm {runtime.rocm_version}" if runtime.rocm_version else "without ROCm"
        problems.append(
            f"built with HIP kernels for ROCm {built.rocm_version} but torch {runtime.version} runs {r} (a "
            f"stable-ABI build still needs the same ROCm major.minor): {fix}"
        )
    return problems
