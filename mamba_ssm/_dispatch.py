"""Which implementation runs an op on a device: the compiled kernels, the PyTorch fallback or the reference.

Backends:

* ``compiled``: the kernels of ``mamba_ssm._C`` (Python face: :mod:`mamba_ssm.ops.backends.compiled`);
  chosen when the module is present, passes the compatibility rule, loaded, and covers the device.
* ``triton``: Triton kernels (:mod:`mamba_ssm.ops.triton._kernels`) for the ops in :data:`TRITON_OPS`
  (SSD scan, decode state update, norms, Mamba-3's scans and step), on CUDA/ROCm devices when
  ``triton`` >= :data:`TRITON_MIN_VERSION` imports.
* ``torch``: the fast PyTorch fallback (a chunked parallel scan; :mod:`mamba_ssm.ops.backends.torch_scan`).
* ``ref``: the sequential reference implementations (slow; for checking).

The choice comes from :func:`set_backend` when called, else the environment variable
``MAMBA_SSM_BACKEND`` = ``auto`` (default) | ``compiled`` | ``cuda`` (an alias of ``compiled``) | ``triton``
| ``torch`` | ``ref``. ``auto`` uses the GPU kernels an op has (compiled, else Triton) where they can run
and falls back to PyTorch otherwise,
warning once per process (a :class:`MambaFallbackWarning`, silenced by
``MAMBA_SSM_NO_FALLBACK_WARNING=1``) with the reason and the fix. Forcing ``compiled`` where it cannot
run raises :class:`RuntimeError` with the reason instead of falling back; so does forcing ``triton`` for an
op with a Triton kernel where Triton cannot run (ops without one behave as under ``auto``).

Nothing here runs at ``import mamba_ssm``; the compiled module is loaded at the first
:func:`backend_for` call that could use it, and a GPU's coverage is checked at the first call on it.
"""

from __future__ import annotations

import os
import sys
import threading
import warnings
from typing import Any, Callable, Dict, Optional, Tuple

from mamba_ssm import _loader

__all__ = [
    "BACKENDS",
    "CHOICES",
    "ENV_BACKEND",
    "ENV_NO_WARNING",
    "OPS",
    "COMPILED_OPS",
    "TRITON_OPS",
    "TRITON_MIN_VERSION",
    "MAMBA3_OPS",
    "triton_unavailable",
    "CONV1D_OPS",
    "MambaFallbackWarning",
    "backend_for",
    "fallback_for_call",
    "set_backend",
    "get_backend",
    "plan",
]

ENV_BACKEND = "MAMBA_SSM_BACKEND"
ENV_NO_WARNING = "MAMBA_SSM_NO_FALLBACK_WARNING"

#: What backend_for returns.
BACKENDS = ("compiled", "triton", "torch", "ref")
#: What MAMBA_SSM_BACKEND and set_backend accept (``cuda`` is an alias of ``compiled``).
CHOICES = ("auto", "compiled", "cuda", "triton", "torch", "ref")
_ALIASES = {"cuda": "compiled"}

#: Mamba-3's ops (mamba_ssm.ops.triton.mamba3, mamba_ssm.ops.tilelang.mamba3): Triton kernels on CUDA/ROCm
#: (through mamba_ssm.ops.triton.mamba3._triton_hook), the PyTorch path elsewhere.
MAMBA3_OPS = ("mamba3_siso", "mamba3_mimo", "mamba3_step")
#: The ops the dispatcher knows, and which of them mamba_ssm._C has kernels for. The others have one
#: implementation (PyTorch): backend_for answers "torch" for them whatever is asked for. The causal
#: conv1d ops have compiled kernels and one PyTorch implementation, which is also their reference ("ref"
#: runs it); mamba_ssm.ops.causal_conv1d.implementation() adds the causal-conv1d package's kernels.
OPS = (
    "selective_scan",
    "mamba_inner",
    "selective_state_update",
    "causal_conv1d",
    "causal_conv1d_update",
    "ssd_chunk_scan",
    "rms_norm",
    "layer_norm",
    *MAMBA3_OPS,
)
COMPILED_OPS = frozenset({"selective_scan", "mamba_inner", "causal_conv1d", "causal_conv1d_update"})
#: The compiled ops whose implementation mamba_ssm.ops.causal_conv1d.implementation() names (it may pick
#: the causal-conv1d package's kernels); doctor reports them but judges the install by the others.
CONV1D_OPS = frozenset({"causal_conv1d", "causal_conv1d_update"})
#: The ops with Triton kernels (mamba_ssm.ops.triton._kernels): used on CUDA/ROCm devices.
TRITON_OPS = frozenset({"ssd_chunk_scan", "selective_state_update", "rms_norm", "layer_norm", *MAMBA3_OPS})
#: The oldest Triton the kernels are written for (what torch 2.4 brings); older: the PyTorch path.
TRITON_MIN_VERSION = (3, 0)


