"""Finding, checking and loading the compiled module ``mamba_ssm._C``.

The compiled module is one shared object next to this file, ``_C.abi3.so`` (a limited-API build) or a
version-specific name such as ``_C.cpython-311-x86_64-linux-gnu.so``. It is never imported as a
Python module: its static initialisers register the ``mamba_ssm`` operators with ``torch.library``
when :func:`torch.ops.load_library` dlopens it.

When there is none, the per-platform wheel's kernel modules are looked at: ``_kernels/<folder>/_C.abi3.so``
(``cpu``, ``cu12``, ``cu13``; :mod:`mamba_ssm._compat.kernel_modules`). They register the same operators,
so the running torch picks exactly one of them before anything is dlopened
(:func:`mamba_ssm._compat.kernel_modules.choose_module`); the choice is kept on the result
(``LoadResult.module``). A top-level ``_C*.so`` always wins over them.

Before anything is dlopened, the build-info record embedded in the file's bytes is read
(:func:`mamba_ssm._compat.buildinfo.read_build_info`) and checked against the running torch with the
one compatibility rule (:func:`mamba_ssm._compat.buildinfo.incompatibilities`: same torch
major.minor, or the exact build for pre-release / nightly / NGC torch; same C++ ABI; same CUDA major;
same ROCm major.minor). An incompatible library is therefore never loaded into the process, where a
mismatched torch ABI would crash or fail with an undefined symbol.

Everything here is lazy: nothing happens at ``import mamba_ssm``. :func:`load` runs once per process
(thread-safe) on the first call that needs it. Failures are never raised: they are recorded in a
:class:`LoadResult` with the exact reason and a fix (:mod:`mamba_ssm._advice`), which the dispatch
turns into a fallback warning and ``python -m mamba_ssm doctor`` prints. Whether the loaded build
covers a device is :mod:`mamba_ssm._devices`' question.
"""

from __future__ import annotations

import dataclasses
import glob
import importlib.machinery
import os
import sys
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import _advice
from ._compat.textenum import TextEnum

if TYPE_CHECKING:
    from ._compat.buildinfo import BuildInfo
    from ._compat.kernel_modules import ModuleChoice
    from ._compat.versions import TorchBuild
    from ._install.record import InstallRecord

__all__ = [
    "PACKAGE_DIR",
    "LoadKind",
    "LoadResult",
    "find_compiled_module",
    "find_wheel_modules",
    "install_record",
    "load",
    "peek",
    "shadowed_install",
]

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class LoadKind(TextEnum):
    """How looking for and loading ``mamba_ssm._C`` ended (doctor's JSON carries the value)."""

    LOADED = "loaded"
    MISSING = "missing"  # no _C*.so next to the package (a pure-Python install), or none of the
    # wheel's kernel modules can serve this torch
    NO_TORCH = "torch-unavailable"  # torch itself cannot be imported
    BAD_BUILD_INFO = "bad-build-info"  # the file carries no readable build-info record
    INCOMPATIBLE = "incompatible"  # the build info fails the compatibility rule: never dlopened
    LOAD_ERROR = "load-error"  # dlopen / static initialisation failed (undefined symbol, bad ELF)


