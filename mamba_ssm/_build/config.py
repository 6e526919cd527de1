"""The preflight of a source build as a whole: ``resolve_config`` turns the environment (``Settings``)
and what torch says about itself (``BuildTorch``) into the one ``BuildConfig`` the build uses: kernels,
sources, flags, toolkit, GPU targets. torch is imported only by ``probe_torch``.
"""

from __future__ import annotations

import os
import re
import sysconfig
from dataclasses import dataclass, field
from typing import Any, List, Mapping, Optional, Tuple

from .._compat import archs, buildinfo, versions
from . import toolkit
from .errors import PreflightError
from .settings import (
    CSRC,
    FALSE_VALUES,
    ROOT,
    TRUE_VALUES,
    Settings,
    default_max_jobs,
    package_version,
    spellings,
)

# The limited API setup.py targets when torch defines none itself (torch < 2.7): Python 3.9, the
# lower bound of requires-python. torch >= 2.7 compiles py_limited_api extensions with
# -DPy_LIMITED_API=torch.utils.cpp_extension.min_supported_cpython (pytorch/pytorch#145764; torch 2.14:
# "0x030A0000"), its own lowest Python; the wheel's abi3 tag follows whichever is in force.
LIMITED_API_HEX = "0x03090000"


def limited_api_tag(hex_text: str) -> str:
    """The wheel's Python tag for a ``Py_LIMITED_API`` value: ``"0x030A0000"`` -> ``"cp310"``.

    The value is ``0xMMmm0000`` (PY_VERSION_HEX layout, major in the top byte, minor in the next:
    https://docs.python.org/3/c-api/apiabiversion.html). Raises ``PreflightError`` naming the value
    when it is not a CPython 3 version.
    """
    try:
        value = int(str(hex_text), 0)
    except ValueError:
        value = -1
    major, minor = (value >> 24) & 0xFF, (value >> 16) & 0xFF
    if value < 0 or major != 3:
        raise PreflightError(
            f"Py_LIMITED_API={hex_text!r} is not a CPython 3 version (expected e.g. 0x030A0000 for 3.10): "
            "torch.utils.cpp_extension.min_supported_cpython is unreadable; upgrade or reinstall torch"
        )
    return f"cp{major}{minor}"


@dataclass
class BuildTorch:
    """What the build needs from the torch it compiles against (filled by ``probe_torch``; tests pass
    their own)."""

    build: versions.TorchBuild
    arch_list: List[str] = field(default_factory=list)
    cuda_home: Optional[str] = None
    rocm_home: Optional[str] = None
    # torch.utils.cpp_extension.min_supported_cpython when torch defines Py_LIMITED_API itself (>= 2.7)
    limited_api: Optional[str] = None


def _no_isolation_fix() -> str | None:
    """The pinned, torch-safe command (:mod:`mamba_ssm._advice`) for this source tree's version; None
    for a development version, which no index has (only its source tree builds it)."""
    from .._advice import is_on_an_index, no_isolation_command
    from .._version import __version__

    return no_isolation_command(__version__) if is_on_an_index(__version__) else None


_CHECKOUT_NO_ISOLATION = "python -m pip install --no-build-isolation --no-deps ."


def _broken_torch(need: str, exc: BaseException, torch: Any = None) -> str:
    where = getattr(torch, "__file__", None) or "the environment"
    version = getattr(torch, "__version__", None)
    return (
        f"{need} needs a working torch, but the torch in {where}"
        + (f" ({version})" if version else "")
        + f" is broken or incomplete ({type(exc).__name__}: {exc}). Fix: reinstall the torch you use "
        '(same version and index) until `python -c "import torch.utils.cpp_extension"` works.'
    )