class MambaFallbackWarning(UserWarning):
    """Warned (once per process per reason) when an op runs on the PyTorch fallback instead of the
    compiled kernels. Silence it with ``MAMBA_SSM_NO_FALLBACK_WARNING=1`` or the ``warnings`` module."""


_lock = threading.RLock()
_override: Optional[str] = None  # set_backend's value, normalised; None: the environment decides
_warned: set = set()
_compiled_import_error: Optional[str] = None
_compiled_imported = False


def _normalise(value: Any, source: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{source} must be a string, one of {', '.join(CHOICES)}; got {value!r}")
    name = value.strip().lower()
    if name not in CHOICES:
        raise ValueError(
            f"{source}={value!r} is not a mamba_ssm backend; choose one of {', '.join(CHOICES)} "
            f"(cuda is an alias of compiled)"
        )
    return _ALIASES.get(name, name)


def _requested() -> Tuple[str, str]:
    """(normalised choice, where it came from)."""
    override = _override
    if override is not None:
        return override, "mamba_ssm.set_backend"
    raw = os.environ.get(ENV_BACKEND)
    if raw is None or raw.strip() == "":
        return "auto", "default"
    return _normalise(raw, ENV_BACKEND), ENV_BACKEND


def set_backend(name: Optional[str]) -> Optional[str]:
    """Choose the backend for every op in this process, overriding ``MAMBA_SSM_BACKEND``.

    Args:
        name: ``"auto"``, ``"compiled"`` (alias ``"cuda"``), ``"triton"``, ``"torch"`` or ``"ref"``; ``None`` goes
            back to what the environment variable says.

    Returns:
        The previous override (a normalised name, or None when the environment decided).

    Raises:
        ValueError: ``name`` is not one of the choices (the message names it and the choices).
        TypeError: ``name`` is neither a string nor None.
    """
    global _override
    value = None if name is None else _normalise(name, "backend")
    with _lock:
        previous, _override = _override, value
    return previous


def get_backend() -> str:
    """The backend asked for: ``"auto"``, ``"compiled"``, ``"triton"``, ``"torch"`` or ``"ref"``.

    That is :func:`set_backend`'s value when set, else ``MAMBA_SSM_BACKEND`` (``cuda`` reported as
    ``compiled``), else ``"auto"``. What actually runs on a device is :func:`backend_for`'s answer.

    Raises:
        ValueError: ``MAMBA_SSM_BACKEND`` holds a value that is not a backend.
    """
    return _requested()[0]


def _check_op(op: str) -> None:
    if op not in OPS:
        raise ValueError(f"unknown op {op!r} for backend dispatch; known ops: {', '.join(OPS)}")


def _import_compiled() -> Optional[str]:
    """Import mamba_ssm.ops.backends.compiled once (it registers fake/autograd implementations).

    Returns None on success, else why it failed."""
    global _compiled_imported, _compiled_import_error
    if _compiled_imported:
        return None
    if _compiled_import_error is not None:
        return _compiled_import_error
    with _lock:
        if not _compiled_imported and _compiled_import_error is None:
            try:
                import mamba_ssm.ops.backends.compiled  # noqa: F401,PLC0415
            except Exception as exc:  # noqa: BLE001
                _compiled_import_error = (
                    f"mamba_ssm._C loaded but its Python face mamba_ssm.ops.backends.compiled failed to "
                    f"import ({type(exc).__name__}: {exc})"
                )
            else:
                _compiled_imported = True
    return _compiled_import_error


def _coverage_fix(device: Any) -> str:
    """What to do when the loaded build has no kernel for ``device`` ("" when nothing can be done)."""
    kind, _ = _loader.device_key(device)
    arch = _loader.device_arch(device)
    if kind == "cpu":
        return (
            f"install the build for this torch, which carries the CPU kernel: `{_loader.FIX_INSTALL_KERNELS}`, "
            f"or build from source: `{_loader.FIX_SOURCE_BUILD}`"
        )
    if kind != "cuda":
        return ""
    if arch and arch.startswith("gfx"):
        return (
            f"install a wheel built for {arch} (`{_loader.FIX_INSTALL_KERNELS}` picks one), or build "
            f"from source for it: `HIP_BUILD=1 PYTORCH_ROCM_ARCH={arch} {_loader.FIX_SOURCE_BUILD}`"
        )
    capability = arch or "<compute capability>"
    try:  # a GPU older than everything this torch's CUDA can build for: no build helps, say what does
        import torch  # noqa: PLC0415

        from mamba_ssm._install.fixes import gpu_unservable  # noqa: PLC0415

        unservable = gpu_unservable(arch, getattr(torch.version, "cuda", None)) if arch else None
    except Exception:  # noqa: BLE001 - advice only
        unservable = None
    if unservable:
        return unservable
    return (
        f"install a wheel whose kernels cover compute capability {capability} "
        f"(`{_loader.FIX_INSTALL_KERNELS}` picks one), or build from source for it: "
        f"`TORCH_CUDA_ARCH_LIST={capability} {_loader.FIX_SOURCE_BUILD}`"
    )


def _compiled_unavailable(device: Any) -> Optional[Tuple[str, str]]:
    """None when the compiled kernels can run on ``device``, else (reason, fix)."""
    result = _loader.load()
    if not result.loaded:
        return result.reason or "mamba_ssm._C is not loaded", result.fix or ""
    reason = _loader.device_coverage(device)
    if reason is not None:
        return reason, _coverage_fix(device)
    error = _import_compiled()
    if error is not None:
        return error, f"reinstall the package: `{_loader.FIX_REINSTALL}`"
    return None


_triton_status: Optional[Tuple[Optional[str], Optional[str]]] = None  # (reason, fix); reason None: usable


def _triton_fix() -> Optional[str]:
    """A safe command that installs the Triton this torch wheel was built with (its pinned requirement,
    so pip leaves torch alone), or None when torch names no Triton requirement."""
    try:
        from importlib import metadata  # noqa: PLC0415

        for req in metadata.requires("torch") or []:
            name = req.split(";")[0].strip()
            for dist in ("pytorch-triton-rocm", "pytorch-triton", "triton"):
                if name.startswith(dist + "==") and "extra ==" not in req:
                    return f"pip install '{name}' (the Triton your torch was built with)"
    except Exception:  # noqa: BLE001 - no metadata: no command to suggest
        pass
    return None


def _check_triton() -> Tuple[Optional[str], Optional[str]]:
    """Import triton and our Triton kernels once: (None, None) when usable, else (reason, fix)."""
    global _triton_status
    if _triton_status is not None:
        return _triton_status
    with _lock:
        if _triton_status is not None:
            return _triton_status
        floor = ".".join(map(str, TRITON_MIN_VERSION))
        status: Tuple[Optional[str], Optional[str]] = (None, None)
        try:
            import triton  # noqa: PLC0415
        except Exception as exc:  # noqa: BLE001
            fix = _triton_fix() or f"install the Triton (>= {floor}) that matches your torch"
            status = (f"triton cannot be imported ({type(exc).__name__}: {exc})", fix)
        else:
            version = str(getattr(triton, "__version__", "0"))
            parts = []
            for piece in version.split("+")[0].split(".")[:2]:
                digits = "".join(ch for ch in piece if ch.isdigit())
                parts.append(int(digits) if digits else 0)
            if tuple(parts) < TRITON_MIN_VERSION:
                status = (
                    f"triton {version} is older than {floor}, the oldest the Triton kernels support",
                    "upgrade torch (>= 2.4 brings Triton >= 3.0), or install the newer Triton your torch "
                    f"supports ({_triton_fix() or 'see the PyTorch install page'})",
                )
            else:
                try:
                    import mamba_ssm.ops.triton._kernels  # noqa: F401,PLC0415
                except Exception as exc:  # noqa: BLE001
                    status = (
                        f"the Triton kernels failed to import with triton {version} "
                        f"({type(exc).__name__}: {exc})",
                        f"reinstall the package: `{_loader.FIX_REINSTALL}`",
                    )
        _triton_status = status
    return status


def triton_unavailable(device: Any) -> Optional[Tuple[str, Optional[str]]]:
    """None when the Triton kernels can run on ``device``, else ``(reason, fix)``.

    They run on CUDA and ROCm devices (torch calls both ``cuda``) when ``triton`` >= :data:`TRITON_MIN_VERSION`
    imports; other devices get the reason and no fix (nothing to repair: the PyTorch path is the one for
    them). Triton's import is tried once per process.
    """
    kind, _ = _loader.device_key(device)
    if kind != "cuda":
        return (
            f"the Triton kernels run on CUDA/ROCm devices only; on {kind} the PyTorch implementation runs",
            None,
        )
    arch = _loader.device_arch(device)  # known once the device's coverage was checked
    if arch and not arch.startswith("gfx"):
        try:
            major = int(arch.split(".")[0])
        except ValueError:
            major = None
        if major is not None and major < 7:
            return (
                f"Triton does not support compute capability {arch} (it needs >= 7.0); the PyTorch "
                "implementation runs",
                None,
            )
    reason, fix = _check_triton()
    return None if reason is None else (reason, fix)


def _plan_triton_op(op: str, device: Any, out: Dict[str, Any]) -> Dict[str, Any]:
    requested, source = out["requested"], out["source"]
    if requested in ("torch", "ref"):
        out["backend"] = "torch"
        out["reason"] = (
            f"{op} has one PyTorch implementation, which is also its reference ({source}=ref)"
            if requested == "ref"
            else f"{source}=torch: {op} runs on its PyTorch implementation, not its Triton kernel"
        )
        return out
    unavailable = triton_unavailable(device)
    if unavailable is None:
        out["backend"] = "triton"
        if requested == "compiled":
            out["reason"] = f"mamba_ssm._C has no kernel for {op}; its Triton kernel is the GPU kernel"
        return out
    out["reason"], out["fix"] = unavailable
    if requested == "triton" and out["fix"] is not None:
        out["error"] = True  # forced on a GPU where Triton cannot run
    else:
        out["backend"] = "torch"
    return out


def plan(op: str, device: Any) -> Dict[str, Any]:
    """What :func:`backend_for` would choose, without warning or raising for an unavailable backend.

    Args:
        op: one of :data:`OPS`.
        device: a torch.device, a device string, a CUDA ordinal or a tensor.

    Returns:
        ``{"backend": "compiled"|"triton"|"torch"|"ref"|None, "requested": ..., "source": ..., "reason":
        str|None, "fix": str|None, "error": bool}``: ``backend`` None and ``error`` True when the
        requested backend cannot run (``backend_for`` raises then); ``reason``/``fix`` explain any
        fallback (``fix`` None: nothing to repair, e.g. Triton ops on a CPU device).

    Raises:
        ValueError: unknown op, or a bad ``MAMBA_SSM_BACKEND`` value.
    """
    _check_op(op)
    requested, source = _requested()
    out: Dict[str, Any] = {
        "backend": None,
        "requested": requested,
        "source": source,
        "reason": None,
        "fix": None,
        "error": False,
    }
    if op in TRITON_OPS:
        return _plan_triton_op(op, device, out)
    if op not in COMPILED_OPS:
        # One implementation, whatever is asked for (the causal_conv1d ops use the causal-conv1d
        # package's kernels for CUDA tensors when it is installed; doctor reports that).
        out["backend"] = "torch"
        out["reason"] = f"mamba_ssm._C has no kernel for {op}; it runs on its PyTorch implementation"
        if requested in ("ref", "compiled", "triton"):
            out["reason"] += (
                f" (the only one: {source}={requested} does not change it; "
                f"only {' and '.join(sorted(COMPILED_OPS))} have a compiled kernel and a "
                f"separate reference)"
            )
        return out
    if requested in ("torch", "ref"):
        out["backend"] = (
            "torch" if op in CONV1D_OPS else requested
        )  # the conv's PyTorch code is its reference
        return out
    unavailable = _compiled_unavailable(device)
    if unavailable is None and op in CONV1D_OPS:
        from mamba_ssm.ops.backends import compiled_conv1d  # noqa: PLC0415 (imported by compiled)

        if not compiled_conv1d.available():
            unavailable = (
                "this mamba_ssm._C was built without the causal conv1d kernels (a build older than them)",
                f"reinstall the package: `{_loader.FIX_REINSTALL}`",
            )
    if unavailable is None:
        out["backend"] = "compiled"
        if requested == "triton":
            out["reason"] = f"{op} has no Triton kernel; the compiled kernel runs ({source}=triton)"
        return out
    out["reason"], out["fix"] = unavailable
    if requested == "compiled":
        out["error"] = True
    else:
        out["backend"] = "torch"
    return out


def _warnings_silenced() -> bool:
    return os.environ.get(ENV_NO_WARNING, "").strip().lower() not in ("", "0", "false", "no", "off")


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _library_dirs() -> Tuple[str, ...]:
    """The directories whose frames a warning skips: this package's, and torch's when torch is imported
    (``module(x)`` goes through ``torch/nn/modules/module.py``, ``Function.apply`` through
    ``torch/autograd``; neither is the user's line). torch is not imported here for it."""
    dirs = [_PACKAGE_DIR]
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    if torch_file:
        dirs.append(os.path.dirname(os.path.abspath(torch_file)) + os.sep)
    return tuple(dirs)


def _user_stacklevel() -> int:
    """The warnings stacklevel, seen from _warn_once, of the first frame outside this package and torch
    (the user's call of selective_scan_fn, ``Mamba(...)(x)``, ...)."""
    skipped = _library_dirs()
    level = 1
    frame = sys._getframe(1)  # _warn_once's frame; stacklevel 1 names it
    while frame is not None and frame.f_code.co_filename.startswith(skipped):
        frame = frame.f_back
        level += 1
    return level


def _warn_once(key: Any, message: Callable[[], str]) -> None:
    """Warn ``message()`` unless ``key`` was warned already; the text is only built when warned (it
    reads the recorded install decision from disk). The warning names the user's line."""
    if key in _warned or _warnings_silenced():  # the common case: no lock (and traceable by dynamo)
        return
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message(), MambaFallbackWarning, stacklevel=_user_stacklevel())


