"""Selection: which wheel of a manifest serves a target environment; a pure function.

``select(env, manifest, sdist_version)`` checks every wheel and returns a :class:`Selection`: the
chosen wheel, the ranked compatible candidates, and each rejected wheel with its reasons. Rules:

* the wheel's version equals the sdist's (local version label ignored);
* its platform / Python / ABI tags are among the target's (``packaging.tags``: an aarch64 target never
  takes an x86_64 wheel, a musllinux target never a manylinux one, nor an unrepaired ``linux_*`` one);
* its Requires-Python (recorded in the manifest by the index) admits the target's Python;
* THE compatibility rule, ``mamba_ssm._compat.buildinfo.incompatibilities`` (classic wheels: torch
  major.minor or the exact build, C++ ABI, CUDA major, ROCm major.minor; stable-ABI wheels: every torch
  from the floor on with the same CUDA major / ROCm major.minor); a CPU-only torch gets a CPU wheel and
  a CUDA / ROCm torch never a CPU-only one (its kernels would not run on the GPU);
* the NVIDIA driver is at least the minimum of the wheel's CUDA major (CUDA minor-version
  compatibility) and, when a GPU can only run the wheel's PTX (JIT), at least the driver of the
  toolkit that produced that PTX (:data:`TOOLKIT_DRIVER`);
* every visible GPU is covered (``mamba_ssm._compat.archs.coverage``; ROCm: its gfx target is built);
* with hashes pinned into the sdist, the wheel is one of them with the same sha256.

Ranking of the wheels that pass (:func:`rank_key`): a stable-ABI wheel before a classic one for the
same target (it keeps working when torch is upgraded, for about 0.1-0.6 us more per op call:
docs/benchmarks.md), the highest floor first among stable ones; then a classic wheel built against the
exact torch build; then SASS over PTX JIT; then the most specific wheel tag.

No wheel passing is a result of its own (``Selection.chosen is None``, status ``no-candidate``); what
to do then (source build / pure-Python package / error) is the caller's business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

from packaging.version import InvalidVersion, Version

from .._compat.archs import coverage, gpu_unservable
from .._compat.buildinfo import (
    STABLE_ABI_MIN_FLOOR,
    BuildInfo,
    BuildInfoError,
    incompatibilities,
    parse_floor,
)
from .._compat.variant import VariantKey
from .._compat.versions import TorchAbi
from .environment import Environment
from .manifest import Manifest, Pin, WheelEntry
from .record import Rejection, SelectionStatus, SelectionSummary
from .wheelmeta import requires_python_problem

if TYPE_CHECKING:
    from .._compat.versions import TorchBuild

__all__ = [
    "CUDA_MAJOR_MIN_DRIVER",
    "TOOLKIT_DRIVER",
    "Selection",
    "min_driver_for_toolkit",
    "parse_driver_version",
    "select",
    "served_by",
]

#: Minimum Linux driver for any toolkit of a CUDA major (CUDA minor-version compatibility), from
#: NVIDIA's CUDA Toolkit release notes ("CUDA Toolkit and Minimum Required Driver Version for CUDA
#: Minor Version Compatibility").
CUDA_MAJOR_MIN_DRIVER: dict[int, str] = {11: "450.80.02", 12: "525.60.13", 13: "580"}

#: Linux driver shipped with each toolkit (the same release notes, "CUDA Toolkit and Corresponding
#: Driver Versions"): PTX from that toolkit needs at least this driver to JIT-compile.
TOOLKIT_DRIVER: dict[tuple[int, int], str] = {
    (11, 0): "450.36.06",
    (11, 1): "455.23",
    (11, 2): "460.27.03",
    (11, 3): "465.19.01",
    (11, 4): "470.42.01",
    (11, 5): "495.29.05",
    (11, 6): "510.39.01",
    (11, 7): "515.43.04",
    (11, 8): "520.61.05",
    (12, 0): "525.60.13",
    (12, 1): "530.30.02",
    (12, 2): "535.54.03",
    (12, 3): "545.23.06",
    (12, 4): "550.54.14",
    (12, 5): "555.42.02",
    (12, 6): "560.28.03",
    (12, 8): "570.26",
    (12, 9): "575.51.03",
    (13, 0): "580.65.06",
}

_ARCH_RE = re.compile(r"(x86_64|aarch64|i686|ppc64le|s390x|armv7l|riscv64|arm64|universal2)$")


def parse_driver_version(text: str) -> tuple[int, ...]:
    """``"580.65.06"`` -> ``(580, 65, 6)``. Raises ValueError naming the text."""
    m = re.match(r"^\s*(\d+(?:\.\d+)*)", str(text))
    if not m:
        raise ValueError(f"driver version {text!r} is not dotted numbers (e.g. '580.65.06')")
    return tuple(int(x) for x in m.group(1).split("."))


def min_driver_for_toolkit(toolkit: tuple[int, int]) -> tuple[str, bool]:
    """(the driver PTX of ``toolkit`` (major, minor) needs, exact?) — an unknown minor takes the
    nearest older known toolkit of the same major (exact False); an unknown major the newest known."""
    if toolkit in TOOLKIT_DRIVER:
        return TOOLKIT_DRIVER[toolkit], True
    older = [k for k in TOOLKIT_DRIVER if k[0] == toolkit[0] and k < toolkit]
    if older:
        return TOOLKIT_DRIVER[max(older)], False
    return TOOLKIT_DRIVER[max(TOOLKIT_DRIVER)], False


@dataclass(frozen=True)
class Selection:
    """The result of :func:`select`.

    ``candidates`` are the compatible wheels, best first (``chosen`` is ``candidates[0]``); ``rejected``
    the others with their reasons, nearest first; ``looked_for`` says what a fitting wheel would be;
    ``served`` what the index's wheels serve, one line per distinct target (:func:`served_by`);
    ``gpu_unservable`` each visible GPU that no build for the target's torch can run on (older than
    every arch its CUDA's toolkit targets): why, and the real fix
    (:func:`mamba_ssm._compat.archs.gpu_unservable`).
    """

    status: SelectionStatus
    chosen: WheelEntry | None
    candidates: tuple[WheelEntry, ...]
    rejected: tuple[Rejection, ...]
    looked_for: str
    notes: tuple[str, ...] = ()
    served: tuple[str, ...] = ()
    gpu_unservable: tuple[str, ...] = ()

    def summary(self) -> SelectionSummary:
        """What the install record keeps of it (file names instead of entries)."""
        return SelectionSummary(
            status=self.status,
            chosen=self.chosen.filename if self.chosen else None,
            candidates=tuple(c.filename for c in self.candidates),
            rejected=self.rejected,
            looked_for=self.looked_for,
            notes=self.notes,
            served=self.served,
            gpu_unservable=self.gpu_unservable,
        )

    def explain(self, limit: int = 3) -> str:
        """One paragraph: what was looked for, the outcome, the nearest rejected wheels and why."""
        if self.status is SelectionStatus.CHOSEN and self.chosen is not None:
            text = f"Looked for {self.looked_for}; chose {self.chosen.filename}"
            if len(self.candidates) > 1:
                text += f" (best of {len(self.candidates)} compatible wheels)"
            text += "."
        elif self.status is SelectionStatus.NO_TORCH:
            text = f"Looked for {self.looked_for}: torch is not installed in the target environment."
        else:
            text = f"Looked for {self.looked_for}; no wheel of the index fits."
        if self.rejected and self.status is not SelectionStatus.CHOSEN:
            near = "; ".join(f"{f}: {r}" for f, r in self.rejected[:limit])
            more = len(self.rejected) - limit
            text += f" Nearest: {near}" + (f" (and {more} more rejected)." if more > 0 else ".")
        if self.notes:
            text += " Note: " + "; ".join(self.notes) + "."
        return text


def _arch_of(platform_tag: str) -> str | None:
    m = _ARCH_RE.search(platform_tag)
    return m.group(1) if m else None


def _tag_reason(entry: WheelEntry, env: Environment) -> str | None:
    wheel_tags = entry.tags
    env_tags = set(env.tags)
    env_plats = env.platform_tags
    wheel_plats = sorted({t.platform for t in wheel_tags})
    env_musl = any(p.startswith("musllinux") for p in env_plats)
    env_many = any(p.startswith("manylinux") for p in env_plats)
    # packaging's tags for a musl interpreter include linux_*; an unrepaired wheel is glibc-built
    unrepaired_on_musl = env_musl and not env_many and all(p.startswith("linux_") for p in wheel_plats)
    if any(str(t) in env_tags for t in wheel_tags) and not unrepaired_on_musl:
        return None
    env_arch = _arch_of(env_plats[0]) if env_plats else env.machine
    wheel_arch = {a for a in (_arch_of(p) for p in wheel_plats) if a}
    if wheel_arch and env_arch and env_arch not in wheel_arch:
        return (
            f"built for {', '.join(sorted(wheel_arch))} ({', '.join(wheel_plats)}) but the target is "
            f"{env_arch}"
        )
    if unrepaired_on_musl:
        return (
            f"an unrepaired {', '.join(wheel_plats)} wheel (built against some glibc, never checked by "
            f"auditwheel) cannot be trusted on a musllinux (musl libc) target"
        )
    if any(p.startswith("manylinux") for p in wheel_plats) and env_musl and not env_many:
        return (
            f"a manylinux (glibc) wheel ({', '.join(wheel_plats)}) cannot run on a musllinux "
            f"(musl libc) target"
        )
    if any(p.startswith("musllinux") for p in wheel_plats) and not env_musl:
        return f"a musllinux wheel ({', '.join(wheel_plats)}) cannot run on a glibc target"
    if not any(p in env_plats for p in wheel_plats):
        best = env_plats[0] if env_plats else env.platform
        return (
            f"platform tag {', '.join(wheel_plats)} is not supported by the target (newest it "
            f"accepts: {best}; a manylinux tag needs at least that glibc)"
        )
    interp = sorted({f"{t.interpreter}-{t.abi}" for t in wheel_tags})
    return (
        f"Python/ABI tag {', '.join(interp)} is not supported by the target interpreter "
        f"(Python {env.python_version}, e.g. {env.tags[0] if env.tags else '?'})"
    )


def _tag_rank(entry: WheelEntry, env: Environment) -> int:
    order = {t: i for i, t in enumerate(env.tags)}
    return min((order[str(t)] for t in entry.tags if str(t) in order), default=len(order))


def _toolkit(info: BuildInfo) -> tuple[int, int] | None:
    source = info.nvcc_version or info.torch_cuda
    if not source:
        return None
    m = re.search(r"(\d+)\.(\d+)", str(source))
    return (int(m.group(1)), int(m.group(2))) if m else None


def _gfx_base(name: str) -> str:
    return name.split(":", 1)[0].lower()


def _looked_for(env: Environment) -> str:
    plat = env.display_platform
    if env.torch is None or not env.has_torch:
        return f"a wheel for Python {env.python_version} on {plat}"
    try:
        from .._compat.variant import VariantKey  # only to name the variant looked for

        label = VariantKey.from_torch(env.torch.build()).local_label
    except (ValueError, TypeError):  # unknown ABI or an odd version: describe it in words
        label = f"torch {env.torch.version}"
    gpus = ", ".join(
        f"sm_{g.capability.replace('.', '')}" if g.capability else (g.gfx or g.vendor) for g in env.gpus
    )
    text = f"+{label} (torch {env.torch.version})"
    stable = _stable_label(env)
    if stable:
        text += f" or a stable-ABI +{stable}"
    text += f" for Python {env.python_version} on {plat}"
    if gpus:
        text += f", GPUs {gpus}"
    if env.driver_version:
        text += f", driver {env.driver_version}"
    return text


@dataclass
class _Check:
    """Why one wheel does not fit (``reasons``, empty when it does) and what ranks it."""

    reasons: list[str] = field(default_factory=list)
    jit: bool = False  # a visible GPU runs it only through PTX JIT
    exact_torch: bool = False  # built with exactly the target's torch
    gpu_only: bool = False  # every reason is about the driver or a GPU
    stable_floor: tuple[int, int] | None = None  # a stable-ABI wheel's torch floor
    notes: list[str] = field(default_factory=list)


def _stable_label(env: Environment) -> str | None:
    """The stable-ABI labels that serve the target's torch, in words (``cu13torch2.10stable`` or a
    higher floor up to the torch's own), or None for a torch below the lowest floor."""
    if env.torch is None:
        return None
    try:
        build = env.torch.build()
        if tuple(build.release[:2]) < parse_floor(STABLE_ABI_MIN_FLOOR):
            return None
        label = VariantKey(
            STABLE_ABI_MIN_FLOOR, build.accelerator, None, torch_abi=TorchAbi.STABLE
        ).local_label
        return (
            label
            if build.major_minor == STABLE_ABI_MIN_FLOOR
            else f"{label} (or a floor up to {build.major_minor})"
        )
    except Exception:  # noqa: BLE001 - an odd version: the classic label (or words) says enough
        return None


