"""Which of the per-platform wheel's kernel modules fits a torch: the one rule, pure (no torch, no files).

The per-platform PyPI wheel carries no top-level ``mamba_ssm/_C*.so``; it carries three stable-ABI
builds of ``_C``, one per folder of ``mamba_ssm/_kernels/`` (data, not a package):

    _kernels/cpu/_C.abi3.so    CPU kernels only
    _kernels/cu12/_C.abi3.so   CPU + CUDA kernels, built by nvcc 12.x
    _kernels/cu13/_C.abi3.so   CPU + CUDA kernels, built by nvcc 13.x

They register the same operators, so exactly one is dlopened, chosen from the running torch before
anything is loaded (:func:`choose_module`): a CUDA torch takes ``cu<its CUDA major>``; a ROCm torch
and a CPU torch take ``cpu`` (the wheel has no HIP module: its CPU kernels still run there, the GPU
ops use Triton or the PyTorch fallback); a CUDA major without a module (a future CUDA 14 torch) takes
``cpu`` too, saying so. The chosen file then goes through the build-info check like any ``_C``
(:func:`mamba_ssm._compat.buildinfo.incompatibilities`: the stable floor, the CUDA major), so this rule
never decides compatibility on its own.

A top-level ``mamba_ssm/_C*.so`` (an in-place or source build, a wheel of the project's index) always
wins over these folders: the loader looks at them only when there is none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

from .versions import TorchBuild

__all__ = ["CPU_MODULE", "KERNELS_DIR", "WHEEL_MODULES", "ModuleChoice", "choose_module", "module_folder"]

#: The folder of ``mamba_ssm/`` that holds the wheel's kernel modules, one sub-folder each.
KERNELS_DIR = "_kernels"
#: The CPU-only module's folder.
CPU_MODULE = "cpu"
#: The folders the per-platform wheel carries, in the order messages list them.
WHEEL_MODULES = ("cpu", "cu12", "cu13")

_CUDA_FOLDER = re.compile(r"^cu(\d+)$")


def module_folder(cuda_major: Optional[int]) -> str:
    """The folder of the module built for CUDA ``cuda_major`` (``13`` -> ``"cu13"``); None -> ``"cpu"``."""
    return CPU_MODULE if cuda_major is None else f"cu{int(cuda_major)}"


def _order(folder: str) -> Tuple[int, int, str]:
    """``cpu`` first, then the CUDA folders by major, then anything else by name."""
    if folder == CPU_MODULE:
        return (0, 0, folder)
    m = _CUDA_FOLDER.match(folder)
    return (1, int(m.group(1)), folder) if m else (2, 0, folder)


@dataclass(frozen=True)
class ModuleChoice:
    """Which of the wheel's kernel modules the running torch gets, and why.

    Fields:
        folder: the chosen folder under ``mamba_ssm/_kernels/`` (``"cu13"``, ``"cpu"``), or None when no
            module there can serve this torch.
        path: the chosen module's file (as given to :func:`choose_module`), or None with ``folder``.
        reason: why, in one sentence naming the torch build.
        available: every module folder present, ``cpu`` first then by CUDA major.
        wanted: the folder this torch asks for (``"cu13"`` for a CUDA 13 torch; ``"cpu"`` for a CPU or
            ROCm torch), whether present or not.
    """

    folder: Optional[str]
    path: Optional[str]
    reason: str
    available: Tuple[str, ...]
    wanted: str

    @property
    def others(self) -> Tuple[str, ...]:
        """The module folders present but not chosen."""
        return tuple(f for f in self.available if f != self.folder)

    def to_dict(self) -> Dict[str, Any]:
        """The JSON object ``doctor --json`` shows under ``compiled_module.module_choice``."""
        return {
            "folder": self.folder,
            "path": self.path,
            "reason": self.reason,
            "available": list(self.available),
            "others": list(self.others),
            "wanted": self.wanted,
        }


def choose_module(torch: TorchBuild, modules: Mapping[str, str]) -> ModuleChoice:
    """The module of ``modules`` that the torch ``torch`` loads (see the module docstring).

    Args:
        torch: the running torch (``TorchBuild(torch.__version__, torch.version.cuda, torch.version.hip)``).
        modules: the folders present under ``mamba_ssm/_kernels/`` that hold a module, each mapped to its
            file (``{"cpu": ".../_kernels/cpu/_C.abi3.so", ...}``).

    Returns:
        The :class:`ModuleChoice`; its ``folder`` is None when ``modules`` holds neither the wanted
        folder nor ``cpu`` (only a CUDA module of another major: it could not load here).
    """
    available = tuple(sorted(modules, key=_order))
    listed = ", ".join(available) or "none"
    rocm, cuda = torch.rocm_version, torch.cuda_version
    if rocm is not None:
        wanted = CPU_MODULE
        why = (
            f"torch {torch.version} is a ROCm {rocm} build and the wheel has no ROCm/HIP module, so the CPU "
            "module is loaded: the CPU kernels run, the GPU ops use Triton or the PyTorch fallback"
        )
    elif cuda is not None:
        wanted = module_folder(torch.cuda_major)
        why = f"torch {torch.version} is a CUDA {cuda} build"
    else:
        wanted = CPU_MODULE
        why = f"torch {torch.version} is a CPU-only build"
    if wanted in modules:
        return ModuleChoice(wanted, modules[wanted], why, available, wanted)
    if CPU_MODULE in modules:
        return ModuleChoice(
            CPU_MODULE,
            modules[CPU_MODULE],
            f"{why}, and this install has no {wanted} module (it has {listed}), so the CPU module is "
            "loaded: the CPU kernels run, the GPU ops use Triton or the PyTorch fallback",
            available,
            wanted,
        )
    missing = (
        f"no {CPU_MODULE} module" if wanted == CPU_MODULE else f"neither a {wanted} nor a {CPU_MODULE} module"
    )
    return ModuleChoice(
        None,
        None,
        f"{why}, and this install has {missing} (it has {listed}), so none of its modules can be loaded",
        available,
        wanted,
    )
