"""Builds csrc's GPU kernels for the CPU with g++ against HIP-CPU (TEST-ONLY; no torch).

HIP-CPU (ROCm's header-only HIP runtime for the CPU, MIT) is found at ``HIP_CPU_ROOT`` or else at
``../shared/third_party/hip-cpu`` beside the repository root. It is never written to: its headers are
copied under the build folder (``BUILD_ROOT``, below) and the copy's block scheduler is patched (``SCHEDULER_PATCH``) so that the
order in which a block's threads resume after a barrier can be chosen at run time (HIP-CPU's own order,
thread 0 first after every barrier, hides a missing ``__syncthreads`` after "one thread writes shared
memory").

One shared library per layout, from the csrc translation units in ``KERNEL_SOURCES`` compiled unchanged
(``g++ -x c++``) plus ``harness.cpp`` (C entry points for ctypes). The layouts:
  - ``wave64``: 64-lane warps (AMD CDNA, HIP-CPU's own warpSize),
  - ``wave32``: 32-lane warps, the block shape of every NVIDIA GPU and of AMD RDNA; the kernels see
    kWarpSize 32 through the macro real HIP compilers define for wave32 targets
    (``__AMDGCN_WAVEFRONT_SIZE``), and the sub-warp shuffles come from ``mamba_hipcpu_shim.h``.
Objects and the library live in ``$MAMBA_DEV_HOME/hipcpu/<layout>-<key>/`` (default
``~/.cache/mamba-ssm-dev``, beside the shared dev venv; ``MAMBA_HIPCPU_BUILD`` overrides), the key a hash
of every input of the build (the contents and relative names of the sources, headers and HIP-CPU's files,
the patch, compiler and flags, with the trees' locations left out), so a rerun with nothing changed,
from this clone or another, reuses them and any change rebuilds.
"""

import concurrent.futures
import hashlib
import os
import shutil
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
CSRC = os.path.join(REPO_ROOT, "csrc")
BUILD_ROOT = os.environ.get("MAMBA_HIPCPU_BUILD") or os.path.join(
    os.environ.get("MAMBA_DEV_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "mamba-ssm-dev"),
    "hipcpu",
)

# csrc translation units with GPU entry points; a new kernel (e.g. causal conv1d) adds its .cu files
# here and its C wrapper to harness.cpp.
KERNEL_SOURCES = [
    "scan_fwd_fp32.cu",
    "scan_fwd_fp16.cu",
    "scan_fwd_bf16.cu",
    "scan_bwd_fp32.cu",
    "scan_bwd_fp16.cu",
    "scan_bwd_bf16.cu",
    "scan_complex_fwd_fp32.cu",
    "scan_complex_fwd_fp16.cu",
    "scan_complex_fwd_bf16.cu",
    "scan_complex_bwd_fp32.cu",
    "scan_complex_bwd_fp16.cu",
    "scan_complex_bwd_bf16.cu",
    "conv1d_fp32.cu",
    "conv1d_fp16.cu",
    "conv1d_bf16.cu",
]
HARNESS_SOURCES = [os.path.join(HERE, "harness.cpp")]

LAYOUTS = {"wave64": 64, "wave32": 32}

# Resume orders the patched scheduler offers (the value mamba_hipcpu_set_schedule takes).
SCHEDULES = {"fixed": 0, "reversed": 1, "shuffled": 2}

# No -DNDEBUG: HIP-CPU's asserts stay on, and its __forceinline__ expands to nothing, so the link also
# checks that csrc's non-template device helpers defined in headers are `inline`. -O1: half the compile
# time of -O2 for the same emulation speed (fiber switches at every barrier dominate).
CXXFLAGS = ["-std=c++17", "-O1", "-fPIC", "-Wno-attributes", "-DMAMBA_SSM_HIP"]
LIBS = ["-ltbb", "-lpthread"]


class Unavailable(Exception):
    """HIP-CPU, TBB or a C++17 compiler is missing here: the reason, for a skip message."""


def hip_cpu_root():
    """The HIP-CPU tree to use (``HIP_CPU_ROOT`` or ``../shared/third_party/hip-cpu``), or raise
    Unavailable naming where it was looked for."""
    env = os.environ.get("HIP_CPU_ROOT")
    root = env or os.path.normpath(os.path.join(REPO_ROOT, "..", "shared", "third_party", "hip-cpu"))
    if not os.path.isfile(os.path.join(root, "include", "hip", "hip_runtime.h")):
        how = "HIP_CPU_ROOT" if env else "the default ../shared/third_party/hip-cpu (set HIP_CPU_ROOT)"
        raise Unavailable(
            f"HIP-CPU not found at {root} ({how}; it is ROCm/HIP-CPU's header-only "
            "runtime, with include/hip/hip_runtime.h)"
        )
    return root


def compiler():
    cxx = os.environ.get("MAMBA_HIPCPU_CXX") or shutil.which("g++")
    if not cxx:
        raise Unavailable("no g++ found (set MAMBA_HIPCPU_CXX to a C++17 compiler)")
    return cxx


_TBB_CHECKED = {}


def check_tbb(cxx):
    """HIP-CPU's parallel algorithms need TBB's headers and library (Debian: libtbb-dev). Checked once
    per process and compiler (a compile and link of a probe)."""
    if cxx not in _TBB_CHECKED:
        try:
            _probe_tbb(cxx)
            _TBB_CHECKED[cxx] = None
        except Unavailable as e:
            _TBB_CHECKED[cxx] = e
    if _TBB_CHECKED[cxx] is not None:
        raise _TBB_CHECKED[cxx]


def _probe_tbb(cxx):
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "t.cpp")
        with open(src, "w") as f:
            f.write("#include <tbb/version.h>\nint main() { return TBB_VERSION_MAJOR > 0 ? 0 : 1; }\n")
        proc = subprocess.run([cxx, src, "-o", os.path.join(tmp, "t")] + LIBS, capture_output=True, text=True)
    if proc.returncode != 0:
        raise Unavailable(
            "TBB is missing (install it: apt-get install -y libtbb-dev); HIP-CPU needs "
            f"it: {proc.stderr.strip()[-300:]}"
        )