def _check(
    entry: WheelEntry, env: Environment, sdist: Version, runtime: TorchBuild, pinned: Mapping[str, Pin] | None
) -> _Check:
    out = _Check()
    reasons = out.reasons
    try:
        wheel_version = Version(entry.version)
    except InvalidVersion:
        reasons.append(f"version {entry.version!r} is not PEP 440")
        return out
    if wheel_version.public != sdist.public:
        reasons.append(f"version {wheel_version.public} is not this sdist's {sdist.public}")
    tag = _tag_reason(entry, env)
    if tag:
        reasons.append(tag)
    needs = requires_python_problem(entry.requires_python, env.python_version)
    if needs:
        reasons.append(needs)
    if pinned is not None:
        pin = pinned.get(entry.filename)
        if pin is None:
            reasons.append("not among the wheels whose sha256 is pinned in this sdist")
        elif pin.sha256 != entry.sha256:
            reasons.append(
                f"the index's sha256 {entry.sha256[:12]}... differs from the one pinned in this sdist "
                f"({pin.sha256[:12]}...): refusing it"
            )
    try:
        info = entry.build()
    except BuildInfoError as exc:
        reasons.append(f"unreadable build info ({exc})")
        return out
    if info is None:
        reasons.append("carries no compiled module (pure-Python wheel)")
        return out
    out.exact_torch = info.torch_version == runtime.version
    # The shared rule's sentences end in the generic fix; the selection's paragraph gives the fix once.
    reasons.extend(r.split(": install the mamba-ssm wheel", 1)[0] for r in incompatibilities(info, runtime))
    cpu_only = _cpu_only_for_gpu_torch(info, runtime)
    if cpu_only:
        reasons.append(cpu_only)
    out.stable_floor = _stable_floor(info)
    if reasons:
        return out
    out.gpu_only = True  # every reason from here on is about the driver or a GPU
    if info.torch_cuda:
        _check_nvidia(entry, info, env, out)
    if info.torch_hip:
        built = {_gfx_base(g) for g in (entry.gfx_archs or info.gfx_archs)}
        for gpu in env.gpus:
            if gpu.vendor == "amd" and gpu.gfx and _gfx_base(gpu.gfx) not in built:
                reasons.append(
                    f"{gpu.name or 'GPU'} ({gpu.gfx}) is not among the wheel's targets "
                    f"({', '.join(sorted(built)) or 'none'})"
                )
    return out


