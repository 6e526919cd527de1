"""Finding, checking and loading the compiled module ``mamba_ssm._C``.

The compiled module is one shared object next to this file, ``_C.abi3.so`` (a limited-API build) or a
version-specific name such as ``_C.cpython-311-x86_64-linux-gnu.so``. It is never imported as a
Python module: its static initialisers register the ``mamba_ssm`` operators with ``torch.library``
when :func:`torch.ops.load_library` dlopens it.

Before anything is dlopened, the build-info record embedded in the file's bytes is read
(:func:`mamba_ssm._compat.buildinfo.read_build_info`) and checked against the running torch with the
one compatibility rule (:func:`mamba_ssm._compat.buildinfo.incompatibilities`: same torch
major.minor, or the exact build for pre-release / nightly / NGC torch; same C++ ABI; same CUDA major;
same ROCm major.minor). An incompatible library is therefore never loaded into the process, where a
mismatched torch ABI would crash or fail with an undefined symbol.

Everything here is lazy: nothing happens at ``import mamba_ssm``. :func:`load` runs once per process
(thread-safe) on the first call that needs it; :func:`device_coverage` checks once per device whether
the build carries kernels for it (compute capability against the build's SASS/PTX for CUDA, the gfx
arch for ROCm, the ``cpu`` kernel for CPU tensors). Failures are never raised: they are recorded in a
:class:`LoadResult` with the exact reason and a fix, which the dispatcher (:mod:`mamba_ssm._dispatch`)
turns into a fallback warning and ``python -m mamba_ssm doctor`` prints.
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.machinery
import os
import threading
from typing import Any, Dict, List, Optional, Tuple

__all__ = [
    "LoadResult",
    "PACKAGE_DIR",
    "find_compiled_module",
    "load",
    "peek",
    "device_coverage",
    "device_arch",
    "device_key",
    "install_decision",
    "kernels_deferred",
    "FIX_REINSTALL",
    "FIX_INSTALL_KERNELS",
    "FIX_SOURCE_BUILD",
    "FIX_REPAIR_TORCH",
]

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

# The commands a fix names (FIX_REINSTALL, FIX_INSTALL_KERNELS, FIX_SOURCE_BUILD), so the warning, the
# errors and doctor say the same thing. Built on first use by ``__getattr__`` below from
# mamba_ssm._install.fixes: each pins this install's version, never changes torch (``--no-deps`` or
# install-kernels) and names the wheel index the recorded install decision used.
FIX_REPAIR_TORCH = (
    'repair torch until `python -c "import torch"` works (reinstall the torch build you use, same version '
    "and index), then run `python -m mamba_ssm doctor` again"
)


def _fixes() -> Any:
    from mamba_ssm._install import fixes  # noqa: PLC0415 (stdlib only, no torch)

    return fixes


def _decision_index(decision: Optional[Dict[str, Any]] = None) -> Optional[str]:
    """The non-default wheel index of the recorded decision (None: default, or nothing recorded)."""
    return _fixes().recorded_index(install_decision() if decision is None else decision)


def __getattr__(name: str) -> str:
    if name == "FIX_REINSTALL":
        return _fixes().reinstall_command(index=_decision_index())
    if name == "FIX_INSTALL_KERNELS":
        return _fixes().install_kernels_command(_decision_index())
    if name == "FIX_SOURCE_BUILD":
        return _fixes().source_build_command()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# Kinds of outcome, stable strings (doctor's JSON carries them).
KIND_LOADED = "loaded"
KIND_MISSING = "missing"  # no _C*.so next to the package (a pure-Python install)
KIND_NO_TORCH = "torch-unavailable"  # torch itself cannot be imported
KIND_BAD_BUILD_INFO = "bad-build-info"  # the file carries no readable build-info record
KIND_INCOMPATIBLE = "incompatible"  # the build info fails the compatibility rule: never dlopened
KIND_LOAD_ERROR = "load-error"  # dlopen / static initialisation failed (undefined symbol, bad ELF)


@dataclasses.dataclass
class LoadResult:
    """What happened when the compiled module was looked for and loaded.

    Attributes:
        found: a ``_C*.so`` file exists next to the package.
        path: its absolute path (None when not found).
        build_info: the :class:`mamba_ssm._compat.buildinfo.BuildInfo` read from the file's bytes, or
            None when absent or unreadable.
        loaded: ``torch.ops.load_library`` succeeded; the ``mamba_ssm`` operators are registered.
        reason: when not loaded, the exact reason in one or a few sentences (the dlopen error text,
            the failed compatibility checks, ...); None when loaded.
        fix: when not loaded, what the user should run; None when loaded.
        kind: one of ``loaded``, ``missing``, ``torch-unavailable``, ``bad-build-info``,
            ``incompatible``, ``load-error``.
        incompatibilities: the failed compatibility checks (empty unless ``kind == "incompatible"``).
    """

    found: bool
    path: Optional[str]
    build_info: Any
    loaded: bool
    reason: Optional[str]
    fix: Optional[str]
    kind: str
    incompatibilities: List[str] = dataclasses.field(default_factory=list)

    def build_info_dict(self) -> Optional[Dict[str, Any]]:
        """The build info as a plain dict (JSON keys of docs/architecture.md), or None."""
        return _build_info_as_dict(self.build_info)

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-serialisable view (stable keys, used by ``doctor --json``)."""
        return {
            "found": self.found,
            "path": self.path,
            "loaded": self.loaded,
            "kind": self.kind,
            "reason": self.reason,
            "fix": self.fix,
            "incompatibilities": list(self.incompatibilities),
            "build_info": self.build_info_dict(),
        }


