"""Detection of the *target* environment: the interpreter, torch, platform tags, GPUs and driver.

When pip builds our sdist it runs setup.py with the target interpreter but inside an isolated build
environment (``PYTHONPATH`` pointing at ``pip-build-env-*/site``, ``PYTHONNOUSERSITE=1``), where torch
is absent or is whatever pip pulled into isolation. uv runs the build backend with the python of a
throw-away *build venv* (``VIRTUAL_ENV`` is that venv; ``UV`` and ``UV_INTERNAL__BUILD_DIR`` are set),
so ``sys.executable`` is not the target at all; the target is what the ``uv`` process was asked to
install into (``--python``, ``UV_PYTHON``, ``VIRTUAL_ENV``/``CONDA_PREFIX`` of uv's environment or the
project's ``.venv``). Either way the resolver runs the target interpreter in a subprocess with the
isolation variables removed and reads torch there (:data:`PROBE`), never in the build process.

GPUs: NVML through ctypes (``libnvidia-ml.so.1``), else ``nvidia-smi``; ROCm: ``rocminfo``. Neither
initialises CUDA in any process.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

__all__ = [
    "Environment",
    "TorchInfo",
    "Gpu",
    "DetectionError",
    "detect",
    "find_target_python",
    "probe_python",
    "detect_gpus",
    "parse_nvidia_smi",
    "parse_rocminfo",
    "tags_for",
]

PROBE_BEGIN = "@@MAMBA_SSM_PROBE_BEGIN@@"
PROBE_END = "@@MAMBA_SSM_PROBE_END@@"

#: Runs in the target interpreter (``python -c``); prints one JSON object between markers. It reads
#: torch/version.py and, for the C++ ABI, looks for ``std::__cxx11`` names in torch/lib/libc10.so; when
#: that does not settle it (or ``MAMBA_PROBE_IMPORT_TORCH=1``) it imports torch (``torch._C.
#: _GLIBCXX_USE_CXX11_ABI``). It never touches torch.cuda.
PROBE = r"""
import json, os, sys, sysconfig, platform
out = {"executable": sys.executable, "prefix": os.path.realpath(sys.prefix),
       "base_prefix": os.path.realpath(getattr(sys, "base_prefix", sys.prefix)),
       "python_version": "%d.%d.%d" % sys.version_info[:3],
       "implementation": sys.implementation.name, "platform": sysconfig.get_platform(),
       "machine": platform.machine(), "libc": " ".join(x for x in platform.libc_ver() if x) or None,
       "tags": None, "tags_source": None, "torch": None, "notes": []}
for mod in ("packaging.tags", "pip._vendor.packaging.tags"):
    try:
        tags = __import__(mod, fromlist=["sys_tags"])
        out["tags"] = [str(t) for t in tags.sys_tags()]
        out["tags_source"] = mod
        break
    except Exception as e:
        out["notes"].append("%s: %s" % (mod, e))
import importlib.util
spec = None
try:
    spec = importlib.util.find_spec("torch")
except Exception as e:
    out["notes"].append("find_spec(torch): %s" % e)
fast = None
if spec is not None and spec.origin and os.environ.get("MAMBA_PROBE_IMPORT_TORCH") != "1":
    # Fast path, no torch import: torch/version.py for the versions and libc10.so's symbols for the
    # C++ ABI (std::__cxx11 names exist only in a _GLIBCXX_USE_CXX11_ABI=1 build). Anything unclear
    # (no such files, no __cxx11 names) falls back to importing torch.
    tdir = os.path.dirname(spec.origin)
    try:
        ns = {}
        with open(os.path.join(tdir, "version.py")) as fh:
            exec(compile(fh.read(), "torch/version.py", "exec"), ns)
        import mmap
        with open(os.path.join(tdir, "lib", "libc10.so"), "rb") as fh:
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as m:
                if m.find(b"__cxx11") >= 0:
                    fast = {"path": tdir, "error": None, "version": str(ns["__version__"]),
                            "cuda": ns.get("cuda"), "hip": ns.get("hip"), "git_version": ns.get("git_version"),
                            "cxx11_abi": True, "source": "torch/version.py + lib/libc10.so"}
    except Exception as e:
        out["notes"].append("fast torch probe: %s: %s" % (type(e).__name__, e))