@dataclass(frozen=True)
class LoadResult:
    """What happened when the compiled module was looked for and loaded.

    Attributes:
        found: a ``_C*.so`` file exists next to the package.
        path: its absolute path (None when not found).
        build_info: the build info read from the file's bytes, or None when absent or unreadable.
        loaded: ``torch.ops.load_library`` succeeded; the ``mamba_ssm`` operators are registered.
        reason: when not loaded, the exact reason in one or a few sentences (the dlopen error text,
            the failed compatibility checks, ...); None when loaded.
        fix: when not loaded, what the user should run; None when loaded.
        kind: how it ended (:class:`LoadKind`).
        incompatibilities: the failed compatibility checks (empty unless ``kind`` is incompatible).
        module: which of the wheel's kernel modules (``_kernels/<folder>``) the running torch chose, and
            why; None when a top-level ``_C*.so`` was used or the install has no such modules.
    """

    found: bool
    path: str | None
    build_info: BuildInfo | None
    loaded: bool
    reason: str | None
    fix: str | None
    kind: LoadKind
    incompatibilities: tuple[str, ...] = ()
    module: ModuleChoice | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON object ``doctor --json`` shows (stable keys)."""
        return {
            "found": self.found,
            "path": self.path,
            "loaded": self.loaded,
            "kind": str(self.kind),
            "reason": self.reason,
            "fix": self.fix,
            "incompatibilities": list(self.incompatibilities),
            "build_info": None if self.build_info is None else dataclasses.asdict(self.build_info),
            "module_choice": None if self.module is None else self.module.to_dict(),
        }


_lock = threading.RLock()
_result: LoadResult | None = None


def _suffix_rank(path: str) -> tuple[int, str]:
    """Sort key: ``_C.abi3.so`` first, then this interpreter's extension suffixes in their order."""
    name = os.path.basename(path)
    if name == "_C.abi3.so":
        return (0, name)
    for i, suffix in enumerate(importlib.machinery.EXTENSION_SUFFIXES):
        if name == "_C" + suffix:
            return (1 + i, name)
    return (100, name)


def find_compiled_module(package_dir: str | None = None) -> str | None:
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
    return os.path.abspath(min(candidates, key=_suffix_rank))


def shadowed_install(package_dir: str, path: list[str] | None = None) -> str | None:
    """Another ``mamba_ssm`` package on ``path`` (default ``sys.path``; ``""`` is the current directory)
    with compiled kernels (a ``_C*.so`` or the wheel's ``_kernels/`` modules), which the package at
    ``package_dir``, imported first, hides: its folder, or None. Typical case: Python started inside a
    source checkout, whose ``mamba_ssm`` shadows the installed one. Reads directories only."""
    here = os.path.realpath(package_dir)
    for entry in sys.path if path is None else path:
        candidate = os.path.realpath(os.path.join(entry or os.getcwd(), "mamba_ssm"))
        if candidate == here or not os.path.isfile(os.path.join(candidate, "__init__.py")):
            continue
        if find_compiled_module(candidate) or find_wheel_modules(candidate):
            return candidate
    return None


def find_wheel_modules(package_dir: str | None = None) -> dict[str, str]:
    """The per-platform wheel's kernel modules: each folder of ``<package_dir>/_kernels/`` holding a
    ``_C*.so`` (chosen as :func:`find_compiled_module` chooses), mapped to its absolute path; empty when
    there is no such folder. Reads the directory only: nothing is opened or loaded."""
    from ._compat.kernel_modules import KERNELS_DIR  # standard library only

    root = os.path.join(package_dir or PACKAGE_DIR, KERNELS_DIR)
    try:
        names = sorted(os.listdir(root))
    except OSError:  # absent (every install but the per-platform wheel) or unreadable
        return {}
    found = {}
    for name in names:
        folder = os.path.join(root, name)
        path = find_compiled_module(folder) if os.path.isdir(folder) else None
        if path is not None:
            found[name] = path
    return found


def install_record() -> InstallRecord | None:
    """The install record of this install, or None (resolver absent, nothing recorded, unreadable, or an
    earlier install's record). Never raises: the resolver (``mamba_ssm._install``) may be missing from a
    partial install."""
    try:
        from ._install.record import current_record  # optional part of the install
    except ImportError:
        return None
    try:
        return current_record()
    except OSError:  # a site folder that cannot be listed: no record known
        return None


def _exception_text(exc: BaseException) -> str:
    """The exception's message and its causes' (torch wraps dlopen's error text in a cause)."""
    parts: list[str] = []
    seen = set()
    current: BaseException | None = exc
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
    while True:
        cause = root.__cause__ or root.__context__
        if cause is None or id(cause) in seen:
            break
        root = cause
        seen.add(id(root))
    text = str(root).strip() or type(root).__name__
    while text.startswith(path + ": "):
        text = text[len(path) + 2 :]
    return text


