"""What the user asked for: ``MAMBA_SSM_BACKEND`` / :func:`set_backend`, and ``MAMBA_SSM_CONV1D``.

Read at every call (a test or a notebook may change the environment between calls); nothing here
imports torch.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from .._compat.textenum import TextEnum

__all__ = [
    "CHOICES",
    "ENV_BACKEND",
    "ENV_CONV1D",
    "ENV_NO_WARNING",
    "Config",
    "Conv1dPreference",
    "Requested",
    "conv1d_preference",
    "current",
    "get_backend",
    "set_override",
]

ENV_BACKEND = "MAMBA_SSM_BACKEND"
ENV_NO_WARNING = "MAMBA_SSM_NO_FALLBACK_WARNING"
ENV_CONV1D = "MAMBA_SSM_CONV1D"
SET_BACKEND = "mamba_ssm.set_backend"
DEFAULT = "default"


class Requested(TextEnum):
    """The backend asked for (``cuda`` is accepted as an alias of ``compiled``)."""

    AUTO = "auto"
    COMPILED = "compiled"
    TRITON = "triton"
    TORCH = "torch"
    REF = "ref"


#: What MAMBA_SSM_BACKEND and set_backend accept.
CHOICES = ("auto", "compiled", "cuda", "triton", "torch", "ref")
_ALIASES = {"cuda": Requested.COMPILED}


class Conv1dPreference(TextEnum):
    """``MAMBA_SSM_CONV1D``: whose causal conv1d kernels come first on CUDA."""

    AUTO = "auto"  # mamba_ssm._C's
    CAUSAL_CONV1D = "causal_conv1d"  # the causal-conv1d package's


@dataclass(frozen=True)
class Config:
    """The backend asked for and where that came from (``mamba_ssm.set_backend``, ``MAMBA_SSM_BACKEND``
    or ``default``)."""

    requested: Requested
    source: str


_lock = threading.Lock()
_override: Requested | None = None  # set_backend's value; None: the environment decides


def _parse(value: object, source: str) -> Requested:
    if not isinstance(value, str):
        raise TypeError(f"{source} must be a string, one of {', '.join(CHOICES)}; got {value!r}")
    name = value.strip().lower()
    if name not in CHOICES:
        raise ValueError(
            f"{source}={value!r} is not a mamba_ssm backend; choose one of {', '.join(CHOICES)} "
            f"(cuda is an alias of compiled)"
        )
    return _ALIASES.get(name) or Requested(name)


def current() -> Config:
    """The backend asked for now.

    Raises:
        ValueError: ``MAMBA_SSM_BACKEND`` holds a value that is not a backend (the message names it).
    """
    override = _override
    if override is not None:
        return Config(override, SET_BACKEND)
    raw = os.environ.get(ENV_BACKEND)
    if raw is None or raw.strip() == "":
        return Config(Requested.AUTO, DEFAULT)
    return Config(_parse(raw, ENV_BACKEND), ENV_BACKEND)


def set_override(name: str | None) -> str | None:
    """Set (or, with None, clear) the process-wide choice that overrides ``MAMBA_SSM_BACKEND``;
    returns the previous one. ValueError / TypeError for a name that is not a choice."""
    global _override  # the process-wide override
    value = None if name is None else _parse(name, "backend")
    with _lock:
        previous, _override = _override, value
    return None if previous is None else str(previous)


def get_backend() -> str:
    """The backend asked for: ``"auto"``, ``"compiled"``, ``"triton"``, ``"torch"`` or ``"ref"``.

    That is :func:`set_backend`'s value when set, else ``MAMBA_SSM_BACKEND`` (``cuda`` reported as
    ``compiled``), else ``"auto"``. What actually runs on a device is ``backend_for``'s answer.

    Raises:
        ValueError: ``MAMBA_SSM_BACKEND`` holds a value that is not a backend.
    """
    return str(current().requested)


def conv1d_preference() -> Conv1dPreference:
    """``MAMBA_SSM_CONV1D``: ``auto`` (default: mamba_ssm._C's kernels first) or ``causal_conv1d``.

    Raises:
        ValueError: the variable holds another value (the message names it and the choices).
    """
    raw = os.environ.get(ENV_CONV1D, "")
    value = raw.strip().lower().replace("-", "_")
    if value in ("", "auto"):
        return Conv1dPreference.AUTO
    if value == "causal_conv1d":
        return Conv1dPreference.CAUSAL_CONV1D
    raise ValueError(
        f"{ENV_CONV1D}={raw!r} is not a choice; use auto (mamba_ssm's compiled kernels first) or "
        f"causal_conv1d (the causal-conv1d package's CUDA kernels first), or unset it"
    )


def warnings_silenced() -> bool:
    """``MAMBA_SSM_NO_FALLBACK_WARNING`` is set to something other than ``0``/``false``/``no``/``off``."""
    return os.environ.get(ENV_NO_WARNING, "").strip().lower() not in ("", "0", "false", "no", "off")


def _reset_for_tests() -> None:
    global _override  # noqa: PLW0603
    with _lock:
        _override = None