def probe_torch(need: str) -> BuildTorch:
    """Import torch (never initialising CUDA). ``PreflightError`` when torch is absent, with the
    build-isolation fix; ``need`` names what asked for it."""
    try:
        import torch
    except ImportError as e:
        if getattr(e, "name", None) not in (None, "torch"):  # torch is there but one of its imports fails
            raise PreflightError(_broken_torch(need, e)) from None
        fix = _no_isolation_fix()
        raise PreflightError(
            f"{need} needs torch in the build environment, but it cannot be imported ({e}). pip builds in "
            "an isolated environment without torch: install torch first, then build against it with "
            + (
                f"'{fix}' (from a source checkout: '{_CHECKOUT_NO_ISOLATION}')."
                if fix
                else f"'{_CHECKOUT_NO_ISOLATION}' in the source checkout (no package index has a "
                "development version)."
            )
        ) from None
    except Exception as e:  # noqa: BLE001 - a torch that fails while importing (a missing library, ...)
        raise PreflightError(_broken_torch(need, e)) from None
    try:
        from torch.utils import cpp_extension

        build = versions.TorchBuild.from_torch(torch)
    except Exception as e:  # noqa: BLE001 - no torch.utils, no torch.version, an odd version string
        raise PreflightError(_broken_torch(need, e, torch)) from None
    arch_list: List[str] = []
    if build.cuda:
        try:
            arch_list = list(torch.cuda.get_arch_list()) or (torch._C._cuda_getArchFlags() or "").split()
        except Exception:  # noqa: BLE001
            arch_list = []
    return BuildTorch(
        build=build,
        arch_list=arch_list,
        cuda_home=getattr(cpp_extension, "CUDA_HOME", None),
        rocm_home=getattr(cpp_extension, "ROCM_HOME", None),
        limited_api=getattr(cpp_extension, "min_supported_cpython", None),
    )


# ----------------------------------------------------------------------------- the torch ABI


def stable_abi_hex(floor: str) -> str:
    """``TORCH_TARGET_VERSION`` for a floor: ``"2.10"`` -> ``"0x020a000000000000"`` (torch's
    ``[major][minor][patch][5 bytes ABI tag]`` layout, torch/headeronly/version.h)."""
    major, minor = buildinfo.parse_floor(floor)
    return f"0x{major:02x}{minor:02x}000000000000"


def resolve_torch_abi(
    raw: str, torch: versions.TorchBuild, gpu: Optional[str]
) -> Tuple[versions.TorchAbi, Optional[str], str]:
    """``MAMBA_TORCH_STABLE_ABI`` (``raw``) -> (``TorchAbi.STABLE`` | ``CLASSIC``, the floor or None, why).

    Unset: the stable-ABI binding with floor ``buildinfo.STABLE_ABI_MIN_FLOOR`` (2.10) when the build
    torch is at least that and the build has no HIP kernels, else classic. A false spelling
    (``settings.FALSE_VALUES``: ``0``/``FALSE``/``NO``/``OFF``, any case): classic. A true one
    (``settings.TRUE_VALUES``: ``1``/``TRUE``/``YES``/``ON``): stable at the default floor. ``X.Y``: stable at that floor,
    which must be >= 2.10 and <= the build torch. Raises ``PreflightError`` naming the value otherwise,
    or when a stable build is asked of a ROCm build (the stable binding registers no HIP kernels).
    """
    low = buildinfo.parse_floor(buildinfo.STABLE_ABI_MIN_FLOOR)
    have = tuple(torch.release[:2])
    value = raw.strip()
    if not value:
        if have < low:
            return (
                versions.TorchAbi.CLASSIC,
                None,
                f"torch {torch.version} is older than {buildinfo.STABLE_ABI_MIN_FLOOR}",
            )
        if gpu == "hip":
            return versions.TorchAbi.CLASSIC, None, "the stable-ABI binding has no HIP kernels"
        return versions.TorchAbi.STABLE, buildinfo.STABLE_ABI_MIN_FLOOR, "the default for torch >= 2.10"
    if value.upper() in FALSE_VALUES:
        return versions.TorchAbi.CLASSIC, None, f"MAMBA_TORCH_STABLE_ABI={value}"
    floor = buildinfo.STABLE_ABI_MIN_FLOOR if value.upper() in TRUE_VALUES else value
    try:
        want = buildinfo.parse_floor(floor)
    except ValueError:
        want = None
    if want is None or want < low:
        raise PreflightError(
            f"MAMBA_TORCH_STABLE_ABI={raw!r} is not a stable-ABI floor: set it to a torch version "
            f"MAJOR.MINOR >= {buildinfo.STABLE_ABI_MIN_FLOOR} (e.g. MAMBA_TORCH_STABLE_ABI="
            f"{buildinfo.STABLE_ABI_MIN_FLOOR}), to a boolean ({spellings()}: true is stable with floor "
            f"{buildinfo.STABLE_ABI_MIN_FLOOR}, false the classic binding), or unset it (stable with floor "
            f"{buildinfo.STABLE_ABI_MIN_FLOOR} for torch >= {buildinfo.STABLE_ABI_MIN_FLOOR}, else classic)"
        )
    floor = f"{want[0]}.{want[1]}"
    if want > have:
        raise PreflightError(
            f"MAMBA_TORCH_STABLE_ABI={raw!r} asks for a stable-ABI floor of torch {floor}, newer than the torch "
            f"building it ({torch.version}): a floor can be older than the build torch, never newer. Fix: "
            f"set MAMBA_TORCH_STABLE_ABI to at most {torch.major_minor}, or build with torch >= {floor}"
        )
    if gpu == "hip":
        raise PreflightError(
            f"MAMBA_TORCH_STABLE_ABI={raw!r} asks for the stable-ABI binding, which has no HIP kernels; a "
            "ROCm build uses the classic binding. Fix: unset MAMBA_TORCH_STABLE_ABI or set it to 0"
        )
    return versions.TorchAbi.STABLE, floor, f"MAMBA_TORCH_STABLE_ABI={value}"


