"""The compiled backend: the kernels of ``mamba_ssm._C``.

It can run an op on a device when ``_C`` loaded (:mod:`mamba_ssm._loader`), its kernels cover the device
(:mod:`mamba_ssm._devices`) and its Python face imports (it registers the ops' fake and autograd
implementations); the conv ops also need a build with the causal conv1d kernels. A particular call it
does not take (float64, d_state above the GPU kernels' limit, ...) is named by the family's check.
"""

from __future__ import annotations

import threading
from typing import ClassVar

from .. import _advice, _devices, _loader
from .base import Backend, BackendObject, Target, Unavailable

__all__ = ["CompiledBackend", "compiled_unavailable"]

_CONV = "mamba_ssm._families.causal_conv1d.calls"
#: The module whose import registers the compiled ops' fake and autograd implementations.
FACE = "mamba_ssm._families.selective_scan.compiled"
#: The ops that run on the causal conv1d kernels of ``_C``.
CONV_OPS = ("causal_conv1d", "causal_conv1d_update", "causal_conv1d_varlen_states")

_lock = threading.RLock()
_face: Unavailable | None = None
_face_imported = False


def _import_face() -> Unavailable | None:
    """Import the compiled kernels' Python face once (it registers fake/autograd implementations)."""
    global _face, _face_imported  # noqa: PLW0603 - once per process
    if _face_imported or _face is not None:
        return _face
    with _lock:
        if not _face_imported and _face is None:
            try:
                import mamba_ssm._families.selective_scan.compiled  # noqa: F401 - the family's compiled face
            except Exception as exc:  # noqa: BLE001 - any failure means: not this backend, with why
                _face = Unavailable(
                    f"mamba_ssm._C loaded but its Python face {FACE} failed to import ({type(exc).__name__}: {exc})",
                    _advice.reinstall_fix(_loader.install_record()),
                )
            else:
                _face_imported = True
    return _face


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
    face = _import_face()
    if face is not None:
        return face
    if op in CONV_OPS:
        from mamba_ssm._families.causal_conv1d import (
            compiled as compiled_conv1d,  # imported by the face above
        )

        if not compiled_conv1d.available():
            return Unavailable(
                "this mamba_ssm._C was built without the causal conv1d kernels (a build older than them)",
                _advice.reinstall_fix(_loader.install_record()),
            )
    return None


class CompiledBackend(BackendObject):
    """``mamba_ssm._C``'s kernels (CPU, CUDA, ROCm)."""

    name: ClassVar[str] = Backend.COMPILED
    implementations: ClassVar[dict[str, Target]] = {
        "selective_scan": ("mamba_ssm._families.selective_scan.compiled", "selective_scan"),
        "causal_conv1d": (_CONV, "compiled_fn"),
        "causal_conv1d_update": (_CONV, "compiled_update"),
        "causal_conv1d_varlen_states": (_CONV, "compiled_varlen_states"),
    }
    checks: ClassVar[dict[str, Target]] = {
        "selective_scan": (FACE, "supports"),
        "causal_conv1d": (_CONV, "compiled_fn_unsupported"),
        "causal_conv1d_update": (_CONV, "compiled_update_unsupported"),
        "causal_conv1d_varlen_states": (_CONV, "compiled_varlen_states_unsupported"),
    }

    def unavailable(self, op: str, device: _devices.DeviceKey) -> Unavailable | None:
        """Why ``_C``'s kernels cannot run ``op`` on ``device`` (not loaded, not covering it, no conv
        kernels in this build), or None."""
        return compiled_unavailable(op, device)
