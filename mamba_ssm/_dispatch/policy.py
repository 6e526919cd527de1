"""The policy: which backend runs an op on a device, given what was asked for and what can run there.

:func:`decide` is the one decision, one loop over the op's backends (:data:`.table.TABLE`, most preferred
first) with the request as a filter; it warns and raises nothing (the callers in ``__init__`` do). The
request (``MAMBA_SSM_BACKEND`` / ``set_backend``, and ``MAMBA_SSM_CONV1D`` for the conv ops) keeps:

* ``auto``: the op's kernels, then its PyTorch code (the causal-conv1d package first when
  ``MAMBA_SSM_CONV1D=causal_conv1d``);
* ``compiled``: the same, without the package unless it comes first; the compiled kernels are forced
  (they run or the call is an error); an op without them runs its Triton kernel where it can;
* ``triton``: the op's kernels but the package; the Triton kernels are forced on a GPU where they cannot
  run (an error there; ops without them run their compiled kernels where they can);
* ``torch``: the PyTorch code; ``ref``: the sequential reference where the op has one, else its PyTorch
  code.

The first backend kept that can run on the device wins; :class:`BackendChoice` says why when it is not
the op's first kernel, with the fix that would bring that kernel back.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import _devices
from .._backends import BACKENDS, Unavailable
from .config import ENV_CONV1D, Config, Conv1dPreference, Requested, conv1d_preference
from .table import TABLE, Backend

__all__ = ["BackendChoice", "decide"]

_EVERYWHERE = (Backend.TORCH, Backend.REF)


@dataclass(frozen=True)
class BackendChoice:
    """What runs ``op`` on ``device`` and why.

    ``backend`` is None when the requested backend was forced and cannot run there (calls raise);
    ``reason`` and ``fix`` explain a choice other than the op's kernels (``fix`` None: nothing to repair,
    e.g. the Triton ops on a CPU).
    """

    op: str
    device: str
    backend: str | None
    requested: Requested
    source: str
    reason: str | None = None
    fix: str | None = None

    @property
    def error(self) -> bool:
        """The requested backend was forced and cannot run here."""
        return self.backend is None

    @property
    def fixable_fallback(self) -> bool:
        """The PyTorch fallback runs for a reason the user can fix (the warning names it)."""
        return self.backend == Backend.TORCH and bool(self.fix)


def _kept(backends: tuple[str, ...], requested: Requested, preference: Conv1dPreference) -> list[str]:
    """The op's backends the request keeps, in the order they are tried."""
    if requested is Requested.TORCH:
        return [Backend.TORCH]
    if requested is Requested.REF:
        return [Backend.REF if Backend.REF in backends else Backend.TORCH]
    package_first = preference is Conv1dPreference.CAUSAL_CONV1D and Backend.CAUSAL_CONV1D in backends
    kept: list[str] = [Backend.CAUSAL_CONV1D] if package_first and requested is not Requested.TRITON else []
    for backend in backends:
        if backend == Backend.REF or (
            backend == Backend.CAUSAL_CONV1D and (package_first or requested is not Requested.AUTO)
        ):
            continue
        kept.append(backend)
    return kept


def _forced(backend: str, requested: Requested, missing: Unavailable) -> bool:
    """The request names ``backend``, which cannot run: an error, not a fallback (Triton only on a GPU
    where it could be repaired)."""
    if backend == Backend.COMPILED:
        return requested is Requested.COMPILED
    return backend == Backend.TRITON and requested is Requested.TRITON and missing.fix is not None


def _why(
    op: str,
    backend: str,
    device: _devices.DeviceKey,
    config: Config,
    preference: Conv1dPreference,
    primary: Unavailable | None,
) -> str | None:
    """Why ``backend`` runs ``op`` (None: nothing to say); ``primary`` is why the op's first kernel the
    request kept cannot run (None: it can, or none was kept)."""
    requested, source = config.requested, config.source
    conv = Backend.CAUSAL_CONV1D in TABLE[op]
    if backend == Backend.COMPILED:
        if conv:
            why = "mamba_ssm._C's causal conv1d kernels"
            package = BACKENDS[Backend.CAUSAL_CONV1D].unavailable(op, device) is None
            if package and requested in (Requested.AUTO, Requested.COMPILED):
                why += f" (preferred over the installed causal-conv1d package; {ENV_CONV1D}=causal_conv1d selects it)"
            return why
        if requested is Requested.TRITON:
            return f"{op} has no Triton kernel; the compiled kernel runs ({source}=triton)"
        return None
    if backend == Backend.TRITON:
        if requested is Requested.COMPILED:
            return f"mamba_ssm._C has no kernel for {op}; its Triton kernel is the GPU kernel"
        return None
    if backend == Backend.CAUSAL_CONV1D:
        if preference is Conv1dPreference.CAUSAL_CONV1D:
            return f"the causal-conv1d package's kernels ({ENV_CONV1D}=causal_conv1d)"
        return f"the causal-conv1d package's kernels, as mamba_ssm._C cannot run here: {primary and primary.reason}"
    if backend != Backend.TORCH:
        return None
    if conv:
        if BACKENDS[Backend.CAUSAL_CONV1D].unavailable(op, device) is None:  # installed, on a CUDA device
            return (
                f"the causal-conv1d package is installed but not used: the {requested} backend was asked for "
                f"({source}); {op} runs on its PyTorch implementation"
            )
        if primary is not None:
            return primary.reason
        return f"the {requested} backend was asked for ({source}); the PyTorch implementation runs"
    if primary is not None:
        return primary.reason
    if Backend.TRITON in TABLE[op]:
        if requested is Requested.REF:
            return f"{op} has one PyTorch implementation, which is also its reference ({source}=ref)"
        if requested is Requested.TORCH:
            return f"{source}=torch: {op} runs on its PyTorch implementation, not its Triton kernel"
    return None


def decide(op: str, device: _devices.DeviceKey, config: Config) -> BackendChoice:
    """The backend that runs ``op`` (a key of :data:`.table.TABLE`) on ``device`` under ``config``."""
    requested, source, here = config.requested, config.source, str(device)
    preference = conv1d_preference() if Backend.CAUSAL_CONV1D in TABLE[op] else Conv1dPreference.AUTO
    kept = _kept(TABLE[op], requested, preference)
    kernels = [b for b in TABLE[op] if b in kept and b not in _EVERYWHERE]
    answers: dict[str, Unavailable | None] = {}
    if kernels:  # asked first: its fix is the one every other choice reports
        answers[kernels[0]] = BACKENDS[kernels[0]].unavailable(op, device)
    primary = answers.get(kernels[0]) if kernels else None
    for backend in kept:
        if backend not in answers:
            answers[backend] = BACKENDS[backend].unavailable(op, device)
        missing = answers[backend]
        if missing is None:
            why = _why(op, backend, device, config, preference, primary)
            fix = None if primary is None or backend == kernels[0] else primary.fix
            return BackendChoice(op, here, backend, requested, source, why, fix)
        if _forced(backend, requested, missing):
            return BackendChoice(op, here, None, requested, source, missing.reason, missing.fix)
    raise AssertionError(f"no backend of {op} runs on {here}: {kept}")  # TORCH runs everywhere