_lock = threading.RLock()
_result: Optional[LoadResult] = None
_coverage: Dict[Tuple[str, int], Optional[str]] = {}
_archs: Dict[Tuple[str, int], str] = {}  # device key -> "7.5" (CUDA compute capability) or "gfx90a"


def _build_info_as_dict(build: Any) -> Optional[Dict[str, Any]]:
    if build is None:
        return None
    if dataclasses.is_dataclass(build):
        return dataclasses.asdict(build)
    to_json = getattr(build, "to_json", None)
    if callable(to_json):
        import json

        return json.loads(to_json())
    return dict(build)


def _suffix_rank(path: str) -> Tuple[int, str]:
    """Sort key: ``_C.abi3.so`` first, then this interpreter's extension suffixes in their order."""
    name = os.path.basename(path)
    if name == "_C.abi3.so":
        return (0, name)
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    for i, suffix in enumerate(suffixes):
        if name == "_C" + suffix:
            return (1 + i, name)
    return (100, name)


def find_compiled_module(package_dir: Optional[str] = None) -> Optional[str]:
    """The path of the compiled module next to the package, or None.

    Args:
        package_dir: the directory to look in; defaults to this package's directory.

    Returns:
        The absolute path of ``_C.abi3.so`` when present, else of the first ``_C.*.so`` whose
        suffix this interpreter accepts (``importlib.machinery.EXTENSION_SUFFIXES`` order), else of
        any other ``_C*.so`` (e.g. built for another Python: the build info decides), else None.
    """
    directory = package_dir or PACKAGE_DIR
    candidates = [p for p in glob.glob(os.path.join(glob.escape(directory), "_C*.so")) if os.path.isfile(p)]
    if not candidates:
        return None
    return os.path.abspath(sorted(candidates, key=_suffix_rank)[0])


