"""The reference backend: the sequential references of the ops that have one of their own (slow; for
checking). The other ops' PyTorch code is their reference (the policy runs the PyTorch backend)."""

from __future__ import annotations

from typing import ClassVar

from .base import Backend, BackendObject, Target

__all__ = ["ReferenceBackend"]


class ReferenceBackend(BackendObject):
    """The sequential references: they run everywhere, and every call."""

    name: ClassVar[str] = Backend.REF
    implementations: ClassVar[dict[str, Target]] = {
        "selective_scan": ("mamba_ssm._families.selective_scan.reference", "selective_scan_ref"),
    }
