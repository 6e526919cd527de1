"""The GPUs and the NVIDIA driver of this machine, without initialising CUDA in any process.

NVIDIA: NVML through ctypes (``libnvidia-ml.so.1``; skipped when ``MAMBA_SSM_NO_NVML=1``), else
``nvidia-smi --query-gpu=name,compute_cap,driver_version,uuid --format=csv,noheader``. AMD:
``rocminfo``. ``CUDA_VISIBLE_DEVICES`` is applied to the NVIDIA GPUs as CUDA applies it.

Used by the install-time resolver (:func:`mamba_ssm._install.environment.detect`) and by ``python -m
mamba_ssm doctor``. Standard library only.
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Callable, Mapping, NamedTuple

__all__ = ["Gpu", "GpuProbe", "detect_gpus", "nvidia_driver", "parse_nvidia_smi", "parse_rocminfo"]

_NAME_BUFFER = 96
_TOOL_TIMEOUT_S = 30
NVML_LIBRARY = "libnvidia-ml.so.1"
SMI_QUERY = ("--query-gpu=name,compute_cap,driver_version,uuid", "--format=csv,noheader")


@dataclass(frozen=True)
class Gpu:
    """One visible GPU: vendor ``"nvidia"`` with ``capability`` like ``"9.0"``, or ``"amd"`` with
    ``gfx`` like ``"gfx90a"``."""

    vendor: str
    name: str = ""
    capability: str | None = None
    gfx: str | None = None
    uuid: str | None = None

    @property
    def capability_tuple(self) -> tuple[int, int] | None:
        """``"8.6"`` -> ``(8, 6)``; None for an AMD GPU or an unknown capability."""
        if not self.capability:
            return None
        major, _, minor = self.capability.partition(".")
        return int(major), int(minor or 0)


class GpuProbe(NamedTuple):
    """What :func:`detect_gpus` found: the visible GPUs, the NVIDIA driver version (or None) and how
    they were found (or why none were), one clause per source."""

    gpus: list[Gpu]
    driver: str | None
    how: str


def parse_nvidia_smi(text: str) -> tuple[list[Gpu], str | None]:
    """Parse ``nvidia-smi --query-gpu=name,compute_cap,driver_version,uuid --format=csv,noheader``.

    Returns (GPUs, driver version). Lines without a ``major.minor`` compute capability are skipped.
    """
    gpus: list[Gpu] = []
    driver = None
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not re.match(r"^\d+\.\d+$", parts[1]):
            continue
        gpus.append(Gpu("nvidia", parts[0], parts[1], uuid=parts[3] if len(parts) > 3 else None))
        driver = driver or parts[2]
    return gpus, driver


def parse_rocminfo(text: str) -> list[Gpu]:
    """GPU agents of ``rocminfo`` output: each ``Name: gfxNNN`` of an agent whose device type is GPU."""
    gpus = []
    for block in re.split(r"\n\*+\s*\n\s*Agent \d+\s*\n\*+", text):
        name = re.search(r"^\s*Name:\s*(gfx[0-9a-f]+)\s*$", block, re.MULTILINE | re.IGNORECASE)
        if name and re.search(r"Device Type:\s*GPU", block):
            market = re.search(r"Marketing Name:\s*(.+)", block)
            gpus.append(Gpu("amd", market.group(1).strip() if market else "", gfx=name.group(1).lower()))
    return gpus


def _nvml_string(getter: Callable[..., int], *args: object) -> str | None:
    buf = ctypes.create_string_buffer(_NAME_BUFFER)
    if getter(*args, buf, ctypes.c_uint(_NAME_BUFFER)) != 0:
        return None
    return buf.value.decode("utf-8", "replace") or None


def _nvml(devices: bool = True) -> tuple[list[Gpu], str | None]:
    """(GPUs, driver version) through NVML; OSError / AttributeError when NVML is absent or fails."""
    lib = ctypes.CDLL(NVML_LIBRARY)
    init = getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit
    if init() != 0:
        raise OSError("nvmlInit failed")
    try:
        driver = _nvml_string(lib.nvmlSystemGetDriverVersion)
        gpus: list[Gpu] = []
        if not devices:
            return gpus, driver
        count = ctypes.c_uint(0)
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            raise OSError("nvmlDeviceGetCount_v2 failed")
        for i in range(count.value):
            handle = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(handle)) != 0:
                continue
            major, minor = ctypes.c_int(0), ctypes.c_int(0)
            cap = None
            if lib.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) == 0:
                cap = f"{major.value}.{minor.value}"
            name = _nvml_string(lib.nvmlDeviceGetName, handle) or ""
            gpus.append(Gpu("nvidia", name, cap, uuid=_nvml_string(lib.nvmlDeviceGetUUID, handle)))
        return gpus, driver
    finally:
        lib.nvmlShutdown()


def _run(argv: list[str]) -> tuple[int, str]:
    """(exit status, stdout) of a tool; OSError / SubprocessError when it cannot run or times out."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S, check=False)
    return done.returncode, done.stdout