def resolve_stable_cuda_major(
    raw: str, torch_abi: versions.TorchAbi, torch_cuda: str, nvcc: Tuple[int, int], nvcc_path: str
) -> Optional[str]:
    """Check nvcc's CUDA major against the module's: ``MAMBA_STABLE_CUDA_MAJOR`` (``raw``) when set, else
    torch's (``torch.version.cuda``). Returns a note for the build log when the two differ, else None.

    Invariant: a stable-ABI module reaches torch only through the LibTorch stable C shim, so the CUDA of
    the torch whose headers compile it does not matter; its kernels and the CUDA runtime it links
    (``libcudart.so.<nvcc major>``) are nvcc's, and the build info's ``nvcc_version`` says which torches
    may load it (``BuildInfo.cuda_runtime_version``). A classic module links torch's CUDA libraries: nvcc's
    major must be torch's. Raises ``PreflightError`` naming the value and the fix: ``raw`` not a CUDA
    major, set for a classic build, or not nvcc's major; unset and nvcc's major is not torch's.
    """
    value = raw.strip()
    if not value:
        toolkit.check_nvcc_matches_torch(nvcc, torch_cuda, nvcc_path)
        return None
    if not value.isdigit() or int(value) < 1:
        raise PreflightError(
            f"MAMBA_STABLE_CUDA_MAJOR={raw!r} is not a CUDA major version: set it to e.g. 12 (the CUDA of "
            "the torches the stable-ABI module is for, which nvcc must be) or unset it (torch's CUDA major)"
        )
    if torch_abi != versions.TorchAbi.STABLE:
        raise PreflightError(
            f"MAMBA_STABLE_CUDA_MAJOR={value} applies to a stable-ABI build only; this build uses the classic "
            "binding, which links torch's CUDA libraries (nvcc's CUDA major must be torch's). Fix: unset "
            "MAMBA_STABLE_CUDA_MAJOR, or build the stable-ABI binding (unset MAMBA_TORCH_STABLE_ABI, torch >= "
            f"{buildinfo.STABLE_ABI_MIN_FLOOR})"
        )
    if nvcc[0] != int(value):
        raise PreflightError(
            f"MAMBA_STABLE_CUDA_MAJOR={value} but nvcc ({nvcc_path}) is CUDA {nvcc[0]}.{nvcc[1]}: the module's "
            f"kernels and CUDA runtime are nvcc's. Fix: set CUDA_HOME to a CUDA {value}.x toolkit, or set "
            f"MAMBA_STABLE_CUDA_MAJOR={nvcc[0]}"
        )
    t_major, _ = versions.parse_cuda_version(torch_cuda)
    if t_major == nvcc[0]:
        return None
    return (
        f"stable-ABI module for CUDA {value} (nvcc {nvcc[0]}.{nvcc[1]}, libcudart.so.{value}) compiled with the "
        f"headers of a CUDA {torch_cuda} torch: it loads under CUDA {value} torches only "
        "(MAMBA_STABLE_CUDA_MAJOR)"
    )


