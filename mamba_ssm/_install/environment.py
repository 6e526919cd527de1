"""Detection of the *target* environment: the interpreter, torch, platform tags, GPUs and driver.

When pip builds our sdist it runs setup.py with the target interpreter but inside an isolated build
environment (``PYTHONPATH`` pointing at ``pip-build-env-*/site``, ``PYTHONNOUSERSITE=1``), where torch
is absent or is whatever pip pulled into isolation. uv runs the build backend with the python of a
throw-away *build venv* (``VIRTUAL_ENV`` is that venv; ``UV`` and ``UV_INTERNAL__BUILD_DIR`` are set),
so ``sys.executable`` is not the target at all; the target is what the ``uv`` process was asked to
install into (``--python``, ``UV_PYTHON``, ``VIRTUAL_ENV``/``CONDA_PREFIX`` of uv's environment or the
project's ``.venv``). Either way the resolver runs the target interpreter in a subprocess with the
isolation variables removed and reads torch there (the program :mod:`.probe`, run by path), never in
the build process.

GPUs and the driver come from :mod:`mamba_ssm._gpus` (NVML, ``nvidia-smi``, ``rocminfo``), probed while
the target reads torch; neither initialises CUDA in any process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from .._gpus import Gpu, detect_gpus
from . import probe as _probe

if TYPE_CHECKING:
    from .._compat.versions import TorchBuild

__all__ = [
    "DetectionError",
    "Environment",
    "TargetTorch",
    "detect",
    "find_target_python",
    "probe_environ",
    "probe_python",
    "tags_for",
]

#: The probe program, run by path in the target interpreter.
PROBE_FILE = os.path.abspath(_probe.__file__)
PROBE_TIMEOUT_S = 120.0


class DetectionError(RuntimeError):
    """The target environment could not be probed; the message names the interpreter and the cause."""


@dataclass(frozen=True)
class TargetTorch:
    """torch in the target environment: ``torch.__version__`` (e.g. ``"2.14.1+cu130"``),
    ``torch.version.cuda`` (``"13.0"``) / ``.hip`` (``"6.2.41133-dd7f95766"``), the C++ ABI, and the
    import error when torch is installed but does not import. ``source`` says how it was read
    (:data:`.probe.IMPORT_SOURCE` or :data:`.probe.FAST_SOURCE`)."""

    version: str | None
    cuda: str | None = None
    hip: str | None = None
    cxx11_abi: bool | None = None
    git_version: str | None = None
    path: str | None = None
    error: str | None = None
    source: str | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TargetTorch:
        """From the probe's (or an ``--env-json`` file's) ``torch`` object; unknown keys are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def build(self) -> TorchBuild:
        """This torch as a :class:`mamba_ssm._compat.versions.TorchBuild` (ValueError on a bad version)."""
        from .._compat.versions import TorchBuild  # packaging is imported only when needed

        return TorchBuild(str(self.version), self.cuda, self.hip, self.cxx11_abi)


@dataclass
class Environment:
    """Everything selection needs to know about the target.

    ``tags`` are the target interpreter's supported wheel tags, most preferred first
    (``packaging.tags.sys_tags()`` there, e.g. ``"cp311-cp311-manylinux_2_36_x86_64"``);
    ``driver_version`` is the NVIDIA driver (``"580.65.06"``) or None; ``prefix`` is the target's
    ``sys.prefix`` (realpath), which keys the install record.
    """

    python_version: str
    tags: list[str]
    platform: str = "linux-x86_64"
    machine: str = "x86_64"
    implementation: str = "cpython"
    libc: str | None = None
    executable: str | None = None
    prefix: str | None = None
    torch: TargetTorch | None = None
    gpus: list[Gpu] = field(default_factory=list)
    driver_version: str | None = None
    gpu_probe: str | None = None
    target_source: str | None = None
    notes: list[str] = field(default_factory=list)

    # -- (de)serialisation -------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view (the ``--env-json`` shape)."""
        return asdict(self)

    def to_json(self) -> str:
        """JSON text (``--env-json`` files have this shape)."""
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: object) -> Environment:
        """Build from a dict; ``tags`` may be omitted when ``python_version`` and ``platform_tags``
        (e.g. ``["manylinux_2_28_x86_64"]``) are given. Raises ValueError naming a bad field."""
        if not isinstance(data, Mapping):
            raise ValueError(f"environment must be a JSON object, got {type(data).__name__}")
        values = dict(data)
        if "python_version" not in values:
            raise ValueError("environment lacks 'python_version' (e.g. \"3.11.7\")")
        platform_tags = values.pop("platform_tags", None)
        if not values.get("tags"):
            if not platform_tags:
                raise ValueError(
                    "environment lacks 'tags' (the target's packaging.tags.sys_tags()) and "
                    "'platform_tags' (e.g. [\"manylinux_2_28_x86_64\"]) to derive them from"
                )
            major, minor = (int(x) for x in str(values["python_version"]).split(".")[:2])
            values["tags"] = tags_for((major, minor), platform_tags)
        torch = values.get("torch")
        if torch is not None:
            if not isinstance(torch, Mapping) or "version" not in torch:
                raise ValueError(f"environment 'torch' must be an object with 'version', got {torch!r}")
            values["torch"] = TargetTorch.from_dict(torch)
        values["gpus"] = [g if isinstance(g, Gpu) else Gpu(**g) for g in values.get("gpus") or []]
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"environment has unknown fields {sorted(unknown)}; known: {sorted(known)}")
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> Environment:
        """Parse ``--env-json`` text; ValueError naming what is wrong."""
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"environment JSON does not parse: {exc}") from None
        return cls.from_dict(data)

    # -- derived -----------------------------------------------------------------------------
    @property
    def platform_tags(self) -> list[str]:
        """The platform tags of ``tags`` in preference order (``manylinux_2_36_x86_64``, ...)."""
        seen: list[str] = []
        for tag in self.tags:
            plat = tag.rsplit("-", 1)[-1]
            if plat != "any" and plat not in seen:
                seen.append(plat)
        return seen

    @property
    def display_platform(self) -> str:
        """The first non-``linux_*`` platform tag (the one a repaired wheel carries), else the first."""
        plat = next((p for p in self.platform_tags if not p.startswith("linux_")), None)
        return plat or (self.platform_tags[0] if self.platform_tags else self.platform)

    @property
    def has_torch(self) -> bool:
        """torch is installed in the target (its version is known)."""
        return self.torch is not None and bool(self.torch.version)

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
        return f"Python {self.python_version} on {self.display_platform}, {torch}, {gpus}{driver}"