def _fallback_message(op: str, device: Any, reason: str, fix: Optional[str]) -> str:
    text = f"mamba_ssm: {op} on {device} runs on the PyTorch fallback (slower): {reason}."
    if fix:
        text += f" Fix: {fix}."
    decision = _loader.install_decision()
    if _loader.kernels_deferred(decision) and _loader.FIX_INSTALL_KERNELS not in text:
        text += (
            f" The kernels were deferred at install time (torch was being installed by the same "
            f"command): run `{_loader.FIX_INSTALL_KERNELS}`."
        )
    build = decision.get("build") if isinstance(decision, dict) else None
    if isinstance(build, dict) and build.get("mode") == "python" and build.get("reason"):
        text += f" At install time no kernels were built: {str(build['reason']).rstrip('.')}."
    text += f" Set {ENV_NO_WARNING}=1 to silence this warning; `python -m mamba_ssm doctor` explains more."
    return text


def _describe(device: Any) -> str:
    try:
        kind, index = _loader.device_key(device)
    except Exception:  # noqa: BLE001
        return str(device)
    return kind if index < 0 else f"{kind}:{index}"


def backend_for(op: str, device: Any) -> str:
    """The backend that runs ``op`` on ``device`` for this call.

    Args:
        op: one of :data:`OPS` (``"selective_scan"``, ``"selective_state_update"``, ...).
        device: the device of the op's inputs: a torch.device, a device string, a CUDA ordinal or a
            tensor. A CUDA device's coverage (compute capability vs the build's SASS/PTX) is checked
            at its first call and cached.

    Returns:
        ``"compiled"``, ``"triton"``, ``"torch"`` or ``"ref"``. When ``"compiled"`` is returned,
        :mod:`mamba_ssm.ops.backends.compiled` has been imported; when ``"triton"``,
        :mod:`mamba_ssm.ops.triton._kernels`.

    Raises:
        RuntimeError: ``compiled`` was forced (``MAMBA_SSM_BACKEND=compiled|cuda`` or
            ``set_backend("compiled")``) and cannot run on ``device``, or ``triton`` was forced for an op
            with a Triton kernel on a GPU where Triton cannot run; the message gives the reason and the fix.
        ValueError: unknown ``op``, or ``MAMBA_SSM_BACKEND`` holds a value that is not a backend.

    Falling back from ``auto`` to ``torch`` warns once per process and reason
    (:class:`MambaFallbackWarning`), unless ``MAMBA_SSM_NO_FALLBACK_WARNING=1``.

    Under ``torch.compile`` (also ``fullgraph=True``) the choice is made eagerly at trace time and
    baked into the graph as a constant; changing the setting afterwards needs a recompile
    (``torch._dynamo.reset()``).
    """
    if _compiling():
        # Under torch.compile the choice is made once, eagerly, at trace time and baked into the graph
        # as a constant (finding and loading _C touches the file system, which dynamo cannot trace).
        return _constant_backend_for(op, _describe(device))
    return _backend_for_eager(op, device)