if fast is not None:
    out["torch"] = fast
elif spec is not None:
    info = {"path": os.path.dirname(spec.origin or "") or None, "error": None, "source": "import torch"}
    try:
        import torch
        info.update(version=str(torch.__version__), cuda=getattr(torch.version, "cuda", None),
                    hip=getattr(torch.version, "hip", None),
                    git_version=getattr(torch.version, "git_version", None))
        abi = getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None)
        info["cxx11_abi"] = None if abi is None else bool(abi)
    except BaseException as e:
        info["error"] = "import torch failed: %s: %s" % (type(e).__name__, e)
        try:
            from importlib.metadata import version as _v
            info["version"] = _v("torch")
        except Exception:
            info["version"] = None
    out["torch"] = info
sys.stdout.write("\n@@MAMBA_SSM_PROBE_BEGIN@@" + json.dumps(out) + "@@MAMBA_SSM_PROBE_END@@\n")
"""


class DetectionError(RuntimeError):
    """The target environment could not be probed; the message names the interpreter and the cause."""


@dataclass
class TorchInfo:
    """torch in the target environment: ``torch.__version__`` (e.g. ``"2.14.1+cu130"``),
    ``torch.version.cuda`` (``"13.0"``) / ``.hip`` (``"6.2.41133-dd7f95766"``), the C++ ABI, and the
    import error when torch is installed but does not import."""

    version: Optional[str]
    cuda: Optional[str] = None
    hip: Optional[str] = None
    cxx11_abi: Optional[bool] = None
    git_version: Optional[str] = None
    path: Optional[str] = None
    error: Optional[str] = None
    source: Optional[str] = None  # how it was read: "import torch" or "torch/version.py + lib/libc10.so"

    def build(self):
        """This torch as a ``mamba_ssm._compat.versions.TorchBuild`` (ValueError on a bad version)."""
        from .._compat.versions import TorchBuild

        return TorchBuild(self.version, self.cuda, self.hip, self.cxx11_abi)


@dataclass
class Gpu:
    """One visible GPU: vendor ``"nvidia"`` with ``capability`` like ``"9.0"``, or ``"amd"`` with
    ``gfx`` like ``"gfx90a"``."""

    vendor: str
    name: str = ""
    capability: Optional[str] = None
    gfx: Optional[str] = None
    uuid: Optional[str] = None

    @property
    def capability_tuple(self) -> Optional[Tuple[int, int]]:
        if not self.capability:
            return None
        major, _, minor = self.capability.partition(".")
        return int(major), int(minor or 0)


@dataclass
class Environment:
    """Everything selection needs to know about the target.

    ``tags`` are the target interpreter's supported wheel tags, most preferred first
    (``packaging.tags.sys_tags()`` there, e.g. ``"cp311-cp311-manylinux_2_36_x86_64"``);
    ``driver_version`` is the NVIDIA driver (``"580.65.06"``) or None; ``prefix`` is the target's
    ``sys.prefix`` (realpath), which keys the recorded decision.
    """

    python_version: str
    tags: List[str]
    platform: str = "linux-x86_64"
    machine: str = "x86_64"
    implementation: str = "cpython"
    libc: Optional[str] = None
    executable: Optional[str] = None
    prefix: Optional[str] = None
    torch: Optional[TorchInfo] = None
    gpus: List[Gpu] = field(default_factory=list)
    driver_version: Optional[str] = None
    gpu_probe: Optional[str] = None
    target_source: Optional[str] = None
    notes: List[str] = field(default_factory=list)

    # -- (de)serialisation -------------------------------------------------------------------
    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        """JSON text (``--env-json`` files have this shape)."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Environment":
        """Build from a dict; ``tags`` may be omitted when ``python_version`` and ``platform_tags``
        (e.g. ``["manylinux_2_28_x86_64"]``) are given. Raises ValueError naming a bad field."""
        if not isinstance(data, Mapping):
            raise ValueError(f"environment must be a JSON object, got {type(data).__name__}")
        data = dict(data)
        if "python_version" not in data:
            raise ValueError("environment lacks 'python_version' (e.g. \"3.11.7\")")
        platform_tags = data.pop("platform_tags", None)
        if not data.get("tags"):
            if not platform_tags:
                raise ValueError(
                    "environment lacks 'tags' (the target's packaging.tags.sys_tags()) and "
                    "'platform_tags' (e.g. [\"manylinux_2_28_x86_64\"]) to derive them from"
                )
            major, minor = (int(x) for x in str(data["python_version"]).split(".")[:2])
            data["tags"] = tags_for((major, minor), platform_tags)
        torch = data.get("torch")
        if torch is not None:
            if not isinstance(torch, Mapping) or "version" not in torch:
                raise ValueError(f"environment 'torch' must be an object with 'version', got {torch!r}")
            data["torch"] = TorchInfo(
                **{k: torch.get(k) for k in TorchInfo.__dataclass_fields__ if k in torch}
            )
        data["gpus"] = [g if isinstance(g, Gpu) else Gpu(**g) for g in data.get("gpus") or []]
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"environment has unknown fields {sorted(unknown)}; known: {sorted(known)}")
        return cls(**data)

    @classmethod
    def from_json(cls, text: str) -> "Environment":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"environment JSON does not parse: {exc}") from None
        return cls.from_dict(data)

    # -- derived -----------------------------------------------------------------------------
    @property
    def platform_tags(self) -> List[str]:
        """The platform tags of ``tags`` in preference order (``manylinux_2_36_x86_64``, ...)."""
        seen: List[str] = []
        for tag in self.tags:
            plat = tag.rsplit("-", 1)[-1]
            if plat != "any" and plat not in seen:
                seen.append(plat)
        return seen

    def summary(self) -> str:
        """One line: Python, platform, torch, GPUs and driver."""
        torch = "no torch"
        if self.torch is not None:
            torch = f"torch {self.torch.version}"
            if self.torch.cxx11_abi is not None:
                torch += f" (cxx11abi {'TRUE' if self.torch.cxx11_abi else 'FALSE'})"
        gpus = (
            ", ".join(
                f"{g.name or g.vendor} "
                + (f"sm_{g.capability.replace('.', '')}" if g.capability else (g.gfx or "?"))
                for g in self.gpus
            )
            or "no GPU visible"
        )
        driver = f", driver {self.driver_version}" if self.driver_version else ""
        plat = next((p for p in self.platform_tags if not p.startswith("linux_")), None)
        plat = plat or (self.platform_tags[0] if self.platform_tags else self.platform)
        return f"Python {self.python_version} on {plat}, {torch}, {gpus}{driver}"