def tags_for(python: tuple[int, int], platforms: Sequence[str]) -> list[str]:
    """CPython wheel tags, most preferred first, for ``python`` (``(3, 11)``) on ``platforms``
    (``["manylinux_2_28_x86_64", "manylinux2014_x86_64", "linux_x86_64"]``), as ``packaging.tags``
    computes them; used for declared (``--env-json``) targets."""
    from packaging import tags

    plats = list(platforms)
    out = [str(t) for t in tags.cpython_tags(python_version=python, platforms=plats)]
    out += [str(t) for t in tags.compatible_tags(python_version=python, platforms=plats)]
    return out


# ----------------------------------------------------------------------------- the target python
def _proc_chain(max_depth: int = 8) -> list[int]:
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


def _read_proc(pid: int) -> tuple[str, list[str], str, dict[str, str]] | None:
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


def _python_in(path: str, cwd: str, env: Mapping[str, str]) -> str | None:
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
    return shutil.which(path, path=env.get("PATH"))


def _uv_target(environ: Mapping[str, str]) -> tuple[str, str] | None:
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


def find_target_python(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
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


def probe_environ(environ: Mapping[str, str] | None = None) -> dict[str, str]:
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


# ----------------------------------------------------------------------------- the probe
def probe_python(
    python: str, environ: Mapping[str, str] | None = None, timeout: float = PROBE_TIMEOUT_S
) -> dict[str, Any]:
    """Run :mod:`.probe` in ``python`` (isolation removed) and return its JSON object.

    Raises DetectionError naming the interpreter when it cannot run or prints no result.
    """
    return _probe_result(python, _probe_start(python, environ), timeout)


def _probe_start(python: str, environ: Mapping[str, str] | None) -> subprocess.Popen[str]:
    home = os.path.expanduser("~")
    try:
        return subprocess.Popen(
            [python, PROBE_FILE],
            env=probe_environ(environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=home if os.path.isdir(home) else None,
        )
    except OSError as exc:
        raise DetectionError(f"cannot run the target interpreter {python!r}: {exc}") from None


def _probe_result(python: str, proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise DetectionError(
            f"the target interpreter {python!r} did not answer within {timeout:g} s"
        ) from None
    i, j = out.rfind(_probe.BEGIN), out.rfind(_probe.END)
    if i < 0 or j < i:
        raise DetectionError(
            f"the target interpreter {python!r} printed no probe result (exit {proc.returncode}): "
            f"{(err or out)[-600:]}"
        )
    try:
        data = json.loads(out[i + len(_probe.BEGIN) : j])
    except ValueError as exc:
        raise DetectionError(
            f"the target interpreter {python!r} printed a malformed probe result ({exc})"
        ) from None
    if not isinstance(data, dict):
        raise DetectionError(
            f"the target interpreter {python!r} printed a malformed probe result (not an object)"
        )
    return data


# ----------------------------------------------------------------------------- everything
def detect(
    python: str | None = None, environ: Mapping[str, str] | None = None, gpus: bool = True
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
        data = _probe_result(python, proc, PROBE_TIMEOUT_S)
    finally:
        if proc.poll() is None:  # an unexpected error above: leave no probe process behind
            proc.kill()
            proc.communicate()
    notes = list(data.get("notes") or [])
    tags = data.get("tags")
    if not tags:
        from packaging import tags as _tags  # only for a target without packaging

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
        torch=TargetTorch.from_dict(torch) if torch else None,
        target_source=how,
        notes=notes,
    )
    if found_gpus is not None:
        env.gpus, env.driver_version, env.gpu_probe = list(found_gpus.gpus), found_gpus.driver, found_gpus.how
    return env
