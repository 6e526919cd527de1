"""The CUDA toolkit root torch's cpp_extension would guess, read from the environment and PATH alone.

torch takes ``CUDA_HOME`` (else ``CUDA_PATH``), else ``dirname(dirname(which nvcc))``. When the ``nvcc``
on PATH is a wrapper script (``/usr/local/bin/nvcc`` holding ``exec /usr/local/cuda-13.0/bin/nvcc
"$@"``) that guess is ``/usr/local``, which is no toolkit root, and a source build fails to link
``-lcudart``. setup.py's preflight (``_build.toolkit.locate_cuda``) and every printed source-build
command (``_advice``) name the wrapper's target instead. Standard library only; nothing is run.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
from typing import Mapping, Optional


def is_script(path: str) -> bool:
    """Whether ``path`` starts with ``#!`` (a script, not the nvcc executable)."""
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


def script_target_home(path: str) -> Optional[str]:
    """For a wrapper script like ``exec /usr/local/cuda-13.0/bin/nvcc "$@"`` (the path bare or quoted),
    the toolkit root; None when the script names no absolute ``<root>/bin/nvcc``."""
    try:
        with open(path, errors="replace") as f:
            text = f.read(20000)
    except OSError:
        return None
    quoted = re.search(r"([\"'])(/[^\"'\n]+)/bin/nvcc\1", text)  # a root with spaces is quoted
    if quoted:
        return quoted.group(2)
    m = re.search(r"(/[^\s\"']+)/bin/nvcc\b", text)
    return m.group(1) if m else None


def is_toolkit_root(home: str) -> bool:
    """Whether ``home`` holds the CUDA runtime's header and library (what the link needs)."""
    has_header = os.path.isfile(os.path.join(home, "include", "cuda_runtime.h")) or bool(
        glob.glob(os.path.join(home, "targets", "*", "include", "cuda_runtime.h"))
    )
    has_lib = bool(
        glob.glob(os.path.join(home, "lib64", "libcudart.so*"))
        or glob.glob(os.path.join(home, "lib", "libcudart.so*"))
        or glob.glob(os.path.join(home, "targets", "*", "lib", "libcudart.so*"))
    )
    return has_header and has_lib


def misleading_wrapper(env: Mapping[str, str], guessed: Optional[str] = None) -> Optional[str]:
    """The ``nvcc`` wrapper script on ``env["PATH"]`` that makes torch guess a wrong toolkit root, or None.

    It is returned only when ``CUDA_HOME`` and ``CUDA_PATH`` are unset in ``env``, the ``nvcc`` on PATH is
    a script, and the folder torch guesses (``guessed``, default ``dirname(dirname(which nvcc))``) is not
    a toolkit root. Never raises.
    """
    if env.get("CUDA_HOME") or env.get("CUDA_PATH"):
        return None
    on_path = shutil.which("nvcc", path=env.get("PATH"))
    if not on_path or not is_script(on_path):
        return None
    if is_toolkit_root(guessed or os.path.dirname(os.path.dirname(on_path))):
        return None
    return on_path


def wrapper_toolkit_root(env: Mapping[str, str], guessed: Optional[str] = None) -> Optional[str]:
    """The toolkit root a build must be given as ``CUDA_HOME`` because torch's guess is wrong, or None:
    the ``<root>`` of the ``<root>/bin/nvcc`` that :func:`misleading_wrapper`'s script names (the
    script's text, not checked further). Never raises."""
    wrapper = misleading_wrapper(env, guessed)
    return script_target_home(wrapper) if wrapper else None