def install_decision() -> Optional[Dict[str, Any]]:
    """The decision the install-time resolver recorded, or None (resolver absent or nothing recorded).

    Never raises: the resolver (``mamba_ssm._install.decision.read_decision``) may be missing from a
    partial install or fail to parse its record; both mean "no decision known".
    """
    try:
        from mamba_ssm._install import decision as _decision  # noqa: PLC0415 (lazy on purpose)
    except Exception:  # noqa: BLE001 - absent or broken resolver: no decision
        return None
    try:
        value = _decision.read_decision()
    except Exception:  # noqa: BLE001
        return None
    if value is None:
        return None
    try:  # a record written for an earlier install says nothing about this one
        if isinstance(value, dict) and not _decision.record_belongs_to_install(value)[0]:
            return None
    except Exception:  # noqa: BLE001
        return None
    if isinstance(value, dict):
        return value
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        try:
            return dict(to_dict())
        except Exception:  # noqa: BLE001
            return None
    return None


def kernels_deferred(decision: Optional[Dict[str, Any]]) -> bool:
    """True when the recorded install decision says the kernels were deferred.

    That happens when pip built our sdist before installing torch in the same command: the pure-Python
    package was installed and ``python -m mamba_ssm install-kernels`` fetches the kernels afterwards.
    """
    if not decision:
        return False
    if decision.get("deferred") is True or decision.get("kernels_deferred") is True:
        return True
    for key in ("final_mode", "mode", "outcome", "status"):
        value = decision.get(key)
        if isinstance(value, str) and "defer" in value.lower():
            return True
    return False


def _exception_text(exc: BaseException) -> str:
    """The exception's message and its causes' (torch wraps dlopen's error text in a cause)."""
    parts: List[str] = []
    seen = set()
    current: Optional[BaseException] = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        text = str(current).strip() or type(current).__name__
        if text not in parts:
            parts.append(text)
        current = current.__cause__ or current.__context__
    return ": ".join(parts)


def _dlopen_error_text(exc: BaseException, path: str) -> str:
    """The dynamic loader's own message (torch wraps it as the cause of "Could not load this library"),
    without the repeated path prefix: e.g. "undefined symbol: _ZN3c10...", "invalid ELF header"."""
    root: BaseException = exc
    seen = {id(exc)}
    while (root.__cause__ or root.__context__) is not None and id(
        root.__cause__ or root.__context__
    ) not in seen:
        root = root.__cause__ or root.__context__
        seen.add(id(root))
    text = str(root).strip() or type(root).__name__
    while text.startswith(path + ": "):
        text = text[len(path) + 2 :]
    return text


def _without_shared_fix(problems: List[str]) -> List[str]:
    """The compatibility rule ends each sentence with the same ": <fix>"; the LoadResult carries the fix
    once (``fix``), so the reason keeps only what differs. Sentences without a shared tail stay whole."""
    if not problems:
        return problems
    parts = [p.rsplit(": ", 1) for p in problems]
    tails = {part[1] for part in parts if len(part) == 2}
    if len(tails) == 1 and all(len(part) == 2 for part in parts):
        return [part[0] for part in parts]
    return list(problems)


def _unreachable_index(decision: Optional[Dict[str, Any]]) -> Optional[str]:
    """The recorded resolver error when it was the wheel index or the download that failed (no
    network, a DNS failure, a bad index): ``"index-dns"`` etc., else None."""
    if not decision or decision.get("status") != "error":
        return None
    kind = str(decision.get("error_kind") or "")
    if kind in ("fetch-local", "fetch-os"):  # the cache could not be written: not the index's fault
        return None
    return kind if kind == "index" or kind.startswith(("index-", "fetch-")) else None


def _no_candidate(decision: Optional[Dict[str, Any]]) -> bool:
    return bool(decision) and decision.get("status") == "no-candidate"


def _fix_for_no_candidate(decision: Dict[str, Any], source_build: str) -> str:
    where = decision.get("environment") or "this environment"
    return (
        f"at install time no prebuilt wheel on the index fitted {where}, so "
        f"`{_fixes().install_kernels_command(_decision_index(decision))}` fails the same way until torch "
        f"changes: build from source with `{source_build}` (needs a C++ compiler, and nvcc for GPU kernels), "
        "or move to a torch a prebuilt wheel serves (`python -m mamba_ssm install-kernels --dry-run` then "
        "names the wheel it would take) and run install-kernels"
    )