# --- the scheduler patch (applied to the scratch copy of HIP-CPU's tile.hpp) -------------------------

_STATE = """inline thread_local bool has_barrier{false};

            // mamba-ssm test patch (tests/kernels/hipcpu/hipcpu_build.py): the order in which a block's
            // fibers resume after each barrier, chosen at run time. 0: HIP-CPU's own (fiber i hands
            // over to i + 1, so fiber 0 runs first after every barrier); 1: reversed (fiber n-1 first,
            // fiber 0 last); 2: an affine permutation k -> (a k + b) mod n that changes with every
            // barrier phase. Fiber 0 always starts the block (it is the worker's own context).
            inline std::atomic<int> mamba_schedule{0};
            inline thread_local std::uint32_t mamba_phase{0};
            inline thread_local std::uint32_t mamba_arrived{0};

            inline std::uint32_t mamba_order(
                std::uint32_t phase, std::uint32_t k, std::uint32_t n) noexcept
            {
                if (mamba_schedule.load(std::memory_order_relaxed) == 1) {
                    if (phase == 0) return k == 0 ? 0u : n - k;
                    return n - 1 - k;
                }
                std::uint64_t h{(phase + 1ull) * 0x9E3779B97F4A7C15ull};
                h ^= h >> 29; h *= 0xBF58476D1CE4E5B9ull; h ^= h >> 32;
                std::uint64_t a{(h % n) | 1u};
                while (std::gcd(a, std::uint64_t{n}) != 1) ++a;
                const std::uint64_t b{phase == 0 ? 0u : (h >> 17) % n};
                return static_cast<std::uint32_t>((a * k + b) % n);
            }

            inline void mamba_check_turn(std::uint32_t self, std::uint32_t k, std::uint32_t n)
            {
                if (mamba_order(mamba_phase, k, n) != self) {
                    std::fprintf(stderr, "hip-cpu patch: fiber %u reached a barrier out of turn "
                                 "(phase %u, position %u): threads took different barrier counts\\n",
                                 self, mamba_phase, k);
                    std::abort();
                }
            }

            inline void mamba_begin_tile() noexcept { mamba_phase = 0; mamba_arrived = 0; }

            // The fiber to resume after fiber `self` reaches a barrier.
            inline std::uint32_t mamba_next_after_barrier(std::uint32_t self, std::uint32_t n)
            {
                if (mamba_schedule.load(std::memory_order_relaxed) == 0) return (self + 1) % n;
                mamba_check_turn(self, mamba_arrived, n);
                const std::uint32_t k{++mamba_arrived};
                if (k < n) return mamba_order(mamba_phase, k, n);
                mamba_arrived = 0;
                ++mamba_phase;
                return mamba_order(mamba_phase, 0, n);
            }

            // The fiber to resume after fiber `self` returns from the kernel (fiber 0, the worker,
            // once every fiber has).
            inline std::uint32_t mamba_next_after_exit(std::uint32_t self, std::uint32_t n)
            {
                if (mamba_schedule.load(std::memory_order_relaxed) == 0) return (self + 1) % n;
                mamba_check_turn(self, mamba_arrived, n);
                const std::uint32_t k{++mamba_arrived};
                return k < n ? mamba_order(mamba_phase, k, n) : 0u;
            }"""