def _check_nvidia(entry: WheelEntry, info: BuildInfo, env: Environment, out: _Check) -> None:
    """The NVIDIA driver against the wheel's CUDA, and every visible NVIDIA GPU against its archs."""
    toolkit = _toolkit(info)
    driver = None
    if env.driver_version:
        try:
            driver = parse_driver_version(env.driver_version)
        except ValueError:
            out.notes.append(f"driver version {env.driver_version!r} unreadable")
    if driver is not None and toolkit is not None:
        need = CUDA_MAJOR_MIN_DRIVER.get(toolkit[0])
        if need and driver < parse_driver_version(need):
            out.reasons.append(
                f"the NVIDIA driver {env.driver_version} is older than {need}, the minimum for CUDA "
                f"{toolkit[0]}.x (update the driver, or use a torch built for an older CUDA)"
            )
    sass = entry.sass_archs or info.sass_archs
    ptx = entry.ptx_archs or info.ptx_archs
    for gpu in env.gpus:
        cap = gpu.capability_tuple
        if gpu.vendor != "nvidia" or cap is None:
            continue
        why = coverage(cap, sass, ptx)
        if why:
            out.reasons.append(f"{gpu.name or 'GPU'}: {why}")
            continue
        if coverage(cap, sass, []) is not None:  # runs only through PTX JIT
            out.jit = True
            if driver is not None and toolkit is not None:
                need, _exact = min_driver_for_toolkit(toolkit)
                if driver < parse_driver_version(need):
                    out.reasons.append(
                        f"{gpu.name or 'GPU'} (sm_{cap[0]}{cap[1]}) needs PTX JIT, and PTX from CUDA "
                        f"{toolkit[0]}.{toolkit[1]} needs driver >= {need}, not {env.driver_version}"
                    )