def _fix_for_missing() -> str:
    decision = install_decision()
    fixes = _fixes()
    index = _decision_index(decision)
    kernels, source = fixes.install_kernels_command(index), fixes.source_build_command()
    text = (
        f"run `{kernels}` to fetch the prebuilt kernels matching this torch, or build them "
        f"from source with `{source}` (needs a C++ compiler, and nvcc for GPU kernels)"
    )
    unreachable = _unreachable_index(decision)
    if unreachable:
        return (
            f"at install time the wheel index could not be used ({unreachable}; index "
            f"{decision.get('index') or 'the default'}), so `{fixes.install_kernels_command()}` alone fails the "
            "same way: point MAMBA_WHEEL_INDEX at a reachable index or a local mirror (to make one: "
            f"{fixes.mirror_hint()}) or restore the network, then run "
            f"`{fixes.install_kernels_command()}`; or build from source with `{source}`"
        )
    if _no_candidate(decision):
        return _fix_for_no_candidate(decision, source)
    if (
        decision
        and decision.get("final_mode") == "python"
        and "MAMBA_SKIP_CUDA_BUILD" in str(decision.get("requested") or decision.get("message") or "")
    ):
        return (
            "the pure-Python package was requested at install time (MAMBA_SKIP_CUDA_BUILD=TRUE), so no "
            f"kernels were installed; to get them run `{kernels}`, or reinstall without "
            f"MAMBA_SKIP_CUDA_BUILD (`{fixes.reinstall_command(index=index)}`), or build from "
            f"source with `{source}`"
        )
    if kernels_deferred(decision):
        text = (
            "the kernels were deferred at install time because torch was being installed by the same "
            f"command: run `{kernels}` now that torch is present (or build from source "
            f"with `{source}`)"
        )
    return text


def _fix_for_mismatch() -> str:
    decision = install_decision()
    fixes = _fixes()
    index = _decision_index(decision)
    if _no_candidate(decision):
        return _fix_for_no_candidate(decision, fixes.source_build_command())
    return (
        f"run `{fixes.install_kernels_command(index)}` to fetch the kernels built for this torch (it replaces "
        f"only mamba-ssm's own files), or rebuild without pip's wheel cache, which can hand back a wheel built "
        f"for another torch: `{fixes.reinstall_command(index=index)}`, or build from source with "
        f"`{fixes.source_build_command()}`"
    )


def _runtime_torch(torch: Any) -> Any:
    from mamba_ssm._compat.versions import TorchBuild  # noqa: PLC0415

    version = getattr(torch, "version", None)
    abi = getattr(getattr(torch, "_C", None), "_GLIBCXX_USE_CXX11_ABI", None)
    return TorchBuild(
        str(torch.__version__),
        getattr(version, "cuda", None),
        getattr(version, "hip", None),
        None if abi is None else bool(abi),
    )


