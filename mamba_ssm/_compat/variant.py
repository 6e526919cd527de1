r"""The wheel variant key: which torch build, accelerator and C++ ABI a compiled wheel serves.

A wheel of ``mamba_ssm`` with the compiled module ``_C`` only works with the torch build it was
compiled against, so each wheel carries its variant in the PEP 440 *local version label* of its
version, in the file name and in METADATA alike (setup.py appends ``MAMBA_LOCAL_VERSION``)::

    mamba_ssm-2.4.0+cu13torch2.14cxx11abitrue-cp39-abi3-manylinux_2_28_x86_64.whl
                    \__/\_______/\____________/ \__/ \__/ \____________________/
                    accel torch    C++ ABI       python abi platform tag (what auditwheel grants)

Label grammar (ours; upstream's CUDA labels ``cu12torch2.6cxx11abiTRUE`` have the same shape)::

    label   := accel "torch" torch "cxx11abi" ("TRUE" | "FALSE")     (the classic binding)
             | accel "torch" MAJOR "." MINOR "stable"                 (the stable-ABI binding)
    accel   := "cu" MAJOR | "rocm" MAJOR "." MINOR | "cpu"
    torch   := MAJOR "." MINOR                            (a release torch: major.minor is enough)
             | PUBLIC [ ".local." LOCAL ]                 (pre-release / nightly / NGC: the exact build)

A stable-ABI wheel (``cu13torch2.10stable``) serves every torch from the floor it names on (with the
same CUDA major / ROCm minor); the C++ ABI is not part of it, so its key has ``cxx11abi=None``.

A pre-release, nightly, NGC or source-built torch has no ABI promise across builds, so its key holds
the exact version; its ``+local`` part (e.g. NGC's ``ecf3bae40a.nv25.1``) is written after the literal
segment ``.local.`` because ``+`` is not allowed inside a local label.  The letter ``l`` never occurs
in a normalised public version, so the split is unambiguous.  PEP 440 normalisation lower-cases the
label and turns numeric segments into integers (``nv25.01`` -> ``nv25.1``), so the key stores the
normalised torch version and parsing is case-insensitive.

Upstream's ROCm label ``hip62`` (ROCm 6.2, no torch version or ABI in it) is read too; such a key has
``torch=None`` and ``cxx11abi=None`` (``complete`` is False) and formats back to ``hip62``.

Pure Python: imports neither torch nor ``mamba_ssm/__init__``.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Optional, Tuple

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from .versions import TorchAbi

__all__ = ["DIST_NAME", "VariantError", "VariantKey", "split_wheel_filename"]

DIST_NAME = "mamba_ssm"

_ACCEL_RE = re.compile(r"^(?:cu(?P<cu>\d+)|rocm(?P<rocm>\d+\.\d+)|(?P<cpu>cpu))$")
_OURS_RE = re.compile(
    r"^(?P<accel>cu\d+|rocm\d+\.\d+|cpu)torch(?P<torch>.+)cxx11abi(?P<abi>true|false)$", re.IGNORECASE
)
_STABLE_RE = re.compile(r"^(?P<accel>cu\d+|rocm\d+\.\d+|cpu)torch(?P<floor>\d+\.\d+)stable$", re.IGNORECASE)
_HIP_RE = re.compile(r"^hip(?P<major>\d)(?P<minor>\d+)$", re.IGNORECASE)
_MAJOR_MINOR_RE = re.compile(r"^\d+\.\d+$")
_LOCAL_SEP = ".local."


class VariantError(ValueError):
    """A variant key, local version label or wheel file name that cannot be read; names the value."""


def _normalise_accelerator(text: str) -> str:
    m = _ACCEL_RE.match(text.lower())
    if not m:
        raise VariantError(
            f"accelerator {text!r} is not one of 'cu<major>' (e.g. 'cu13'), 'rocm<major>.<minor>' "
            f"(e.g. 'rocm6.2') or 'cpu'"
        )
    if m.group("cu"):
        return f"cu{int(m.group('cu'))}"
    if m.group("rocm"):
        major, minor = m.group("rocm").split(".")
        return f"rocm{int(major)}.{int(minor)}"
    return "cpu"


def _normalise_torch(text: str) -> str:
    """'2.14' stays; any other version string becomes its PEP 440 normal form (exact build)."""
    text = text.strip()
    if _MAJOR_MINOR_RE.match(text):
        major, minor = text.split(".")
        return f"{int(major)}.{int(minor)}"
    try:
        v = Version(text)
    except InvalidVersion as exc:
        raise VariantError(
            f"torch {text!r} is neither 'major.minor' (e.g. '2.14') nor a PEP 440 version "
            f"(e.g. '2.6.0a0+ecf3bae40a.nv25.01')"
        ) from exc
    if v.epoch:
        raise VariantError(f"torch {text!r}: a version with an epoch cannot go into a local label")
    return str(v)


def _encode_torch(torch: str) -> str:
    if "+" in torch:
        public, local = torch.split("+", 1)
        return f"{public}{_LOCAL_SEP}{local}"
    return torch


def _decode_torch(text: str) -> str:
    if _LOCAL_SEP in text:
        public, local = text.split(_LOCAL_SEP, 1)
        return f"{public}+{local}"
    return text


@dataclass(frozen=True)
class VariantKey:
    """One wheel variant: torch build x accelerator x C++ ABI x Python/ABI tag x platform tag.

    Fields:
        torch: ``"2.14"`` (major.minor of a release torch) or the exact PEP 440 version of a
            pre-release / nightly / NGC / source-built torch (``"2.6.0a0+ecf3bae40a.nv25.1"``);
            None only for upstream labels that do not say (``hip62``).
        accelerator: ``"cu13"`` (CUDA major), ``"rocm6.2"`` (ROCm major.minor) or ``"cpu"``.
        cxx11abi: the C++ ABI (torch._C._GLIBCXX_USE_CXX11_ABI); None for a stable-ABI key and for
            upstream ``hip62``.
        python_tag, abi_tag, platform_tag: the wheel tags (``cp39``, ``abi3``, ``linux_x86_64`` or
            the manylinux tag auditwheel granted).
        torch_abi: :class:`TorchAbi`: ``"classic"`` (one torch series) or ``"stable"`` (the LibTorch stable ABI: ``torch``
            is then the floor, ``"2.10"``, and the key serves every torch from it on).

    Raises VariantError (a ValueError) naming the value when a field is malformed.
    """

    torch: Optional[str]
    accelerator: str
    cxx11abi: Optional[bool]
    python_tag: str = "cp39"
    abi_tag: str = "abi3"
    platform_tag: str = "linux_x86_64"
    torch_abi: TorchAbi = TorchAbi.CLASSIC
    # Set only for keys read from an upstream label that our grammar cannot express (``hip62``).
    upstream_label: Optional[str] = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "accelerator", _normalise_accelerator(self.accelerator))
        if self.torch is not None:
            object.__setattr__(self, "torch", _normalise_torch(str(self.torch)))
        abi = TorchAbi.lookup(self.torch_abi)
        if abi is None:
            raise VariantError(f"torch_abi {self.torch_abi!r} is neither 'classic' nor 'stable'")
        object.__setattr__(self, "torch_abi", abi)
        if abi is TorchAbi.STABLE:
            if self.torch is None or not _MAJOR_MINOR_RE.match(self.torch) or self.cxx11abi is not None:
                raise VariantError(
                    f"a stable-ABI VariantKey needs torch = its floor 'major.minor' and cxx11abi=None (got "
                    f"torch={self.torch!r}, cxx11abi={self.cxx11abi!r})"
                )
        elif self.upstream_label is None and (self.torch is None or self.cxx11abi is None):
            raise VariantError(
                f"VariantKey needs torch and cxx11abi (got torch={self.torch!r}, "
                f"cxx11abi={self.cxx11abi!r}); only upstream 'hip<MM>' labels may omit them"
            )
        if self.cxx11abi is not None and not isinstance(self.cxx11abi, bool):
            raise VariantError(f"cxx11abi must be a bool, got {self.cxx11abi!r}")
        for name in ("python_tag", "abi_tag", "platform_tag"):
            value = getattr(self, name)
            if not value or not re.match(r"^[A-Za-z0-9_.]+$", value):
                raise VariantError(f"{name} {value!r} is not a wheel tag (letters, digits, '_', '.')")

    # -- derived -------------------------------------------------------------------------------
    @property
    def complete(self) -> bool:
        """True when torch and cxx11abi are known (always for our labels; a stable key needs no ABI)."""
        return self.torch is not None and (self.stable or self.cxx11abi is not None)

    @property
    def stable(self) -> bool:
        """A stable-ABI key: ``torch`` is the floor, every later torch is served."""
        return self.torch_abi is TorchAbi.STABLE

    @property
    def exact_torch(self) -> bool:
        """True when the key names one exact torch build (pre-release / nightly / NGC)."""
        return self.torch is not None and not _MAJOR_MINOR_RE.match(self.torch)

    @property
    def cuda_major(self) -> Optional[int]:
        return int(self.accelerator[2:]) if self.accelerator.startswith("cu") else None

    @property
    def rocm(self) -> Optional[Tuple[int, int]]:
        if not self.accelerator.startswith("rocm"):
            return None
        major, minor = self.accelerator[4:].split(".")
        return int(major), int(minor)

    @property
    def local_label(self) -> str:
        """The local version label, e.g. ``cu13torch2.14cxx11abiTRUE`` or ``cu13torch2.10stable`` (also
        the index folder name)."""
        if self.upstream_label is not None:
            return self.upstream_label
        if self.stable:
            return f"{self.accelerator}torch{self.torch}stable"
        abi = "TRUE" if self.cxx11abi else "FALSE"
        return f"{self.accelerator}torch{_encode_torch(self.torch or '')}cxx11abi{abi}"

    @property
    def normalized_label(self) -> str:
        """The label as PEP 440 normalises it (what setuptools writes into file name and METADATA)."""
        return Version(f"0+{self.local_label}").local or ""

    @property
    def tags(self) -> str:
        return f"{self.python_tag}-{self.abi_tag}-{self.platform_tag}"

    def with_tags(
        self, python_tag: str | None = None, abi_tag: str | None = None, platform_tag: str | None = None
    ) -> VariantKey:
        """A copy with other python_tag / abi_tag / platform_tag."""
        return dataclasses.replace(
            self,
            python_tag=python_tag or self.python_tag,
            abi_tag=abi_tag or self.abi_tag,
            platform_tag=platform_tag or self.platform_tag,
        )

    # -- parsing -------------------------------------------------------------------------------
    @classmethod
    def from_local_label(cls, label: str, **tags: Any) -> VariantKey:
        """Parse a local version label (ours or upstream's; case-insensitive, '+' optional).

        ``tags`` sets python_tag / abi_tag / platform_tag.  Raises VariantError naming the label.
        """
        text = label.strip().lstrip("+")
        m = _STABLE_RE.match(text)
        if m:
            try:
                return cls(
                    torch=m.group("floor"),
                    accelerator=m.group("accel"),
                    cxx11abi=None,
                    torch_abi=TorchAbi.STABLE,
                    **tags,
                )
            except VariantError as exc:
                raise VariantError(f"local version label {label!r}: {exc}") from exc
        m = _OURS_RE.match(text)
        if m:
            torch = _decode_torch(m.group("torch"))
            try:
                return cls(
                    torch=torch,
                    accelerator=m.group("accel"),
                    cxx11abi=m.group("abi").lower() == "true",
                    **tags,
                )
            except VariantError as exc:
                raise VariantError(f"local version label {label!r}: {exc}") from exc
        m = _HIP_RE.match(text)
        if m:
            return cls(
                torch=None,
                accelerator=f"rocm{m.group('major')}.{int(m.group('minor'))}",
                cxx11abi=None,
                upstream_label=text.lower(),
                **tags,
            )
        raise VariantError(
            f"local version label {label!r} is not a wheel variant: expected "
            f"'<cuNN|rocmX.Y|cpu>torch<major.minor or exact build>cxx11abi<TRUE|FALSE>' "
            f"(e.g. 'cu13torch2.14cxx11abiTRUE'), a stable-ABI '<cuNN|rocmX.Y|cpu>torch<floor>stable' "
            f"(e.g. 'cu13torch2.10stable') or upstream's 'hip<MM>' (e.g. 'hip62')"
        )

    @classmethod
    def from_wheel_filename(cls, name: str) -> VariantKey:
        """The key of a wheel file name (ours or upstream's).  Raises VariantError naming it."""
        _dist, version, python_tag, abi_tag, platform_tag = split_wheel_filename(name)
        local = Version(version).local
        if not local:
            raise VariantError(
                f"wheel {name!r} has no local version label, so it names no variant "
                f"(a pure-Python or unlabelled wheel)"
            )
        return cls.from_local_label(local, python_tag=python_tag, abi_tag=abi_tag, platform_tag=platform_tag)

    @classmethod
    def from_torch(
        cls, build: Any, python_tag: str = "cp39", abi_tag: str = "abi3", platform_tag: str = "linux_x86_64"
    ) -> VariantKey:
        """The key a given torch needs.

        ``build`` is a ``mamba_ssm._compat.versions.TorchBuild`` (or anything with ``version``,
        ``cuda``, ``hip`` and ``cxx11_abi``).  Release torch -> major.minor; pre-release, nightly,
        NGC or source build (a local label that is not cuXXX/rocmX.Y/cpu) -> the exact version.
        Raises VariantError when cxx11_abi is unknown or the version is not PEP 440.
        """
        if build.cxx11_abi is None:
            raise VariantError(
                f"torch {build.version!r}: its C++ ABI is unknown (read torch._C._GLIBCXX_USE_CXX11_ABI)"
            )
        try:
            v = Version(build.version)
        except InvalidVersion as exc:
            raise VariantError(f"torch version {build.version!r} is not PEP 440") from exc
        if getattr(build, "hip", None):
            m = re.match(r"^\s*(\d+)\.(\d+)", build.hip)
            if not m:
                raise VariantError(f"torch.version.hip {build.hip!r} does not start with major.minor")
            accel = f"rocm{int(m.group(1))}.{int(m.group(2))}"
        elif getattr(build, "cuda", None):
            accel = f"cu{int(str(build.cuda).split('.')[0])}"
        else:
            accel = "cpu"
        exact = getattr(build, "needs_exact_match", None)
        if exact is None:
            exact = (
                v.is_prerelease
                or v.is_devrelease
                or bool(v.local and not re.match(r"^(cu\d+|rocm\d+(\.\d+)*|cpu)$", v.local))
            )
        torch = str(v) if exact else f"{v.release[0]}.{v.release[1] if len(v.release) > 1 else 0}"
        return cls(
            torch=torch,
            accelerator=accel,
            cxx11abi=bool(build.cxx11_abi),
            python_tag=python_tag,
            abi_tag=abi_tag,
            platform_tag=platform_tag,
        )

    # -- formatting ----------------------------------------------------------------------------
    def version_with_label(self, version: str) -> str:
        """``version`` (public, e.g. '2.4.0') plus this key's label, PEP 440-normalised."""
        v = Version(version)
        if v.local:
            if v.local != self.normalized_label:
                raise VariantError(
                    f"version {version!r} already has the local label {v.local!r}, "
                    f"not this key's {self.normalized_label!r}"
                )
            return str(v)
        return str(Version(f"{v.public}+{self.local_label}"))

    def wheel_filename(self, version: str) -> str:
        """The wheel file name setuptools + auditwheel produce for ``version`` with this key."""
        return f"{DIST_NAME}-{self.version_with_label(version)}-{self.tags}.whl"

    def __str__(self) -> str:
        return f"{self.local_label} ({self.tags})"


def split_wheel_filename(name: str) -> Tuple[str, str, str, str, str]:
    """Split a wheel file name into (distribution, version, python_tag, abi_tag, platform_tag).

    Accepts a path (the directory part is ignored).  Raises VariantError naming the file when it is
    not ``{dist}-{version}(-{build})?-{py}-{abi}-{platform}.whl`` of mamba_ssm.
    """
    base = name.replace("\\", "/").rsplit("/", 1)[-1]
    if not base.endswith(".whl"):
        raise VariantError(f"{name!r} is not a wheel file name (no .whl suffix)")
    parts = base[:-4].split("-")
    if len(parts) not in (5, 6):
        raise VariantError(
            f"{name!r} is not a wheel file name: expected "
            f"'<dist>-<version>[-<build>]-<python>-<abi>-<platform>.whl'"
        )
    dist, version = parts[0], parts[1]
    if canonicalize_name(dist) != canonicalize_name(DIST_NAME):
        raise VariantError(f"{name!r} is a wheel of {dist!r}, not of {DIST_NAME!r}")
    try:
        Version(version)
    except InvalidVersion as exc:
        raise VariantError(f"{name!r}: version {version!r} is not PEP 440") from exc
    return dist, version, parts[-3], parts[-2], parts[-1]
