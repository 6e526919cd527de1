"""Whether each backend can run on a device: the one question the dispatch asks a backend.

* COMPILED: ``mamba_ssm._C`` loaded (:mod:`mamba_ssm._loader`), its kernels cover the device
  (:mod:`mamba_ssm._devices`) and its Python face (:mod:`mamba_ssm.ops.backends.compiled`, which registers
  the ops' fake and autograd implementations) imports; for the conv ops also that this build has the
  causal conv1d kernels.
* TRITON: a CUDA/ROCm device of compute capability >= 7.0 (NVIDIA) where ``triton`` >=
  :data:`TRITON_MIN_VERSION` and :mod:`mamba_ssm.ops.triton._kernels` import.
* CAUSAL_CONV1D: a CUDA device where the causal-conv1d package imports.
* TORCH, REF: every device.

Each answer is an :class:`Unavailable` (the reason, and the fix: None when there is nothing to repair,
the PyTorch path being the one for that device) or None. The backend modules are below the dispatch:
they are imported here only when asked about, never at ``import mamba_ssm``.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

from .. import _advice, _devices, _loader
from .table import Backend

__all__ = [
    "TRITON_MIN_VERSION",
    "Unavailable",
    "causal_conv1d_package",
    "compiled_unavailable",
    "triton_unavailable",
    "unavailable",
]

#: The oldest Triton the kernels are written for (what torch 2.4 brings); older: the PyTorch path.
TRITON_MIN_VERSION = (3, 0)
#: NVIDIA GPUs older than this compute capability run no Triton code.
TRITON_MIN_CAPABILITY = 7


@dataclass(frozen=True)
class Unavailable:
    """Why a backend cannot run on a device, and the fix (None: nothing to repair)."""

    reason: str
    fix: str | None


_lock = threading.RLock()
_compiled_face: Unavailable | None = None
_compiled_imported = False
_triton: tuple[Unavailable | None] | None = None  # (the answer,) once checked
# The package's functions, False when it does not import, None before the first look.
_package: tuple[Callable[..., Any], Callable[..., Any]] | bool | None = None


def _import_compiled_face() -> Unavailable | None:
    """Import the compiled kernels' Python face once (it registers fake/autograd implementations)."""
    global _compiled_face, _compiled_imported  # noqa: PLW0603 - once per process
    if _compiled_imported or _compiled_face is not None:
        return _compiled_face
    with _lock:
        if not _compiled_imported and _compiled_face is None:
            try:
                import mamba_ssm.ops.backends.compiled  # noqa: F401 - the backend, below the dispatch
            except Exception as exc:  # noqa: BLE001 - any failure means: not this backend, with why
                _compiled_face = Unavailable(
                    f"mamba_ssm._C loaded but its Python face mamba_ssm.ops.backends.compiled failed to "
                    f"import ({type(exc).__name__}: {exc})",
                    _advice.reinstall_fix(_loader.install_record()),
                )
            else:
                _compiled_imported = True
    return _compiled_face


def _coverage_fix(device: _devices.DeviceKey) -> str:
    import torch  # a device was asked about, so torch is there

    index = _advice.recorded_index(_loader.install_record())
    loaded = _loader.peek()
    if loaded is not None and loaded.module is not None and loaded.build_info is not None:
        # One of the per-platform wheel's kernel modules: a GPU kind it has no kernels for (a ROCm GPU,
        # a CUDA major without a module) is served by the wheel built for this torch, not by this wheel.
        gpu = "hip" if getattr(torch.version, "hip", None) else "cuda"
        if device.type == "cuda" and gpu not in loaded.build_info.kernels:
            return _advice.wheel_kernels_fix(index)
    return _advice.coverage_fix(
        device.type, _devices.device_arch(device), getattr(torch.version, "cuda", None), index
    )


def compiled_unavailable(op: str, device: _devices.DeviceKey) -> Unavailable | None:
    """Why ``mamba_ssm._C``'s kernels cannot run ``op`` on ``device``, or None."""
    result = _loader.load()
    if not result.loaded:
        return Unavailable(result.reason or "mamba_ssm._C is not loaded", result.fix or "")
    reason = _devices.device_coverage(device)
    if reason is not None:
        return Unavailable(reason, _coverage_fix(device))
    face = _import_compiled_face()
    if face is not None:
        return face
    if op in ("causal_conv1d", "causal_conv1d_update"):
        from mamba_ssm.ops.backends import compiled_conv1d  # imported by the face above

        if not compiled_conv1d.available():
            return Unavailable(
                "this mamba_ssm._C was built without the causal conv1d kernels (a build older than them)",
                _advice.reinstall_fix(_loader.install_record()),
            )
    return None