def _cpu_only_for_gpu_torch(info: BuildInfo, runtime: TorchBuild) -> str | None:
    """Why a wheel with CPU kernels only does not serve a CUDA / ROCm torch (the compatibility rule lets
    a stable-ABI one load there, but its kernels would not run on the GPU), or None."""
    if any(k in info.kernels for k in ("cuda", "hip")):
        return None
    if runtime.cuda_major is not None:
        return f"has CPU kernels only, and the target's torch is a CUDA {runtime.cuda_version} build"
    if runtime.rocm_version:
        return f"has CPU kernels only, and the target's torch is a ROCm {runtime.rocm_version} build"
    return None


def _stable_floor(info: BuildInfo) -> tuple[int, int] | None:
    return parse_floor(info.torch_abi_floor) if info.is_stable_abi else None


RankKey = tuple[bool, tuple[int, ...], bool, bool, int, str]


def rank_key(check: _Check, tag_rank: int, filename: str) -> RankKey:
    """The sort key of a compatible wheel (smaller is better; see the module docstring): stable ABI
    first (highest floor first), then an exact torch build, SASS over PTX JIT, the tag's rank, the name."""
    floor = check.stable_floor
    return (
        floor is None,
        tuple(-x for x in floor) if floor else (),
        not check.exact_torch,
        check.jit,
        tag_rank,
        filename,
    )