def tags_for(python: Tuple[int, int], platforms: Sequence[str]) -> List[str]:
    """CPython wheel tags, most preferred first, for ``python`` (``(3, 11)``) on ``platforms``
    (``["manylinux_2_28_x86_64", "manylinux2014_x86_64", "linux_x86_64"]``), as ``packaging.tags``
    computes them; used for declared (``--env-json``) targets."""
    from packaging import tags

    plats = list(platforms)
    out = [str(t) for t in tags.cpython_tags(python_version=python, platforms=plats)]
    out += [str(t) for t in tags.compatible_tags(python_version=python, platforms=plats)]
    return out


# ----------------------------------------------------------------------------- the target python
def _proc_chain(max_depth: int = 8) -> List[int]:
    pids, pid = [], os.getppid()
    for _ in range(max_depth):
        if pid <= 1:
            break
        pids.append(pid)
        try:
            with open(f"/proc/{pid}/stat") as fh:
                pid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _read_proc(pid: int) -> Optional[Tuple[str, List[str], str, Dict[str, str]]]:
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = [a.decode(errors="replace") for a in fh.read().split(b"\0") if a]
        cwd = os.readlink(f"/proc/{pid}/cwd")
        with open(f"/proc/{pid}/environ", "rb") as fh:
            env = {}
            for item in fh.read().split(b"\0"):
                k, sep, v = item.partition(b"=")
                if sep:
                    env[k.decode(errors="replace")] = v.decode(errors="replace")
        return exe, argv, cwd, env
    except OSError:
        return None


