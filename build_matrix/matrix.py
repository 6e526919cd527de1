"""Read build_matrix/matrix.toml, expand it into cells, exclude, and validate every cell.

A *cell* is one wheel: (torch series, accelerator family ``cuNN`` / ``rocmX.Y`` / ``cpu``, C++ ABI,
platform), built by one toolkit against one torch build, serving one or more published torch builds
(e.g. the cell ``cu12torch2.8cxx11abiTRUE-x86_64`` serves torch 2.8.x +cu126, +cu128 and +cu129).
From ``[stable_abi] floor`` on, the torch builds of the kinds listed there are grouped by (family,
platform) alone: one stable-ABI cell (``cu13torch2.10stable-x86_64``) serves every series from the floor
on, later releases included, built against the newest listed series that ships the family.

Validation is not circular: torch builds are checked against ``data/torch_builds.toml`` (a copy of
PyTorch's published compatibility data, written independently of matrix.toml), archs against
``mamba_ssm._compat.archs.nvcc_supported_archs`` / ``known_bad``, and the Python list against
pyproject.toml's ``requires-python`` both ways.  Impossible builds are *rejected* with the reason;
``plan`` exits non-zero when anything is rejected or the matrix itself is wrong.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef,unused-ignore]

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from mamba_ssm._compat import archs, buildinfo
from mamba_ssm._compat.variant import VariantKey
from mamba_ssm._compat.versions import TorchAbi

from .layout import REPO_ROOT

MATRIX_PATH = Path(__file__).resolve().parent / "matrix.toml"
DATA_PATH = Path(__file__).resolve().parent / "data" / "torch_builds.toml"
PYPROJECT_PATH = REPO_ROOT / "pyproject.toml"

OWNER_PLACEHOLDER = "<owner>"  # the GitHub repository owner, filled in by the workflows (image_for)
_CU_RE = re.compile(r"^cu(\d+)(\d)$")
_ROCM_RE = re.compile(r"^rocm(\d+)\.(\d+)(?:\.(\d+))?$")


class MatrixError(ValueError):
    """matrix.toml (or the data file) is malformed; the message names the entry and the fix."""


def accelerator_family(acc: str) -> str:
    """'cu124' -> 'cu12', 'cu130' -> 'cu13', 'rocm6.2.4' -> 'rocm6.2', 'cpu' -> 'cpu'.

    Raises MatrixError naming the value when it is none of cuXYZ / rocmX.Y[.Z] / cpu.
    """
    if acc == "cpu":
        return "cpu"
    m = _CU_RE.match(acc)
    if m:
        return f"cu{int(m.group(1))}"
    m = _ROCM_RE.match(acc)
    if m:
        return f"rocm{int(m.group(1))}.{int(m.group(2))}"
    raise MatrixError(f"accelerator {acc!r} is none of cu<major><minor> (cu124), rocmX.Y[.Z], cpu")


def accelerator_version(acc: str) -> Optional[Tuple[int, ...]]:
    """'cu124' -> (12, 4); 'rocm6.2.4' -> (6, 2, 4); 'cpu' -> None."""
    m = _CU_RE.match(acc)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = _ROCM_RE.match(acc)
    if m:
        return tuple(int(x) for x in m.groups() if x is not None)
    return None


@dataclass(frozen=True)
class Toolkit:
    """A compiler toolchain cells are built with (one builder image per toolkit and platform)."""

    id: str
    kind: str  # cuda | rocm | cpu
    version: str
    serves: Tuple[str, ...]
    platforms: Tuple[str, ...]
    sass: Tuple[str, ...] = ()
    ptx: Tuple[str, ...] = ()
    gfx: Tuple[str, ...] = ()
    experimental: bool = False
    base_image: str = "quay.io/pypa/manylinux_2_28_{arch}"
    packages: Tuple[str, ...] = ()

    @property
    def nvcc(self) -> Optional[Tuple[int, int]]:
        if self.kind != "cuda":
            return None
        major, minor = self.version.split(".")[:2]
        return int(major), int(minor)


@dataclass(frozen=True)
class Cell:
    """One wheel of the release (see the module docstring).  All fields are plain data (to_dict)."""

    id: str  # "<local label>-<platform>", e.g. "cu13torch2.14cxx11abiTRUE-x86_64"
    label: str  # the local version label, e.g. "cu13torch2.14cxx11abiTRUE"
    series: str  # "2.14"
    torch_version: str  # the release compiled against, e.g. "2.14.1"
    build_against: str  # the accelerator of that torch build, e.g. "cu130"
    serves: Tuple[str, ...]  # the torch builds this wheel serves, e.g. ("cu130", "cu132")
    family: str  # "cu13" | "rocm6.2" | "cpu"
    cxx11abi: bool
    platform: str  # "x86_64" | "aarch64"
    toolkit: str  # toolkit id, e.g. "cuda13.0"
    toolkit_kind: str
    toolkit_version: str
    sass: Tuple[str, ...]
    ptx: Tuple[str, ...]
    gfx: Tuple[str, ...]
    image: str  # the builder image, "ghcr.io/<owner>/mamba-ssm-builder:cuda13.0-x86_64"
    runner: str
    manylinux: str
    size_budget_mib: float
    experimental: bool
    python_tag: str = "cp39"
    abi_tag: str = "abi3"
    torch_abi: str = "classic"  # "classic" | "stable" (the LibTorch stable ABI)
    torch_abi_floor: Optional[str] = None  # a stable cell's floor, e.g. "2.10"
    serves_series: Tuple[str, ...] = ()  # the torch series a stable cell serves (listed ones; later ones too)
    torch_abi_build_min: Optional[str] = None  # a stable cell: the oldest torch whose headers build it

    @property
    def torch_abi_env(self) -> str:
        """``MAMBA_TORCH_STABLE_ABI`` for this cell's build: the floor, or ``0`` (classic)."""
        return self.torch_abi_floor if self.torch_abi == "stable" and self.torch_abi_floor else "0"

    @property
    def torch_spec(self) -> str:
        """The pip requirement of the torch this cell compiles against: 'torch==2.14.1+cu130'."""
        return f"torch=={self.torch_version}+{self.build_against}"

    def torch_mismatch(self, version: str) -> Optional[str]:
        """Why the torch build ``version`` (``torch.__version__``, e.g. ``"2.13.0+cpu"``) cannot build this
        cell, or None when it can.  A classic cell: only its own ``torch_version+build_against``.  A
        stable-ABI cell: any build it serves from its floor on (the binary depends on the floor's stable
        ABI and the CUDA major, not on the torch it was compiled against) whose headers build the binding
        (``[stable_abi] build_min``), e.g. torch 2.13.0+cpu for ``cputorch2.10stable``; a stable CUDA cell
        also any CUDA torch of another major, e.g. 2.14.1+cu130 for ``cu12torch2.10stable``: the module
        reaches torch only through the stable C shim, its kernels and ``libcudart.so.<major>`` are its
        toolkit's nvcc's (the build sets ``MAMBA_STABLE_CUDA_MAJOR``; the build info's ``nvcc_version``
        tells the loader which torches may load it). ``serves_torch`` says which torches load it."""
        own = f"{self.torch_version}+{self.build_against}"
        if version == own:
            return None
        if self.torch_abi != "stable" or not self.torch_abi_floor:
            return (
                f"torch {version} is not the cell's {own} (a classic cell builds against its own torch only)"
            )
        try:
            v = Version(version)
        except ValueError:
            return f"torch {version!r} is not a PEP 440 version"
        acc = v.local or ""
        if Version(f"{v.major}.{v.minor}") < Version(self.torch_abi_build_min or self.torch_abi_floor):
            return (
                f"torch {version} is older than {self.torch_abi_build_min or self.torch_abi_floor}, the oldest "
                "torch whose stable headers build the binding ([stable_abi] build_min)"
            )
        if acc not in self.serves and not (self.toolkit_kind == "cuda" and re.fullmatch(r"cu\d+", acc)):
            return (
                f"torch {version} is a +{acc or '(no label)'} build; the stable cell {self.id} serves "
                f"+{', +'.join(self.serves)} (one CUDA major / CPU per stable binary)"
                + (", and builds with any CUDA torch" if self.toolkit_kind == "cuda" else "")
            )
        return None

    def serves_torch(self, version: str) -> bool:
        """Whether the torch build ``version`` (``"2.10.0+cu128"``) loads this cell's module: its own torch
        build, or for a stable cell any build of an accelerator it serves from its floor on."""
        if version == f"{self.torch_version}+{self.build_against}":
            return True
        if self.torch_abi != "stable" or not self.torch_abi_floor:
            return False
        try:
            v = Version(version)
        except ValueError:
            return False
        return (v.local or "") in self.serves and Version(f"{v.major}.{v.minor}") >= Version(
            self.torch_abi_floor
        )

    def image_for(self, owner: str) -> str:
        """The builder image under a repository owner (lowercased: registry paths are lower case)."""
        if not owner or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]*", owner):
            raise MatrixError(f"image owner {owner!r} is not a GitHub user/organisation name")
        return self.image.replace(OWNER_PLACEHOLDER, owner.lower())

    @property
    def cibuildwheel_identifier(self) -> str:
        """The one cibuildwheel build identifier of this cell: ``cp310-manylinux_x86_64`` (abi3: one
        CPython, the tag's, serves every later one)."""
        return f"{self.python_tag}-manylinux_{self.platform}"

    @property
    def platform_tag(self) -> str:
        return f"{self.manylinux}_{self.platform}"

    def variant_key(self, platform_tag: Optional[str] = None) -> VariantKey:
        """The VariantKey of this cell's wheel (platform tag: the manylinux one unless given)."""
        stable = self.torch_abi == "stable"
        return VariantKey(
            torch=self.torch_abi_floor if stable else self.series,
            accelerator=self.family,
            cxx11abi=None if stable else self.cxx11abi,
            python_tag=self.python_tag,
            abi_tag=self.abi_tag,
            platform_tag=platform_tag or self.platform_tag,
            torch_abi=TorchAbi.parse(self.torch_abi, "torch_abi"),
        )

    def to_dict(self) -> Dict[str, object]:
        d = asdict(self)
        d["torch_spec"] = self.torch_spec
        d["platform_tag"] = self.platform_tag
        return d


