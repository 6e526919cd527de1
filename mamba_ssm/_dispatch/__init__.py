"""Which implementation runs an op on a device: :func:`call`, the one entry every public op goes
through, and the answers doctor asks for.

Backends (:class:`Backend`): ``compiled`` (the kernels of ``mamba_ssm._C``), ``triton`` (the Triton
kernels, CUDA/ROCm), ``causal-conv1d`` (that package's CUDA kernels, conv ops only), ``torch`` (the
PyTorch fallback, every device) and ``ref`` (the sequential references). Which ones implement an op
is the table in :mod:`.table`; whether one can run on a device, takes a call and runs it is the backend
object's answer (:data:`mamba_ssm._backends.BACKENDS`); the rules are :mod:`.policy`'s.

The choice comes from :func:`set_backend` when called, else ``MAMBA_SSM_BACKEND`` = ``auto`` (default)
| ``compiled`` | ``cuda`` (an alias of ``compiled``) | ``triton`` | ``torch`` | ``ref``. ``auto`` uses the GPU
kernels an op has (compiled, else Triton) where they can run and falls back to PyTorch otherwise,
warning once per process (a :class:`MambaFallbackWarning`, silenced by
``MAMBA_SSM_NO_FALLBACK_WARNING=1``) with the reason and the fix. Forcing ``compiled`` where it cannot
run raises :class:`RuntimeError` with the reason instead of falling back; so does forcing ``triton`` for an
op with a Triton kernel where Triton cannot run (ops without one behave as under ``auto``).

A public op checks its arguments and hands them to :func:`call`, which asks :func:`backend_for` (the
answer is cached per op, device and setting), then the chosen backend whether it takes this particular
call (when not, :func:`fallback_for_call`: the PyTorch backend runs it), and runs it. :func:`plan` gives the same
answer without warning or raising (doctor). Nothing here runs at ``import mamba_ssm``; the compiled
module is loaded at the first question that could use it, a GPU's coverage checked at the first call
on it.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

from .. import _advice, _devices, _loader
from .._backends import BACKENDS, Unavailable
from .._backends import package as _package
from .._backends import triton as _triton
from .._backends.triton import TRITON_MIN_VERSION
from . import config as _config
from . import fallback, policy
from .config import CHOICES, ENV_BACKEND, ENV_CONV1D, ENV_NO_WARNING, Config, Requested, current, get_backend
from .fallback import MambaFallbackWarning
from .policy import BackendChoice
from .table import COMPILED_OPS, CONV1D_OPS, OPS, SHARES, TABLE, TRITON_OPS, Backend

__all__ = [
    "BACKENDS",
    "CHOICES",
    "COMPILED_OPS",
    "CONV1D_OPS",
    "ENV_BACKEND",
    "ENV_CONV1D",
    "ENV_NO_WARNING",
    "OPS",
    "SHARES",
    "TABLE",
    "TRITON_MIN_VERSION",
    "TRITON_OPS",
    "Backend",
    "BackendChoice",
    "MambaFallbackWarning",
    "Requested",
    "Unavailable",
    "backend_for",
    "call",
    "causal_conv1d_package",
    "fallback_for_call",
    "get_backend",
    "plan",
    "set_backend",
]

causal_conv1d_package = _package.causal_conv1d_package

_lock = threading.Lock()
_choices: dict[tuple[str, _devices.DeviceKey, Config, str], BackendChoice] = {}


def _check_op(op: str) -> None:
    if op not in TABLE:
        raise ValueError(f"unknown op {op!r} for backend dispatch; known ops: {', '.join(OPS)}")


def plan(op: str, device: Any) -> BackendChoice:
    """What :func:`backend_for` would choose, without warning or raising for an unavailable backend.

    Args:
        op: one of :data:`OPS`.
        device: a torch.device, a device string, a CUDA ordinal or a tensor.

    Returns:
        The :class:`BackendChoice`; its ``backend`` is None (``error``) when the requested backend was
        forced and cannot run (``backend_for`` raises then); ``reason``/``fix`` explain a fallback.

    Raises:
        ValueError: unknown op, or a bad ``MAMBA_SSM_BACKEND`` / ``MAMBA_SSM_CONV1D`` value.
    """
    _check_op(op)
    return policy.decide(op, _devices.device_key(device), current())


def _cached(op: str, device: Any) -> BackendChoice:
    """:func:`plan`, remembered per op, device and setting: a decode step's dispatch is a lookup."""
    _check_op(op)
    key = _devices.device_key(device)
    config = current()
    conv = os.environ.get(ENV_CONV1D, "") if op in CONV1D_OPS else ""
    cache_key = (op, key, config, conv)
    choice = _choices.get(cache_key)
    if choice is None:
        choice = policy.decide(op, key, config)
        with _lock:
            if len(_choices) > 256:
                _choices.clear()
            _choices[cache_key] = choice
    return choice


