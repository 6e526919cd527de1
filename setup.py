"""Build script of mamba-ssm: a prebuilt kernel wheel, a source build of ``mamba_ssm._C``, or the
pure-Python wheel.

What happens depends on the command and the environment:

* metadata (``egg_info``, ``dist_info``, ``sdist``, ``--version``): nothing is probed; no torch, nvcc
  or GPU is needed.
* a wheel (``bdist_wheel``, what ``pip install`` runs):
    - ``MAMBA_SKIP_CUDA_BUILD=TRUE``: the pure-Python wheel (no download, no compiler).
    - ``MAMBA_FORCE_BUILD=TRUE``: a source build (torch must be importable: use
      ``pip install --no-build-isolation``).
    - otherwise the resolver (``mamba_ssm/_install/setup_hook.py``) looks for a prebuilt wheel; one
      found is copied unchanged into the dist dir; else ``MAMBA_FALLBACK=auto|source|python|error``.
* ``build_ext`` / ``develop`` / editable installs: a source build (``auto`` fallback without the
  resolver for editable installs).

A source build compiles ``csrc/*.cpp`` (CPU kernel + binding) always and ``csrc/*.cu`` for CUDA/HIP
builds into ``mamba_ssm/_C.abi3.so`` (Python limited API, ``cp39-abi3``), after a preflight that
names each problem and its fix. Environment variables are documented in ``docs/build.md``.

The shared rules (``mamba_ssm/_compat``) and the version are loaded by file path: ``import mamba_ssm``
would need torch.
"""
from __future__ import annotations

import glob
import importlib
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import types
import uuid
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from setuptools import find_packages, setup
from setuptools.command.build_ext import build_ext as _setuptools_build_ext

try:  # setuptools >= 70.1 ships bdist_wheel
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # pragma: no cover - older setuptools with the wheel package
    from wheel.bdist_wheel import bdist_wheel as _bdist_wheel

ROOT = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "mamba_ssm"
EXT_NAME = "mamba_ssm._C"
CSRC = "csrc"
PYTHON_TAG = "cp39"
LIMITED_API_HEX = "0x03090000"
INSTALL_ID_FILE = "mamba_ssm_install.json"  # = mamba_ssm._install.decision.INSTALL_ID_FILE

# ----------------------------------------------------------------------------- loading by path
_BYPATH = "_mamba_ssm_setup_bypath"


def _bypath(dotted: str) -> types.ModuleType:
    """Import ``mamba_ssm.<dotted>`` from this checkout by file path, never running
    ``mamba_ssm/__init__.py`` (which needs torch). Sibling relative imports work."""
    if _BYPATH not in sys.modules:
        pkg = types.ModuleType(_BYPATH)
        pkg.__path__ = [os.path.join(ROOT, PACKAGE)]
        sys.modules[_BYPATH] = pkg
    return importlib.import_module(f"{_BYPATH}.{dotted}")