@dataclass(frozen=True)
class PypiWheel:
    """The wheel PyPI serves for one platform (matrix.toml ``[pypi]``): the stable-ABI cells' modules,
    one per family, merged under ``mamba_ssm/_kernels/<family>/``; no local version label."""

    platform: str  # "x86_64" | "aarch64"
    platform_tag: str  # "manylinux_2_28_x86_64"
    python_tag: str  # "cp310" (the stable cells')
    abi_tag: str  # "abi3"
    torch_floor: str  # "2.10": Requires-Dist torch>=<floor>
    modules: Tuple[
        Tuple[str, str], ...
    ]  # (family, stable cell id), e.g. ("cu13", "cu13torch2.10stable-x86_64")
    size_budget_mib: float
    runner: str

    @property
    def tags(self) -> str:
        """``cp310-abi3-manylinux_2_28_x86_64``."""
        return f"{self.python_tag}-{self.abi_tag}-{self.platform_tag}"

    def filename(self, version: str) -> str:
        """The wheel's file name for ``version`` (public, no local label):
        ``mamba_ssm-2.4.0-cp310-abi3-manylinux_2_28_x86_64.whl``."""
        if "+" in version:
            raise MatrixError(f"the PyPI wheel's version {version!r} has a local label; PyPI refuses one")
        return f"mamba_ssm-{version}-{self.tags}.whl"

    def cell_of(self, family: str) -> str:
        """The id of the stable cell that feeds module ``family``."""
        for fam, cell_id in self.modules:
            if fam == family:
                return cell_id
        raise MatrixError(
            f"the PyPI wheel for {self.platform} has no module {family!r} (it has "
            f"{', '.join(f for f, _ in self.modules)})"
        )

    def to_dict(self) -> Dict[str, object]:
        d = asdict(self)
        d["modules"] = dict(self.modules)
        d["tags"] = self.tags
        return d


# ------------------------------------------------------------------------------- the parsed files
# matrix.toml and data/torch_builds.toml are read once, by ``Matrix.from_toml`` / ``TorchData.from_toml``,
# into the frozen records below; everything downstream (expansion, build, emit, release) reads these
# records, never the TOML tables.  Problems that matrix.toml shows on its own (a toolkit lacking a key,
# an arch its nvcc cannot target, a bad [stable_abi] or [pypi]) are found here and kept, in file order,
# in ``Matrix.errors``; problems that need PyTorch's published builds or requires-python are found by
# ``expand_matrix``.


@dataclass(frozen=True)
class PythonAxis:
    """matrix.toml ``[python]``: the interpreters the sdist is tested with (and a cell may be built with)."""

    versions: Tuple[str, ...]  # ("3.9", ..., "3.13"); the first is requires-python's lower bound
    build: str = "3.11"  # the Python a cell is built with unless ``build --python`` says otherwise


@dataclass(frozen=True)
class Platform:
    """matrix.toml ``[platforms.<name>]``: one CPU architecture wheels are built for."""

    name: str  # "x86_64" | "aarch64"
    manylinux: str = "manylinux_2_28"
    runner: str = "ubuntu-24.04"  # the GitHub Actions runner label of its jobs


@dataclass(frozen=True)
class Images:
    """matrix.toml ``[images]``: builder images are ``<registry>/<owner>/<name>:<toolkit>-<platform>``."""

    registry: str = "ghcr.io"
    name: str = "builder"


@dataclass(frozen=True)
class Policy:
    """matrix.toml ``[policy]``."""

    #: GPUs below this capability get the PyTorch fallback; ``plan`` warns only about served torch
    #: targets at or above it that a cell's archs do not cover.
    min_compute_capability: str = "0.0"


@dataclass(frozen=True)
class KnownBad:
    """matrix.toml ``[[known_bad]]``: an (arch, nvcc) pair never to build."""

    arch: str  # "sm_103"
    nvcc: str  # a version specifier over nvcc versions, ">=13.0,<14.0" (checked when parsed)
    reason: str

    def applies(self, sass: str, nvcc_version: str) -> bool:
        """Whether SASS arch ``sass`` compiled by nvcc ``nvcc_version`` ("13.0") is this pair."""
        return self.arch == sass and Version(nvcc_version) in SpecifierSet(self.nvcc)


@dataclass(frozen=True)
class StableAbi:
    """matrix.toml ``[stable_abi]``, checked: from ``floor`` on, the torch builds of ``kinds`` get one
    stable-ABI cell per (family, platform), compiled against a torch of ``build_min`` or later."""

    floor: str  # "2.10" (normalised MAJOR.MINOR, >= buildinfo.STABLE_ABI_MIN_FLOOR)
    kinds: Tuple[str, ...]  # toolkit kinds: ("cuda", "cpu")
    build_min: str  # "2.13": the oldest torch whose stable headers build the binding (>= floor)

    def covers(self, series: str, kind: str) -> bool:
        """Whether torch ``series`` built by a toolkit of ``kind`` goes to a stable-ABI cell."""
        return Version(series) >= Version(self.floor) and kind in self.kinds


