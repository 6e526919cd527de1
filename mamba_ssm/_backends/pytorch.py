"""The PyTorch backend: the families' PyTorch implementations, on every device (the fallback)."""

from __future__ import annotations

from typing import ClassVar

from .base import Backend, BackendObject, Target

__all__ = ["PyTorchBackend"]

_SCAN = "mamba_ssm._families.selective_scan.calls"
_CONV = "mamba_ssm._families.causal_conv1d.torch_impl"


class PyTorchBackend(BackendObject):
    """The PyTorch implementations: they run everywhere, and every call."""

    name: ClassVar[str] = Backend.TORCH
    implementations: ClassVar[dict[str, Target]] = {
        "selective_scan": (_SCAN, "torch_selective_scan"),
        "causal_conv1d": (_CONV, "causal_conv1d_ref"),
        "causal_conv1d_update": (_CONV, "causal_conv1d_update"),
        "causal_conv1d_varlen_states": (_CONV, "causal_conv1d_varlen_states"),
    }