def _without_shared_fix(problems: list[str]) -> list[str]:
    """The compatibility rule ends each sentence with the same ": <fix>"; the LoadResult carries the fix
    once (``fix``), so the reason keeps only what differs. Sentences without a shared tail stay whole."""
    if not problems:
        return problems
    parts = [p.rsplit(": ", 1) for p in problems]
    tails = {part[1] for part in parts if len(part) == 2}
    if len(tails) == 1 and all(len(part) == 2 for part in parts):
        return [part[0] for part in parts]
    return list(problems)


def runtime_torch(torch: Any) -> TorchBuild:
    """The running torch as a :class:`mamba_ssm._compat.versions.TorchBuild`."""
    from ._compat.versions import TorchBuild  # packaging only once torch is there

    version = getattr(torch, "version", None)
    abi = getattr(getattr(torch, "_C", None), "_GLIBCXX_USE_CXX11_ABI", None)
    return TorchBuild(
        str(torch.__version__),
        getattr(version, "cuda", None),
        getattr(version, "hip", None),
        None if abi is None else bool(abi),
    )


def _not_loaded(kind: LoadKind, path: str | None, reason: str, fix: str, **more: Any) -> LoadResult:
    return LoadResult(path is not None, path, more.pop("build_info", None), False, reason, fix, kind, **more)


def _choose_wheel_module(where: str, modules: dict[str, str]) -> tuple[ModuleChoice, str] | LoadResult:
    """The wheel's kernel module the running torch takes and its file (imports torch), or why none can
    be loaded."""
    from ._compat.kernel_modules import KERNELS_DIR, choose_module  # packaging only once modules are there

    listed = ", ".join(sorted(modules))
    try:
        import torch  # never at import mamba_ssm
    except Exception as exc:  # noqa: BLE001
        return _not_loaded(
            LoadKind.NO_TORCH,
            None,
            f"torch cannot be imported ({_exception_text(exc)}), so none of the kernel modules in "
            f"{os.path.join(where, KERNELS_DIR)} ({listed}) can be chosen",
            _advice.REPAIR_TORCH,
        )
    try:
        choice = choose_module(runtime_torch(torch), modules)
    except Exception as exc:  # noqa: BLE001 - e.g. a torch version that is not PEP 440
        return _not_loaded(
            LoadKind.MISSING,
            None,
            f"cannot choose among the kernel modules in {os.path.join(where, KERNELS_DIR)} ({listed}) for "
            f"torch {getattr(torch, '__version__', '?')}: {_exception_text(exc)}",
            _advice.wheel_kernels_fix(_advice.recorded_index(install_record())),
        )
    if choice.path is None:
        return _not_loaded(
            LoadKind.MISSING,
            None,
            f"no compiled module of {os.path.join(where, KERNELS_DIR)} fits: {choice.reason}",
            _advice.wheel_kernels_fix(_advice.recorded_index(install_record())),
            module=choice,
        )
    return choice, choice.path


def _load_uncached(package_dir: str | None = None) -> LoadResult:  # one return per outcome
    where = package_dir or PACKAGE_DIR
    path = find_compiled_module(package_dir)
    choice: ModuleChoice | None = None
    if path is None:
        modules = find_wheel_modules(package_dir)
        if not modules:
            other = shadowed_install(where)
            return _not_loaded(
                LoadKind.MISSING,
                None,
                f"the compiled module mamba_ssm._C is not installed (no _C*.so in {where})"
                + (
                    f"; this mamba_ssm comes first on sys.path and hides the one at {other}, which has "
                    "compiled kernels"
                    if other
                    else ""
                ),
                _advice.shadowed_install_fix(where, other)
                if other
                else _advice.missing_kernels_fix(install_record()),
            )
        chosen = _choose_wheel_module(where, modules)
        if isinstance(chosen, LoadResult):
            return chosen
        choice, path = chosen
    result = _check_and_load(path, choice)
    return dataclasses.replace(result, module=choice) if choice is not None else result