def torch_requirement(cfg: BuildConfig) -> str:
    """The wheel's requirement on torch: ``torch>=2.10`` for a stable-ABI build (every torch from its
    floor on), ``torch==2.14.*`` for a classic one (its torch minor), or ``torch==<public version>`` for a
    classic build against a pre-release / nightly / NGC / source torch (only that build fits)."""
    if cfg.torch_abi == versions.TorchAbi.STABLE:
        return f"torch>={cfg.torch_abi_floor}"
    if cfg.torch.needs_exact_match:
        return f"torch=={cfg.torch.parsed.public}"
    return f"torch=={cfg.torch.major_minor}.*"


# ----------------------------------------------------------------------------- the configuration
@dataclass
class BuildConfig:
    """Everything a source build of ``mamba_ssm._C`` uses, resolved from the environment."""

    version: str
    torch: versions.TorchBuild
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
    arch_spec: Optional[archs.ArchSpec] = None
    arch_source: Optional[str] = None
    nvcc_threads: Optional[int] = None
    rocm_home: Optional[str] = None
    hipcc: Optional[Tuple[int, int]] = None
    gfx_archs: Tuple[str, ...] = ()
    gfx_source: Optional[str] = None
    ninja: Optional[str] = None
    notes: List[str] = field(default_factory=list)
    limited_api: str = LIMITED_API_HEX  # the Py_LIMITED_API the module is compiled for
    torch_defines_limited_api: bool = False  # torch's cpp_extension passes -DPy_LIMITED_API itself
    torch_abi: versions.TorchAbi = versions.TorchAbi.CLASSIC  # the binding: ATen or the LibTorch stable ABI
    torch_abi_floor: Optional[str] = None  # the stable ABI's lowest torch, e.g. "2.10"

    @property
    def python_tag(self) -> str:
        """The wheel's Python tag (``cp310`` for ``Py_LIMITED_API=0x030A0000``); the ABI tag is abi3."""
        return limited_api_tag(self.limited_api)

    @property
    def gpu(self) -> Optional[str]:
        return "cuda" if "cuda" in self.kernels else ("hip" if "hip" in self.kernels else None)

    def build_info(
        self, git_commit: Optional[str] = None, platform: Optional[str] = None
    ) -> buildinfo.BuildInfo:
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
            python_tag=f"{self.python_tag}-abi3",
            platform=platform or sysconfig.get_platform(),
            git_commit=git_commit,
            kernels=list(self.kernels),
            torch_abi=self.torch_abi,
            torch_abi_floor=self.torch_abi_floor,
        )


def list_sources(root: str = ROOT, gpu: bool = False) -> List[str]:
    """``csrc/*.cpp`` (always) and ``csrc/*.cu`` (GPU builds), relative to ``root``, sorted."""
    names = sorted(os.listdir(os.path.join(root, CSRC))) if os.path.isdir(os.path.join(root, CSRC)) else []
    exts = (".cpp", ".cu") if gpu else (".cpp",)
    return [f"{CSRC}/{n}" for n in names if n.endswith(exts)]


