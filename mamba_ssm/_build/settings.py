"""The build's configuration read from the environment into one typed object, the package version
with its local label, and the classification of a setup.py command line.

Every variable is documented in ``docs/build.md``. Reading never fails: values are checked where they
are used (``Settings.max_jobs_or`` / ``nvcc_threads_or``, ``package_version``, ``fallback_choice``,
``check_flags``), so a metadata command with a bad ``MAX_JOBS`` still succeeds, as it always has.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

from .._compat.textenum import TextEnum
from .._version import __version__ as BASE_VERSION
from .errors import PreflightError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = "mamba_ssm"
EXT_NAME = "mamba_ssm._C"
CSRC = "csrc"
#: The spellings of a boolean variable, compared case-insensitively after stripping blanks; docs/build.md
#: lists exactly these. An empty value is the same as unset (false); anything else is an error.
TRUE_VALUES = ("1", "TRUE", "YES", "ON")
FALSE_VALUES = ("0", "FALSE", "NO", "OFF")
#: The boolean build variables (``Settings``' flags).
FLAG_VARIABLES = (
    "MAMBA_SKIP_CUDA_BUILD",
    "MAMBA_FORCE_BUILD",
    "HIP_BUILD",
    "MAMBA_FORCE_CXX11_ABI",
    "MAMBA_DEBUG_BUILD",
    "MAMBA_KEEP_CUDA_BUILD",
)


class Fallback(TextEnum):
    """``MAMBA_FALLBACK``: what a wheel build does when no prebuilt wheel fits."""

    AUTO = "auto"  # a source build when its preflight passes, else the pure-Python wheel
    SOURCE = "source"
    PYTHON = "python"
    ERROR = "error"


FALLBACKS = Fallback.choices()


class CommandKind(TextEnum):
    """What a setup.py command line asks for."""

    WHEEL = "wheel"  # bdist_wheel: the resolver, then MAMBA_FALLBACK
    EDITABLE = "editable"  # editable_wheel: MAMBA_FALLBACK without the resolver
    SOURCE = "source"  # build_ext, develop, ...: a source build
    METADATA = "metadata"  # egg_info, sdist, --version, ...: nothing is built


def spellings() -> str:
    """The accepted spellings of a boolean variable, for error messages."""
    return f"{', '.join(TRUE_VALUES)} (true) or {', '.join(FALSE_VALUES)} (false), in any case"


def parse_flag(name: str, raw: str) -> bool:
    """The boolean variable ``name`` set to ``raw``: one of :data:`TRUE_VALUES` -> True, one of
    :data:`FALSE_VALUES` or empty -> False (any case, blanks stripped).

    Raises ``PreflightError`` naming the variable, the value and the accepted spellings otherwise.
    """
    value = str(raw).strip().upper()
    if value in TRUE_VALUES:
        return True
    if not value or value in FALSE_VALUES:
        return False
    raise PreflightError(
        f"{name}={str(raw).strip()!r} is not a boolean: use one of {spellings()}, or unset {name}"
    )


def env_flag(env: Mapping[str, str], name: str) -> bool:
    """The boolean variable ``name`` of ``env`` (:func:`parse_flag`); unset -> False.

    Raises ``PreflightError`` for a value that is not one of the accepted spellings."""
    return parse_flag(name, str(env.get(name, "")))


def _text(env: Mapping[str, str], name: str) -> str:
    return str(env.get(name, "")).strip()


def positive_int(name: str, raw: str, default: int) -> int:
    """``raw`` (the text of variable ``name``) as an integer >= 1; ``default`` when empty.

    Raises ``PreflightError`` naming the variable for anything else (``"0"``, ``"-2"``, ``"four"``).
    """
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise PreflightError(f"{name}={raw!r} is not a positive integer; set e.g. {name}=2 or unset it")
    return value


@dataclass(frozen=True)
class Settings:
    """The knobs of a mamba-ssm build, as the environment gives them.

    Flags are booleans (:func:`parse_flag`; a value that is not one of its spellings reads as False here
    and is kept in ``bad_flags`` for :meth:`check_flags`); the rest are stripped strings ("" when unset). Tool locations (``PATH``, ``CUDA_HOME``, ``CC``, ``ROCM_PATH``, ...) are not here: the toolkit
    discovery in ``toolkit`` reads them, as torch's cpp_extension does.
    """

    skip_cuda_build: bool = False  # MAMBA_SKIP_CUDA_BUILD: the pure-Python wheel
    force_build: bool = False  # MAMBA_FORCE_BUILD: a source build, no resolver
    fallback: str = "auto"  # MAMBA_FALLBACK (lower case; checked by fallback_choice)
    local_version: str = ""  # MAMBA_LOCAL_VERSION, without a leading "+"
    cuda_archs: str = ""  # MAMBA_CUDA_ARCHS
    torch_cuda_arch_list: str = ""  # TORCH_CUDA_ARCH_LIST
    hip_build: bool = False  # HIP_BUILD
    force_cxx11_abi: bool = False  # MAMBA_FORCE_CXX11_ABI
    debug_build: bool = False  # MAMBA_DEBUG_BUILD: -g / -lineinfo
    keep_cuda_build: bool = False  # MAMBA_KEEP_CUDA_BUILD: accepted, no effect
    max_jobs: str = ""  # MAX_JOBS (checked by max_jobs_or)
    nvcc_threads: str = ""  # NVCC_THREADS (checked by nvcc_threads_or)
    git_commit: str = ""  # MAMBA_GIT_COMMIT: the commit recorded in the build info
    torch_stable_abi: str = ""  # MAMBA_TORCH_STABLE_ABI (checked by config.resolve_torch_abi)
    stable_cuda_major: str = ""  # MAMBA_STABLE_CUDA_MAJOR (checked by config.resolve_stable_cuda_major)
    bad_flags: Tuple[str, ...] = ()  # the flag variables set to something else than a boolean spelling

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> Settings:
        """Read ``env`` (default ``os.environ``). Never raises."""
        env = os.environ if env is None else env
        flag: Dict[str, bool] = {}
        bad: List[str] = []
        for name in FLAG_VARIABLES:
            try:
                flag[name] = env_flag(env, name)
            except PreflightError:  # reported by check_flags where the flags are used
                flag[name] = False
                bad.append(name)
        return cls(
            skip_cuda_build=flag["MAMBA_SKIP_CUDA_BUILD"],
            force_build=flag["MAMBA_FORCE_BUILD"],
            fallback=_text(env, "MAMBA_FALLBACK").lower() or "auto",
            local_version=_text(env, "MAMBA_LOCAL_VERSION").lstrip("+"),
            cuda_archs=_text(env, "MAMBA_CUDA_ARCHS"),
            torch_cuda_arch_list=_text(env, "TORCH_CUDA_ARCH_LIST"),
            hip_build=flag["HIP_BUILD"],
            force_cxx11_abi=flag["MAMBA_FORCE_CXX11_ABI"],
            debug_build=flag["MAMBA_DEBUG_BUILD"],
            keep_cuda_build=flag["MAMBA_KEEP_CUDA_BUILD"],
            max_jobs=_text(env, "MAX_JOBS"),
            nvcc_threads=_text(env, "NVCC_THREADS"),
            git_commit=str(env.get("MAMBA_GIT_COMMIT", "") or ""),
            torch_stable_abi=_text(env, "MAMBA_TORCH_STABLE_ABI"),
            stable_cuda_major=_text(env, "MAMBA_STABLE_CUDA_MAJOR"),
            bad_flags=tuple(f"{name}={_text(env, name)!r}" for name in bad),
        )

    def check_flags(self) -> None:
        """``PreflightError`` naming every boolean variable whose value is not one of the accepted
        spellings (``MAMBA_FORCE_BUILD='maybe'``) and the spellings; nothing when all are valid."""
        if self.bad_flags:
            plural = "are not booleans" if len(self.bad_flags) > 1 else "is not a boolean"
            raise PreflightError(
                f"{', '.join(self.bad_flags)} {plural}: use one of {spellings()}, or unset the variable"
            )

    def max_jobs_or(self, default: int) -> int:
        """``MAX_JOBS`` as a positive integer, else ``default``; ``PreflightError`` when malformed."""
        return positive_int("MAX_JOBS", self.max_jobs, default)

    def nvcc_threads_or(self, default: int) -> int:
        """``NVCC_THREADS`` as a positive integer, else ``default``; ``PreflightError`` when malformed."""
        return positive_int("NVCC_THREADS", self.nvcc_threads, default)

    def fallback_choice(self) -> Fallback:
        """``MAMBA_FALLBACK`` (:class:`Fallback`); ``PreflightError`` naming the value otherwise."""
        try:
            return Fallback.parse(self.fallback, "MAMBA_FALLBACK")
        except ValueError as e:
            raise PreflightError(str(e)) from None


def package_version(env: Optional[Mapping[str, str]] = None) -> str:
    """The version with ``MAMBA_LOCAL_VERSION`` appended as a local label (``2.4.0.dev0+cu13torch2.14``,
    normalised by PEP 440: lower case).

    Raises ``PreflightError`` when the label is not a valid PEP 440 local label.
    """
    label = Settings.from_env(env).local_version
    if not label:
        return BASE_VERSION
    from packaging.version import InvalidVersion, Version

    try:
        return str(Version(f"{BASE_VERSION}+{label}"))
    except InvalidVersion:
        raise PreflightError(
            f"MAMBA_LOCAL_VERSION={label!r} is not a valid local version label: use letters, digits and "
            "dots only, e.g. MAMBA_LOCAL_VERSION=cu13torch2.14cxx11abiTRUE"
        ) from None


METADATA_COMMANDS = {"egg_info", "dist_info", "sdist", "check", "--name", "--version", "--fullname"}
WHEEL_COMMANDS = {"bdist_wheel"}
SOURCE_COMMANDS = {"build_ext", "build", "develop", "install", "bdist_egg"}
EDITABLE_COMMANDS = {"editable_wheel"}


def classify_commands(argv: List[str]) -> CommandKind:
    """What a setup.py command line asks for (options are ignored; a wheel command wins over the
    others)."""
    cmds = {a for a in argv if not a.startswith("-") or a in METADATA_COMMANDS}
    if cmds & WHEEL_COMMANDS:
        return CommandKind.WHEEL
    if cmds & EDITABLE_COMMANDS:
        return CommandKind.EDITABLE
    if cmds & SOURCE_COMMANDS:
        return CommandKind.SOURCE
    return CommandKind.METADATA


def default_max_jobs(
    cpu_count: Optional[int] = None, mem_available_gib: Optional[float] = None, gib_per_job: float = 2.5
) -> int:
    """Parallel compile jobs: the usable cores, capped so each job has ``gib_per_job`` of the memory
    available (nvcc on the kernel translation units peaks at about 1-2 GiB). At least 1."""
    if cpu_count is None:
        try:
            cpu_count = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpu_count = os.cpu_count() or 1
    if mem_available_gib is None:
        mem_available_gib = mem_available()
    jobs = max(1, int(cpu_count))
    if mem_available_gib is not None:
        jobs = min(jobs, max(1, int(mem_available_gib // gib_per_job)))
    return jobs


def mem_available() -> Optional[float]:
    """``MemAvailable`` of /proc/meminfo in GiB; None where it cannot be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / (1024 * 1024)
    except OSError:
        pass
    return None