def served_by(entry: WheelEntry) -> str:
    """What one wheel serves, in words: ``torch 2.14 (built with 2.14.1+cu130), CUDA 13.0, cxx11abi
    TRUE; cp39-abi3 manylinux_2_28_x86_64`` (from its build info and file name)."""
    tags = sorted(entry.tags, key=str)
    where = (
        " ".join(sorted({f"{t.interpreter}-{t.abi}" for t in tags}))
        + " "
        + " ".join(sorted({t.platform for t in tags}))
    )
    info = entry.build_info
    if not info:
        return f"any torch (pure-Python wheel, no compiled kernels); {where}"
    tv = str(info.get("torch_version") or "?")
    mm = ".".join(re.split(r"[.+]", tv)[:2])
    if info.get("torch_cuda"):
        accel = f"CUDA {info['torch_cuda']}"
    elif info.get("torch_hip"):
        accel = f"ROCm/HIP {info['torch_hip']}"
    else:
        accel = "CPU only"
    if info.get("torch_abi") == TorchAbi.STABLE:
        return f"torch >= {info.get('torch_abi_floor')} (stable ABI, built with {tv}), {accel}; {where}"
    abi = {True: "TRUE", False: "FALSE"}.get(bool(info["cxx11_abi"]), "?") if "cxx11_abi" in info else "?"
    return f"torch {mm} (built with {tv}), {accel}, cxx11abi {abi}; {where}"