def set_backend(name: str | None) -> str | None:
    """Choose the backend for every op in this process, overriding ``MAMBA_SSM_BACKEND``.

    Args:
        name: ``"auto"``, ``"compiled"`` (alias ``"cuda"``), ``"triton"``, ``"torch"`` or ``"ref"``; ``None``
            goes back to what the environment variable says.

    Returns:
        The previous override (a normalised name, or None when the environment decided).

    Raises:
        ValueError: ``name`` is not one of the choices (the message names it and the choices).
        TypeError: ``name`` is neither a string nor None.
    """
    previous = _config.set_override(name)
    with _lock:
        _choices.clear()
    return previous


def _fallback_message(choice: BackendChoice) -> str:
    text = (
        f"mamba_ssm: {choice.op} on {choice.device} runs on the PyTorch fallback (slower): {choice.reason}."
    )
    if choice.fix:
        text += f" Fix: {choice.fix}."
    text += _advice.install_notes(_loader.install_record(), text)
    text += f" Set {ENV_NO_WARNING}=1 to silence this warning; `python -m mamba_ssm doctor` explains more."
    return text


def _backend_for_eager(op: str, device: Any) -> str:
    choice = _cached(op, device)
    if choice.backend is None:
        forced = "triton" if choice.requested is Requested.TRITON else "compiled"
        raise RuntimeError(
            f"mamba_ssm: the {forced} backend was forced ({choice.source}="
            f"{choice.requested}) but cannot run {op} on {choice.device}: {choice.reason}. "
            f"Fix: {choice.fix}; or unset {ENV_BACKEND} (auto) to use the PyTorch fallback."
        )
    if choice.fixable_fallback:
        fallback.warn_once(("unavailable", choice.reason), lambda: _fallback_message(choice))
    return choice.backend


def _fallback_for_call_eager(op: str, device: Any, reason: str) -> str:
    _check_op(op)
    config = current()
    kernel = TABLE[op][0]
    forced = (config.requested is Requested.COMPILED and kernel is Backend.COMPILED) or (
        config.requested is Requested.TRITON and kernel is Backend.TRITON
    )
    where = _devices.describe(device)
    if forced:
        raise RuntimeError(
            f"mamba_ssm: the {config.requested} backend was forced ({config.source}={config.requested}) but "
            f"cannot run this {op} call on {where}: {reason}. Unset {ENV_BACKEND} (auto) to let such calls run "
            "on the PyTorch fallback."
        )
    fallback.warn_once(
        ("call", op),
        lambda: (
            f"mamba_ssm: this {op} call on {where} runs on the PyTorch fallback: {reason}. "
            f"Set {ENV_NO_WARNING}=1 to silence this warning."
        ),
    )
    return Backend.TORCH


def _compiling() -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.compiler.is_compiling())
    except AttributeError:  # an old torch without torch.compiler
        return False


def _at_trace_time(question: str, op: str, device: str, reason: str) -> str:
    """:func:`backend_for` (``question="backend"``) or :func:`fallback_for_call` (``"fallback"``) as
    ``torch.compile`` sees them: called eagerly while tracing, the answer baked into the graph as a
    constant (finding and loading ``_C`` touches the file system, which dynamo cannot trace)."""
    if question == "fallback":
        return str(_fallback_for_call_eager(op, device, reason))
    return str(_backend_for_eager(op, device))


def _loaded_at_trace_time(name: str, op: str) -> str:
    """``name``, after importing what backend ``name`` runs and checks for the call ``op``: called eagerly
    while ``torch.compile`` traces (dynamo does not trace an import; the traced call then finds the
    modules as attributes of their packages: :func:`mamba_ssm._backends.base.resolve`)."""
    BACKENDS[name].load(op)
    return name


# What torch._dynamo.assume_constant_result sets; set here so that import needs no torch, and so that
# the marking is in place before tracing starts (dynamo refuses to trace the decorator itself).
_at_trace_time._dynamo_marked_constant = True  # type: ignore[attr-defined]
_loaded_at_trace_time._dynamo_marked_constant = True  # type: ignore[attr-defined]