def resolve_config(
    env: Optional[Mapping[str, str]] = None,
    torch_info: Optional[BuildTorch] = None,
    root: str = ROOT,
    cpu_only: bool = False,
) -> BuildConfig:
    """Run the preflight and resolve the source-build configuration from ``env`` (default
    ``os.environ``). Raises ``PreflightError`` (one paragraph: the value and the fix) on the first
    problem, before anything is compiled. ``cpu_only``: the CPU kernel alone, whatever torch's
    accelerator (the auto fallback on a machine without a GPU: only a C++ compiler needed)."""
    env = os.environ if env is None else env
    s = Settings.from_env(env)
    s.check_flags()
    version = package_version(env)
    if torch_info is None:
        torch_info = probe_torch("a source build of mamba_ssm._C")
    t = torch_info.build
    ninja = toolkit.check_ninja(env)
    notes: List[str] = []
    if s.keep_cuda_build:
        notes.append("MAMBA_KEEP_CUDA_BUILD is accepted and has no effect (the build dir is always kept).")

    cuda_requested, torch_list_set = bool(s.cuda_archs), bool(s.torch_cuda_arch_list)
    if s.hip_build and not t.hip:
        raise PreflightError(
            f"HIP_BUILD=1 but torch {t.version} is not a ROCm build (torch.version.hip is None). Fix: "
            "install a ROCm torch (e.g. pip install torch --index-url https://download.pytorch.org/whl/rocm6.2), "
            "or unset HIP_BUILD."
        )
    if cpu_only:
        gpu = None
    elif t.hip:
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

    force_abi = s.force_cxx11_abi
    cxx11_abi = True if force_abi else (t.cxx11_abi if t.cxx11_abi is not None else True)
    max_jobs = s.max_jobs_or(default_max_jobs())
    define_macros: List[Tuple[str, Optional[str]]] = []
    # Python's CFLAGS carry -g: debug info for torch's templates costs compile time and megabytes.
    debug = s.debug_build
    cxx_flags = ["-O3", "-g" if debug else "-g0"]
    gpu_flags: List[str] = ["-O3"] + (["-lineinfo"] if debug else [])
    if force_abi:
        cxx_flags.append("-D_GLIBCXX_USE_CXX11_ABI=1")
    cfg = BuildConfig(
        version=version,
        torch=t,
        kernels=("cpu",),
        cxx11_abi=bool(cxx11_abi),
        force_cxx11_abi=force_abi,
        max_jobs=max_jobs,
        sources=list_sources(root, gpu=False),
        define_macros=define_macros,
        cxx_flags=cxx_flags,
        gpu_flags=gpu_flags,
        ninja=ninja,
        notes=notes,
        limited_api=torch_info.limited_api or LIMITED_API_HEX,
        torch_defines_limited_api=bool(torch_info.limited_api),
    )
    limited_api_tag(cfg.limited_api)  # an unreadable value fails here, before compiling
    cfg.torch_abi, floor, why = resolve_torch_abi(s.torch_stable_abi, t, gpu)
    cfg.torch_abi_floor = floor
    if floor is not None:
        # Only stable torch headers compile (any other #errors), and only the floor's API is visible.
        define_macros += [
            ("MAMBA_SSM_STABLE_ABI", None),
            ("TORCH_TARGET_VERSION", stable_abi_hex(floor)),
        ]
        cxx_flags.append("-fvisibility=hidden")  # torch::stable types are hidden; ours hold them
        notes.append(f"stable-ABI binding for torch >= {floor} ({why})")
    else:
        notes.append(f"classic binding for torch {t.major_minor} ({why})")

    if gpu == "cuda":
        home, nvcc_path = toolkit.locate_cuda(torch_info.cuda_home, env)
        nvcc, _ = toolkit.nvcc_version_of(nvcc_path)
        cross = resolve_stable_cuda_major(s.stable_cuda_major, cfg.torch_abi, t.cuda or "", nvcc, nvcc_path)
        if cross:
            notes.append(cross)
        toolkit.check_host_compiler(home, nvcc, env)
        spec, source = toolkit.resolve_cuda_archs(env, torch_info.arch_list, nvcc)
        threads = s.nvcc_threads_or(max(1, min(4, len(spec.sass) + len(spec.ptx))))
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
        cfg.cuda_home, cfg.nvcc, cfg.arch_spec, cfg.arch_source, cfg.nvcc_threads = (
            home,
            nvcc,
            spec,
            source,
            threads,
        )
        cfg.sources = list_sources(root, gpu=True)
    elif gpu == "hip":
        try:
            rocm = versions.parse_rocm_version(t.hip or "")
        except ValueError as e:
            raise PreflightError(f"torch.version.hip: {e}") from None
        rocm_home, hipcc_path = toolkit.locate_rocm(env, torch_info.rocm_home)
        rc, out = toolkit.run_tool([hipcc_path, "--version"])
        try:
            hipcc = versions.parse_hipcc_version(out)
        except ValueError as e:
            raise PreflightError(f"{hipcc_path} --version (exit {rc}): {e}") from None
        if hipcc[:2] != rocm[:2]:
            notes.append(
                f"hipcc is ROCm {hipcc[0]}.{hipcc[1]} but torch was built with ROCm {rocm[0]}.{rocm[1]}."
            )
        toolkit.check_rocm_bf16_header(rocm_home, hipcc)
        gfx, source = toolkit.resolve_gfx_archs(env, rocm)
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
    commit = Settings.from_env().git_commit
    if commit:
        return commit
    if not os.path.exists(os.path.join(root, ".git")):
        return None
    rc, out = toolkit.run_tool(["git", "-C", root, "rev-parse", "HEAD"], timeout=20)
    out = out.strip()
    return out if rc == 0 and re.fullmatch(r"[0-9a-f]{40}", out) else None