@dataclass(frozen=True)
class PypiSettings:
    """matrix.toml ``[pypi]``, checked on its own (``expand_pypi`` matches it to the stable cells)."""

    platforms: Tuple[str, ...]  # names of [platforms], each once
    modules: Tuple[str, ...]  # "cpu" and "cuNN" families, each once, "cpu" among them
    size_budget_mib: float  # > 0


@dataclass(frozen=True)
class TorchBuild:
    """One entry of a ``[[torch]]`` series' ``builds``: a published torch build we serve."""

    accelerator: str  # the index name, "cu126" | "rocm6.2.4" | "cpu" (as written)
    cxx11abi: Optional[bool]  # None when matrix.toml's value is not a boolean (``problem`` says so)
    platforms: Tuple[str, ...] = ("x86_64",)
    skip: Optional[str] = None  # why this build gets no cell for now (listed as skipped)
    #: why this entry can never be a cell, from matrix.toml alone (a non-boolean cxx11abi, an
    #: accelerator that is none of cuXYZ / rocmX.Y / cpu); None when it may be one
    problem: Optional[str] = None
    abi_text: str = ""  # the cxx11abi value as written, for messages ("True", "yes", "None": absent)
    #: cxx11abi for filtering and the JSON listing: the boolean, or the text (None: absent)
    abi_field: Optional[Union[bool, str]] = None


@dataclass(frozen=True)
class TorchSeries:
    """matrix.toml ``[[torch]]``: one torch series, the release compiled against and the builds served."""

    series: str  # "2.14"
    version: str  # "2.14.1"
    builds: Tuple[TorchBuild, ...]


#: The cell fields an ``[[exclude]]`` entry may match on.
EXCLUDE_FIELDS = ("series", "family", "cxx11abi", "platform")


@dataclass(frozen=True)
class Exclude:
    """matrix.toml ``[[exclude]]``: cells dropped after expansion."""

    #: (field, lower-cased glob) pairs over EXCLUDE_FIELDS; all must match.  None: matches nothing
    patterns: Tuple[Tuple[str, str], ...]
    reason: str = "excluded"

    def matches(self, series: str, fam: str, abi: bool, platform: str) -> bool:
        fields = {"series": series, "family": fam, "cxx11abi": str(abi), "platform": platform}
        return bool(self.patterns) and all(
            fnmatch.fnmatchcase(fields[k].lower(), pat) for k, pat in self.patterns
        )


@dataclass(frozen=True)
class Matrix:
    """build_matrix/matrix.toml, parsed and checked on its own (``Matrix.from_toml``)."""

    package: str
    wheel_python_tag: str  # "cp39": the abi3 tag of cells whose torch sets no Py_LIMITED_API
    wheel_abi_tag: str  # "abi3"
    python: PythonAxis
    platforms: Tuple[Platform, ...]
    size_budget_mib: Mapping[str, float]  # per toolkit kind; 100 for a kind not listed
    images: Images
    policy: Policy
    toolkits: Tuple[Toolkit, ...]
    known_bad: Tuple[KnownBad, ...]
    stable_abi: Optional[StableAbi]  # None when absent or wrong (then ``errors`` says why)
    pypi: Optional[PypiSettings]  # None when absent or wrong (then ``errors`` says why)
    torch: Tuple[TorchSeries, ...]
    excludes: Tuple[Exclude, ...]
    #: what is wrong with the file itself, each naming the entry and the fix (empty: nothing)
    errors: Tuple[str, ...] = ()

    @property
    def platform_names(self) -> Tuple[str, ...]:
        return tuple(p.name for p in self.platforms)

    def platform(self, name: str) -> Platform:
        """The ``[platforms.<name>]`` entry; MatrixError naming the platforms there are."""
        for p in self.platforms:
            if p.name == name:
                return p
        raise MatrixError(f"platform {name!r} is not in [platforms] ({', '.join(self.platform_names)})")

    def size_budget(self, kind: str) -> float:
        """The size budget (MiB) of one wheel built by a toolkit of ``kind``."""
        return self.size_budget_mib.get(kind, 100.0)

    def toolkits_by_accelerator(self) -> Dict[str, List[Toolkit]]:
        """{torch build accelerator: the toolkits that serve it} (more than one is an error)."""
        serves: Dict[str, List[Toolkit]] = {}
        for tk in self.toolkits:
            for acc in tk.serves:
                serves.setdefault(acc, []).append(tk)
        return serves

    @classmethod
    def from_toml(cls, raw: Mapping[str, object]) -> Matrix:
        """Parse matrix.toml's tables (as ``load_toml`` reads them).  Never raises for a bad entry:
        it lands in ``errors``, naming the value and the fix (the entry is left out or defaulted)."""
        errors: List[str] = []
        py = _table(raw.get("python"))
        platforms = tuple(
            Platform(
                name=str(name),
                manylinux=str(_table(p).get("manylinux", Platform.manylinux)),
                runner=str(_table(p).get("runner", Platform.runner)),
            )
            for name, p in _table(raw.get("platforms")).items()
        )
        names = tuple(p.name for p in platforms)
        budgets: Dict[str, float] = {}
        for kind, mib in _table(raw.get("size_budget_mib")).items():
            if isinstance(mib, bool) or not isinstance(mib, (int, float)):
                errors.append(f"[size_budget_mib] {kind} must be a number of MiB, got {mib!r}")
            else:
                budgets[str(kind)] = float(mib)
        images = _table(raw.get("images"))
        policy = _table(raw.get("policy"))
        known_bad = _parse_known_bad(raw.get("known_bad"), errors)
        toolkits = _parse_toolkits(raw.get("toolkit"), errors)
        for tk in toolkits:
            errors += validate_toolkit_archs(tk, known_bad)
            for p in tk.platforms:
                if p not in names:
                    errors.append(f"toolkit {tk.id}: platform {p!r} is not in [platforms]")
        matrix = cls(
            package=str(raw.get("package", "mamba-ssm")),
            wheel_python_tag=str(raw.get("wheel_python_tag", "cp39")),
            wheel_abi_tag=str(raw.get("wheel_abi_tag", "abi3")),
            python=PythonAxis(
                versions=_strings(py.get("versions")), build=str(py.get("build", PythonAxis.build))
            ),
            platforms=platforms,
            size_budget_mib=MappingProxyType(budgets),
            images=Images(
                registry=str(images.get("registry", Images.registry)),
                name=str(images.get("name", Images.name)),
            ),
            policy=Policy(str(policy.get("min_compute_capability", Policy.min_compute_capability))),
            toolkits=toolkits,
            known_bad=known_bad,
            stable_abi=None,
            pypi=None,
            torch=tuple(_parse_series(t) for t in _tables(raw.get("torch"))),
            excludes=tuple(_parse_exclude(ex) for ex in _tables(raw.get("exclude"))),
        )
        for acc, tks in matrix.toolkits_by_accelerator().items():
            if len(tks) > 1:
                errors.append(f"{acc} is served by several toolkits: {', '.join(t.id for t in tks)}")
        stable = _parse_stable_abi(raw.get("stable_abi"), errors)
        pypi = _parse_pypi(raw.get("pypi"), names, errors)
        return replace(matrix, stable_abi=stable, pypi=pypi, errors=tuple(errors))


