"""The fallback warning: given once per reason (or once per op for single calls), naming the user's
line and the fix, silenced by ``MAMBA_SSM_NO_FALLBACK_WARNING=1``."""

from __future__ import annotations

import os
import sys
import threading
import warnings
from typing import Callable, Hashable

from .config import warnings_silenced

__all__ = ["MambaFallbackWarning", "warn_once"]


class MambaFallbackWarning(UserWarning):
    """Warned (once per process per reason) when an op runs on the PyTorch fallback instead of the
    compiled kernels. Silence it with ``MAMBA_SSM_NO_FALLBACK_WARNING=1`` or the ``warnings`` module."""


_lock = threading.Lock()
_warned: set[Hashable] = set()
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _library_dirs() -> tuple[str, ...]:
    """The directories whose frames a warning skips: this package's, and torch's when torch is imported
    (``module(x)`` goes through ``torch/nn/modules/module.py``, ``Function.apply`` through
    ``torch/autograd``; neither is the user's line). torch is not imported here for it."""
    dirs = [_PACKAGE_DIR]
    torch_file = getattr(sys.modules.get("torch"), "__file__", None)
    if torch_file:
        dirs.append(os.path.dirname(os.path.abspath(torch_file)) + os.sep)
    return tuple(dirs)


def _user_stacklevel() -> int:
    """The warnings stacklevel, seen from :func:`warn_once`, of the first frame outside this package and
    torch (the user's call of selective_scan_fn, ``Mamba(...)(x)``, ...)."""
    skipped = _library_dirs()
    level = 1
    frame = sys._getframe(1)  # warn_once's frame; stacklevel 1 names it
    while frame is not None and frame.f_code.co_filename.startswith(skipped):
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return level


def warn_once(key: Hashable, message: Callable[[], str]) -> None:
    """Warn ``message()`` unless ``key`` was warned already; the text is only built when warned (it
    reads the install record from disk). The warning names the user's line."""
    if key in _warned or warnings_silenced():  # the common case: no lock (and traceable by dynamo)
        return
    with _lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message(), MambaFallbackWarning, stacklevel=_user_stacklevel())


def _reset_for_tests() -> None:
    with _lock:
        _warned.clear()
