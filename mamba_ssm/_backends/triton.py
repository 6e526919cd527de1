"""The Triton backend: the Triton kernels of the families, on CUDA/ROCm devices.

It can run on a CUDA/ROCm device of compute capability >= 7.0 (NVIDIA) where ``triton`` >=
:data:`TRITON_MIN_VERSION` and the kernels import (tried once per process); other devices get the reason
and no fix (the PyTorch implementation is the one for them).
"""

from __future__ import annotations

import threading
from typing import Any, ClassVar

from .. import _advice, _devices, _loader
from .base import Backend, BackendObject, Target, Unavailable

__all__ = ["KERNELS", "TRITON_MIN_CAPABILITY", "TRITON_MIN_VERSION", "TritonBackend", "triton_unavailable"]

#: The oldest Triton the kernels are written for (what torch 2.4 brings); older: the PyTorch path.
TRITON_MIN_VERSION = (3, 0)
#: NVIDIA GPUs older than this compute capability run no Triton code.
TRITON_MIN_CAPABILITY = 7
#: The package of the Triton kernels (importing it imports triton).
KERNELS = "mamba_ssm._families.triton_kernels"

_MAMBA3 = "mamba_ssm._families.mamba3.calls"
_MAMBA3_KERNELS = "mamba_ssm._families.mamba3.triton_kernels"
_SCAN = "mamba_ssm._families.selective_scan.calls"
_NORMS = "mamba_ssm._families.norms.torch_impl"
_GATED = "mamba_ssm._families.norms.gated"
_SSD = "mamba_ssm._families.ssd.calls"

_lock = threading.RLock()
_checked: tuple[Unavailable | None] | None = None  # (the answer,) once checked


def _triton_version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split("+", maxsplit=1)[0].split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _check_triton() -> Unavailable | None:
    """Import triton and the Triton kernels once: None when usable, else why not and the fix."""
    global _checked  # noqa: PLW0603 - once per process
    checked = _checked
    if checked is not None:
        return checked[0]
    with _lock:
        if _checked is not None:
            return _checked[0]
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
                    import mamba_ssm._families.triton_kernels  # noqa: F401 - the families' Triton kernels
                except Exception as exc:  # noqa: BLE001
                    answer = Unavailable(
                        f"the Triton kernels failed to import with triton {version} "
                        f"({type(exc).__name__}: {exc})",
                        _advice.reinstall_fix(_loader.install_record()),
                    )
        _checked = (answer,)
    return answer


def triton_unavailable(device: Any) -> Unavailable | None:
    """Why the Triton kernels cannot run on ``device`` (a torch.device, device string or key), or None."""
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


class TritonBackend(BackendObject):
    """The families' Triton kernels (CUDA/ROCm)."""

    name: ClassVar[str] = Backend.TRITON
    implementations: ClassVar[dict[str, Target]] = {
        "selective_state_update": (
            "mamba_ssm._families.selective_scan.state_update_triton",
            "selective_state_update",
        ),
        "layer_norm": (_NORMS, "triton_layer_norm"),
        "rms_norm": (_NORMS, "triton_layer_norm"),
        "mamba3_siso": (_MAMBA3_KERNELS, "chunk_scan"),
        "mamba3_mimo": (_MAMBA3_KERNELS, "chunk_scan"),
        "mamba3_step": (_MAMBA3_KERNELS, "step"),
        "ssd_chunk_scan": (_SSD, "triton_chunk_scan_combined"),
        "ssd_chunk_scan_fwd": (_SSD, "triton_chunk_scan_fwd"),
        "ssd_chunk_scan_bwd": (_SSD, "triton_chunk_scan_bwd"),
        "ssd_chunk_cumsum": (_SSD, "triton_chunk_cumsum"),
        "ssd_chunk_state": (_SSD, "triton_chunk_state"),
        "ssd_chunk_state_varlen": (_SSD, "triton_chunk_state_varlen"),
        "ssd_state_passing": (_SSD, "triton_state_passing"),
        "gated_rms_norm": (_GATED, "triton_gated_norm"),
        "gated_layer_norm": (_GATED, "triton_gated_norm"),
    }
    checks: ClassVar[dict[str, Target]] = {
        "selective_state_update": (_SCAN, "triton_state_update_unsupported"),
        "layer_norm": (_NORMS, "triton_layer_norm_unsupported"),
        "rms_norm": (_NORMS, "triton_layer_norm_unsupported"),
        "mamba3_siso": (_MAMBA3, "triton_siso_unsupported"),
        "mamba3_mimo": (_MAMBA3, "triton_mimo_unsupported"),
        "mamba3_step": (_MAMBA3, "triton_step_unsupported"),
        "ssd_chunk_scan": (_SSD, "triton_combined_unsupported"),
        "ssd_chunk_scan_fwd": (_SSD, "triton_combined_unsupported"),
        "ssd_chunk_scan_bwd": (_SSD, "triton_combined_unsupported"),
        "ssd_chunk_cumsum": (_SSD, "triton_chunk_cumsum_unsupported"),
        "ssd_chunk_state": (_SSD, "triton_chunk_state_unsupported"),
        "ssd_chunk_state_varlen": (_SSD, "triton_chunk_state_varlen_unsupported"),
        "ssd_state_passing": (_SSD, "triton_state_passing_unsupported"),
        "gated_rms_norm": (_GATED, "triton_gated_norm_unsupported"),
        "gated_layer_norm": (_GATED, "triton_gated_norm_unsupported"),
    }

    def unavailable(self, op: str, device: _devices.DeviceKey) -> Unavailable | None:
        """Why the Triton kernels cannot run on ``device`` (the same answer for every op), or None."""
        del op
        return triton_unavailable(device)


def _reset_for_tests() -> None:
    """Forget the Triton check (tests only)."""
    global _checked  # noqa: PLW0603
    with _lock:
        _checked = None