@dataclass(frozen=True)
class TorchRelease:
    """data/torch_builds.toml ``[releases."<series>"]``: what PyTorch published for one series."""

    series: str  # "2.14"
    versions: Tuple[str, ...]  # ("2.14.0", "2.14.1")
    python: str = ""  # the Python range of its wheels, ">=3.10,<=3.15" ("" when not recorded)
    cuda: Tuple[str, ...] = ()  # x86_64 CUDA builds, ("cu126", "cu130", "cu132")
    rocm: Tuple[str, ...] = ()
    cpu: bool = False  # an x86_64 CPU build
    pypi_default: Optional[str] = None  # the build PyPI itself serves (x86_64), "cu130"
    cxx11abi: Mapping[str, bool] = field(default_factory=lambda: MappingProxyType({}))  # per x86_64 build
    aarch64: Tuple[str, ...] = ()  # the aarch64 builds
    aarch64_cxx11abi: Optional[bool] = None  # the C++ ABI of every aarch64 build

    def shipped(self, platform: str) -> Tuple[str, ...]:
        """The builds (accelerator names) published for ``platform``."""
        if platform == "aarch64":
            return self.aarch64
        return self.cuda + self.rocm + (("cpu",) if self.cpu else ())

    def published_abi(self, acc: str, platform: str) -> Optional[bool]:
        """The C++ ABI the build ``acc`` for ``platform`` is published with (None: not recorded)."""
        return self.aarch64_cxx11abi if platform == "aarch64" else self.cxx11abi.get(acc)


@dataclass(frozen=True)
class TorchData:
    """build_matrix/data/torch_builds.toml: PyTorch's published Linux builds (``TorchData.from_toml``)."""

    releases: Mapping[str, TorchRelease]  # by series, "2.14"
    torch_archs: Mapping[str, Tuple[str, ...]]  # CUDA "13.0" -> the archs torch's builds target

    @classmethod
    def from_toml(cls, raw: Mapping[str, object]) -> TorchData:
        """Parse the data file's tables (a value of the wrong type reads as not recorded)."""
        releases = {}
        for series, r in _table(raw.get("releases")).items():
            rel = _table(r)
            default = rel.get("pypi_default")
            aarch64_abi = rel.get("aarch64_cxx11abi")
            releases[str(series)] = TorchRelease(
                series=str(series),
                versions=_strings(rel.get("versions")),
                python=str(rel.get("python") or ""),
                cuda=_strings(rel.get("cuda")),
                rocm=_strings(rel.get("rocm")),
                cpu=bool(rel.get("cpu")),
                pypi_default=None if default is None else str(default),
                cxx11abi=MappingProxyType(
                    {str(k): v for k, v in _table(rel.get("cxx11abi")).items() if isinstance(v, bool)}
                ),
                aarch64=_strings(rel.get("aarch64")),
                aarch64_cxx11abi=aarch64_abi if isinstance(aarch64_abi, bool) else None,
            )
        archs_ = {str(k): _strings(v) for k, v in _table(raw.get("torch_archs")).items()}
        return cls(releases=MappingProxyType(releases), torch_archs=MappingProxyType(archs_))


def _table(raw: object) -> Mapping[str, object]:
    """A TOML table (an empty one for anything else)."""
    if isinstance(raw, dict):
        return {str(k): v for k, v in raw.items()}
    return {}


def _tables(raw: object) -> List[Mapping[str, object]]:
    """A TOML array of tables (its tables only)."""
    return [_table(t) for t in raw if isinstance(t, dict)] if isinstance(raw, list) else []


def _strings(raw: object) -> Tuple[str, ...]:
    """A TOML array of strings (each item as text; empty for anything else)."""
    return tuple(str(x) for x in raw) if isinstance(raw, list) else ()


def _parse_toolkits(raw: object, errors: List[str]) -> Tuple[Toolkit, ...]:
    out = []
    for i, t in enumerate(_tables(raw)):
        missing = next((k for k in ("id", "kind", "version", "serves", "platforms") if k not in t), None)
        if missing is not None:
            errors.append(f"[[toolkit]] #{i + 1} lacks {missing!r}")
            continue
        out.append(
            Toolkit(
                id=str(t["id"]),
                kind=str(t["kind"]),
                version=str(t["version"]),
                serves=_strings(t["serves"]),
                platforms=_strings(t["platforms"]),
                sass=_strings(t.get("sass")),
                ptx=_strings(t.get("ptx")),
                gfx=_strings(t.get("gfx")),
                experimental=bool(t.get("experimental", False)),
                base_image=str(t.get("base_image", Toolkit.base_image)),
                packages=_strings(t.get("packages")),
            )
        )
    return tuple(out)


def _parse_known_bad(raw: object, errors: List[str]) -> Tuple[KnownBad, ...]:
    out = []
    for i, rule in enumerate(_tables(raw)):
        missing = next((k for k in ("arch", "nvcc", "reason") if k not in rule), None)
        if missing is not None:
            errors.append(f"[[known_bad]] #{i + 1} lacks {missing!r}")
            continue
        try:
            SpecifierSet(str(rule["nvcc"]))
        except InvalidSpecifier:
            errors.append(
                f"[[known_bad]] #{i + 1}: nvcc {rule['nvcc']!r} is not a version specifier (e.g. '>=13.0,<14.0')"
            )
            continue
        out.append(KnownBad(arch=str(rule["arch"]), nvcc=str(rule["nvcc"]), reason=str(rule["reason"])))
    return tuple(out)


def _parse_build(b: Mapping[str, object]) -> TorchBuild:
    acc, abi, skip = str(b.get("accelerator", "?")), b.get("cxx11abi"), b.get("skip")
    problem = None
    if not isinstance(abi, bool):
        problem = f"cxx11abi must be true or false, got {abi!r}"
    else:
        try:
            accelerator_family(acc)
        except MatrixError as exc:
            problem = str(exc)
    platforms = b.get("platforms", ["x86_64"])
    return TorchBuild(
        accelerator=acc,
        cxx11abi=abi if isinstance(abi, bool) else None,
        platforms=_strings(platforms),
        skip=str(skip) if skip else None,
        problem=problem,
        abi_text=str(abi),
        abi_field=abi if abi is None or isinstance(abi, (bool, str)) else str(abi),
    )


def _parse_series(t: Mapping[str, object]) -> TorchSeries:
    return TorchSeries(
        series=str(t.get("series")),
        version=str(t.get("version")),
        builds=tuple(_parse_build(b) for b in _tables(t.get("builds"))),
    )


def _parse_exclude(ex: Mapping[str, object]) -> Exclude:
    patterns = tuple((k, str(v).lower()) for k, v in ex.items() if k in EXCLUDE_FIELDS)
    return Exclude(patterns=patterns, reason=str(ex.get("reason", "excluded")))


def _parse_stable_abi(raw: object, errors: List[str]) -> Optional[StableAbi]:
    """matrix.toml's ``[stable_abi]`` (``floor``, ``kinds``, ``build_min``), checked; None when absent
    or wrong (the problem goes to ``errors``)."""
    if raw is None:
        return None
    cfg = _table(raw)
    floor = str(cfg.get("floor", ""))
    try:
        want = buildinfo.parse_floor(floor)
    except ValueError as exc:
        errors.append(f"[stable_abi] floor: {exc}")
        return None
    if want < buildinfo.parse_floor(buildinfo.STABLE_ABI_MIN_FLOOR):
        errors.append(
            f"[stable_abi] floor {floor!r} is below {buildinfo.STABLE_ABI_MIN_FLOOR}, the lowest the stable-ABI "
            "binding builds for"
        )
        return None
    kinds = _strings(cfg["kinds"]) if "kinds" in cfg else ("cuda", "cpu")
    bad = [k for k in kinds if k not in ("cuda", "cpu", "rocm")]
    if bad:
        errors.append(f"[stable_abi] kinds {bad!r}: each must be cuda, cpu or rocm")
        return None
    build_min = str(cfg.get("build_min", floor))
    try:
        low = buildinfo.parse_floor(build_min)
    except ValueError as exc:
        errors.append(f"[stable_abi] build_min: {exc}")
        return None
    if low < want:
        errors.append(
            f"[stable_abi] build_min {build_min!r} is below the floor {floor!r}; raise it to the floor or above"
        )
        return None
    return StableAbi(floor=f"{want[0]}.{want[1]}", kinds=kinds, build_min=f"{low[0]}.{low[1]}")