def _compiling() -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.compiler.is_compiling())
    except Exception:  # noqa: BLE001 - an old torch without torch.compiler
        return False


def _constant_backend_for(op: str, device: str) -> str:
    """backend_for as dynamo sees it: called eagerly at trace time, its result baked in as a constant."""
    return _backend_for_eager(op, device)


# What torch._dynamo.assume_constant_result sets; set here so that import needs no torch, and so that
# the marking is in place before tracing starts (dynamo refuses to trace the decorator itself).
_constant_backend_for._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _backend_for_eager(op: str, device: Any) -> str:
    decision = plan(op, device)
    if decision["error"]:
        forced = "triton" if decision["requested"] == "triton" else "compiled"
        raise RuntimeError(
            f"mamba_ssm: the {forced} backend was forced ({decision['source']}="
            f"{decision['requested']}) but cannot run {op} on {_describe(device)}: {decision['reason']}. "
            f"Fix: {decision['fix']}; or unset {ENV_BACKEND} (auto) to use the PyTorch fallback."
        )
    if decision["backend"] == "torch" and decision["fix"]:
        _warn_once(
            ("unavailable", decision["reason"]),
            lambda: _fallback_message(op, _describe(device), decision["reason"], decision["fix"]),
        )
    return decision["backend"]


def fallback_for_call(op: str, device: Any, reason: str) -> str:
    """Called by an op when the compiled (or Triton) backend was chosen but cannot take this particular call.

    For example ``mamba_ssm.ops.backends.compiled.supports(...)`` says d_state 512 exceeds the
    kernel's limit of 256.

    Args:
        op: one of :data:`OPS`.
        device: the inputs' device (for the message).
        reason: why the compiled kernel cannot take this call, one sentence.

    Returns:
        ``"torch"``: run this call on the PyTorch fallback (warned once per process per op).

    Raises:
        RuntimeError: the compiled backend was forced for a compiled op, or the triton backend for a
            Triton op; the message carries ``reason``.
    """
    if _compiling():
        return _constant_fallback_for_call(op, _describe(device), str(reason))
    return _fallback_for_call_eager(op, device, reason)