def _visible(gpus: list[Gpu], environ: Mapping[str, str]) -> tuple[list[Gpu], str | None]:
    """Apply CUDA_VISIBLE_DEVICES (indices or UUID prefixes) to the NVIDIA GPUs."""
    spec = environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return gpus, None
    nv = [g for g in gpus if g.vendor == "nvidia"]
    chosen: list[Gpu] = []
    for token in [t.strip() for t in spec.split(",") if t.strip()]:
        if re.match(r"^-?\d+$", token):
            idx = int(token)
            if idx < 0 or idx >= len(nv):
                break  # CUDA stops at the first invalid entry
            chosen.append(nv[idx])
        else:
            match = [g for g in nv if g.uuid and (g.uuid == token or g.uuid.startswith(token))]
            if not match:
                break
            chosen.append(match[0])
    others = [g for g in gpus if g.vendor != "nvidia"]
    return chosen + others, f"CUDA_VISIBLE_DEVICES={spec!r} applied"


def _nvml_allowed(environ: Mapping[str, str]) -> bool:
    return environ.get("MAMBA_SSM_NO_NVML") != "1"


def detect_gpus(environ: Mapping[str, str] | None = None) -> GpuProbe:
    """The visible GPUs and the NVIDIA driver (see the module docstring). Never raises."""
    environ = os.environ if environ is None else environ
    gpus: list[Gpu] = []
    driver = None
    how = []
    if _nvml_allowed(environ):
        try:
            gpus, driver = _nvml()
            how.append(f"NVML: {len(gpus)} NVIDIA GPU(s)")
        except (OSError, AttributeError) as exc:
            how.append(f"NVML unavailable ({exc})")
    if not gpus and driver is None:
        smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
        if smi:
            try:
                gpus, driver = parse_nvidia_smi(_run([smi, *SMI_QUERY])[1])
                how.append(f"nvidia-smi: {len(gpus)} NVIDIA GPU(s)")
            except (OSError, subprocess.SubprocessError) as exc:
                how.append(f"nvidia-smi failed ({exc})")
        else:
            how.append("no nvidia-smi")
    rocminfo = shutil.which("rocminfo", path=environ.get("PATH"))
    if rocminfo:
        try:
            amd = parse_rocminfo(_run([rocminfo])[1])
            gpus = gpus + amd
            how.append(f"rocminfo: {len(amd)} AMD GPU(s)")
        except (OSError, subprocess.SubprocessError) as exc:
            how.append(f"rocminfo failed ({exc})")
    gpus, note = _visible(gpus, environ)
    if note:
        how.append(note)
    return GpuProbe(gpus, driver, "; ".join(how))


def nvidia_driver(environ: Mapping[str, str] | None = None) -> tuple[str | None, str | None]:
    """(the NVIDIA driver version, ``"nvml"`` or ``"nvidia-smi"``), or (None, None) without a driver.

    Never raises."""
    environ = os.environ if environ is None else environ
    if _nvml_allowed(environ):
        try:
            _, driver = _nvml(devices=False)
        except (OSError, AttributeError):
            driver = None
        if driver:
            return driver, "nvml"
    smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
    if smi:
        try:  # the driver column alone: older nvidia-smi lacks compute_cap
            status, out = _run([smi, "--query-gpu=driver_version", "--format=csv,noheader"])
        except (OSError, subprocess.SubprocessError):
            status, out = 1, ""
        lines = out.split()
        if status == 0 and lines:
            return lines[0], "nvidia-smi"
    return None, None
