"""The policy: which backend runs an op on a device, given what was asked for and what can run there.

:func:`decide` is the one decision; it warns and raises nothing (the callers in ``__init__`` do). The
rules, per op (:data:`.table.TABLE`):

* an op with compiled kernels: ``auto`` runs them where they can run, else the PyTorch fallback (with
  the reason and the fix); ``compiled`` runs them or is an error; ``triton`` runs them where they can
  (the op has no Triton kernel); ``torch`` runs its PyTorch code, ``ref`` its sequential reference
  where it has one, else its PyTorch code. The conv ops may run the causal-conv1d package's kernels
  on CUDA instead (``MAMBA_SSM_CONV1D=causal_conv1d``, or ``auto`` where the compiled ones cannot);
* an op with Triton kernels: ``auto`` and ``compiled`` run them where they can, else PyTorch; ``triton``
  runs them or, on a GPU where they cannot, is an error; ``torch`` / ``ref`` run its PyTorch code;
* an op with one implementation runs it whatever is asked for.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import _devices
from . import backends
from .config import ENV_CONV1D, Config, Conv1dPreference, Requested, conv1d_preference
from .table import COMPILED_OPS, TABLE, Backend

__all__ = ["BackendChoice", "decide"]


@dataclass(frozen=True)
class BackendChoice:
    """What runs ``op`` on ``device`` and why.

    ``backend`` is None when the requested backend was forced and cannot run there (calls raise);
    ``reason`` and ``fix`` explain a choice other than the op's kernels (``fix`` None: nothing to repair,
    e.g. the Triton ops on a CPU).
    """

    op: str
    device: str
    backend: Backend | None
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
        return self.backend is Backend.TORCH and bool(self.fix)


def _decide_triton(op: str, device: _devices.DeviceKey, config: Config) -> BackendChoice:
    requested, source = config.requested, config.source
    here = str(device)
    reason: str | None = None
    if requested is Requested.REF:
        reason = f"{op} has one PyTorch implementation, which is also its reference ({source}=ref)"
        return BackendChoice(op, here, Backend.TORCH, requested, source, reason)
    if requested is Requested.TORCH:
        reason = f"{source}=torch: {op} runs on its PyTorch implementation, not its Triton kernel"
        return BackendChoice(op, here, Backend.TORCH, requested, source, reason)
    missing = backends.triton_unavailable(device)
    if missing is None:
        if requested is Requested.COMPILED:
            reason = f"mamba_ssm._C has no kernel for {op}; its Triton kernel is the GPU kernel"
        return BackendChoice(op, here, Backend.TRITON, requested, source, reason)
    forced = requested is Requested.TRITON and missing.fix is not None  # forced on a GPU where it cannot run
    return BackendChoice(
        op, here, None if forced else Backend.TORCH, requested, source, missing.reason, missing.fix
    )


def _decide_compiled(op: str, device: _devices.DeviceKey, config: Config) -> BackendChoice:
    requested, source = config.requested, config.source
    here = str(device)
    if requested in (Requested.TORCH, Requested.REF):
        has_ref = Backend.REF in TABLE[op]
        backend = Backend.REF if requested is Requested.REF and has_ref else Backend.TORCH
        return BackendChoice(op, here, backend, requested, source)
    missing = backends.compiled_unavailable(op, device)
    if missing is None:
        reason = None
        if requested is Requested.TRITON:
            reason = f"{op} has no Triton kernel; the compiled kernel runs ({source}=triton)"
        return BackendChoice(op, here, Backend.COMPILED, requested, source, reason)
    forced = requested is Requested.COMPILED
    return BackendChoice(
        op, here, None if forced else Backend.TORCH, requested, source, missing.reason, missing.fix
    )


def _decide_conv(op: str, device: _devices.DeviceKey, config: Config) -> BackendChoice:
    """The compiled decision, with the causal-conv1d package's kernels where they come first or where
    the compiled ones cannot run under ``auto``."""
    preference = conv1d_preference()
    compiled = _decide_compiled(op, device, config)
    requested, source = config.requested, config.source
    package = (
        requested in (Requested.AUTO, Requested.COMPILED) and backends.package_unavailable(device) is None
    )
    here = str(device)
    if package and preference is Conv1dPreference.CAUSAL_CONV1D:
        why = f"the causal-conv1d package's kernels ({ENV_CONV1D}=causal_conv1d)"
        return BackendChoice(op, here, Backend.CAUSAL_CONV1D, requested, source, why, compiled.fix)
    if compiled.backend is Backend.COMPILED:
        why = "mamba_ssm._C's causal conv1d kernels"
        if package:
            why += f" (preferred over the installed causal-conv1d package; {ENV_CONV1D}=causal_conv1d selects it)"
        return BackendChoice(op, here, Backend.COMPILED, requested, source, why)
    if compiled.error:
        return compiled
    if package and requested is Requested.AUTO:
        why = f"the causal-conv1d package's kernels, as mamba_ssm._C cannot run here: {compiled.reason}"
        return BackendChoice(op, here, Backend.CAUSAL_CONV1D, requested, source, why, compiled.fix)
    if device.type == "cuda" and backends.causal_conv1d_package() is not None:
        why = (
            f"the causal-conv1d package is installed but not used: the {requested} backend was asked for "
            f"({source}); {op} runs on its PyTorch implementation"
        )
    elif compiled.reason:
        why = compiled.reason
    else:
        why = f"the {requested} backend was asked for ({source}); the PyTorch implementation runs"
    return BackendChoice(op, here, Backend.TORCH, requested, source, why, compiled.fix)


def _decide_single(op: str, device: _devices.DeviceKey, config: Config) -> BackendChoice:
    requested, source = config.requested, config.source
    reason = f"mamba_ssm._C has no kernel for {op}; it runs on its PyTorch implementation"
    if requested in (Requested.REF, Requested.COMPILED, Requested.TRITON):
        reason += (
            f" (the only one: {source}={requested} does not change it; "
            f"only {' and '.join(sorted(COMPILED_OPS))} have a compiled kernel and a "
            f"separate reference)"
        )
    return BackendChoice(op, str(device), Backend.TORCH, requested, source, reason)


def decide(op: str, device: _devices.DeviceKey, config: Config) -> BackendChoice:
    """The backend that runs ``op`` (a key of :data:`.table.TABLE`) on ``device`` under ``config``."""
    backends_of_op = TABLE[op]
    if Backend.CAUSAL_CONV1D in backends_of_op:
        return _decide_conv(op, device, config)
    if Backend.COMPILED in backends_of_op:
        return _decide_compiled(op, device, config)
    if Backend.TRITON in backends_of_op:
        return _decide_triton(op, device, config)
    return _decide_single(op, device, config)