def _python_in(path: str, cwd: str, env: Mapping[str, str]) -> Optional[str]:
    """An interpreter from a uv ``--python`` value: a file, a venv/prefix dir, or a name on PATH."""
    if not path:
        return None
    cand = path if os.path.isabs(path) else os.path.join(cwd, path)
    if os.path.isfile(cand) and os.access(cand, os.X_OK):
        return cand
    if os.path.isdir(cand):
        for name in ("bin/python", "bin/python3"):
            if os.path.isfile(os.path.join(cand, name)):
                return os.path.join(cand, name)
    if re.match(r"^\d+(\.\d+)*$", path):
        path = "python" + path
    found = shutil.which(path, path=env.get("PATH"))
    return found


def _uv_target(environ: Mapping[str, str]) -> Optional[Tuple[str, str]]:
    """The interpreter a running ``uv`` was asked to install into, read from its /proc entry."""
    uv_bin = environ.get("UV")
    for pid in _proc_chain():
        info = _read_proc(pid)
        if info is None:
            continue
        exe, argv, cwd, env = info
        if not (
            os.path.basename(exe) in ("uv", "uv.exe")
            or (uv_bin and os.path.realpath(exe) == os.path.realpath(uv_bin))
        ):
            continue
        for i, arg in enumerate(argv):
            value = None
            if arg in ("--python", "-p") and i + 1 < len(argv):
                value = argv[i + 1]
            elif arg.startswith("--python="):
                value = arg.split("=", 1)[1]
            if value:
                py = _python_in(value, cwd, env)
                if py:
                    return py, f"uv's --python {value}"
        if "--system" in argv:
            py = shutil.which("python3", path=env.get("PATH"))
            if py:
                return py, "uv's --system: python3 on uv's PATH"
        for var in ("UV_PYTHON", "UV_PROJECT_ENVIRONMENT", "VIRTUAL_ENV", "CONDA_PREFIX"):
            if env.get(var):
                py = _python_in(env[var], cwd, env)
                if py:
                    return py, f"{var}={env[var]} of the uv process"
        d = cwd
        while True:
            venv = os.path.join(d, ".venv")
            if os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
                return os.path.join(venv, "bin", "python"), f"the project venv {venv} (uv)"
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent
        return None
    return None


def find_target_python(environ: Optional[Mapping[str, str]] = None) -> Tuple[str, str]:
    """(path of the target interpreter, how it was found).

    ``MAMBA_TARGET_PYTHON`` wins; under uv the interpreter uv installs into; otherwise
    ``sys.executable`` (pip runs build backends with the target's own interpreter).
    """
    environ = os.environ if environ is None else environ
    explicit = environ.get("MAMBA_TARGET_PYTHON")
    if explicit:
        return explicit, "MAMBA_TARGET_PYTHON"
    if environ.get("UV") or environ.get("UV_INTERNAL__BUILD_DIR"):
        found = _uv_target(environ)
        if found:
            return found
        return sys.executable, "uv's build venv (the target interpreter uv installs into was not found)"
    if _in_pip_isolation(environ):
        return sys.executable, (
            "the Python that pip is building with, inspected without pip's temporary build packages"
        )
    return sys.executable, "the running interpreter"


def _in_pip_isolation(environ: Mapping[str, str]) -> bool:
    return "pip-build-env-" in environ.get("PYTHONPATH", "") or "pip-build-env-" in environ.get("PATH", "")


