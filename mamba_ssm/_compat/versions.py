"""Version strings of torch, CUDA, ROCm, nvcc and hipcc, parsed once for the loader, the resolver,
the audit and setup.py.

Pure Python: imports neither torch nor ``mamba_ssm/__init__``, only the standard library and
``packaging``, so setup.py can load this file by path inside an isolated build.

Examples of the strings handled (all public):

* PyPI / download.pytorch.org torch: ``"2.5.1+cu124"``, ``"2.6.0+cu126"``, ``"2.4.0+rocm6.1"``,
  ``"2.13.0+cpu"``, ``"2.6.0"`` (PyPI's default CUDA build carries no label).
* nightlies: ``"2.3.0.dev20240304+cu118"``.
* NVIDIA NGC containers: ``"2.6.0a0+ecf3bae40a.nv25.01"``, ``"2.3.0a0+6ddf5cf85e.nv24.04"``.
* source builds: ``"2.5.0a0+git32f585d"``.
* ``torch.version.hip``: ``"6.2.41133-dd7f95766"``; ``hipcc --version``: ``"HIP version: 5.2.21153-0"``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from packaging.version import InvalidVersion, Version

from .textenum import TextEnum

__all__ = [
    "TorchAbi",
    "TorchBuild",
    "cuda_from_local_label",
    "parse_cuda_version",
    "parse_hipcc_version",
    "parse_nvcc_version",
    "parse_rocm_version",
    "rocm_from_local_label",
]


class TorchAbi(TextEnum):
    """The torch ABI a ``mamba_ssm._C`` binds to (its build info's ``torch_abi``, a wheel variant's)."""

    CLASSIC = "classic"  # ATen: one torch minor (and C++ ABI) per build
    STABLE = "stable"  # the LibTorch stable ABI: every torch from the build's floor on


_NGC_LOCAL = re.compile(r"(?:^|\.)nv\d{2}\.\d{2}(?:$|\.)")
_CUDA_LOCAL = re.compile(r"^cu(\d{2,3})$")
_ROCM_LOCAL = re.compile(r"^rocm(\d+)\.(\d+)(?:\.\d+)*$")
_SOURCE_LOCAL = re.compile(r"(?:^|\.)git[0-9a-f]{4,}")


def parse_cuda_version(text: str) -> Tuple[int, int]:
    """Parse a CUDA version such as ``torch.version.cuda`` (``"12.4"``, ``"13.0"``, ``"11.8.89"``).

    Returns ``(major, minor)`` as ints. Raises ``ValueError`` naming the text when it holds no
    ``major.minor``.
    """
    m = re.search(r"(\d+)\.(\d+)", str(text or ""))
    if not m:
        raise ValueError(f"cannot read a CUDA version from {text!r}: expected 'major.minor' such as '12.4'")
    return int(m.group(1)), int(m.group(2))


def parse_rocm_version(text: str) -> Tuple[int, int]:
    """Parse a ROCm/HIP version tolerantly: ``"6.2.41133-dd7f95766"`` -> ``(6, 2)``.

    Accepts what ``torch.version.hip``, ``hipcc --version``, ``$ROCM_PATH/.info/version`` and torch's
    local label write: ``"6.0.32830-d62f6a171"``, ``"6.1"``, ``"rocm6.1"``, ``"HIP version: 5.2.21153-0"``,
    ``"6.2.4-120"``. Returns ``(major, minor)``; raises ``ValueError`` naming the text when no
    ``major.minor`` is present.
    """
    s = str(text or "")
    m = re.search(r"HIP version:\s*(\d+)\.(\d+)", s)
    if not m:
        m = re.search(r"(?<![\d.])(\d+)\.(\d+)", s)
    if not m:
        raise ValueError(
            f"cannot read a ROCm/HIP version from {text!r}: expected 'major.minor[.patch][-hash]' "
            "such as '6.2.41133-dd7f95766'"
        )
    return int(m.group(1)), int(m.group(2))


def parse_hipcc_version(text: str) -> Tuple[int, int]:
    r"""Parse the output of ``hipcc --version`` (``"HIP version: 5.2.21153-0\n..."``) -> ``(5, 2)``.

    Raises ``ValueError`` naming the text when it carries no ``HIP version:`` line.
    """
    m = re.search(r"HIP version:\s*(\d+)\.(\d+)", str(text or ""))
    if not m:
        raise ValueError(
            f"cannot read the HIP version from hipcc output {text!r}: expected a line "
            "'HIP version: X.Y...'; is this hipcc from ROCm?"
        )
    return int(m.group(1)), int(m.group(2))


def parse_nvcc_version(text: str) -> Tuple[int, int]:
    """Parse the output of ``nvcc --version`` -> ``(major, minor)``, e.g. ``(13, 0)``.

    Reads ``"Cuda compilation tools, release 13.0, V13.0.88"``; falls back on a ``V13.0.88`` token.
    Raises ``ValueError`` naming the text when neither is present (e.g. a wrapper script that printed
    something else).
    """
    s = str(text or "")
    m = re.search(r"release\s+(\d+)\.(\d+)", s)
    if not m:
        m = re.search(r"\bV(\d+)\.(\d+)\.\d+", s)
    if not m:
        raise ValueError(
            f"cannot read the CUDA release from nvcc output {s.strip()[:300]!r}: expected a line "
            "'Cuda compilation tools, release X.Y, VX.Y.Z'; point CUDA_HOME at a CUDA toolkit root"
        )
    return int(m.group(1)), int(m.group(2))


def cuda_from_local_label(local: Optional[str]) -> Optional[str]:
    """``"cu124"`` -> ``"12.4"``, ``"cu118"`` -> ``"11.8"``, ``"cu130"`` -> ``"13.0"``; else None.

    The last digit of torch's ``cuXYZ`` label is the minor version.
    """
    m = _CUDA_LOCAL.match(local or "")
    if not m:
        return None
    digits = m.group(1)
    return f"{int(digits[:-1])}.{int(digits[-1])}"


def rocm_from_local_label(local: Optional[str]) -> Optional[str]:
    """``"rocm6.1"`` -> ``"6.1"``, ``"rocm5.7.1"`` -> ``"5.7"``; else None."""
    m = _ROCM_LOCAL.match(local or "")
    if not m:
        return None
    return f"{int(m.group(1))}.{int(m.group(2))}"


@dataclass(frozen=True)
class TorchBuild:
    """One torch build, as the runtime sees it or as a wheel was built against.

    Fields:
        version: ``torch.__version__`` in full, e.g. ``"2.6.0+cu124"``, ``"2.3.0.dev20240304+cu118"``,
            ``"2.6.0a0+ecf3bae40a.nv25.01"``.
        cuda: ``torch.version.cuda`` (``"12.4"``) or None.
        hip: ``torch.version.hip`` (``"6.2.41133-dd7f95766"``) or None.
        cxx11_abi: ``torch._C._GLIBCXX_USE_CXX11_ABI``, None when unknown.

    When both ``cuda`` and ``hip`` are None, the accelerator is read from a ``cuXYZ`` / ``rocmX.Y``
    local label (``TorchBuild("2.5.1+cu124").accelerator == "cu12"``).

    Raises ``ValueError`` (naming the string) when ``version`` is not a PEP 440 version.
    """

    version: str
    cuda: Optional[str] = None
    hip: Optional[str] = None
    cxx11_abi: Optional[bool] = None

    def __post_init__(self) -> None:
        try:
            Version(self.version)
        except InvalidVersion:
            raise ValueError(
                f"torch version {self.version!r} is not a PEP 440 version (expected e.g. '2.6.0+cu124')"
            ) from None

    # ----------------------------------------------------------------- version properties
    @property
    def parsed(self) -> Version:
        """The version as a ``packaging.version.Version``."""
        return Version(self.version)

    @property
    def release(self) -> Tuple[int, ...]:
        """The release tuple: ``"2.6.0a0+ecf3bae40a.nv25.01"`` -> ``(2, 6, 0)``."""
        return self.parsed.release

    @property
    def major_minor(self) -> str:
        """``"2.6"`` for any 2.6.x build."""
        r = self.release + (0,)
        return f"{r[0]}.{r[1]}"

    @property
    def local(self) -> Optional[str]:
        """The local version label as written (``"cu124"``, ``"ecf3bae40a.nv25.01"``) or None.

        Taken from the text, not from ``packaging`` (which normalises ``nv25.01`` to ``nv25.1``).
        """
        _, plus, label = self.version.partition("+")
        return label.strip() if plus and label.strip() else None

    @property
    def is_nightly(self) -> bool:
        """A dev release (``"2.3.0.dev20240304+cu118"``): nightlies change ABI from day to day."""
        return self.parsed.is_devrelease

    @property
    def is_ngc(self) -> bool:
        """An NVIDIA NGC container build (local label ending ``nvYY.MM``)."""
        return bool(_NGC_LOCAL.search(self.local or ""))

    @property
    def is_prerelease(self) -> bool:
        """An alpha/beta/rc or dev version (``"2.6.0a0+..."``, ``"2.7.0rc1"``)."""
        return self.parsed.is_prerelease

    @property
    def is_source_build(self) -> bool:
        """Built from a git checkout (local label ``git<hash>``)."""
        return bool(_SOURCE_LOCAL.search(self.local or ""))

    @property
    def needs_exact_match(self) -> bool:
        """True when only a build against this exact version string is compatible."""
        return self.is_prerelease or self.is_nightly or self.is_ngc or self.is_source_build

    # ----------------------------------------------------------------- accelerator
    @property
    def cuda_version(self) -> Optional[str]:
        """CUDA ``major.minor`` from ``cuda`` or, failing that, a ``cuXYZ`` label; None if CPU/ROCm."""
        if self.cuda:
            major, minor = parse_cuda_version(self.cuda)
            return f"{major}.{minor}"
        if self.hip:
            return None
        return cuda_from_local_label(self.local)

    @property
    def rocm_version(self) -> Optional[str]:
        """ROCm ``major.minor`` from ``hip`` or, failing that, a ``rocmX.Y`` label; else None."""
        if self.hip:
            major, minor = parse_rocm_version(self.hip)
            return f"{major}.{minor}"
        if self.cuda:
            return None
        return rocm_from_local_label(self.local)

    @property
    def cuda_major(self) -> Optional[int]:
        """The CUDA major version as an int, or None."""
        v = self.cuda_version
        return int(v.split(".")[0]) if v else None

    @property
    def accelerator(self) -> str:
        """``"cu12"`` (CUDA major), ``"rocm6.2"`` (ROCm major.minor) or ``"cpu"``."""
        rocm = self.rocm_version
        if rocm:
            return f"rocm{rocm}"
        major = self.cuda_major
        if major is not None:
            return f"cu{major}"
        return "cpu"

    @classmethod
    def from_torch(cls, torch_module: Any = None) -> TorchBuild:
        """The build of the torch in this process (imports torch lazily; never initialises CUDA).

        Raises ``ImportError`` when torch is not installed.
        """
        if torch_module is None:
            import torch  # only when asked about the torch of this process

            torch_module = torch
        version = getattr(torch_module, "version", None)
        abi = getattr(getattr(torch_module, "_C", None), "_GLIBCXX_USE_CXX11_ABI", None)
        return cls(
            version=str(torch_module.__version__),
            cuda=getattr(version, "cuda", None),
            hip=getattr(version, "hip", None),
            cxx11_abi=None if abi is None else bool(abi),
        )
