"""The causal-conv1d package backend: that package's CUDA kernels behind the conv ops' signatures
(:mod:`mamba_ssm._families.causal_conv1d.package`; the varlen-states copy, which the package does not
have, is the PyTorch code's). It can run on a CUDA device where ``causal_conv1d`` imports (looked up once
per process).
"""

from __future__ import annotations

from typing import ClassVar

from .._devices import DeviceKey
from .._families.causal_conv1d import package as _lookup
from .._families.causal_conv1d.package import causal_conv1d_package
from .base import Backend, BackendObject, Target, Unavailable

__all__ = ["PackageBackend", "causal_conv1d_package", "package_unavailable"]

_PACKAGE = "mamba_ssm._families.causal_conv1d.package"


def package_unavailable(device: DeviceKey) -> Unavailable | None:
    """Why the causal-conv1d package cannot run on ``device`` (its kernels are CUDA-only), or None."""
    if device.type != "cuda":
        return Unavailable("the causal-conv1d package has CUDA kernels only", None)
    if causal_conv1d_package() is None:
        return Unavailable("the causal-conv1d package is not installed (or does not import)", None)
    return None


class PackageBackend(BackendObject):
    """The causal-conv1d package's CUDA kernels, for the conv ops."""

    name: ClassVar[str] = Backend.CAUSAL_CONV1D
    implementations: ClassVar[dict[str, Target]] = {
        "causal_conv1d": (_PACKAGE, "package_fn"),
        "causal_conv1d_update": (_PACKAGE, "package_update"),
        "causal_conv1d_varlen_states": (
            "mamba_ssm._families.causal_conv1d.torch_impl",
            "causal_conv1d_varlen_states",
        ),
    }

    def unavailable(self, op: str, device: DeviceKey) -> Unavailable | None:
        """Why the package cannot run on ``device`` (not CUDA, not installed), or None."""
        del op
        return package_unavailable(device)


def _reset_for_tests() -> None:
    """Look the package up again at the next question (tests only)."""
    _lookup._reset_for_tests()