PYPI_KEYS = ("platforms", "modules", "size_budget_mib")
_PYPI_MODULE_RE = re.compile(r"^(cpu|cu\d+)$")


def _parse_pypi(raw: object, known: Sequence[str], errors: List[str]) -> Optional[PypiSettings]:
    """matrix.toml's ``[pypi]`` checked on its own (``known``: the [platforms] names); None when absent
    or wrong (each problem goes to ``errors`` naming the value and the fix: an unknown key, a platform
    not in ``[platforms]``, a module that is not ``cpu`` / ``cuNN``, no ``cpu`` module, a size budget
    that is not a positive number)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        errors.append(f"[pypi] must be a table, got {raw!r}")
        return None
    cfg = _table(raw)
    for key in cfg:
        if key not in PYPI_KEYS:
            errors.append(f"[pypi] has an unknown key {key!r} (it takes {', '.join(PYPI_KEYS)})")
    platforms, modules = cfg.get("platforms"), cfg.get("modules")
    ok = True
    if not isinstance(platforms, list) or not platforms or not all(isinstance(p, str) for p in platforms):
        errors.append(f"[pypi] platforms must be a non-empty list of [platforms] names, got {platforms!r}")
        ok = False
    else:
        for p in platforms:
            if p not in known:
                errors.append(f"[pypi] platforms: {p!r} is not in [platforms] ({', '.join(known)})")
                ok = False
        if len(set(platforms)) != len(platforms):
            errors.append(f"[pypi] platforms {platforms!r} names a platform twice")
            ok = False
    if not isinstance(modules, list) or not modules or not all(isinstance(m, str) for m in modules):
        errors.append(f"[pypi] modules must be a non-empty list of stable-ABI families, got {modules!r}")
        ok = False
    else:
        for m in modules:
            if not _PYPI_MODULE_RE.match(m):
                why = (
                    "the stable-ABI binding registers no HIP kernels, so ROCm stays on the sdist + resolver"
                    if m.startswith("rocm")
                    else "a module is an accelerator family of the stable-ABI cells"
                )
                errors.append(f"[pypi] modules: {m!r} is not cpu or cu<major> (e.g. cu13): {why}")
                ok = False
        if "cpu" not in modules:
            errors.append(
                f"[pypi] modules {modules!r} has no 'cpu': CPU and ROCm torch builds load the CPU module; add it"
            )
            ok = False
        if len(set(modules)) != len(modules):
            errors.append(f"[pypi] modules {modules!r} names a family twice")
            ok = False
    budget = cfg.get("size_budget_mib", 100)
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or budget <= 0:
        errors.append(f"[pypi] size_budget_mib must be a positive number of MiB, got {budget!r}")
        return None
    if not ok or not isinstance(platforms, list) or not isinstance(modules, list):
        return None
    return PypiSettings(
        platforms=_strings(platforms), modules=_strings(modules), size_budget_mib=float(budget)
    )


def expand_pypi(matrix: Matrix, plan: Plan) -> List[PypiWheel]:
    """matrix.toml's ``[pypi]`` (parsed: ``Matrix.pypi``) -> one PypiWheel per platform, from the plan's
    stable-ABI cells.  Never raises: a module without a stable cell on a platform, no stable cells at
    all, or cells that disagree on their tags or floor go to ``plan.errors`` naming the value and the fix."""
    cfg = matrix.pypi
    if cfg is None:
        return []
    errors = plan.errors
    stable = {(c.family, c.platform): c for c in plan.cells if c.torch_abi == "stable"}
    if not stable:
        errors.append(
            "[pypi] needs the stable-ABI cells ([stable_abi] with kinds cuda and cpu); there are none"
        )
        return []
    out = []
    for platform in cfg.platforms:
        cells = []
        for fam in cfg.modules:
            cell = stable.get((fam, platform))
            if cell is None:
                have = sorted(f for f, p in stable if p == platform)
                errors.append(
                    f"[pypi] modules: {fam!r} has no stable-ABI cell on {platform} (stable families there: "
                    f"{', '.join(have) or 'none'}): drop it from [pypi] modules or add its torch builds"
                )
                continue
            cells.append(cell)
        if len(cells) != len(cfg.modules):
            continue
        tags = {(c.python_tag, c.abi_tag, c.platform_tag) for c in cells}
        floors = {c.torch_abi_floor for c in cells}
        if len(tags) != 1 or len(floors) != 1:
            errors.append(
                f"[pypi] {platform}: the cells {', '.join(c.id for c in cells)} disagree on their tags "
                f"{sorted(tags)} or floors {sorted(map(str, floors))}; one wheel has one tag and one torch floor"
            )
            continue
        (py, abi, ptag), floor = next(iter(tags)), next(iter(floors))
        out.append(
            PypiWheel(
                platform=platform,
                platform_tag=ptag,
                python_tag=py,
                abi_tag=abi,
                torch_floor=str(floor),
                modules=tuple((c.family, c.id) for c in cells),
                size_budget_mib=cfg.size_budget_mib,
                runner=cells[0].runner,
            )
        )
    return out


#: What ``plan --filter`` keys stand for (the rest are Cell field names).
_FILTER_ALIASES = {"kind": "toolkit_kind", "abi": "cxx11abi"}

#: A cell field value of a Rejection (for filtering and the JSON listing; None: not given).
NoteValue = Union[str, bool, None]


@dataclass
class Rejection:
    what: str  # e.g. "torch 2.8 cu118 x86_64"
    reason: str
    #: the cell fields this entry would have had (id, series, family, cxx11abi, platform,
    #: toolkit_kind) where known, so that ``plan --filter`` applies to it as to the cells
    fields: Dict[str, NoteValue] = field(default_factory=dict)

    def matches(self, filters: Sequence[str]) -> bool:
        """Whether every filter (as :meth:`Plan.filtered`) matches; a filter on a field this entry
        does not know does not match. An entry without fields matches everything."""
        if not self.fields:
            return True
        for flt in filters:
            if "=" in flt:
                key, pat = _split_filter(flt)
                if key not in self.fields or not _value_matches(self.fields[key], key, pat):
                    return False
            elif not _id_matches(str(self.fields.get("id", "")), flt):
                return False
        return True


def _note_fields(
    series: str, acc: str, abi: NoteValue, platform: str, fam: Optional[str] = None
) -> Dict[str, NoteValue]:
    """The cell fields of a (torch series, accelerator or family, cxx11abi, platform) entry, for
    filtering."""
    if fam is None:
        try:
            fam = accelerator_family(acc)
        except MatrixError:
            return {"series": series, "cxx11abi": abi, "platform": platform}
    kind = "cpu" if fam == "cpu" else "rocm" if fam.startswith("rocm") else "cuda"
    fields: Dict[str, NoteValue] = {
        "series": series,
        "family": fam,
        "cxx11abi": abi,
        "platform": platform,
        "toolkit_kind": kind,
    }
    if isinstance(abi, bool):
        label = VariantKey(torch=series, accelerator=fam, cxx11abi=abi).local_label
        fields["id"] = f"{label}-{platform}"
    return fields


@dataclass
class Plan:
    """The expanded, validated matrix (and the parsed files it was expanded from)."""

    matrix: Matrix
    data: TorchData
    cells: List[Cell] = field(default_factory=list)
    rejected: List[Rejection] = field(default_factory=list)
    skipped: List[Rejection] = field(default_factory=list)
    excluded: List[Rejection] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)  # the matrix itself is wrong
    warnings: List[str] = field(default_factory=list)
    python_versions: List[str] = field(default_factory=list)
    pypi: List[PypiWheel] = field(default_factory=list)  # [pypi]: one wheel per platform

    @property
    def ok(self) -> bool:
        return not self.errors and not self.rejected

    def pypi_wheel(self, platform: str) -> PypiWheel:
        """The PyPI wheel of ``platform``; MatrixError naming the platforms there are."""
        for w in self.pypi:
            if w.platform == platform:
                return w
        raise MatrixError(
            f"no PyPI wheel for platform {platform!r} in matrix.toml [pypi] (it has "
            f"{', '.join(w.platform for w in self.pypi) or 'none'})"
        )

    def cell(self, cell_id: str) -> Cell:
        """The cell with this id; MatrixError listing near ids when absent or rejected."""
        for c in self.cells:
            if c.id == cell_id:
                return c
        for r in self.rejected:
            if cell_id in r.what:
                raise MatrixError(f"cell {cell_id!r} was rejected: {r.reason}")
        near = [c.id for c in self.cells if c.id.split("-")[0][:4] == cell_id[:4]][:8]
        raise MatrixError(
            f"no cell {cell_id!r} in the plan; `python -m build_matrix plan` lists them"
            + (f" (e.g. {', '.join(near)})" if near else "")
        )

    def filtered(self, filters: Sequence[str]) -> List[Cell]:
        return [c for c in self.cells if all(_matches(c, f) for f in filters)]

    def filtered_notes(self, filters: Sequence[str]) -> Tuple[List[Rejection], List[Rejection]]:
        """The skipped and excluded entries the filters select (as for the cells); rejected builds
        are matrix errors and are always reported."""
        return (
            [r for r in self.skipped if r.matches(filters)],
            [r for r in self.excluded if r.matches(filters)],
        )


def _split_filter(flt: str) -> Tuple[str, str]:
    """'kind=cuda' -> ('toolkit_kind', 'cuda'): the cell field and the glob."""
    key, pat = flt.split("=", 1)
    return _FILTER_ALIASES.get(key.strip(), key.strip()), pat.strip()


def _value_matches(value: object, key: str, pat: str) -> bool:
    """Whether a cell field's value matches the glob (a boolean as true/false, any item of a tuple)."""
    if isinstance(value, bool):
        value = str(value).lower()
    elif isinstance(value, tuple):
        return any(fnmatch.fnmatchcase(str(v), pat) for v in value)
    return fnmatch.fnmatchcase(str(value), pat.lower() if key == "cxx11abi" else pat)