def _triton_version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+", maxsplit=1)[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _check_triton() -> Unavailable | None:
    """Import triton and our Triton kernels once: None when usable, else why not and the fix."""
    global _triton  # noqa: PLW0603 - once per process
    checked = _triton
    if checked is not None:
        return checked[0]
    with _lock:
        if _triton is not None:
            return _triton[0]
        floor = ".".join(map(str, TRITON_MIN_VERSION))
        answer: Unavailable | None = None
        try:
            import triton  # only where a GPU asks for it
        except Exception as exc:  # noqa: BLE001
            fix = (
                _advice.triton_install_command() or f"install the Triton (>= {floor}) that matches your torch"
            )
            answer = Unavailable(f"triton cannot be imported ({type(exc).__name__}: {exc})", fix)
        else:
            version = str(getattr(triton, "__version__", "0"))
            if _triton_version(version) < TRITON_MIN_VERSION:
                answer = Unavailable(
                    f"triton {version} is older than {floor}, the oldest the Triton kernels support",
                    "upgrade torch (>= 2.4 brings Triton >= 3.0), or install the newer Triton your torch "
                    f"supports ({_advice.triton_install_command() or 'see the PyTorch install page'})",
                )
            else:
                try:
                    import mamba_ssm.ops.triton._kernels  # noqa: F401 - the backend
                except Exception as exc:  # noqa: BLE001
                    answer = Unavailable(
                        f"the Triton kernels failed to import with triton {version} "
                        f"({type(exc).__name__}: {exc})",
                        _advice.reinstall_fix(_loader.install_record()),
                    )
        _triton = (answer,)
    return answer


def triton_unavailable(device: Any) -> Unavailable | None:
    """Why the Triton kernels cannot run on ``device``, or None.

    They run on CUDA and ROCm devices (torch calls both ``cuda``) when ``triton`` >=
    :data:`TRITON_MIN_VERSION` imports; other devices get the reason and no fix (nothing to repair: the
    PyTorch path is the one for them). Triton's import is tried once per process.
    """
    key = _devices.device_key(device)
    if key.type != "cuda":
        return Unavailable(
            f"the Triton kernels run on CUDA/ROCm devices only; on {key.type} the PyTorch implementation runs",
            None,
        )
    arch = _devices.device_arch(key)  # known once the device's coverage was checked
    if arch and not arch.startswith("gfx"):
        major = arch.split(".")[0]
        if major.isdigit() and int(major) < TRITON_MIN_CAPABILITY:
            return Unavailable(
                f"Triton does not support compute capability {arch} (it needs >= 7.0); the PyTorch "
                "implementation runs",
                None,
            )
    return _check_triton()


def causal_conv1d_package() -> tuple[Callable[..., Any], Callable[..., Any]] | None:
    """``(causal_conv1d_fn, causal_conv1d_update)`` of the causal-conv1d package, or None (absent, or
    built for another torch). Looked up once per process."""
    global _package  # noqa: PLW0603 - once per process
    if _package is None:
        try:
            from causal_conv1d import causal_conv1d_fn, causal_conv1d_update
        except Exception:  # noqa: BLE001 - absent, or built for another torch
            _package = False
        else:
            _package = (causal_conv1d_fn, causal_conv1d_update)
    return _package if isinstance(_package, tuple) else None


def package_unavailable(device: _devices.DeviceKey) -> Unavailable | None:
    """Why the causal-conv1d package cannot run on ``device`` (its kernels are CUDA-only), or None."""
    if device.type != "cuda":
        return Unavailable("the causal-conv1d package has CUDA kernels only", None)
    if causal_conv1d_package() is None:
        return Unavailable("the causal-conv1d package is not installed (or does not import)", None)
    return None


def unavailable(backend: Backend, op: str, device: _devices.DeviceKey) -> Unavailable | None:
    """Why ``backend`` cannot run ``op`` on ``device``, or None (TORCH and REF run everywhere)."""
    if backend is Backend.COMPILED:
        return compiled_unavailable(op, device)
    if backend is Backend.TRITON:
        return triton_unavailable(device)
    if backend is Backend.CAUSAL_CONV1D:
        return package_unavailable(device)
    return None


def _reset_for_tests() -> None:
    """Forget the Triton check (tests only)."""
    global _triton  # noqa: PLW0603
    with _lock:
        _triton = None