def _load_uncached(package_dir: Optional[str] = None) -> LoadResult:
    path = find_compiled_module(package_dir)
    if path is None:
        where = package_dir or PACKAGE_DIR
        return LoadResult(
            found=False,
            path=None,
            build_info=None,
            loaded=False,
            reason=f"the compiled module mamba_ssm._C is not installed (no _C*.so in {where})",
            fix=_fix_for_missing(),
            kind=KIND_MISSING,
        )

    try:
        from mamba_ssm._compat import buildinfo as _buildinfo  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001 - a broken install: report, never raise
        return LoadResult(
            True,
            path,
            None,
            False,
            f"cannot check {path}: mamba_ssm._compat.buildinfo failed to import ({_exception_text(exc)})",
            f"reinstall: `{_fixes().reinstall_command()}`",
            KIND_BAD_BUILD_INFO,
        )

    try:
        build = _buildinfo.read_build_info(path)
    except Exception as exc:  # noqa: BLE001 - BuildInfoError, OSError: all mean "not ours / corrupt"
        return LoadResult(
            found=True,
            path=path,
            build_info=None,
            loaded=False,
            reason=(
                f"{path} is not a usable mamba_ssm._C build: its build-info record cannot be read "
                f"({_exception_text(exc)}); it was not loaded"
            ),
            fix=f"reinstall the package: `{_fixes().reinstall_command(index=_decision_index())}`",
            kind=KIND_BAD_BUILD_INFO,
        )

    try:
        import torch  # noqa: PLC0415
    except Exception as exc:  # noqa: BLE001
        return LoadResult(
            True,
            path,
            build,
            False,
            f"torch cannot be imported ({_exception_text(exc)})",
            FIX_REPAIR_TORCH,
            KIND_NO_TORCH,
        )

    try:
        runtime = _runtime_torch(torch)
        problems = list(_buildinfo.incompatibilities(build, runtime))
    except Exception as exc:  # noqa: BLE001
        return LoadResult(
            True,
            path,
            build,
            False,
            f"cannot check {path} against torch {torch.__version__}: {_exception_text(exc)}",
            _fix_for_mismatch(),
            KIND_INCOMPATIBLE,
        )
    if problems:
        reason = (
            f"{path} does not match this torch {runtime.version} (CUDA {runtime.cuda or 'none'}, "
            f"cxx11abi={runtime.cxx11_abi}), so it was not loaded: "
            + "; ".join(_without_shared_fix(problems))
        )
        return LoadResult(
            True,
            path,
            build,
            False,
            reason,
            _fix_for_mismatch(),
            KIND_INCOMPATIBLE,
            incompatibilities=problems,
        )

    if path in getattr(torch.ops, "loaded_libraries", ()):
        return LoadResult(True, path, build, True, None, None, KIND_LOADED)
    try:
        torch.ops.load_library(path)
    except (OSError, ImportError, RuntimeError) as exc:
        return LoadResult(
            found=True,
            path=path,
            build_info=build,
            loaded=False,
            reason=f"loading {path} failed: {_dlopen_error_text(exc, path)}",
            fix=_fix_for_mismatch(),
            kind=KIND_LOAD_ERROR,
        )
    return LoadResult(True, path, build, True, None, None, KIND_LOADED)


def load() -> LoadResult:
    """Find, check and load ``mamba_ssm._C`` once per process; never raises.

    Thread-safe: concurrent first calls load once and all see the same :class:`LoadResult`.

    Returns:
        The :class:`LoadResult`; ``loaded`` tells whether the ``mamba_ssm`` operators are registered.
    """
    global _result
    result = _result
    if result is not None:
        return result
    with _lock:
        if _result is None:
            _result = _load_uncached()
        return _result


def peek() -> Optional[LoadResult]:
    """The :class:`LoadResult` if :func:`load` already ran in this process, else None (loads nothing)."""
    return _result


def device_key(device: Any) -> Tuple[str, int]:
    """``(device type, index)`` for a torch.device, a device string, a CUDA ordinal or a tensor.

    A CUDA device without an index means the current device (``torch.cuda.current_device()``, which
    initialises CUDA: only called on the way to a CUDA computation). CPU is ``("cpu", -1)``.

    Raises:
        TypeError: ``device`` is none of the accepted kinds.
    """
    import torch  # noqa: PLC0415

    if isinstance(device, torch.Tensor):
        device = device.device
    if isinstance(device, int) and not isinstance(device, bool):
        device = torch.device("cuda", device)
    elif isinstance(device, str):
        device = torch.device(device)
    if not isinstance(device, torch.device):
        raise TypeError(
            f"device must be a torch.device, a device string, a CUDA ordinal or a tensor; got "
            f"{type(device).__name__} {device!r}"
        )
    if device.type == "cpu":
        return ("cpu", -1)
    index = device.index
    if index is None:
        if device.type == "cuda":
            index = torch.cuda.current_device()
        else:
            index = 0
    return (device.type, int(index))


def _gfx_base(name: str) -> str:
    """``"gfx90a:sramecc+:xnack-"`` -> ``"gfx90a"``."""
    return name.split(":", 1)[0].strip().lower()


