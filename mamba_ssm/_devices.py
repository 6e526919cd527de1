"""Devices as the dispatch sees them, and whether the loaded ``mamba_ssm._C`` has kernels for them.

:func:`device_key` names a device (``("cuda", 0)``, ``("cpu", -1)``); :func:`device_coverage` checks once
per device whether the loaded build carries kernels for it (compute capability against the build's
SASS/PTX for CUDA, the gfx arch for ROCm, the ``cpu`` kernel for CPU tensors) and :func:`device_arch`
gives the arch that check found. CUDA is initialised only by a check on a CUDA device, at the first
call on it, never at import.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

from . import _loader

__all__ = ["DeviceKey", "describe", "device_arch", "device_coverage", "device_key"]


class DeviceKey(NamedTuple):
    """``(device type, ordinal)``: ``("cuda", 1)``; the CPU is ``("cpu", -1)``."""

    type: str
    ordinal: int

    def __str__(self) -> str:
        return self.type if self.ordinal < 0 else f"{self.type}:{self.ordinal}"


_lock = threading.RLock()
_coverage: dict[DeviceKey, str | None] = {}
_archs: dict[DeviceKey, str] = {}  # "7.5" (CUDA compute capability) or "gfx90a"


def device_key(device: Any) -> DeviceKey:
    """The key of a torch.device, a device string, a CUDA ordinal or a tensor (a key is its own key).

    A CUDA device without an index means the current device (``torch.cuda.current_device()``, which
    initialises CUDA: only called on the way to a CUDA computation).

    Raises:
        TypeError: ``device`` is none of the accepted kinds.
    """
    if isinstance(device, DeviceKey):
        return device
    import torch  # only once a device is asked about

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
        return DeviceKey("cpu", -1)
    index = device.index
    if index is None:  # torch's stub types device.index as int; an unindexed device's is None
        index = torch.cuda.current_device() if device.type == "cuda" else 0  # type: ignore[unreachable]
    return DeviceKey(device.type, int(index))


def describe(device: Any) -> str:
    """``"cpu"``, ``"cuda:0"``: the device as messages name it (its ``str`` when it has no key)."""
    try:
        return str(device_key(device))
    except Exception:  # noqa: BLE001 - a message must not fail
        return str(device)


def _gfx_base(name: str) -> str:
    """``"gfx90a:sramecc+:xnack-"`` -> ``"gfx90a"``."""
    return name.split(":", 1)[0].strip().lower()


def _coverage_uncached(key: DeviceKey) -> str | None:
    result = _loader.load()
    if not result.loaded or result.build_info is None:
        return result.reason or "the compiled module is not loaded"
    build = result.build_info
    kernels = [str(k).lower() for k in build.kernels]
    listed = ", ".join(kernels) or "none"
    if key.type == "cpu":
        if "cpu" in kernels:
            return None
        return f"this build of mamba_ssm._C has no CPU kernel (kernels: {listed})"
    if key.type != "cuda":
        return f"mamba_ssm._C has no kernel for {key.type} devices (kernels: {listed})"

    import torch

    if getattr(torch.version, "hip", None):
        if "hip" not in kernels and "rocm" not in kernels:
            return f"this build of mamba_ssm._C has no ROCm/HIP kernel (kernels: {listed})"
        props = torch.cuda.get_device_properties(key.ordinal)
        arch = _gfx_base(getattr(props, "gcnArchName", "") or "")
        if arch:
            _archs[key] = arch
        built = sorted({_gfx_base(a) for a in build.gfx_archs})
        if arch and arch in built:
            return None
        return (
            f"GPU {key.ordinal} ({props.name}) is {arch or 'of an unknown gfx arch'}, and this build of "
            f"mamba_ssm._C carries code for {', '.join(built) or 'no gfx arch'} only"
        )

    if "cuda" not in kernels:
        return f"this build of mamba_ssm._C has no CUDA kernel (kernels: {listed}): it is a CPU-only build"
    from ._compat.archs import coverage

    major, minor = (int(x) for x in torch.cuda.get_device_capability(key.ordinal))
    _archs[key] = f"{major}.{minor}"
    reason = coverage((major, minor), list(build.sass_archs), list(build.ptx_archs))
    if reason is None:
        return None
    return f"GPU {key.ordinal} (compute capability {major}.{minor}): {reason}"


def device_coverage(device: Any) -> str | None:
    """Whether the loaded compiled module has kernels for ``device``; checked once per device.

    Args:
        device: a torch.device, a device string (``"cpu"``, ``"cuda:1"``), a CUDA ordinal or a tensor.

    Returns:
        None when the compiled kernels run on that device, else the reason in one sentence (including
        "not loaded" reasons from :func:`mamba_ssm._loader.load`). CPU: the build has the ``cpu``
        kernel. CUDA: the device's compute capability (``torch.cuda.get_device_capability``, called
        at the first call on that device) is covered by the build's SASS/PTX
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
                _coverage[key] = f"cannot check {key} against the build: {type(exc).__name__}: {exc}"
        return _coverage[key]


def device_arch(device: Any) -> str | None:
    """The arch :func:`device_coverage` found for ``device``: a CUDA compute capability such as ``"7.5"``
    or a ROCm gfx arch such as ``"gfx1100"``; None for the CPU or before its coverage was checked."""
    return _archs.get(device_key(device))


def _reset_for_tests() -> None:
    """Forget the cached coverage and archs (tests only)."""
    with _lock:
        _coverage.clear()
        _archs.clear()
