"""Discovery and preflight of the tools a source build uses: ninja, the CUDA toolkit (nvcc and the
root torch's cpp_extension links against), the host compiler nvcc accepts, ROCm's hipcc, and the GPU
targets (``MAMBA_CUDA_ARCHS`` / ``TORCH_CUDA_ARCH_LIST`` / ``PYTORCH_ROCM_ARCH``).

Every check takes the environment as a mapping (tests give their own) and raises ``PreflightError``
with one paragraph naming the value and the fix. The tools are run, never imported; torch is not used.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from typing import List, Mapping, Optional, Sequence, Tuple

from .._compat import archs, versions
from .._compat.cudahome import is_script as _is_script
from .._compat.cudahome import is_toolkit_root as _is_toolkit_root
from .._compat.cudahome import misleading_wrapper
from .._compat.cudahome import script_target_home as _script_target_home
from .errors import PreflightError

#: The environment a check reads (os.environ, or the mapping a test gives).
Env = Mapping[str, str]


def run_tool(cmd: List[str], timeout: float = 60) -> Tuple[int, str]:
    """Run ``cmd``: ``(exit status, stdout + stderr)``; ``(127, why)`` when it cannot be started."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError) as e:
        return 127, str(e)
    return p.returncode, p.stdout


def find_ninja(env: Env) -> Optional[str]:
    """The ninja executable torch's BuildExtension will use, or None."""
    path = shutil.which("ninja", path=env.get("PATH"))
    if path:
        return path
    try:  # the ninja wheel puts its binary next to the interpreter's scripts
        import ninja  # type: ignore[import-not-found,import-untyped,unused-ignore]

        cand = os.path.join(ninja.BIN_DIR, "ninja")
        if os.access(cand, os.X_OK):
            return cand
    except Exception:  # noqa: BLE001, S110
        pass
    return None


def check_ninja(env: Env) -> str:
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
def locate_cuda(
    torch_cuda_home: Optional[str], env: Env, search_roots: Sequence[str] = ("/usr/local",)
) -> Tuple[str, str]:
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
            target = (
                _script_target_home(on_path)
                if _is_script(on_path)
                else os.path.dirname(os.path.dirname(os.path.realpath(on_path)))
            )
            found.append(target)
        for root in search_roots:
            versioned = glob.glob(os.path.join(root, "cuda-[0-9]*"))
            versioned.sort(
                key=lambda p: [int(x) for x in re.findall(r"\d+", os.path.basename(p))], reverse=True
            )
            found += versioned + [os.path.join(root, "cuda")]
        for cand in found:
            if (
                cand
                and cand != exclude
                and os.path.isfile(os.path.join(cand, "bin", "nvcc"))
                and _is_toolkit_root(cand)
            ):
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
    wrapper = misleading_wrapper(env, guessed=home)
    if wrapper:
        target = _script_target_home(wrapper)  # None: the wrapper names no <root>/bin/nvcc
        hint = (
            f"CUDA_HOME={target}"
            if target
            else "CUDA_HOME=<the toolkit root that holds bin/nvcc, include/, lib64/>"
        )
        raise PreflightError(
            f"the nvcc on PATH ({wrapper}) is a wrapper script, so torch guessed CUDA_HOME={home}, which "
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
    rc, out = run_tool([nvcc, "--version"])
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
    t_major, _ = versions.parse_cuda_version(torch_cuda)
    if nvcc[0] != t_major:
        raise PreflightError(
            f"nvcc {nvcc[0]}.{nvcc[1]} ({nvcc_path}) does not match torch's CUDA {torch_cuda}: the CUDA "
            f"major versions differ ({nvcc[0]} vs {t_major}), so the extension would not load. Fix: set "
            f"CUDA_HOME to a CUDA {t_major}.x toolkit, or install a torch built for CUDA {nvcc[0]}."
        )


def max_gcc_for_nvcc(cuda_home: str, nvcc: Tuple[int, int]) -> Optional[int]:
    """The newest GCC major nvcc accepts: read from ``include/crt/host_config.h`` (``#if __GNUC__ > N``),
    else from the CUDA release notes' table."""
    for path in (
        os.path.join(cuda_home, "include", "crt", "host_config.h"),
        *glob.glob(os.path.join(cuda_home, "targets", "*", "include", "crt", "host_config.h")),
    ):
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


def host_compiler(env: Env) -> str:
    """The host compiler nvcc will use: ``NVCC_CCBIN``, else ``CC`` (torch passes it as -ccbin), else gcc."""
    return env.get("NVCC_CCBIN") or env.get("CC") or "gcc"


def gcc_major(compiler: str) -> Optional[Tuple[str, int]]:
    """``("gcc", 12)`` for a GNU compiler; None for clang or when it cannot be run."""
    rc, out = run_tool([compiler, "--version"])
    if rc != 0 or "clang" in out.lower():
        return None
    rc, ver = run_tool([compiler, "-dumpversion"])
    m = re.match(r"(\d+)", ver.strip()) if rc == 0 else None
    return (compiler, int(m.group(1))) if m else None


def check_host_compiler(cuda_home: str, nvcc: Tuple[int, int], env: Env) -> None:
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


def resolve_cuda_archs(
    env: Env, torch_arch_list: List[str], nvcc: Tuple[int, int]
) -> Tuple[archs.ArchSpec, str]:
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
def locate_rocm(env: Env, torch_rocm_home: Optional[str]) -> Tuple[str, str]:
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


def resolve_gfx_archs(env: Env, rocm: Optional[Tuple[int, int]]) -> Tuple[Tuple[str, ...], str]:
    """``PYTORCH_ROCM_ARCH`` > ``HIP_ARCHITECTURES`` > a default list (never "native")."""
    for name in ("PYTORCH_ROCM_ARCH", "HIP_ARCHITECTURES"):
        text = str(env.get(name, "")).strip()
        if text:
            try:
                return archs.parse_gfx_list(text), name
            except ValueError as e:
                raise PreflightError(f"{name}={text!r}: {e}") from None
    return archs.default_gfx_archs(rocm), "default"