def _constant_fallback_for_call(op: str, device: str, reason: str) -> str:
    """fallback_for_call as dynamo sees it (see _constant_backend_for)."""
    return _fallback_for_call_eager(op, device, reason)


_constant_fallback_for_call._dynamo_marked_constant = True  # type: ignore[attr-defined]


def _fallback_for_call_eager(op: str, device: Any, reason: str) -> str:
    _check_op(op)
    requested, source = _requested()
    if (requested == "compiled" and op in COMPILED_OPS) or (requested == "triton" and op in TRITON_OPS):
        raise RuntimeError(
            f"mamba_ssm: the {requested} backend was forced ({source}={requested}) but cannot run this {op} "
            f"call on {_describe(device)}: {reason}. Unset {ENV_BACKEND} (auto) to let such calls run "
            "on the PyTorch fallback."
        )
    _warn_once(
        ("call", op),
        lambda: (
            f"mamba_ssm: this {op} call on {_describe(device)} runs on the PyTorch "
            f"fallback: {reason}. Set {ENV_NO_WARNING}=1 to silence this warning."
        ),
    )
    return "torch"


def _reset_for_tests() -> None:
    """Forget warnings given, the override and the Triton check (tests only)."""
    global _override, _triton_status
    with _lock:
        _warned.clear()
        _override = None
        _triton_status = None