def _coverage_uncached(key: Tuple[str, int]) -> Optional[str]:
    result = load()
    if not result.loaded:
        return result.reason or "the compiled module is not loaded"
    build = result.build_info
    kernels = [str(k).lower() for k in (getattr(build, "kernels", None) or [])]
    device_type, index = key
    if device_type == "cpu":
        if "cpu" in kernels:
            return None
        return f"this build of mamba_ssm._C has no CPU kernel (kernels: {', '.join(kernels) or 'none'})"
    if device_type != "cuda":
        return (
            f"mamba_ssm._C has no kernel for {device_type} devices (kernels: {', '.join(kernels) or 'none'})"
        )

    import torch  # noqa: PLC0415

    if getattr(torch.version, "hip", None):
        if "hip" not in kernels and "rocm" not in kernels:
            return (
                f"this build of mamba_ssm._C has no ROCm/HIP kernel (kernels: {', '.join(kernels) or 'none'})"
            )
        props = torch.cuda.get_device_properties(index)
        arch = _gfx_base(getattr(props, "gcnArchName", "") or "")
        if arch:
            _archs[key] = arch
        built = sorted({_gfx_base(a) for a in (getattr(build, "gfx_archs", None) or [])})
        if arch and arch in built:
            return None
        return (
            f"GPU {index} ({props.name}) is {arch or 'of an unknown gfx arch'}, and this build of "
            f"mamba_ssm._C carries code for {', '.join(built) or 'no gfx arch'} only"
        )

    if "cuda" not in kernels:
        return (
            f"this build of mamba_ssm._C has no CUDA kernel (kernels: {', '.join(kernels) or 'none'}): "
            "it is a CPU-only build"
        )
    from mamba_ssm._compat.archs import coverage  # noqa: PLC0415

    capability = tuple(torch.cuda.get_device_capability(index))
    _archs[key] = f"{capability[0]}.{capability[1]}"
    reason = coverage(
        capability,
        list(getattr(build, "sass_archs", None) or []),
        list(getattr(build, "ptx_archs", None) or []),
    )
    if reason is None:
        return None
    return f"GPU {index} (compute capability {capability[0]}.{capability[1]}): {reason}"


def device_coverage(device: Any) -> Optional[str]:
    """Whether the loaded compiled module has kernels for ``device``; checked once per device.

    Args:
        device: a torch.device, a device string (``"cpu"``, ``"cuda:1"``), a CUDA ordinal or a tensor.

    Returns:
        None when the compiled kernels run on that device, else the reason in one sentence (including
        "not loaded" reasons from :func:`load`). CPU: the build has the ``cpu`` kernel. CUDA: the
        device's compute capability (``torch.cuda.get_device_capability``; called here, at the first
        call on that device, never at import) is covered by the build's SASS/PTX
        (:func:`mamba_ssm._compat.archs.coverage`). ROCm: the device's gfx arch is in ``gfx_archs``.
    """
    key = device_key(device)
    try:
        return _coverage[key]
    except KeyError:
        pass
    with _lock:
        if key not in _coverage:
            try:
                _coverage[key] = _coverage_uncached(key)
            except Exception as exc:  # noqa: BLE001 - a failed probe means "not covered", with why
                _coverage[key] = f"cannot check {key[0]}:{key[1]} against the build: {_exception_text(exc)}"
        return _coverage[key]


def device_arch(device: Any) -> Optional[str]:
    """The arch :func:`device_coverage` found for ``device``: a CUDA compute capability such as ``"7.5"``
    or a ROCm gfx arch such as ``"gfx1100"``; None for CPU or before its coverage was checked."""
    return _archs.get(device_key(device))


def _reset_for_tests() -> None:
    """Forget the cached load result and coverage (tests only; a loaded library stays loaded)."""
    global _result
    with _lock:
        _result = None
        _coverage.clear()
        _archs.clear()