def probe_environ(environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The environment for the probe subprocess: pip's / uv's isolation variables removed."""
    env = dict(os.environ if environ is None else environ)
    isolated = _in_pip_isolation(env)
    if "PYTHONPATH" in env:
        kept = [p for p in env["PYTHONPATH"].split(os.pathsep) if p and "pip-build-env-" not in p]
        if kept:
            env["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            del env["PYTHONPATH"]
    if isolated:
        env.pop("PYTHONNOUSERSITE", None)
    build_venv = env.get("VIRTUAL_ENV") if (env.get("UV") or env.get("UV_INTERNAL__BUILD_DIR")) else None
    if "PATH" in env:
        env["PATH"] = os.pathsep.join(
            p
            for p in env["PATH"].split(os.pathsep)
            if "pip-build-env-" not in p and not (build_venv and p.startswith(build_venv))
        )
    if build_venv:
        env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONSTARTUP", None)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def probe_python(
    python: str, environ: Optional[Mapping[str, str]] = None, timeout: float = 120.0
) -> Dict[str, Any]:
    """Run :data:`PROBE` in ``python`` (isolation removed) and return its JSON as a dict.

    Raises DetectionError naming the interpreter when it cannot run or prints no result.
    """
    return _probe_result(python, _probe_start(python, environ), timeout)


def _probe_start(python: str, environ: Optional[Mapping[str, str]]) -> Any:
    try:
        return subprocess.Popen(
            [python, "-c", PROBE],
            env=probe_environ(environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=os.path.expanduser("~") if os.path.isdir(os.path.expanduser("~")) else None,
        )
    except OSError as exc:
        raise DetectionError(f"cannot run the target interpreter {python!r}: {exc}") from None


def _probe_result(python: str, proc: Any, timeout: float) -> Dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise DetectionError(
            f"the target interpreter {python!r} did not answer within {timeout:g} s"
        ) from None
    i, j = out.rfind(PROBE_BEGIN), out.rfind(PROBE_END)
    if i < 0 or j < i:
        raise DetectionError(
            f"the target interpreter {python!r} printed no probe result (exit {proc.returncode}): "
            f"{(err or out)[-600:]}"
        )
    try:
        return json.loads(out[i + len(PROBE_BEGIN) : j])
    except ValueError as exc:
        raise DetectionError(
            f"the target interpreter {python!r} printed a malformed probe result ({exc})"
        ) from None


# ----------------------------------------------------------------------------- GPUs and driver
def parse_nvidia_smi(text: str) -> Tuple[List[Gpu], Optional[str]]:
    """Parse ``nvidia-smi --query-gpu=name,compute_cap,driver_version,uuid --format=csv,noheader``.

    Returns (GPUs, driver version). Lines that do not have four fields are skipped.
    """
    gpus, driver = [], None
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3 or not re.match(r"^\d+\.\d+$", parts[1]):
            continue
        gpus.append(Gpu("nvidia", parts[0], parts[1], uuid=parts[3] if len(parts) > 3 else None))
        driver = driver or parts[2]
    return gpus, driver


def parse_rocminfo(text: str) -> List[Gpu]:
    """GPU agents of ``rocminfo`` output: each ``Name: gfxNNN`` of an agent whose device type is GPU."""
    gpus = []
    for block in re.split(r"\n\*+\s*\n\s*Agent \d+\s*\n\*+", text):
        name = re.search(r"^\s*Name:\s*(gfx[0-9a-f]+)\s*$", block, re.M | re.I)
        if name and re.search(r"Device Type:\s*GPU", block):
            market = re.search(r"Marketing Name:\s*(.+)", block)
            gpus.append(Gpu("amd", market.group(1).strip() if market else "", gfx=name.group(1).lower()))
    return gpus


def _nvml() -> Tuple[List[Gpu], Optional[str]]:
    lib = ctypes.CDLL("libnvidia-ml.so.1")
    if lib.nvmlInit_v2() != 0:
        raise OSError("nvmlInit_v2 failed")
    try:
        buf = ctypes.create_string_buffer(96)
        driver = None
        if lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96)) == 0:
            driver = buf.value.decode()
        count = ctypes.c_uint(0)
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            raise OSError("nvmlDeviceGetCount_v2 failed")
        gpus = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(handle)) != 0:
                continue
            major, minor = ctypes.c_int(0), ctypes.c_int(0)
            cap = None
            if lib.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)) == 0:
                cap = f"{major.value}.{minor.value}"
            name = ""
            if lib.nvmlDeviceGetName(handle, buf, ctypes.c_uint(96)) == 0:
                name = buf.value.decode(errors="replace")
            uuid = None
            if lib.nvmlDeviceGetUUID(handle, buf, ctypes.c_uint(96)) == 0:
                uuid = buf.value.decode(errors="replace")
            gpus.append(Gpu("nvidia", name, cap, uuid=uuid))
        return gpus, driver
    finally:
        lib.nvmlShutdown()


def _visible(gpus: List[Gpu], environ: Mapping[str, str]) -> Tuple[List[Gpu], Optional[str]]:
    """Apply CUDA_VISIBLE_DEVICES (indices or UUID prefixes) to NVIDIA GPUs."""
    spec = environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return gpus, None
    nv = [g for g in gpus if g.vendor == "nvidia"]
    chosen: List[Gpu] = []
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


def detect_gpus(environ: Optional[Mapping[str, str]] = None) -> Tuple[List[Gpu], Optional[str], str]:
    """(visible GPUs, NVIDIA driver version or None, how they were found or why none).

    NVML (ctypes, ``libnvidia-ml.so.1``; skipped when ``MAMBA_SSM_NO_NVML=1``), else ``nvidia-smi``,
    plus ``rocminfo`` for AMD GPUs. Never raises; never initialises CUDA.
    """
    environ = os.environ if environ is None else environ
    gpus: List[Gpu] = []
    driver = None
    how = []
    if environ.get("MAMBA_SSM_NO_NVML") != "1":
        try:
            gpus, driver = _nvml()
            how.append(f"NVML: {len(gpus)} NVIDIA GPU(s)")
        except (OSError, AttributeError) as exc:
            how.append(f"NVML unavailable ({exc})")
    if not gpus and driver is None:
        smi = shutil.which("nvidia-smi", path=environ.get("PATH"))
        if smi:
            try:
                out = subprocess.run(
                    [smi, "--query-gpu=name,compute_cap,driver_version,uuid", "--format=csv,noheader"],
                    capture_output=True,
                    text=True,
                    timeout=30,
                )
                gpus, driver = parse_nvidia_smi(out.stdout)
                how.append(f"nvidia-smi: {len(gpus)} NVIDIA GPU(s)")
            except (OSError, subprocess.TimeoutExpired) as exc:
                how.append(f"nvidia-smi failed ({exc})")
        else:
            how.append("no nvidia-smi")
    rocminfo = shutil.which("rocminfo", path=environ.get("PATH"))
    if rocminfo:
        try:
            out = subprocess.run([rocminfo], capture_output=True, text=True, timeout=30)
            amd = parse_rocminfo(out.stdout)
            gpus = gpus + amd
            how.append(f"rocminfo: {len(amd)} AMD GPU(s)")
        except (OSError, subprocess.TimeoutExpired) as exc:
            how.append(f"rocminfo failed ({exc})")
    gpus, note = _visible(gpus, environ)
    if note:
        how.append(note)
    return gpus, driver, "; ".join(how)


# ----------------------------------------------------------------------------- everything
def detect(
    python: Optional[str] = None, environ: Optional[Mapping[str, str]] = None, gpus: bool = True
) -> Environment:
    """Detect the target environment (see the module docstring).

    ``python``: the target interpreter (default: :func:`find_target_python`). Raises DetectionError
    when that interpreter cannot be run.
    """
    environ = os.environ if environ is None else environ
    if python is None:
        python, how = find_target_python(environ)
    else:
        how = "given"
    proc = _probe_start(python, environ)  # GPUs are probed while the target reads torch
    try:
        found_gpus = detect_gpus(environ) if gpus else None
        data = _probe_result(python, proc, 120.0)
    finally:
        if proc.poll() is None:  # an unexpected error above: leave no probe process behind
            proc.kill()
            proc.communicate()
    notes = list(data.get("notes") or [])
    tags = data.get("tags")
    if not tags:
        from packaging import tags as _tags

        tags = [str(t) for t in _tags.sys_tags()]
        notes.append("the target has no packaging; tags computed by the resolver's interpreter")
    torch = data.get("torch")
    env = Environment(
        python_version=data["python_version"],
        tags=tags,
        platform=data["platform"],
        machine=data["machine"],
        implementation=data["implementation"],
        libc=data.get("libc"),
        executable=data["executable"],
        prefix=data["prefix"],
        torch=TorchInfo(**{k: torch.get(k) for k in TorchInfo.__dataclass_fields__}) if torch else None,
        target_source=how,
        notes=notes,
    )
    if found_gpus is not None:
        env.gpus, env.driver_version, env.gpu_probe = found_gpus
    return env