def _load_file(path: str, name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


versions = _bypath("_compat.versions")
archs = _bypath("_compat.archs")
buildinfo = _bypath("_compat.buildinfo")
BASE_VERSION = _load_file(os.path.join(ROOT, PACKAGE, "_version.py"), "_mamba_ssm_setup_version").__version__

# ----------------------------------------------------------------------------- errors and env
TRUE_VALUES = ("1", "TRUE", "YES", "ON")


class PreflightError(Exception):
    """A build cannot proceed; the message is one paragraph naming the value and the fix."""


def env_flag(env, name: str) -> bool:
    """``TRUE``/``1``/``YES``/``ON`` (any case) -> True."""
    return str(env.get(name, "")).strip().upper() in TRUE_VALUES


def package_version(env) -> str:
    """The version with ``MAMBA_LOCAL_VERSION`` appended as a local label (``2.4.0.dev0+cu13torch2.14``).

    Raises ``PreflightError`` when the label is not a valid PEP 440 local label.
    """
    label = str(env.get("MAMBA_LOCAL_VERSION", "")).strip().lstrip("+")
    if not label:
        return BASE_VERSION
    from packaging.version import InvalidVersion, Version

    text = f"{BASE_VERSION}+{label}"
    try:
        v = Version(text)
    except InvalidVersion:
        raise PreflightError(
            f"MAMBA_LOCAL_VERSION={label!r} is not a valid local version label: use letters, digits and "
            "dots only, e.g. MAMBA_LOCAL_VERSION=cu13torch2.14cxx11abiTRUE"
        ) from None
    return str(v)


# ----------------------------------------------------------------------------- commands
METADATA_COMMANDS = {"egg_info", "dist_info", "sdist", "check", "--name", "--version", "--fullname"}
WHEEL_COMMANDS = {"bdist_wheel"}
SOURCE_COMMANDS = {"build_ext", "build", "develop", "install", "bdist_egg"}
EDITABLE_COMMANDS = {"editable_wheel"}


def classify_commands(argv: List[str]) -> str:
    """``"wheel"``, ``"editable"``, ``"source"`` or ``"metadata"`` for a setup.py command line."""
    cmds = {a for a in argv if not a.startswith("-") or a in METADATA_COMMANDS}
    if cmds & WHEEL_COMMANDS:
        return "wheel"
    if cmds & EDITABLE_COMMANDS:
        return "editable"
    if cmds & SOURCE_COMMANDS:
        return "source"
    return "metadata"


# ----------------------------------------------------------------------------- tools
def _run(cmd: List[str], timeout: float = 60) -> Tuple[int, str]:
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as e:
        return 127, str(e)
    return p.returncode, p.stdout


def default_max_jobs(cpu_count: Optional[int] = None, mem_available_gib: Optional[float] = None,
                     gib_per_job: float = 2.5) -> int:
    """Parallel compile jobs: the usable cores, capped so each job has ``gib_per_job`` of the memory
    available (nvcc on the kernel translation units peaks at about 1-2 GiB). At least 1."""
    if cpu_count is None:
        try:
            cpu_count = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cpu_count = os.cpu_count() or 1
    if mem_available_gib is None:
        mem_available_gib = _mem_available_gib()
    jobs = max(1, int(cpu_count))
    if mem_available_gib is not None:
        jobs = min(jobs, max(1, int(mem_available_gib // gib_per_job)))
    return jobs


def _mem_available_gib() -> Optional[float]:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / (1024 * 1024)
    except OSError:
        pass
    return None


def _positive_int(env, name: str, default: int) -> int:
    raw = str(env.get(name, "")).strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise PreflightError(f"{name}={raw!r} is not a positive integer; set e.g. {name}=2 or unset it")
    return value


def find_ninja(env) -> Optional[str]:
    """The ninja executable torch's BuildExtension will use, or None."""
    path = shutil.which("ninja", path=env.get("PATH"))
    if path:
        return path
    try:  # the ninja wheel puts its binary next to the interpreter's scripts
        import ninja  # type: ignore

        cand = os.path.join(ninja.BIN_DIR, "ninja")
        if os.access(cand, os.X_OK):
            return cand
    except Exception:
        pass
    return None


def check_ninja(env) -> str:
    """The ninja path; ``PreflightError`` when missing."""
    path = find_ninja(env)
    if not path:
        raise PreflightError(
            "ninja is not installed (not on PATH and no 'ninja' Python package): the source build of "
            "mamba_ssm._C compiles its translation units in parallel with ninja. Fix: pip install ninja "
            "(and build with --no-build-isolation so the build sees it)."
        )
    return path


# ----------------------------------------------------------------------------- CUDA
def _is_script(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def _script_target_home(path: str) -> Optional[str]:
    """For a wrapper script like ``exec /usr/local/cuda-13.0/bin/nvcc "$@"``, the toolkit root."""
    try:
        with open(path, errors="replace") as f:
            text = f.read(20000)
    except OSError:
        return None
    m = re.search(r"(/[^\s\"']+)/bin/nvcc\b", text)
    return m.group(1) if m else None


def _is_toolkit_root(home: str) -> bool:
    has_header = os.path.isfile(os.path.join(home, "include", "cuda_runtime.h")) or bool(
        glob.glob(os.path.join(home, "targets", "*", "include", "cuda_runtime.h"))
    )
    has_lib = bool(
        glob.glob(os.path.join(home, "lib64", "libcudart.so*"))
        or glob.glob(os.path.join(home, "lib", "libcudart.so*"))
        or glob.glob(os.path.join(home, "targets", "*", "lib", "libcudart.so*"))
    )
    return has_header and has_lib


def locate_cuda(torch_cuda_home: Optional[str], env, search_roots=("/usr/local",)) -> Tuple[str, str]:
    """Validate the CUDA toolkit torch's cpp_extension will use. Returns ``(cuda_home, nvcc_path)``.

    ``torch_cuda_home`` is ``torch.utils.cpp_extension.CUDA_HOME`` (from ``CUDA_HOME``/``CUDA_PATH``,
    else ``dirname(dirname(which nvcc))``, which is wrong when the ``nvcc`` on PATH is a wrapper
    script: the link then fails on ``-lcudart``). Raises ``PreflightError`` naming the value and the fix;
    the fix names a toolkit root actually found (the target of an ``nvcc`` wrapper on PATH, else the
    newest ``cuda-X.Y`` or ``cuda`` under ``search_roots``).
    """

    def suggestion(exclude: Optional[str] = None) -> str:
        found = []
        if on_path:
            target = _script_target_home(on_path) if _is_script(on_path) else \
                os.path.dirname(os.path.dirname(os.path.realpath(on_path)))
            found.append(target)
        for root in search_roots:
            versioned = glob.glob(os.path.join(root, "cuda-[0-9]*"))
            versioned.sort(key=lambda p: [int(x) for x in re.findall(r"\d+", os.path.basename(p))],
                           reverse=True)
            found += versioned + [os.path.join(root, "cuda")]
        for cand in found:
            if cand and cand != exclude and os.path.isfile(os.path.join(cand, "bin", "nvcc")) \
                    and _is_toolkit_root(cand):
                return f"CUDA_HOME={cand} (found here)"
        return "CUDA_HOME=/usr/local/cuda-X.Y (the toolkit root that holds bin/nvcc, include/, lib64/)"

    set_by = "CUDA_HOME" if env.get("CUDA_HOME") else ("CUDA_PATH" if env.get("CUDA_PATH") else None)
    if set_by:  # what torch reads too (its guess was made from the same variables at import)
        torch_cuda_home = env[set_by]
    on_path = shutil.which("nvcc", path=env.get("PATH"))
    if not torch_cuda_home:
        raise PreflightError(
            "nvcc was not found: CUDA_HOME is not set, no nvcc is on PATH and /usr/local/cuda does not "
            "exist. A CUDA build of mamba_ssm._C needs the CUDA toolkit matching torch. Fix: install it "
            f"and set CUDA_HOME to its root, e.g. {suggestion()}, or build without CUDA "
            "kernels (MAMBA_SKIP_CUDA_BUILD=TRUE gives the pure-Python package)."
        )
    home = torch_cuda_home
    nvcc = os.path.join(home, "bin", "nvcc")
    where = f"{set_by}={home}" if set_by else f"CUDA_HOME guessed by torch as {home}"
    if not set_by and on_path and _is_script(on_path) and not _is_toolkit_root(home):
        target = _script_target_home(on_path)
        hint = f"CUDA_HOME={target}" if target else "CUDA_HOME=<the toolkit root that holds bin/nvcc, include/, lib64/>"
        raise PreflightError(
            f"the nvcc on PATH ({on_path}) is a wrapper script, so torch guessed CUDA_HOME={home}, which "
            "is not a CUDA toolkit root (no include/cuda_runtime.h or libcudart there): the link would "
            f"fail on -lcudart. Fix: set {hint} and build again."
        )
    if not (os.path.isfile(nvcc) and os.access(nvcc, os.X_OK)):
        raise PreflightError(
            f"nvcc not found at {nvcc} ({where}). Fix: point CUDA_HOME at the CUDA toolkit root "
            f"(the folder with bin/nvcc, include/ and lib64/), e.g. {suggestion(home)}."
        )
    if not _is_toolkit_root(home):
        raise PreflightError(
            f"{where} has bin/nvcc but no include/cuda_runtime.h or libcudart: it is not a CUDA toolkit "
            "root and the link would fail on -lcudart. Fix: set CUDA_HOME to the toolkit root, e.g. "
            f"{suggestion(home)}."
        )
    return home, nvcc


def nvcc_version_of(nvcc: str) -> Tuple[Tuple[int, int], str]:
    """Run ``nvcc --version``: ``((13, 0), output)``; ``PreflightError`` when it fails or is unreadable."""
    rc, out = _run([nvcc, "--version"])
    if rc != 0:
        raise PreflightError(
            f"{nvcc} --version failed (exit {rc}): {out.strip()[:300]}. Fix: point CUDA_HOME at a working "
            "CUDA toolkit."
        )
    try:
        return versions.parse_nvcc_version(out), out
    except ValueError as e:
        raise PreflightError(f"{nvcc}: {e}") from None


def check_nvcc_matches_torch(nvcc: Tuple[int, int], torch_cuda: str, nvcc_path: str = "nvcc") -> None:
    """nvcc's CUDA major must equal torch's (``torch.version.cuda``)."""
    t_major, t_minor = versions.parse_cuda_version(torch_cuda)
    if nvcc[0] != t_major:
        raise PreflightError(
            f"nvcc {nvcc[0]}.{nvcc[1]} ({nvcc_path}) does not match torch's CUDA {torch_cuda}: the CUDA "
            f"major versions differ ({nvcc[0]} vs {t_major}), so the extension would not load. Fix: set "
            f"CUDA_HOME to a CUDA {t_major}.x toolkit, or install a torch built for CUDA {nvcc[0]}."
        )


def max_gcc_for_nvcc(cuda_home: str, nvcc: Tuple[int, int]) -> Optional[int]:
    """The newest GCC major nvcc accepts: read from ``include/crt/host_config.h`` (``#if __GNUC__ > N``),
    else from the CUDA release notes' table."""
    for path in (os.path.join(cuda_home, "include", "crt", "host_config.h"),
                 *glob.glob(os.path.join(cuda_home, "targets", "*", "include", "crt", "host_config.h"))):
        try:
            with open(path, errors="replace") as f:
                m = re.search(r"#if\s+__GNUC__\s*>\s*(\d+)", f.read())
        except OSError:
            continue
        if m:
            return int(m.group(1))
    table = [((13, 0), 15), ((12, 8), 14), ((12, 4), 13), ((12, 0), 12), ((11, 4), 11), ((11, 1), 10)]
    for since, gcc in table:
        if tuple(nvcc) >= since:
            return gcc
    return None


def host_compiler(env) -> str:
    """The host compiler nvcc will use: ``NVCC_CCBIN``, else ``CC`` (torch passes it as -ccbin), else gcc."""
    return env.get("NVCC_CCBIN") or env.get("CC") or "gcc"


def gcc_major(compiler: str) -> Optional[Tuple[str, int]]:
    """``("gcc", 12)`` for a GNU compiler; None for clang or when it cannot be run."""
    rc, out = _run([compiler, "--version"])
    if rc != 0 or "clang" in out.lower():
        return None
    rc, ver = _run([compiler, "-dumpversion"])
    m = re.match(r"(\d+)", ver.strip()) if rc == 0 else None
    return (compiler, int(m.group(1))) if m else None


def check_host_compiler(cuda_home: str, nvcc: Tuple[int, int], env) -> None:
    """GCC newer than nvcc supports fails inside nvcc's host_config.h; say so before compiling."""
    flags = " ".join(str(env.get(k, "")) for k in ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS"))
    if "allow-unsupported-compiler" in flags:
        return
    cc = host_compiler(env)
    found = gcc_major(cc)
    limit = max_gcc_for_nvcc(cuda_home, nvcc)
    if found is None or limit is None:
        return
    if found[1] > limit:
        raise PreflightError(
            f"the host compiler {cc} is GCC {found[1]}, newer than nvcc {nvcc[0]}.{nvcc[1]} supports "
            f"(GCC <= {limit}, from {cuda_home}/include/crt/host_config.h). Fix: install GCC {limit} or "
            f"older and set CC=gcc-{limit} CXX=g++-{limit} (or NVCC_CCBIN), or use a newer CUDA toolkit."
        )


def resolve_cuda_archs(env, torch_arch_list: List[str], nvcc: Tuple[int, int]) -> Tuple["archs.ArchSpec", str]:
    """The CUDA targets: ``MAMBA_CUDA_ARCHS`` > ``TORCH_CUDA_ARCH_LIST`` > default (torch's archs that
    this nvcc supports, minus known-bad pairs, plus PTX for the newest). Returns ``(spec, source)``.
    Raises ``PreflightError`` for unparsable lists and archs this nvcc cannot build."""
    for name in ("MAMBA_CUDA_ARCHS", "TORCH_CUDA_ARCH_LIST"):
        text = str(env.get(name, "")).strip()
        if text:
            try:
                spec = archs.parse_arch_list(text)
            except ValueError as e:
                raise PreflightError(f"{name}={text!r}: {e}") from None
            problems = archs.unsupported_archs(spec, nvcc)
            if problems:
                raise PreflightError(f"{name}={text!r}: " + "; ".join(problems))
            return spec, name
    try:
        return archs.default_arch_spec(torch_arch_list, nvcc), "default"
    except ValueError as e:
        raise PreflightError(str(e)) from None


# ----------------------------------------------------------------------------- ROCm
def locate_rocm(env, torch_rocm_home: Optional[str]) -> Tuple[str, str]:
    """``(rocm_home, hipcc_path)`` from ``ROCM_PATH``/``ROCM_HOME``, torch's guess, or /opt/rocm;
    ``PreflightError`` naming what was tried when hipcc is missing."""
    tried = []
    for home in (env.get("ROCM_PATH"), env.get("ROCM_HOME"), torch_rocm_home, "/opt/rocm"):
        if not home:
            continue
        hipcc = os.path.join(home, "bin", "hipcc")
        tried.append(hipcc)
        if os.access(hipcc, os.X_OK):
            return home, hipcc
    on_path = shutil.which("hipcc", path=env.get("PATH"))
    if on_path:
        return os.path.dirname(os.path.dirname(os.path.realpath(on_path))), on_path
    raise PreflightError(
        "HIP build requested but hipcc was not found (looked at "
        + (", ".join(tried) or "no ROCM_PATH")
        + " and PATH). Fix: install ROCm and set ROCM_PATH to its root (e.g. ROCM_PATH=/opt/rocm-6.2.0), "
        "or unset HIP_BUILD for a CUDA/CPU build."
    )


_BF16_UNPATCHED = re.compile(
    r"^\s*(?:__BF16_HOST_DEVICE__|__BF16_DEVICE__|__device__|__host__\s+__device__)\s+"
    r"(?!static\b|inline\b)[\w:<>]+\s+\**\s*\w+\s*\(",
    re.MULTILINE,
)


def rocm_bf16_header_needs_patch(text: str) -> bool:
    """True when ROCm 6.0's ``amd_hip_bf16.h`` defines functions without ``static``/``inline``
    (ROCm/hip issue 3403: "multiple definition" at link time when two translation units include it)."""
    return bool(_BF16_UNPATCHED.search(text))


def check_rocm_bf16_header(rocm_home: str, rocm: Tuple[int, int]) -> None:
    """On ROCm 6.0, fail early when the bf16 header still needs its known patch."""
    if tuple(rocm) != (6, 0):
        return
    header = os.path.join(rocm_home, "include", "hip", "amd_detail", "amd_hip_bf16.h")
    try:
        with open(header, errors="replace") as f:
            text = f.read()
    except OSError:
        return
    if rocm_bf16_header_needs_patch(text):
        raise PreflightError(
            f"ROCm 6.0's {header} defines its bf16 functions without 'static inline', so the bf16 kernels "
            "(two translation units include it) fail to link with 'multiple definition' errors (ROCm/hip "
            "issue 3403, fixed in later ROCm). Fix: upgrade to ROCm 6.1 or newer, or patch the header so "
            "every __BF16_DEVICE__/__BF16_HOST_DEVICE__ function is 'static inline'."
        )


def resolve_gfx_archs(env, rocm: Optional[Tuple[int, int]]) -> Tuple[Tuple[str, ...], str]:
    """``PYTORCH_ROCM_ARCH`` > ``HIP_ARCHITECTURES`` > a default list (never "native")."""
    for name in ("PYTORCH_ROCM_ARCH", "HIP_ARCHITECTURES"):
        text = str(env.get(name, "")).strip()
        if text:
            try:
                return archs.parse_gfx_list(text), name
            except ValueError as e:
                raise PreflightError(f"{name}={text!r}: {e}") from None
    return archs.default_gfx_archs(rocm), "default"


# ----------------------------------------------------------------------------- torch
@dataclass
class TorchInfo:
    """What the build needs from torch (filled by ``probe_torch``; tests pass their own)."""

    build: "versions.TorchBuild"
    arch_list: List[str] = field(default_factory=list)
    cuda_home: Optional[str] = None
    rocm_home: Optional[str] = None


def probe_torch(need: str) -> TorchInfo:
    """Import torch (never initialising CUDA). ``PreflightError`` when torch is absent, with the
    build-isolation fix; ``need`` names what asked for it."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise PreflightError(
            f"{need} needs torch in the build environment, but it cannot be imported ({e}). pip builds in "
            "an isolated environment without torch: install torch first, then build with "
            "'pip install --no-build-isolation .' (or 'pip install --no-build-isolation mamba-ssm')."
        ) from None
    import torch.utils.cpp_extension as cpp_extension

    build = versions.TorchBuild.from_torch(torch)
    arch_list: List[str] = []
    if build.cuda:
        try:
            arch_list = list(torch.cuda.get_arch_list()) or torch._C._cuda_getArchFlags().split()
        except Exception:
            arch_list = []
    return TorchInfo(
        build=build,
        arch_list=arch_list,
        cuda_home=getattr(cpp_extension, "CUDA_HOME", None),
        rocm_home=getattr(cpp_extension, "ROCM_HOME", None),
    )


# ----------------------------------------------------------------------------- the configuration
@dataclass
class BuildConfig:
    """Everything a source build of ``mamba_ssm._C`` uses, resolved from the environment."""

    version: str
    torch: "versions.TorchBuild"
    kernels: Tuple[str, ...]  # ("cpu",), ("cpu", "cuda") or ("cpu", "hip")
    cxx11_abi: bool
    force_cxx11_abi: bool
    max_jobs: int
    sources: List[str]
    define_macros: List[Tuple[str, Optional[str]]]
    cxx_flags: List[str]
    gpu_flags: List[str]
    cuda_home: Optional[str] = None
    nvcc: Optional[Tuple[int, int]] = None
    arch_spec: Optional["archs.ArchSpec"] = None
    arch_source: Optional[str] = None
    nvcc_threads: Optional[int] = None
    rocm_home: Optional[str] = None
    hipcc: Optional[Tuple[int, int]] = None
    gfx_archs: Tuple[str, ...] = ()
    gfx_source: Optional[str] = None
    ninja: Optional[str] = None
    notes: List[str] = field(default_factory=list)

    @property
    def gpu(self) -> Optional[str]:
        return "cuda" if "cuda" in self.kernels else ("hip" if "hip" in self.kernels else None)

    def build_info(self, git_commit: Optional[str] = None, platform: Optional[str] = None):
        """The ``BuildInfo`` this configuration writes into ``mamba_ssm_build_info.h``."""
        return buildinfo.BuildInfo(
            package_version=self.version,
            torch_version=self.torch.version,
            torch_cuda=self.torch.cuda,
            torch_hip=self.torch.hip,
            nvcc_version=f"{self.nvcc[0]}.{self.nvcc[1]}" if self.nvcc else None,
            hipcc_version=f"{self.hipcc[0]}.{self.hipcc[1]}" if self.hipcc else None,
            cxx11_abi=self.cxx11_abi,
            sass_archs=list(self.arch_spec.sass) if self.arch_spec else [],
            ptx_archs=list(self.arch_spec.ptx) if self.arch_spec else [],
            gfx_archs=list(self.gfx_archs),
            python_tag=f"{PYTHON_TAG}-abi3",
            platform=platform or sysconfig.get_platform(),
            git_commit=git_commit,
            kernels=list(self.kernels),
        )


def list_sources(root: str = ROOT, gpu: bool = False) -> List[str]:
    """``csrc/*.cpp`` (always) and ``csrc/*.cu`` (GPU builds), relative to ``root``, sorted."""
    names = sorted(os.listdir(os.path.join(root, CSRC))) if os.path.isdir(os.path.join(root, CSRC)) else []
    exts = (".cpp", ".cu") if gpu else (".cpp",)
    return [f"{CSRC}/{n}" for n in names if n.endswith(exts)]


def resolve_config(env=None, torch_info: Optional[TorchInfo] = None, root: str = ROOT) -> BuildConfig:
    """Run the preflight and resolve the source-build configuration from ``env`` (default
    ``os.environ``). Raises ``PreflightError`` (one paragraph: the value and the fix) on the first
    problem, before anything is compiled."""
    env = os.environ if env is None else env
    version = package_version(env)
    if torch_info is None:
        torch_info = probe_torch("a source build of mamba_ssm._C")
    t = torch_info.build
    ninja = check_ninja(env)
    notes: List[str] = []
    if env_flag(env, "MAMBA_KEEP_CUDA_BUILD"):
        notes.append("MAMBA_KEEP_CUDA_BUILD is accepted and has no effect (the build dir is always kept).")

    hip_requested = env_flag(env, "HIP_BUILD")
    cuda_requested = bool(str(env.get("MAMBA_CUDA_ARCHS", "")).strip())
    torch_list_set = bool(str(env.get("TORCH_CUDA_ARCH_LIST", "")).strip())
    if hip_requested and not t.hip:
        raise PreflightError(
            f"HIP_BUILD=1 but torch {t.version} is not a ROCm build (torch.version.hip is None). Fix: "
            "install a ROCm torch (e.g. pip install torch --index-url https://download.pytorch.org/whl/rocm6.2), "
            "or unset HIP_BUILD."
        )
    if t.hip:
        gpu = "hip"
    elif t.cuda:
        gpu = "cuda"
    else:
        gpu = None
        if cuda_requested or torch_list_set:
            name = "MAMBA_CUDA_ARCHS" if cuda_requested else "TORCH_CUDA_ARCH_LIST"
            raise PreflightError(
                f"{name}={env.get(name)!r} asks for a CUDA build, but torch {t.version} is CPU-only "
                "(torch.version.cuda is None). Fix: install a CUDA torch (e.g. pip install torch "
                "--index-url https://download.pytorch.org/whl/cu126), or unset "
                f"{name} to build the CPU kernel alone."
            )

    force_abi = env_flag(env, "MAMBA_FORCE_CXX11_ABI")
    cxx11_abi = True if force_abi else (t.cxx11_abi if t.cxx11_abi is not None else True)
    max_jobs = _positive_int(env, "MAX_JOBS", default_max_jobs())
    define_macros: List[Tuple[str, Optional[str]]] = []
    # Python's CFLAGS carry -g: debug info for torch's templates costs compile time and megabytes.
    debug = env_flag(env, "MAMBA_DEBUG_BUILD")
    cxx_flags = ["-O3", "-g" if debug else "-g0"]
    gpu_flags: List[str] = ["-O3"] + (["-lineinfo"] if debug else [])
    if force_abi:
        cxx_flags.append("-D_GLIBCXX_USE_CXX11_ABI=1")
    cfg = BuildConfig(
        version=version, torch=t, kernels=("cpu",), cxx11_abi=bool(cxx11_abi), force_cxx11_abi=force_abi,
        max_jobs=max_jobs, sources=list_sources(root, gpu=False), define_macros=define_macros,
        cxx_flags=cxx_flags, gpu_flags=gpu_flags, ninja=ninja, notes=notes,
    )

    if gpu == "cuda":
        home, nvcc_path = locate_cuda(torch_info.cuda_home, env)
        nvcc, _ = nvcc_version_of(nvcc_path)
        check_nvcc_matches_torch(nvcc, t.cuda, nvcc_path)
        check_host_compiler(home, nvcc, env)
        spec, source = resolve_cuda_archs(env, torch_info.arch_list, nvcc)
        threads = _positive_int(env, "NVCC_THREADS", max(1, min(4, len(spec.sass) + len(spec.ptx))))
        gpu_flags += archs.gencode_flags(spec)
        gpu_flags += [  # torch's cpp_extension adds --expt-relaxed-constexpr and the -D__CUDA_NO_* we undo
            "-U__CUDA_NO_HALF_OPERATORS__",
            "-U__CUDA_NO_HALF_CONVERSIONS__",
            "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
            "-U__CUDA_NO_HALF2_OPERATORS__",
            f"--threads={threads}",
        ]
        if force_abi:
            gpu_flags.append("-Xcompiler=-D_GLIBCXX_USE_CXX11_ABI=1")
        define_macros.append(("MAMBA_SSM_WITH_CUDA", None))
        cfg.kernels = ("cpu", "cuda")
        cfg.cuda_home, cfg.nvcc, cfg.arch_spec, cfg.arch_source, cfg.nvcc_threads = home, nvcc, spec, source, threads
        cfg.sources = list_sources(root, gpu=True)
    elif gpu == "hip":
        try:
            rocm = versions.parse_rocm_version(t.hip)
        except ValueError as e:
            raise PreflightError(f"torch.version.hip: {e}") from None
        rocm_home, hipcc_path = locate_rocm(env, torch_info.rocm_home)
        rc, out = _run([hipcc_path, "--version"])
        try:
            hipcc = versions.parse_hipcc_version(out)
        except ValueError as e:
            raise PreflightError(f"{hipcc_path} --version (exit {rc}): {e}") from None
        if hipcc[:2] != rocm[:2]:
            notes.append(f"hipcc is ROCm {hipcc[0]}.{hipcc[1]} but torch was built with ROCm {rocm[0]}.{rocm[1]}.")
        check_rocm_bf16_header(rocm_home, hipcc)
        gfx, source = resolve_gfx_archs(env, rocm)
        gpu_flags += [f"--offload-arch={g}" for g in gfx]
        if force_abi:
            gpu_flags.append("-D_GLIBCXX_USE_CXX11_ABI=1")
        define_macros += [("MAMBA_SSM_WITH_CUDA", None), ("MAMBA_SSM_HIP", None)]
        cfg.kernels = ("cpu", "hip")
        cfg.rocm_home, cfg.hipcc, cfg.gfx_archs, cfg.gfx_source = rocm_home, hipcc, gfx, source
        cfg.sources = list_sources(root, gpu=True)
    if not cfg.sources:
        raise PreflightError(
            f"no C++ sources in {os.path.join(root, CSRC)}: this checkout or sdist is incomplete. Fix: use a "
            "complete sdist or git checkout, or MAMBA_SKIP_CUDA_BUILD=TRUE for the pure-Python package."
        )
    return cfg


def git_commit(root: str = ROOT) -> Optional[str]:
    """The checkout's commit (``MAMBA_GIT_COMMIT`` overrides; None outside git)."""
    if os.environ.get("MAMBA_GIT_COMMIT"):
        return os.environ["MAMBA_GIT_COMMIT"]
    if not os.path.exists(os.path.join(root, ".git")):
        return None
    rc, out = _run(["git", "-C", root, "rev-parse", "HEAD"], timeout=20)
    out = out.strip()
    return out if rc == 0 and re.fullmatch(r"[0-9a-f]{40}", out) else None


def write_if_changed(path: str, text: str) -> bool:
    """Write ``text`` to ``path`` (atomically) unless it already holds it; True when written."""
    try:
        with open(path) as f:
            if f.read() == text:
                return False
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return True


# ----------------------------------------------------------------------------- the resolver hook
def load_setup_hook(env) -> Optional[types.ModuleType]:
    """``mamba_ssm/_install/setup_hook.py`` (or the file ``MAMBA_SETUP_HOOK`` names), loaded by path;
    None when absent."""
    override = env.get("MAMBA_SETUP_HOOK")
    if override:
        if not os.path.isfile(override):
            raise PreflightError(f"MAMBA_SETUP_HOOK={override!r} does not exist; unset it or point it at a file")
        return _load_file(override, "_mamba_ssm_setup_hook_override")
    if not os.path.isfile(os.path.join(ROOT, PACKAGE, "_install", "setup_hook.py")):
        return None
    return _bypath("_install.setup_hook")


FALLBACKS = ("auto", "source", "python", "error")


@dataclass
class Plan:
    """What this setup.py run builds: ``mode`` is ``prebuilt``, ``source``, ``python`` or ``metadata``."""

    mode: str
    config: Optional[BuildConfig] = None
    prebuilt_wheel: Optional[str] = None
    outcome: object = None
    hook: Optional[types.ModuleType] = None
    reason: str = ""
    final_mode: str = ""  # what the resolver records: prebuilt | deferred | source | python | error
    install_id: str = ""  # written into the wheel's dist-info and the record (doctor matches them)

    def __post_init__(self):
        self.final_mode = self.final_mode or self.mode


def _fallback(env, outcome_msg: str, root: str = ROOT) -> Plan:
    choice = str(env.get("MAMBA_FALLBACK", "auto")).strip().lower() or "auto"
    if choice not in FALLBACKS:
        raise PreflightError(f"MAMBA_FALLBACK={choice!r} is not one of {', '.join(FALLBACKS)}")
    if choice == "error":
        raise PreflightError(
            (outcome_msg + " " if outcome_msg else "")
            + "MAMBA_FALLBACK=error: no prebuilt kernel wheel and no fallback allowed. Fix: set "
            "MAMBA_FALLBACK=source (build from source) or MAMBA_FALLBACK=python (pure-Python package)."
        )
    if choice == "python":
        return Plan("python", reason="MAMBA_FALLBACK=python")
    if choice == "source":
        return Plan("source", config=resolve_config(env, root=root), reason="MAMBA_FALLBACK=source")
    try:
        return Plan("source", config=resolve_config(env, root=root), reason="MAMBA_FALLBACK=auto: preflight passed")
    except PreflightError as e:
        return Plan("python", reason=f"MAMBA_FALLBACK=auto: the source build cannot run here: {e}")


BOTH_FLAGS_WARNING = (
    "both MAMBA_FORCE_BUILD=TRUE and MAMBA_SKIP_CUDA_BUILD=TRUE are set: MAMBA_SKIP_CUDA_BUILD wins, so "
    "this builds the pure-Python wheel without kernels and nothing is compiled or downloaded. To build "
    "the kernels from source, unset MAMBA_SKIP_CUDA_BUILD; to silence this, unset MAMBA_FORCE_BUILD."
)


def plan_build(kind: str, env=None, root: str = ROOT) -> Plan:
    """Decide what to build for a command ``kind`` (``classify_commands``). Raises ``PreflightError``."""
    env = os.environ if env is None else env
    if kind == "metadata":
        return Plan("metadata")
    if env_flag(env, "MAMBA_SKIP_CUDA_BUILD"):
        reason = "MAMBA_SKIP_CUDA_BUILD=TRUE"
        if env_flag(env, "MAMBA_FORCE_BUILD"):
            reason += " (" + BOTH_FLAGS_WARNING + ")"
            print(f"mamba-ssm: warning: {BOTH_FLAGS_WARNING}", file=sys.stderr, flush=True)
        return _requested(Plan("python", reason=reason), kind, env)
    if env_flag(env, "MAMBA_FORCE_BUILD"):
        plan = _requested(Plan("source", reason="MAMBA_FORCE_BUILD=TRUE"), kind, env)
        try:
            probe_torch("MAMBA_FORCE_BUILD=TRUE")  # fail at once under build isolation
            plan.config = resolve_config(env, root=root)
        except PreflightError as e:
            details = getattr(plan.outcome, "details", None)
            if isinstance(details, dict) and isinstance(details.get("record"), dict):
                details["record"]["message"] = f"{details['record'].get('message', '')} The build failed: {e}"
            _record(plan.hook, plan.outcome, "error")
            raise
        return plan
    if kind == "source":
        return Plan("source", config=resolve_config(env, root=root), reason=f"setup.py {kind} command")
    if kind == "editable":
        return _fallback(env, "", root)
    hook = load_setup_hook(env)
    if hook is None:
        plan = _fallback(env, "", root)
        plan.reason += " (no resolver hook in this checkout)"
        return plan
    outcome = hook.resolve_prebuilt(package_version(env))
    wheel = getattr(outcome, "wheel_path", None)
    if wheel:
        if not os.path.isfile(wheel):
            raise PreflightError(f"the resolver returned {wheel!r}, which does not exist")
        plan = Plan("prebuilt", prebuilt_wheel=os.fspath(wheel), reason="prebuilt wheel found")
    elif getattr(outcome, "deferred", False):
        plan = Plan("python", reason="deferred: torch is being installed by the same command",
                    final_mode="deferred")
    else:
        try:
            plan = _fallback(env, str(getattr(outcome, "message", "") or ""), root)
        except PreflightError:
            _record(hook, outcome, "error")
            raise
    plan.outcome, plan.hook = outcome, hook
    return plan


def _requested(plan: Plan, kind: str, env) -> Plan:
    """A wheel whose mode the user asked for (SKIP / FORCE) is recorded too, through the hook's
    ``requested`` Outcome (doctor must not show an earlier install's decision for it)."""
    if kind != "wheel":
        return plan
    try:
        hook = load_setup_hook(env)
    except PreflightError:
        return plan
    make = getattr(hook, "requested", None) if hook is not None else None
    if make is not None:
        plan.hook, plan.outcome = hook, make(package_version(env), plan.mode, plan.reason)
    return plan


def _record(hook, outcome, final_mode: str, install_id: str = "") -> None:
    record = getattr(hook, "record", None) if hook is not None else None
    if record is None:
        return
    try:
        takes_id = "install_id" in inspect.signature(record).parameters
    except (TypeError, ValueError):
        takes_id = False
    if takes_id:
        record(outcome, final_mode, install_id=install_id or None)
    else:
        record(outcome, final_mode)


def add_install_id(src: str, dest: str, install_id: str) -> str:
    """Copy wheel ``src`` to ``dest`` with ``<dist-info>/mamba_ssm_install.json`` (the install id
    doctor matches with the recorded decision) added to its dist-info and RECORD. Every other entry is
    copied byte for byte (the package files stay the index wheel's). Returns ``dest``."""
    import base64
    import hashlib
    import zipfile

    data = (json.dumps({"install_id": install_id}, sort_keys=True) + "\n").encode("utf-8")
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    tmp = dest + ".part"
    try:
        with zipfile.ZipFile(src) as zin, zipfile.ZipFile(tmp, "w") as zout:
            records = [i.filename for i in zin.infolist() if i.filename.count("/") == 1
                       and i.filename.endswith(".dist-info/RECORD")]
            if len(records) != 1:
                raise PreflightError(f"the prebuilt wheel {src} has no single <name>.dist-info/RECORD")
            dist_info = records[0].rsplit("/", 1)[0]
            new_name = f"{dist_info}/{INSTALL_ID_FILE}"
            for info in zin.infolist():
                if info.filename == new_name:
                    continue
                payload = zin.read(info.filename)
                if info.filename == records[0]:
                    lines = [l for l in payload.decode("utf-8").splitlines()
                             if l and not l.startswith(new_name + ",")]
                    lines.insert(max(0, len(lines) - 1) if lines and lines[-1].startswith(records[0] + ",")
                                 else len(lines), f"{new_name},sha256={digest},{len(data)}")
                    payload = ("\n".join(lines) + "\n").encode("utf-8")
                    extra = zipfile.ZipInfo(new_name, info.date_time)
                    extra.compress_type, extra.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
                    zout.writestr(extra, data)
                zout.writestr(info, payload)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return dest


# ----------------------------------------------------------------------------- commands
def make_cmdclass(plan: Plan) -> Dict[str, type]:
    """The setuptools command classes for ``plan``."""
    cmdclass: Dict[str, type] = {}

    class bdist_wheel(_bdist_wheel):
        def finalize_options(self):
            if plan.mode == "source":
                self.py_limited_api = PYTHON_TAG
            super().finalize_options()

        def write_wheelfile(self, distinfo_path, *args, **kwargs):
            super().write_wheelfile(distinfo_path, *args, **kwargs)
            if plan.install_id:  # RECORD is written afterwards, from the folder's files
                with open(os.path.join(distinfo_path, INSTALL_ID_FILE), "w") as fh:
                    fh.write(json.dumps({"install_id": plan.install_id}, sort_keys=True) + "\n")

        def run(self):
            if plan.hook is not None and not plan.install_id:
                plan.install_id = uuid.uuid4().hex
            if plan.mode == "prebuilt":
                os.makedirs(self.dist_dir, exist_ok=True)
                dest = os.path.join(self.dist_dir, os.path.basename(plan.prebuilt_wheel))
                if plan.install_id:
                    add_install_id(plan.prebuilt_wheel, dest, plan.install_id)
                else:
                    tmp = dest + ".part"
                    shutil.copyfile(plan.prebuilt_wheel, tmp)
                    os.replace(tmp, dest)
                print(f"mamba-ssm: using the prebuilt wheel {plan.prebuilt_wheel}")
            else:
                try:
                    super().run()
                except BaseException:
                    if plan.hook is not None:  # doctor shows why the install has no kernels
                        _record(plan.hook, plan.outcome, "error")
                    raise
            if plan.hook is not None:
                _record(plan.hook, plan.outcome, plan.final_mode, plan.install_id)

    cmdclass["bdist_wheel"] = bdist_wheel
    if plan.mode == "source":
        cmdclass["build_ext"] = make_build_ext(plan.config)
    return cmdclass


def make_build_ext(cfg: BuildConfig) -> type:
    """torch's BuildExtension, writing the build-info header first and honouring the forced ABI."""
    from torch.utils.cpp_extension import BuildExtension

    class build_ext(BuildExtension):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("use_ninja", True)
            super().__init__(*args, **kwargs)

        def build_extensions(self):
            os.environ["MAX_JOBS"] = str(cfg.max_jobs)  # read by torch's ninja driver
            include = os.path.join(os.path.abspath(self.build_temp), "include")
            header = os.path.join(include, "mamba_ssm_build_info.h")
            info = cfg.build_info(git_commit=git_commit())
            write_if_changed(header, buildinfo.render_header(info))
            for ext in self.extensions:
                if include not in ext.include_dirs:
                    ext.include_dirs.insert(0, include)
                if header not in ext.depends:
                    ext.depends.append(header)
            print(
                f"mamba-ssm: building {EXT_NAME} ({'+'.join(cfg.kernels)}) against torch {cfg.torch.version}"
                + (f", nvcc {cfg.nvcc[0]}.{cfg.nvcc[1]}, SASS {','.join(cfg.arch_spec.sass) or '-'}, "
                   f"PTX {','.join(cfg.arch_spec.ptx) or '-'} ({cfg.arch_source})" if cfg.arch_spec else "")
                + (f", gfx {','.join(cfg.gfx_archs)} ({cfg.gfx_source})" if cfg.gfx_archs else "")
                + f", MAX_JOBS={cfg.max_jobs}, cxx11 ABI={int(cfg.cxx11_abi)}"
            )
            for note in cfg.notes:
                print(f"mamba-ssm: {note}")
            super().build_extensions()

        def _add_gnu_cpp_abi_flag(self, extension):  # older torch adds torch's ABI; forced ABI wins
            parent = getattr(super(), "_add_gnu_cpp_abi_flag", None)
            if parent is not None:
                parent(extension)
            if cfg.force_cxx11_abi:
                args = extension.extra_compile_args
                for key in (("cxx", "nvcc") if isinstance(args, dict) else (None,)):
                    flags = args[key] if key else args
                    flags[:] = [f for f in flags if "_GLIBCXX_USE_CXX11_ABI=0" not in f]

    return build_ext


def make_extension(cfg: BuildConfig):
    """The ``mamba_ssm._C`` Extension (py_limited_api, sources, flags) for ``cfg``."""
    from torch.utils import cpp_extension

    kwargs = dict(
        name=EXT_NAME,
        sources=cfg.sources,
        include_dirs=[os.path.join(ROOT, CSRC)],
        define_macros=list(cfg.define_macros),
        py_limited_api=True,
        depends=sorted(glob.glob(os.path.join(CSRC, "*.h")) + glob.glob(os.path.join(CSRC, "*.cuh"))),
    )
    if not hasattr(cpp_extension, "min_supported_cpython"):
        kwargs["define_macros"].append(("Py_LIMITED_API", LIMITED_API_HEX))  # newer torch defines its own
    if cfg.gpu:
        return cpp_extension.CUDAExtension(
            extra_compile_args={"cxx": list(cfg.cxx_flags), "nvcc": list(cfg.gpu_flags)}, **kwargs
        )
    return cpp_extension.CppExtension(extra_compile_args={"cxx": list(cfg.cxx_flags)}, **kwargs)


def setup_kwargs(plan: Plan, version: str) -> dict:
    """Arguments to ``setuptools.setup`` for ``plan``."""
    kw = dict(
        version=version,
        packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
        package_data={PACKAGE: ["_install/*.json", "py.typed"]},
        include_package_data=False,
        zip_safe=False,
        cmdclass=make_cmdclass(plan),
    )
    if plan.mode == "source":
        kw["ext_modules"] = [make_extension(plan.config)]
        kw["options"] = {"bdist_wheel": {"py_limited_api": PYTHON_TAG}}
    return kw


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    os.chdir(ROOT)  # sources and packages are given relative to the project root
    kind = classify_commands(argv)
    try:
        version = package_version(os.environ)
        plan = plan_build(kind)
    except PreflightError as e:
        sys.exit(f"\nmamba-ssm setup.py: {e}\n")
    if plan.reason:
        print(f"mamba-ssm: {plan.mode} build ({plan.reason})")
    setup(**setup_kwargs(plan, version))


if __name__ == "__main__":
    main()