def backend_for(op: str, device: Any) -> str:
    """The backend that runs ``op`` on ``device`` for this call.

    Args:
        op: one of :data:`OPS` (``"selective_scan"``, ``"selective_state_update"``, ...).
        device: the device of the op's inputs: a torch.device, a device string, a CUDA ordinal or a
            tensor. A CUDA device's coverage (compute capability vs the build's SASS/PTX) is checked
            at its first call and cached.

    Returns:
        A :class:`Backend` (a ``str``: ``"compiled"``, ``"triton"``, ``"causal-conv1d"``, ``"torch"`` or
        ``"ref"``), the name of a backend of :data:`BACKENDS`. When it is ``compiled``, the compiled
        kernels' Python face has been imported; when ``triton``, the Triton kernels.

    Raises:
        RuntimeError: ``compiled`` was forced (``MAMBA_SSM_BACKEND=compiled|cuda`` or
            ``set_backend("compiled")``) and cannot run on ``device``, or ``triton`` was forced for an op
            with a Triton kernel on a GPU where Triton cannot run; the message gives the reason and the fix.
        ValueError: unknown ``op``, or ``MAMBA_SSM_BACKEND`` holds a value that is not a backend.

    Falling back from ``auto`` to ``torch`` warns once per process and reason
    (:class:`MambaFallbackWarning`), unless ``MAMBA_SSM_NO_FALLBACK_WARNING=1``.

    Under ``torch.compile`` (also ``fullgraph=True``) the choice is made eagerly at trace time and
    baked into the graph as a constant; changing the setting afterwards needs a recompile
    (``torch._dynamo.reset()``).
    """
    if _compiling():
        return _named(_at_trace_time("backend", op, _devices.describe(device), ""))
    return _backend_for_eager(op, device)


def fallback_for_call(op: str, device: Any, reason: str) -> str:
    """What :func:`call` does when the chosen backend cannot take this particular call.

    For example the compiled backend's ``supports`` says d_state 512 exceeds the kernel's limit of 256.

    Args:
        op: one of :data:`OPS`.
        device: the inputs' device (for the message).
        reason: why the kernel cannot take this call, one sentence.

    Returns:
        ``Backend.TORCH``: run this call on the PyTorch fallback (warned once per process per op).

    Raises:
        RuntimeError: the compiled backend was forced for a compiled op, or the triton backend for a
            Triton op; the message carries ``reason``.
    """
    if _compiling():
        return _named(_at_trace_time("fallback", op, _devices.describe(device), str(reason)))
    return _fallback_for_call_eager(op, device, reason)


def _named(name: str) -> str:
    """The :class:`Backend` member called ``name`` (a backend added at run time: its name)."""
    return Backend(name) if name in _KNOWN else name


_KNOWN = frozenset(Backend.choices())


def _device_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The device of the first tensor among the arguments."""
    import torch  # an op's arguments are tensors: torch is imported

    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            return value.device
    raise TypeError("mamba_ssm._dispatch.call: the op's arguments hold no tensor to take the device from")


def call(op: str, *args: Any, **kwargs: Any) -> Any:
    """Run ``op`` with its (checked) arguments on the backend chosen for the device of its first tensor.

    The choice is :func:`backend_for`'s (cached; its warning or error when the kernels cannot run
    there). When the chosen backend's ``supports`` names a reason this call cannot run on it, the call
    runs on the PyTorch backend (:func:`fallback_for_call`: warned once per op; an error when that
    backend was forced). A call listed in :data:`SHARES` runs on the backend chosen for its op.

    Args:
        op: one of :data:`OPS`, or a call of :data:`SHARES`.
        args, kwargs: the op's arguments, as its backends' implementations take them.

    Returns:
        What the backend's implementation returns.

    Raises:
        RuntimeError: a forced backend cannot run on the device or cannot take this call.
        ValueError: unknown op, or a bad ``MAMBA_SSM_BACKEND`` / ``MAMBA_SSM_CONV1D`` value.
        TypeError: no tensor among the arguments.
    """
    decided = SHARES.get(op, op)
    device = _device_of(args, kwargs)
    # Plain strings as the registry's keys (under torch.compile a TextEnum member cannot be hashed).
    compiling = _compiling()
    if compiling:
        name = _loaded_at_trace_time(_at_trace_time("backend", decided, _devices.describe(device), ""), op)
    else:
        name = str(_backend_for_eager(decided, device))
    backend = BACKENDS[name]
    reason = backend.supports(op, *args, **kwargs)
    if reason is not None:
        if compiling:
            name = _at_trace_time("fallback", decided, _devices.describe(device), str(reason))
            name = _loaded_at_trace_time(name, op)
        else:
            name = str(_fallback_for_call_eager(decided, device, reason))
        backend = BACKENDS[name]
    return backend.run(op, *args, **kwargs)


def _reset_for_tests() -> None:
    """Forget warnings given, the override, the cached choices and the Triton check (tests only)."""
    _config._reset_for_tests()
    fallback._reset_for_tests()
    _triton._reset_for_tests()
    with _lock:
        _choices.clear()