def _check_and_load(path: str, choice: ModuleChoice | None) -> LoadResult:  # one return per outcome
    """Read ``path``'s build info, check it against the running torch and load it (``choice``: the
    wheel's kernel module it is; its fixes then fetch the wheel built for this torch)."""

    def mismatch_fix() -> str:
        record = install_record()
        if choice is not None:  # reinstalling would bring back the same wheel
            return _advice.wheel_kernels_fix(_advice.recorded_index(record))
        return _advice.mismatch_fix(record)

    try:
        from ._compat import buildinfo  # packaging only once a module is there
    except Exception as exc:  # noqa: BLE001 - a broken install: report, never raise
        return _not_loaded(
            LoadKind.BAD_BUILD_INFO,
            path,
            f"cannot check {path}: mamba_ssm._compat.buildinfo failed to import ({_exception_text(exc)})",
            _advice.reinstall_fix(),
        )
    try:
        build = buildinfo.read_build_info(path)
    except Exception as exc:  # noqa: BLE001 - BuildInfoError, OSError: all mean "not ours / corrupt"
        return _not_loaded(
            LoadKind.BAD_BUILD_INFO,
            path,
            f"{path} is not a usable mamba_ssm._C build: its build-info record cannot be read "
            f"({_exception_text(exc)}); it was not loaded",
            _advice.reinstall_fix(install_record()),
        )
    try:
        import torch  # never at import mamba_ssm
    except Exception as exc:  # noqa: BLE001
        return _not_loaded(
            LoadKind.NO_TORCH,
            path,
            f"torch cannot be imported ({_exception_text(exc)})",
            _advice.REPAIR_TORCH,
            build_info=build,
        )
    try:
        runtime = runtime_torch(torch)
        problems = list(buildinfo.incompatibilities(build, runtime))
    except Exception as exc:  # noqa: BLE001
        return _not_loaded(
            LoadKind.INCOMPATIBLE,
            path,
            f"cannot check {path} against torch {torch.__version__}: {_exception_text(exc)}",
            mismatch_fix(),
            build_info=build,
        )
    if problems:
        reason = (
            f"{path} does not match this torch {runtime.version} (CUDA {runtime.cuda or 'none'}, "
            f"cxx11abi={runtime.cxx11_abi}), so it was not loaded: "
            + "; ".join(_without_shared_fix(problems))
        )
        return _not_loaded(
            LoadKind.INCOMPATIBLE,
            path,
            reason,
            mismatch_fix(),
            build_info=build,
            incompatibilities=tuple(problems),
        )
    if path not in getattr(torch.ops, "loaded_libraries", ()):
        try:
            torch.ops.load_library(path)  # type: ignore[no-untyped-call]  # torch's load_library is unannotated
        except (OSError, ImportError, RuntimeError) as exc:
            return _not_loaded(
                LoadKind.LOAD_ERROR,
                path,
                f"loading {path} failed: {_dlopen_error_text(exc, path)}",
                mismatch_fix(),
                build_info=build,
            )
    return LoadResult(True, path, build, True, None, None, LoadKind.LOADED)


def load() -> LoadResult:
    """Find, check and load ``mamba_ssm._C`` once per process; never raises.

    Thread-safe: concurrent first calls load once and all see the same :class:`LoadResult`.

    Returns:
        The :class:`LoadResult`; ``loaded`` tells whether the ``mamba_ssm`` operators are registered.
    """
    global _result  # noqa: PLW0603 - the once-per-process result
    result = _result
    if result is not None:
        return result
    with _lock:
        if _result is None:
            _result = _load_uncached()
        return _result


def peek() -> LoadResult | None:
    """The :class:`LoadResult` if :func:`load` already ran in this process, else None (loads nothing)."""
    return _result


def _reset_for_tests() -> None:
    """Forget the cached load result (tests only; a loaded library stays loaded)."""
    global _result  # noqa: PLW0603
    with _lock:
        _result = None