def select(
    env: Environment,
    manifest: Manifest,
    sdist_version: str,
    pinned: Mapping[str, Pin] | None = None,
) -> Selection:
    """Rank the manifest's wheels for ``env``; see the module docstring for the rules.

    Args:
        env: the target (``environment.detect()`` or a declared ``--env-json``).
        manifest: the index's wheels.
        sdist_version: the version being installed (e.g. ``"2.4.0.dev0"``; a local label is ignored).
        pinned: the hashes pinned into the sdist by file name, or None (no pin check).

    Returns a Selection (never raises for an incompatible wheel).

    Raises:
        ValueError: ``sdist_version`` is not PEP 440 (the message names it).
    """
    try:
        sdist = Version(sdist_version)
    except InvalidVersion:
        raise ValueError(f"sdist version {sdist_version!r} is not a PEP 440 version") from None
    looked_for = _looked_for(env)
    notes: list[str] = []
    served = tuple(sorted({served_by(w) for w in manifest.wheels}))
    if env.torch is None or not env.has_torch:
        return Selection(
            SelectionStatus.NO_TORCH,
            None,
            (),
            tuple(Rejection(w.filename, "torch is not installed in the target") for w in manifest.wheels),
            looked_for,
            served=served,
        )
    if env.torch.error:
        notes.append(f"torch is installed but does not import ({env.torch.error})")
    if env.torch.cxx11_abi is None:
        notes.append("the target torch's C++ ABI is unknown, so it was not compared")
    try:
        runtime = env.torch.build()
    except ValueError as exc:
        return Selection(
            SelectionStatus.NO_CANDIDATE,
            None,
            (),
            tuple(Rejection(w.filename, str(exc)) for w in manifest.wheels),
            looked_for,
            served=served,
        )
    if not env.gpus and (runtime.cuda_major is not None):
        notes.append("no NVIDIA GPU is visible, so GPU coverage and the driver were not checked")
    good: list[tuple[RankKey, WheelEntry]] = []
    bad: list[tuple[tuple[bool, int], Rejection]] = []
    for entry in manifest.wheels:
        check = _check(entry, env, sdist, runtime, pinned)
        notes.extend(n for n in check.notes if n not in notes)
        if check.reasons:
            # nearest first: a wheel that fails only for the GPU (driver, archs) matches everything
            # else; then by how many rules it fails; the name only breaks ties
            bad.append(
                (
                    (not check.gpu_only, len(check.reasons)),
                    Rejection(entry.filename, "; ".join(check.reasons)),
                )
            )
        else:
            good.append((rank_key(check, _tag_rank(entry, env), entry.filename), entry))
    good.sort(key=lambda x: x[0])
    bad.sort(key=lambda x: (x[0], x[1].filename))
    candidates = tuple(e for _, e in good)
    unservable = []
    if runtime.cuda_major is not None:
        for gpu in env.gpus:
            why = gpu_unservable(gpu.capability, env.torch.cuda) if gpu.vendor == "nvidia" else None
            if why:
                unservable.append(f"{gpu.name or 'GPU'}: {why}")
    return Selection(
        SelectionStatus.CHOSEN if candidates else SelectionStatus.NO_CANDIDATE,
        candidates[0] if candidates else None,
        candidates,
        tuple(r for _, r in bad),
        looked_for,
        tuple(notes),
        served,
        tuple(unservable),
    )