def _id_matches(cell_id: str, flt: str) -> bool:
    """A bare glob against a cell id (a text without wildcards matches anywhere in it)."""
    return fnmatch.fnmatchcase(cell_id, flt if any(ch in flt for ch in "*?[") else f"*{flt}*")


def _matches(cell: Cell, flt: str) -> bool:
    """'key=glob' matches a cell field (series=2.1*, family=cu13, platform=x86_64, cxx11abi=true,
    toolkit=cuda13.0, kind=cuda); a bare glob matches the id."""
    if "=" in flt:
        key, pat = _split_filter(flt)
        if not hasattr(cell, key):
            raise MatrixError(
                f"filter {flt!r}: a cell has no field {key!r} (use series, family, cxx11abi, platform, "
                f"toolkit, kind, torch_abi, experimental or a glob on the id)"
            )
        return _value_matches(getattr(cell, key), key, pat)
    return _id_matches(cell.id, flt)


# --------------------------------------------------------------------------------------- loading
def load_toml(path: Path) -> Dict[str, Any]:
    """A TOML file's tables as tomllib reads them (MatrixError when missing or not TOML); the records
    above are parsed from them (``load_matrix``, ``load_data``)."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise MatrixError(f"{path} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError(f"{path} is not valid TOML: {exc}") from None


def load_matrix(path: Path = MATRIX_PATH) -> Matrix:
    """matrix.toml parsed (MatrixError when missing or not TOML; other problems in ``errors``)."""
    return Matrix.from_toml(load_toml(path))


def load_data(path: Path = DATA_PATH) -> TorchData:
    """data/torch_builds.toml parsed (MatrixError when missing or not TOML)."""
    return TorchData.from_toml(load_toml(path))


def validate_toolkit_archs(tk: Toolkit, known_bad_rules: Sequence[KnownBad]) -> List[str]:
    """Why this toolkit's arch list is wrong (empty when fine).

    Each SASS ``sm_XY`` must be one nvcc ``tk.version`` can target
    (``archs.nvcc_supported_archs``), each PTX ``compute_XY`` likewise, and no pair may be known bad
    (``archs.known_bad`` and matrix.toml's ``[[known_bad]]``).  gfx targets must parse.
    """
    problems: List[str] = []
    if tk.kind == "cuda" and tk.nvcc is not None:
        nvcc = tk.nvcc
        if not tk.sass:
            problems.append(f"toolkit {tk.id}: no SASS archs")
        supported = set(archs.nvcc_supported_archs(nvcc, variants=True))
        for name in tk.sass + tk.ptx:
            try:
                a = archs.parse_arch(name)
            except ValueError as exc:
                problems.append(f"toolkit {tk.id}: {exc}")
                continue
            if a.sass not in supported:
                problems.append(
                    f"toolkit {tk.id}: {name} is not supported by nvcc {tk.version} "
                    f"(it targets {', '.join(archs.nvcc_supported_archs(nvcc))})"
                )
                continue
            if name.startswith("sm_"):
                reason = archs.known_bad(a.sass, nvcc)
                if reason:
                    problems.append(f"toolkit {tk.id}: known-bad pair: {reason}")
                for rule in known_bad_rules:
                    if rule.applies(a.sass, tk.version):
                        problems.append(
                            f"toolkit {tk.id}: known-bad pair ({a.sass}, nvcc {tk.version}): {rule.reason}"
                        )
    elif tk.kind == "rocm":
        try:
            archs.parse_gfx_list(";".join(tk.gfx))
        except ValueError as exc:
            problems.append(f"toolkit {tk.id}: {exc}")
        if not tk.gfx:
            problems.append(f"toolkit {tk.id}: no gfx targets")
    elif tk.kind != "cpu":
        problems.append(f"toolkit {tk.id}: kind {tk.kind!r} is none of cuda, rocm, cpu")
    return problems


def validate_python(versions: Sequence[str], requires_python: str, wheel_python_tag: str) -> List[str]:
    """Python list vs requires-python, both directions, and the abi3 tag vs the lower bound.

    Every listed version must satisfy requires-python; every CPython minor that requires-python
    allows between its lower bound and the newest listed one must be listed (no untested gap); the
    wheel's ``cpXY`` tag must be the lowest listed version.
    """
    problems = []
    spec = SpecifierSet(requires_python)
    listed = sorted({tuple(int(p) for p in v.split(".")) for v in versions})
    if not listed:
        return ["[python] versions is empty"]
    for v in listed:
        if f"{v[0]}.{v[1]}" not in spec:
            problems.append(
                f"Python {v[0]}.{v[1]} is listed in matrix.toml but pyproject.toml requires-python is "
                f"{requires_python!r}: drop it from [python] versions or widen requires-python"
            )
    allowed = [(3, m) for m in range(listed[-1][1] + 1) if f"3.{m}" in spec]
    for v in allowed:
        if v not in listed:
            problems.append(
                f"requires-python {requires_python!r} admits Python {v[0]}.{v[1]} but matrix.toml does "
                f"not test it: add it to [python] versions or raise requires-python"
            )
    lowest = f"cp{listed[0][0]}{listed[0][1]}"
    if wheel_python_tag != lowest:
        problems.append(
            f"wheel_python_tag {wheel_python_tag!r} must be the lowest tested Python ({lowest}), the "
            f"oldest interpreter the abi3 wheel is built for"
        )
    return problems


# torch compiles py_limited_api extensions with -DPy_LIMITED_API=cpp_extension.min_supported_cpython
# from 2.7 on (pytorch/pytorch#145764, the 2.7 BC-breaking note), the release's own lowest Python
# (torch 2.14.1 on disk: min_supported_cpython = "0x030A0000", Requires-Python ">=3.10"). Older torch
# defines none and setup.py targets wheel_python_tag's Python (mamba_ssm/_build/config.py).
TORCH_LIMITED_API_SINCE = Version("2.7")


def cell_python_tag(series: str, release: TorchRelease, wheel_python_tag: str) -> str:
    """The abi3 wheel's Python tag for a cell of torch ``series``: the lowest Python of the release
    (``release.python``, from data/torch_builds.toml) when torch sets ``Py_LIMITED_API`` itself
    (series >= 2.7), else ``wheel_python_tag``; never below ``wheel_python_tag``.  The build's
    embedded build info and the audit (abi3audit included) check the compiled module agrees."""
    floor = int(wheel_python_tag[3:])
    if Version(series) < TORCH_LIMITED_API_SINCE:
        return wheel_python_tag
    low = re.search(r">=\s*3\.(\d+)", release.python)
    return f"cp3{max(floor, int(low.group(1)) if low else floor)}"


def validate_cell_python(cell: Cell, versions: Sequence[str], requires_python: str) -> List[str]:
    """The cell's abi3 tag vs the package: its Python must be tested ([python] versions) and allowed
    by requires-python (else the wheel's tag promises an interpreter the metadata refuses)."""
    dotted = f"{cell.python_tag[2]}.{cell.python_tag[3:]}"
    problems = []
    if dotted not in SpecifierSet(requires_python):
        problems.append(
            f"cell {cell.id}: tag {cell.python_tag}-{cell.abi_tag} (Python {dotted}) is outside "
            f"pyproject.toml requires-python {requires_python!r}: widen requires-python"
        )
    if dotted not in versions:
        problems.append(
            f"cell {cell.id}: tag {cell.python_tag}-{cell.abi_tag} is for Python {dotted}, which "
            "[python] versions does not test: add it"
        )
    return problems


def read_requires_python(pyproject: Path = PYPROJECT_PATH) -> str:
    data = load_toml(pyproject)
    try:
        return str(data["project"]["requires-python"])
    except KeyError:
        raise MatrixError(f"{pyproject} has no [project] requires-python") from None


# ------------------------------------------------------------------------------------- expansion
def expand(matrix: Mapping[str, object], data: Mapping[str, object], requires_python: str) -> Plan:
    """Parse matrix.toml's and the data file's tables (as ``load_toml`` reads them) and expand them
    (``expand_matrix``).  Never raises for a bad entry: it lands in ``plan.rejected`` /
    ``plan.errors`` with the reason."""
    return expand_matrix(Matrix.from_toml(matrix), TorchData.from_toml(data), requires_python)


@dataclass
class _ClassicGroup:
    """The torch builds of one classic cell, gathered while expanding."""

    version: str
    release: TorchRelease
    builds: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class _StableBuild:
    """One build a stable-ABI cell serves."""

    series: str
    version: str
    accelerator: str
    release: TorchRelease


def expand_matrix(matrix: Matrix, data: TorchData, requires_python: str) -> Plan:
    """Expand the parsed matrix into validated cells (see the module docstring).  Never raises for a
    bad entry: it lands in ``plan.rejected`` / ``plan.errors`` with the reason (``matrix.errors``
    first, after the Python list's)."""
    plan = Plan(matrix=matrix, data=data)
    plan.python_versions = list(matrix.python.versions)
    plan.errors += validate_python(plan.python_versions, requires_python, matrix.wheel_python_tag)
    plan.errors += matrix.errors
    serves = matrix.toolkits_by_accelerator()
    stable_cfg = matrix.stable_abi
    groups: Dict[Tuple[str, str, bool, str], _ClassicGroup] = {}
    stable_groups: Dict[Tuple[str, str], List[_StableBuild]] = {}
    for t in matrix.torch:
        series, version = t.series, t.version
        rel = data.releases.get(series)
        for b in t.builds:
            acc = b.accelerator
            for platform in b.platforms:
                what = f"torch {series} ({version}) +{acc} cxx11abi={b.abi_text} {platform}"
                notes = _note_fields(series, acc, b.abi_field, platform)
                checked = _check_build(
                    series, version, b, platform, rel, matrix.platform_names, serves, check_toolkit=not b.skip
                )
                if isinstance(checked, str):
                    plan.rejected.append(Rejection(what, checked, notes))
                    continue
                if b.skip:
                    plan.skipped.append(Rejection(what, b.skip, notes))
                    continue
                release, abi = checked
                fam = accelerator_family(acc)
                if stable_cfg and stable_cfg.covers(series, serves[acc][0].kind):
                    stable_groups.setdefault((fam, platform), []).append(
                        _StableBuild(series, version, acc, release)
                    )
                    continue
                g = groups.setdefault((series, fam, abi, platform), _ClassicGroup(version, release))
                g.builds.append(acc)

    for (series, fam, abi, platform), g in groups.items():
        label = VariantKey(torch=series, accelerator=fam, cxx11abi=abi).local_label
        cell_id = f"{label}-{platform}"
        ex = _excluded(matrix.excludes, series, fam, abi, platform)
        if ex is not None:
            plan.excluded.append(Rejection(cell_id, ex, _note_fields(series, "", abi, platform, fam)))
            continue
        by_id = {serves[a][0].id: serves[a][0] for a in g.builds}
        if len(by_id) != 1:
            plan.rejected.append(
                Rejection(
                    cell_id,
                    f"its builds {', '.join(g.builds)} need different toolkits "
                    f"({', '.join(sorted(by_id))}); one wheel is built by one toolkit",
                )
            )
            continue
        tk = next(iter(by_id.values()))
        cell = _make_cell(
            matrix,
            cell_id,
            label,
            series,
            g.version,
            g.release,
            g.builds,
            tuple(g.builds),
            fam,
            abi,
            platform,
            tk,
        )
        plan.errors += validate_cell_python(cell, plan.python_versions, requires_python)
        plan.cells.append(cell)
        plan.warnings += _coverage_warnings(cell, data, matrix.policy)
    if stable_cfg is not None:  # else stable_groups is empty
        for (fam, platform), builds in stable_groups.items():
            stable_cell = _stable_cell(matrix, stable_cfg, fam, platform, builds, serves, plan)
            if stable_cell is None:
                continue
            plan.errors += validate_cell_python(stable_cell, plan.python_versions, requires_python)
            plan.cells.append(stable_cell)
            plan.warnings += _coverage_warnings(stable_cell, data, matrix.policy)
    plan.cells.sort(
        key=lambda c: (c.torch_abi == "stable", Version(c.series), c.family, c.cxx11abi, c.platform)
    )
    plan.pypi = expand_pypi(matrix, plan)
    return plan


def _stable_cell(
    matrix: Matrix,
    stable: StableAbi,
    fam: str,
    platform: str,
    builds: List[_StableBuild],
    serves: Dict[str, List[Toolkit]],
    plan: Plan,
) -> Optional[Cell]:
    """The stable-ABI cell of (family, platform) from the builds it serves, or None (then an
    exclusion or a rejection says why)."""
    floor = stable.floor
    label = VariantKey(torch=floor, accelerator=fam, cxx11abi=None, torch_abi=TorchAbi.STABLE).local_label
    cell_id = f"{label}-{platform}"
    newest = max((b.series for b in builds), key=Version)
    ex = _excluded(matrix.excludes, newest, fam, True, platform)
    if ex is not None:
        plan.excluded.append(Rejection(cell_id, ex, _note_fields(newest, "", True, platform, fam)))
        return None
    tks = {serves[b.accelerator][0].id: serves[b.accelerator][0] for b in builds}
    accs = sorted({b.accelerator for b in builds}, key=lambda a: accelerator_version(a) or ())
    if len(tks) != 1:
        plan.rejected.append(
            Rejection(
                cell_id,
                f"its builds {', '.join(accs)} need different toolkits ({', '.join(sorted(tks))}); one wheel is "
                "built by one toolkit",
            )
        )
        return None
    tk = next(iter(tks.values()))
    version, rel = next((b.version, b.release) for b in builds if b.series == newest)
    # cxx11abi: the build torch's (TRUE for every series >= 2.7); a stable-ABI _C does not depend on it
    return _make_cell(
        matrix,
        cell_id,
        label,
        newest,
        version,
        rel,
        [b.accelerator for b in builds if b.series == newest],
        tuple(accs),
        fam,
        True,
        platform,
        tk,
        torch_abi="stable",
        torch_abi_floor=floor,
        serves_series=tuple(sorted({b.series for b in builds}, key=Version)),
        torch_abi_build_min=stable.build_min,
    )


def _make_cell(
    matrix: Matrix,
    cell_id: str,
    label: str,
    series: str,
    version: str,
    rel: TorchRelease,
    candidates: List[str],
    serves: Tuple[str, ...],
    fam: str,
    abi: bool,
    platform: str,
    tk: Toolkit,
    *,
    torch_abi: str = "classic",
    torch_abi_floor: Optional[str] = None,
    serves_series: Tuple[str, ...] = (),
    torch_abi_build_min: Optional[str] = None,
) -> Cell:
    """The cell ``cell_id`` built by toolkit ``tk`` against torch ``version`` of ``series`` (release data
    ``rel``): against its PyPI default build when that is among ``candidates``, else the oldest of them.
    The keyword arguments: a stable-ABI cell's fields."""
    default = rel.pypi_default
    against = (
        default
        if default is not None and default in candidates
        else min(candidates, key=lambda a: accelerator_version(a) or ())
    )
    plat = matrix.platform(platform)
    return Cell(
        id=cell_id,
        label=label,
        series=series,
        torch_version=version,
        build_against=against,
        serves=serves,
        family=fam,
        cxx11abi=abi,
        platform=platform,
        toolkit=tk.id,
        toolkit_kind=tk.kind,
        toolkit_version=tk.version,
        sass=tk.sass,
        ptx=tk.ptx,
        gfx=tk.gfx,
        image=f"{matrix.images.registry}/{OWNER_PLACEHOLDER}/{matrix.images.name}:{tk.id}-{platform}",
        runner=plat.runner,
        manylinux=plat.manylinux,
        size_budget_mib=matrix.size_budget(tk.kind),
        experimental=tk.experimental,
        python_tag=cell_python_tag(series, rel, matrix.wheel_python_tag),
        abi_tag=matrix.wheel_abi_tag,
        torch_abi=torch_abi,
        torch_abi_floor=torch_abi_floor,
        serves_series=serves_series,
        torch_abi_build_min=torch_abi_build_min,
    )


def _check_build(
    series: str,
    version: str,
    build: TorchBuild,
    platform: str,
    rel: Optional[TorchRelease],
    platforms: Sequence[str],
    serves: Dict[str, List[Toolkit]],
    check_toolkit: bool = True,
) -> Union[str, Tuple[TorchRelease, bool]]:
    """Why this (torch build, platform) cannot be a cell, or when it can, its release's data and its
    C++ ABI."""
    if build.problem is not None or build.cxx11abi is None:
        return build.problem or "cxx11abi must be true or false"
    acc, abi = build.accelerator, build.cxx11abi
    if platform not in platforms:
        return f"platform {platform!r} is not in [platforms] ({', '.join(platforms)})"
    if rel is None:
        return (
            f"torch {series} is not in build_matrix/data/torch_builds.toml (PyTorch's published "
            f"builds); add the release there from pytorch.org first"
        )
    if version not in rel.versions:
        return f"torch {version} is not a release of the {series} series ({', '.join(rel.versions)})"
    shipped = rel.shipped(platform)
    if acc not in shipped:
        return (
            f"PyTorch {series} shipped no +{acc} build for {platform} (it shipped "
            f"{', '.join(shipped) or 'none'})"
        )
    # Independent of the data file: PyTorch's Linux pip wheels use the cxx11 ABI from 2.7 on.
    if Version(series) >= Version("2.7") and abi is False:
        return f"torch {series} Linux pip wheels are built with the cxx11 ABI (TRUE) since 2.7; FALSE is impossible"
    published = rel.published_abi(acc, platform)
    if published is not None and published != abi:
        return (
            f"torch {series}+{acc} ({platform}) is published with cxx11abi={str(published).upper()}, "
            f"matrix says {str(abi).upper()}"
        )
    if not check_toolkit:
        return rel, abi
    tks = serves.get(acc, [])
    if not tks:
        return f"no [[toolkit]] serves +{acc}"
    if platform not in tks[0].platforms:
        return f"toolkit {tks[0].id} (serving +{acc}) has no {platform} builder"
    return rel, abi


def _excluded(excludes: Sequence[Exclude], series: str, fam: str, abi: bool, platform: str) -> Optional[str]:
    """The reason of the first ``[[exclude]]`` entry that drops this cell, or None."""
    for ex in excludes:
        if ex.matches(series, fam, abi, platform):
            return ex.reason
    return None


def _coverage_warnings(cell: Cell, data: TorchData, policy: Policy) -> List[str]:
    """GPUs (at or above the policy's minimum capability) that a served torch build targets but
    this cell's SASS/PTX would not run on."""
    if cell.toolkit_kind != "cuda":
        return []
    floor = archs.parse_capability(policy.min_compute_capability)
    out = []
    for acc in cell.serves:
        v = accelerator_version(acc)
        if v is None:
            continue
        for a in data.torch_archs.get(f"{v[0]}.{v[1]}", ()):
            if not a.startswith("sm_"):
                continue
            cap = archs.parse_arch(a).capability
            if cap < floor:
                continue
            why = archs.coverage(cap, cell.sass, cell.ptx)
            if why:
                out.append(f"{cell.id}: torch +{acc} targets {a} but this wheel does not run there: {why}")
    return out


def load_plan(
    matrix_path: Path = MATRIX_PATH, data_path: Path = DATA_PATH, pyproject: Path = PYPROJECT_PATH
) -> Plan:
    """Load the three files, parse and expand (MatrixError when a file is missing or not TOML)."""
    return expand_matrix(load_matrix(matrix_path), load_data(data_path), read_requires_python(pyproject))
