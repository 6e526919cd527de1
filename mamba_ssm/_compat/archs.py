"""CUDA compute capabilities: arch-list syntax, what each nvcc can target, gencode flags, and whether a
binary's SASS/PTX covers a given GPU, and which GPUs no build for a torch's CUDA can serve. ROCm gfx
targets: syntax and a default list.

Pure Python (no torch), loadable by path from setup.py.

Terms (CUDA C++ Programming Guide, "Compute Capability"; nvcc manual, "GPU Compilation"):

* SASS ``sm_XY`` (a cubin for compute capability X.Y) runs on GPUs of the same major X with minor >= Y.
* ``sm_XYa`` (architecture-specific features, e.g. ``sm_90a``) runs on exactly X.Y.
* ``sm_XYf`` (family-specific, nvcc 12.9+) runs on the same major X with minor >= Y.
* PTX ``compute_XY`` is JIT-compiled by the driver for any GPU of capability >= X.Y;
  ``compute_XYa`` only for exactly X.Y, ``compute_XYf`` for the same major with minor >= Y.

Capabilities are written ``sm_<major><minor>`` with a one-digit minor: ``sm_90`` is 9.0, ``sm_121`` 12.1.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Iterable, List, NamedTuple, Optional, Sequence, Tuple

__all__ = [
    "KNOWN_BAD",
    "Arch",
    "ArchSpec",
    "arch_list_assignment",
    "coverage",
    "default_arch_spec",
    "default_gfx_archs",
    "gencode_flags",
    "gpu_unservable",
    "known_bad",
    "nvcc_supported_archs",
    "parse_arch",
    "parse_arch_list",
    "parse_capability",
    "parse_gfx_list",
    "to_arch_list",
    "to_torch_arch_list",
    "unsupported_archs",
]


class Arch(NamedTuple):
    """One target: ``major``, ``minor``, ``suffix`` ("", "a" or "f")."""

    major: int
    minor: int
    suffix: str = ""

    @property
    def digits(self) -> str:
        return f"{self.major}{self.minor}{self.suffix}"

    @property
    def sass(self) -> str:
        """``"sm_90a"``."""
        return f"sm_{self.digits}"

    @property
    def ptx(self) -> str:
        """``"compute_90a"``."""
        return f"compute_{self.digits}"

    @property
    def capability(self) -> Tuple[int, int]:
        return (self.major, self.minor)


@dataclass(frozen=True)
class ArchSpec:
    """The targets of one build: SASS (``"sm_80"``, ...) and PTX (``"compute_90"``, ...), sorted."""

    sass: Tuple[str, ...] = ()
    ptx: Tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.sass or self.ptx)


_ARCH_RE = re.compile(r"^(?:(sm|compute)_)?(\d+)(?:\.(\d))?([af])?$", re.IGNORECASE)

# torch's named architectures in TORCH_CUDA_ARCH_LIST (GPU generation -> capabilities).
_NAMED = {
    "kepler+tesla": "3.7",
    "kepler": "3.5+PTX",
    "maxwell+tegra": "5.3",
    "maxwell": "5.0;5.2+PTX",
    "pascal": "6.0;6.1+PTX",
    "volta+tegra": "7.2",
    "volta": "7.0+PTX",
    "turing": "7.5+PTX",
    "ampere+tegra": "8.7",
    "ampere": "8.0;8.6+PTX",
    "ada": "8.9+PTX",
    "hopper": "9.0+PTX",
}


def _sort_key(name: str) -> Tuple[int, int, str]:
    a = parse_arch(name)
    return (a.major, a.minor, a.suffix)


def parse_arch(token: str) -> Arch:
    """Parse one target: ``"sm_90a"``, ``"compute_90"``, ``"90"``, ``"9.0"``, ``"121"``, ``"12.1f"``.

    Raises ``ValueError`` naming the token when it is not a compute capability.
    """
    t = str(token).strip()
    m = _ARCH_RE.match(t)
    if not m:
        raise ValueError(
            f"{token!r} is not a CUDA architecture: write e.g. '9.0', '90', 'sm_90', 'sm_90a' or 'compute_90'"
        )
    _, num, dotted_minor, suffix = m.groups()
    if dotted_minor is not None:
        major, minor = int(num), int(dotted_minor)
    else:
        if len(num) < 2:
            raise ValueError(
                f"{token!r} is not a CUDA architecture: a capability needs a major and a one-digit minor "
                "('90' or '9.0' for compute capability 9.0)"
            )
        major, minor = int(num[:-1]), int(num[-1])
    if major < 1:
        raise ValueError(f"{token!r} is not a CUDA architecture (major version {major})")
    return Arch(major, minor, (suffix or "").lower())


def parse_capability(text: object) -> Tuple[int, int]:
    """``"9.0"`` / ``"90"`` / ``"sm_90"`` / ``(9, 0)`` -> ``(9, 0)``. ``ValueError`` naming bad input."""
    if isinstance(text, (tuple, list)) and len(text) == 2:
        return int(text[0]), int(text[1])
    return parse_arch(str(text)).capability


def parse_arch_list(text: str) -> ArchSpec:
    """Parse an arch list in torch's ``TORCH_CUDA_ARCH_LIST`` syntax or ours (``MAMBA_CUDA_ARCHS``).

    Accepted, separated by ``;``, ``,`` or spaces: ``"8.0;9.0+PTX"``, ``"80 90"``, ``"90+PTX"``,
    ``"sm_90a"``, ``"compute_90"`` (PTX only), torch's generation names (``"Ampere"``, ``"Hopper"``).
    ``X+PTX`` adds both the SASS and the PTX of X. Returns an ``ArchSpec`` with sorted, de-duplicated
    entries.

    Raises ``ValueError`` naming the offending token for anything else, including ``"native"`` and
    ``"all"`` (a build machine may have no GPU; list the archs explicitly).
    """
    if text is None or not str(text).strip():
        raise ValueError("empty CUDA arch list: give e.g. '9.0', '80;90' or '8.0;9.0+PTX'")
    tokens = [t for t in re.split(r"[;,\s]+", str(text).strip()) if t]
    sass: set[str] = set()
    ptx: set[str] = set()
    for tok in tokens:
        low = tok.lower()
        if low in ("native", "all", "all-major") or low.startswith("all"):
            raise ValueError(
                f"CUDA arch {tok!r} is not accepted: the build machine may have no GPU and 'all' builds "
                "every arch nvcc knows; list the archs explicitly, e.g. MAMBA_CUDA_ARCHS='80;90+PTX'"
            )
        if low in _NAMED:
            sub = parse_arch_list(_NAMED[low])
            sass.update(sub.sass)
            ptx.update(sub.ptx)
            continue
        with_ptx = low.endswith("+ptx")
        name = tok[: -len("+ptx")] if with_ptx else tok
        kind = "compute" if name.lower().startswith("compute_") else "sm"
        arch = parse_arch(name)
        if kind == "compute":
            ptx.add(arch.ptx)
        else:
            sass.add(arch.sass)
        if with_ptx:
            ptx.add(arch.ptx)
    return ArchSpec(tuple(sorted(sass, key=_sort_key)), tuple(sorted(ptx, key=_sort_key)))


def _written(spec: ArchSpec, dotted: bool) -> str:
    """``X`` per SASS target (``X+PTX`` with its PTX), ``compute_XY`` for a PTX target without its
    SASS, ``;``-separated; ``X`` is ``9.0a`` (``dotted``) or ``90a``."""
    out: List[str] = []
    sass = {parse_arch(s) for s in spec.sass}
    ptx = {parse_arch(p) for p in spec.ptx}
    for a in sorted(sass | ptx):
        base = f"{a.major}.{a.minor}{a.suffix}" if dotted else a.digits
        if a in sass:
            out.append(base + ("+PTX" if a in ptx else ""))
        else:
            out.append(a.ptx)
    return ";".join(out)


def to_torch_arch_list(spec: ArchSpec) -> str:
    """The spec in ``TORCH_CUDA_ARCH_LIST`` syntax: sm_80 + sm_90 + compute_90 -> ``"8.0;9.0+PTX"``.

    A PTX target without the matching SASS cannot be written in torch's syntax; it is listed as
    ``compute_XY``.
    """
    return _written(spec, dotted=True)


def to_arch_list(spec: ArchSpec) -> str:
    """The spec in ``MAMBA_CUDA_ARCHS`` syntax, as README.md and docs/build.md write it: sm_90 -> ``"90"``,
    sm_80 + sm_90 + compute_90 -> ``"80;90+PTX"``, sm_90a -> ``"90a"``, compute_90 alone ->
    ``"compute_90"``. :func:`parse_arch_list` reads it back to ``spec``."""
    return _written(spec, dotted=False)


def arch_list_assignment(spec: ArchSpec) -> str:
    """``MAMBA_CUDA_ARCHS=<to_arch_list(spec)>`` as a user pastes it into a POSIX shell:
    ``MAMBA_CUDA_ARCHS=90``, ``MAMBA_CUDA_ARCHS='80;90+PTX'`` (``shlex.quote``: an unquoted ``;`` ends
    the command)."""
    return f"MAMBA_CUDA_ARCHS={shlex.quote(to_arch_list(spec))}"


# ----------------------------------------------------------------------------- nvcc support table
# Real (SASS) architectures each CUDA release's nvcc accepts, from the CUDA Toolkit release notes and
# `nvcc --list-gpu-code` (13.0 checked on this machine: sm_75 ... sm_121 with sm_88 and sm_110).
_BASE_11 = (35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80)


def _table(nvcc: Tuple[int, int]) -> Tuple[int, ...]:
    major, minor = nvcc
    if major < 11:
        raise ValueError(
            f"nvcc {major}.{minor} is too old for torch 2.x builds of mamba-ssm; install CUDA 11.8 or newer"
        )
    if major == 11:
        archs = list(_BASE_11)
        if minor >= 1:
            archs.append(86)
        if minor >= 4:
            archs.append(87)
        if minor >= 8:
            archs += [89, 90]
        return tuple(archs)
    if major == 12:
        # 12.0 dropped Kepler (sm_35/sm_37).
        archs = [50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90]
        if minor >= 8:
            archs += [100, 101, 120]
        if minor >= 9:
            archs += [103, 121]
        return tuple(archs)
    # 13.x dropped sm_50 ... sm_72 and renamed sm_101 to sm_110; added sm_88.
    return (75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121)


def _has_arch_specific(nvcc: Tuple[int, int], num: int) -> bool:
    # sm_90a since 12.0; sm_100a/101a/120a since 12.8; sm_103a/121a since 12.9; family 'f' since 12.9.
    return num >= 90 and nvcc >= (12, 0)


def nvcc_supported_archs(nvcc: Tuple[int, int], variants: bool = False) -> Tuple[str, ...]:
    """The SASS archs nvcc ``major.minor`` can compile for, oldest first: ``(13, 0)`` -> ``("sm_75", ...,
    "sm_121")``.

    With ``variants=True`` also the architecture-specific (``sm_90a``; nvcc >= 12.0) and family-specific
    (``sm_100f``; nvcc >= 12.9, Blackwell on) targets. Raises ``ValueError`` for nvcc older than 11.
    """
    nvcc = (int(nvcc[0]), int(nvcc[1]))
    nums = _table(nvcc)
    out = [f"sm_{n}" for n in nums]
    if variants:
        for n in nums:
            if _has_arch_specific(nvcc, n):
                out.append(f"sm_{n}a")
            if n >= 100 and nvcc >= (12, 9):
                out.append(f"sm_{n}f")
    return tuple(sorted(out, key=_sort_key))


# (arch, first bad nvcc, first good nvcc or None, reason)
KNOWN_BAD: Tuple[Tuple[str, Tuple[int, int], Optional[Tuple[int, int]], str], ...] = (
    (
        "sm_103",
        (13, 0),
        (14, 0),
        "nvcc 13.x miscompiles sm_103 kernels (seen with causal-conv1d); sm_100f or PTX covers B300 instead",
    ),
)


def known_bad(arch: str, nvcc: Tuple[int, int]) -> Optional[str]:
    """The reason ``arch`` must not be built with nvcc ``major.minor``, or None when the pair is fine."""
    a = parse_arch(arch)
    for bad, first, fixed, reason in KNOWN_BAD:
        b = parse_arch(bad)
        if (
            (a.major, a.minor) == (b.major, b.minor)
            and tuple(nvcc) >= first
            and (fixed is None or tuple(nvcc) < fixed)
        ):
            return f"{a.sass} with nvcc {nvcc[0]}.{nvcc[1]}: {reason}"
    return None


def unsupported_archs(spec: ArchSpec, nvcc: Tuple[int, int]) -> List[str]:
    """One sentence per target in ``spec`` that nvcc ``major.minor`` cannot compile or is known bad."""
    supported = set(nvcc_supported_archs(nvcc, variants=True))
    problems = []
    for name in list(spec.sass) + list(spec.ptx):
        a = parse_arch(name)
        if a.sass not in supported:
            plain = list(nvcc_supported_archs(nvcc))
            problems.append(
                f"{name} is not supported by nvcc {nvcc[0]}.{nvcc[1]} (it targets {plain[0]} ... {plain[-1]}); "
                "drop it from MAMBA_CUDA_ARCHS / TORCH_CUDA_ARCH_LIST or use another CUDA toolkit"
            )
            continue
        reason = known_bad(a.sass, nvcc) if name.startswith("sm_") else None
        if reason:
            problems.append(reason)
    return problems


def default_arch_spec(torch_arch_list: Iterable[str], nvcc: Tuple[int, int]) -> ArchSpec:
    """The default targets: the SASS archs torch was built for (``torch.cuda.get_arch_list()``) that
    nvcc supports, minus known-bad (arch, nvcc) pairs, plus PTX for the newest one kept.

    ``["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]`` with nvcc 13.0 ->
    sass ``sm_75 ... sm_120``, ptx ``("compute_120",)``. Raises ``ValueError`` when nothing is left.
    """
    supported = set(nvcc_supported_archs(nvcc, variants=True))
    wanted = []
    for entry in torch_arch_list:
        e = str(entry).strip()
        if not e.startswith("sm_"):
            continue  # torch lists its own PTX as compute_XY; we add ours below
        if e in supported and not known_bad(e, nvcc):
            wanted.append(e)
    wanted = sorted(set(wanted), key=_sort_key)
    if not wanted:
        raise ValueError(
            f"none of torch's archs {list(torch_arch_list)} can be built with nvcc {nvcc[0]}.{nvcc[1]}; "
            "set MAMBA_CUDA_ARCHS (e.g. '90') or TORCH_CUDA_ARCH_LIST"
        )
    newest = parse_arch(wanted[-1])
    return ArchSpec(tuple(wanted), (Arch(newest.major, newest.minor).ptx,))


def gencode_flags(spec: ArchSpec) -> List[str]:
    """nvcc flags for ``spec``: ``-gencode=arch=compute_90,code=sm_90`` per SASS and
    ``-gencode=arch=compute_90,code=compute_90`` per PTX."""
    flags = []
    for s in spec.sass:
        a = parse_arch(s)
        flags.append(f"-gencode=arch={a.ptx},code={a.sass}")
    for p in spec.ptx:
        a = parse_arch(p)
        flags.append(f"-gencode=arch={a.ptx},code={a.ptx}")
    return flags


def _runs_on(target: Arch, cap: Tuple[int, int], jit: bool) -> bool:
    major, minor = cap
    if target.suffix == "a":
        return (major, minor) == (target.major, target.minor)
    if target.suffix == "f":
        return major == target.major and minor >= target.minor
    if jit:
        return (major, minor) >= (target.major, target.minor)
    return major == target.major and minor >= target.minor


def coverage(capability: object, sass: Sequence[str], ptx: Sequence[str]) -> Optional[str]:
    """Whether a binary with these SASS and PTX targets runs on a GPU of ``capability``.

    Args:
        capability: ``(major, minor)``, e.g. ``(9, 0)`` for H100/H200 (also ``"9.0"``).
        sass: e.g. ``["sm_80", "sm_90"]``.
        ptx: e.g. ``["compute_90"]``.

    Returns None when some target runs there (SASS of the same major with minor <= the GPU's, or PTX
    the driver can JIT-compile: any capability >= its own), else the reason in one sentence (the fix
    depends on the torch the GPU would run with: :func:`mamba_ssm._advice.coverage_fix`).
    """
    cap = parse_capability(capability)
    for s in sass:
        if _runs_on(parse_arch(s), cap, jit=False):
            return None
    for p in ptx:
        if _runs_on(parse_arch(p), cap, jit=True):
            return None
    have = ", ".join(list(sass) + list(ptx)) or "no GPU code"
    return (
        f"a GPU of compute capability {cap[0]}.{cap[1]} (sm_{cap[0]}{cap[1]}) is not covered by this build "
        f"({have})"
    )


#: The last minor release of each older CUDA major (the nvcc whose arch table :func:`gpu_unservable`
#: reads for it).
_LAST_MINOR = {12: 9, 11: 8}
#: The command that installs our wheel for the running torch (``_advice.install_kernels_command()``
#: without an index; this module imports nothing of the package).
_INSTALL_KERNELS = "python -m mamba_ssm install-kernels"


def gpu_unservable(capability: str | None, torch_cuda: str | None) -> str | None:
    """Why no mamba-ssm kernels for a torch built with CUDA ``torch_cuda`` (``"13.0"``) can run on a GPU of
    compute capability ``capability`` (``"6.0"``), prebuilt or built from source, and the real fix; None
    when they can (or either value is unknown).

    A GPU runs SASS of its own major not newer than it, or PTX not newer than it, so a GPU older than
    the oldest architecture the toolkit of that CUDA can target (CUDA 13: sm_75; 12: sm_50; 11: sm_35,
    NVIDIA's release notes, :func:`nvcc_supported_archs`) runs none of it: its GPU ops use the PyTorch
    fallback. The fix is a torch built for the newest older CUDA whose toolkit still targets it, and
    our wheel for that torch.
    """
    if capability is None or torch_cuda is None:
        return None
    try:
        cap = parse_capability(capability)
        cuda = tuple(int(x) for x in str(torch_cuda).split(".")[:2])
        oldest = parse_arch(nvcc_supported_archs((cuda[0], cuda[1]))[0])
    except (TypeError, ValueError, IndexError):
        return None
    if cap >= oldest.capability:
        return None
    sm = f"sm_{cap[0]}{cap[1]}"
    older = [
        m
        for m in sorted(_LAST_MINOR, reverse=True)
        if m < cuda[0] and cap >= parse_arch(nvcc_supported_archs((m, _LAST_MINOR[m]))[0]).capability
    ]
    text = (
        f"the GPU ({sm}) is older than every architecture CUDA {cuda[0]}.{cuda[1]} can build for (oldest "
        f"{oldest.sass}), so no mamba-ssm kernels for this torch can run on it, prebuilt or built from source: "
        f"its GPU ops run on the PyTorch fallback (slower)"
    )
    if older:
        text += (
            f". The real fix: a torch built for CUDA {older[0]} whose arch list still has {sm} "
            f"(torch.cuda.get_arch_list()), then `{_INSTALL_KERNELS}` takes the mamba-ssm "
            f"cu{older[0]} wheel for it"
        )
    else:
        text += ". No CUDA toolkit that torch 2.x supports targets it any more"
    return text


# ----------------------------------------------------------------------------- ROCm gfx targets
_GFX_RE = re.compile(r"^gfx[0-9a-f]{3,4}(?::[a-z0-9+\-:]+)?$", re.IGNORECASE)


def parse_gfx_list(text: str) -> Tuple[str, ...]:
    """Parse ``PYTORCH_ROCM_ARCH`` / ``HIP_ARCHITECTURES`` (``"gfx90a;gfx942"``, also commas/spaces).

    Raises ``ValueError`` naming the token for anything that is not a ``gfx`` target, including
    ``"native"`` (it needs a GPU on the build machine).
    """
    tokens = [t for t in re.split(r"[;,\s]+", str(text or "").strip()) if t]
    if not tokens:
        raise ValueError("empty ROCm arch list: give e.g. PYTORCH_ROCM_ARCH='gfx90a;gfx942'")
    out = []
    for t in tokens:
        if not _GFX_RE.match(t):
            raise ValueError(
                f"{t!r} is not a ROCm GPU target: list gfx targets explicitly, e.g. 'gfx90a;gfx942;gfx1100' "
                "('native' needs a GPU on the build machine)"
            )
        if t not in out:
            out.append(t)
    return tuple(out)


def default_gfx_archs(rocm: Optional[Tuple[int, int]]) -> Tuple[str, ...]:
    """Default ROCm targets for ROCm ``major.minor``: CDNA2 (gfx90a, MI200) and RDNA3 (gfx1100) always,
    CDNA3 (gfx942, MI300) from ROCm 6.0, RDNA4 (gfx1200/gfx1201) from 6.4, CDNA4 (gfx950) from 7.0."""
    archs = ["gfx90a", "gfx1100"]
    if rocm is not None and tuple(rocm) >= (6, 0):
        archs.insert(1, "gfx942")
    if rocm is not None and tuple(rocm) >= (6, 4):
        archs += ["gfx1200", "gfx1201"]
    if rocm is not None and tuple(rocm) >= (7, 0):
        archs.insert(2, "gfx950")
    return tuple(archs)