SCHEDULER_PATCH = [
    (
        "#include <cstdint>\n",
        "#include <cstdint>\n#include <atomic>\n#include <cstdio>\n#include <cstdlib>\n#include <numeric>\n",
    ),
    ("inline thread_local bool has_barrier{false};", _STATE),
    (
        """                        const auto f1{id(Fiber::this_fiber())};
                        const auto f2{
                            (f1 + 1) % count(this_tile().dimensions())};

                        Fiber::yield(r[f2]);""",
        """                        const auto f1{id(Fiber::this_fiber())};
                        const auto f2{this_tile::mamba_next_after_exit(
                            f1, count(this_tile().dimensions()))};

                        if (f2 != f1) Fiber::yield(r[f2]);""",
    ),
    (
        """            const auto f1{(f0 + 1) % count(dimensions())};

            Fiber::yield(Tile::fibers()[f1]);""",
        """            const auto f1{::hip::detail::this_tile::mamba_next_after_barrier(
                f0, count(dimensions()))};

            if (f1 != f0) Fiber::yield(Tile::fibers()[f1]);""",
    ),
    (
        """                this_tile::has_barrier = false;
""",
        """                this_tile::has_barrier = false;
                this_tile::mamba_begin_tile();
""",
    ),
    (
        """                if (this_tile::has_barrier) {
                    Fiber::yield(Tile::fibers()[1]);
                }""",
        """                if (this_tile::has_barrier) {
                    const auto f1{this_tile::mamba_next_after_exit(
                        0u, count(tile_dimensions()))};
                    if (f1 != 0u) Fiber::yield(Tile::fibers()[f1]);
                }""",
    ),
]
TILE_HPP = os.path.join("src", "include", "hip", "detail", "tile.hpp")


def _placeholders(text, bases):
    """``text`` with each of ``bases`` (absolute folders) replaced by ``<i>``, longest first."""
    for i, base in sorted(enumerate(bases), key=lambda ib: -len(ib[1])):
        text = text.replace(os.path.abspath(base), f"<{i}>")
    return text


def _digest(paths, extra="", bases=()):
    """A 16-hex key of the files ``paths`` (names and contents) and the text ``extra``; the folders
    ``bases`` enter as placeholders, so the same trees at other places (another clone) give the same key."""
    h = hashlib.sha256(_placeholders(extra, bases).encode())
    named = sorted((_placeholders(os.path.abspath(p), bases), p) for p in paths)
    for name, p in named:
        h.update(name.encode() + b"\0")
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:16]


def _tree_files(root):
    out = []
    for d, _, files in os.walk(root):
        out += [os.path.join(d, f) for f in files]
    return out


def patched_hip_cpu(root):
    """A scratch copy of HIP-CPU's headers with SCHEDULER_PATCH applied: BUILD_ROOT/hip-cpu-<key>."""
    files = [f for sub in ("include", "src", "external") for f in _tree_files(os.path.join(root, sub))]
    key = _digest(files, repr(SCHEDULER_PATCH), bases=(root,))
    dest = os.path.join(BUILD_ROOT, f"hip-cpu-{key}")
    if os.path.isdir(dest):
        return dest
    os.makedirs(BUILD_ROOT, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="hip-cpu-", dir=BUILD_ROOT)
    for sub in ("include", "src", "external"):
        shutil.copytree(os.path.join(root, sub), os.path.join(tmp, sub), symlinks=False)
    tile = os.path.join(tmp, TILE_HPP)
    os.chmod(tile, 0o644)
    with open(tile) as f:
        text = f.read()
    for old, new in SCHEDULER_PATCH:
        if text.count(old) != 1:
            shutil.rmtree(tmp)
            raise RuntimeError(
                f"HIP-CPU's tile.hpp at {root} does not match the scheduler patch (expected "
                f"once: {old.strip()[:80]!r}); update SCHEDULER_PATCH in {__file__}"
            )
        text = text.replace(old, new)
    with open(tile, "w") as f:
        f.write(text)
    try:
        os.replace(tmp, dest)
    except OSError:  # built meanwhile by another process
        shutil.rmtree(tmp, ignore_errors=True)
    _remove_stale(dest)
    return dest


def _run(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}\n{proc.stdout[-2000:]}\n{proc.stderr[-6000:]}")


def build(layout, csrc=CSRC, sources=None, tag=""):
    """Path of the shared library of csrc's GPU entry points for `layout` ("wave64" or "wave32").

    `csrc` may name a scratch copy of csrc (the mutation test's), `sources` a subset of KERNEL_SOURCES.
    Raises Unavailable where HIP-CPU, TBB or g++ is missing, RuntimeError (with the compiler's output)
    where the build fails."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r}: expected one of {sorted(LAYOUTS)}")
    sources = list(KERNEL_SOURCES if sources is None else sources)
    cxx = compiler()
    root = hip_cpu_root()
    check_tbb(cxx)
    hip = patched_hip_cpu(root)
    flags = CXXFLAGS + [
        f"-D__AMDGCN_WAVEFRONT_SIZE={LAYOUTS[layout]}",
        "-I",
        os.path.join(hip, "include"),
        "-I",
        os.path.join(HERE, "include"),
        "-I",
        csrc,
        "-include",
        os.path.join(HERE, "mamba_hipcpu_shim.h"),
    ]
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    inputs = (
        [os.path.join(csrc, s) for s in sources]
        + HARNESS_SOURCES
        + [os.path.join(csrc, f) for f in os.listdir(csrc) if f.endswith((".h", ".cuh"))]
        + _tree_files(os.path.join(HERE, "include"))
        + [os.path.join(HERE, "mamba_hipcpu_shim.h")]
    )
    key = _digest(inputs, " ".join([version, hip] + flags + sources + LIBS), bases=(csrc, HERE, BUILD_ROOT))
    out_dir = os.path.join(BUILD_ROOT, f"{layout}{'-' + tag if tag else ''}-{key}")
    lib = os.path.join(out_dir, "libmamba_hipcpu.so")
    if os.path.isfile(lib):
        return lib
    # Built in a private folder, renamed into place when complete (a concurrent or interrupted build
    # never leaves a half-written library under the final name).
    os.makedirs(BUILD_ROOT, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{layout}-", dir=BUILD_ROOT)
    try:
        srcs = [os.path.join(csrc, s) for s in sources] + HARNESS_SOURCES
        objs = [os.path.join(tmp, os.path.basename(s) + ".o") for s in srcs]
        jobs = max(1, int(os.environ.get("MAX_JOBS") or min(2, os.cpu_count() or 1)))
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            list(
                pool.map(
                    lambda so: _run([cxx] + flags + ["-x", "c++", "-c", so[0], "-o", so[1]]), zip(srcs, objs)
                )
            )
        _run([cxx, "-shared", "-o", os.path.join(tmp, os.path.basename(lib))] + objs + LIBS)
        try:
            os.replace(tmp, out_dir)
        except OSError:  # another process finished the same build first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    _remove_stale(out_dir)
    return lib


def _remove_stale(keep):
    """Removes earlier builds of the same layout and tag (other keys) under BUILD_ROOT."""
    prefix = os.path.basename(keep).rsplit("-", 1)[0] + "-"
    for d in os.listdir(BUILD_ROOT):
        path = os.path.join(BUILD_ROOT, d)
        if path != keep and d.startswith(prefix) and len(d) == len(prefix) + 16:
            shutil.rmtree(path, ignore_errors=True)
