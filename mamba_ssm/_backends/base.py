"""What a backend is: a name, whether it can run an op on a device, whether it takes one particular call,
and the implementation it runs.

A backend object holds two tables, ``op -> (module, function)``: :attr:`BackendObject.implementations`
(what :meth:`~BackendObject.run` calls) and :attr:`BackendObject.checks` (the "why not" functions
:meth:`~BackendObject.supports` asks; an op without one takes every call). Both name functions of
:mod:`mamba_ssm._families` (the layer below), imported at the first call that needs them and looked up
by name at every call (a test may replace one). Nothing here imports torch.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable, ClassVar

from .._compat.textenum import TextEnum
from .._devices import DeviceKey

__all__ = ["Backend", "BackendObject", "Target", "Unavailable", "resolve"]


class Backend(TextEnum):
    """What runs an op."""

    COMPILED = "compiled"  # the kernels of mamba_ssm._C (mamba_ssm._backends.compiled)
    TRITON = "triton"  # the Triton kernels (mamba_ssm._backends.triton), on CUDA/ROCm devices
    CAUSAL_CONV1D = "causal-conv1d"  # the causal-conv1d package's CUDA kernels (conv ops only)
    TORCH = "torch"  # the PyTorch implementation: every device
    REF = "ref"  # a separate sequential reference (slow; for checking)


@dataclass(frozen=True)
class Unavailable:
    """Why a backend cannot run on a device, and the fix (None: nothing to repair)."""

    reason: str
    fix: str | None


#: ``(module, function)``: a function of the families, imported when first called.
Target = tuple[str, str]


def _imported(dotted: str) -> ModuleType | None:
    """The module ``dotted`` (``mamba_ssm.<...>``) if it was imported, found as an attribute of its parent
    package, as ``import`` leaves it. Module attributes are what ``torch.compile`` reads as they are
    when it traces, where ``sys.modules`` is read once per traced frame, so a module imported while
    tracing (:meth:`BackendObject.load`) is found here and not there."""
    head, _, rest = dotted.partition(".")
    module = sys.modules.get(head)
    for part in rest.split(".") if rest else ():
        inner = module.__dict__.get(part) if module is not None else None
        module = inner if isinstance(inner, ModuleType) else None
    return module


def resolve(target: Target) -> Callable[..., Any]:
    """The function ``target`` names (its module imported on first use)."""
    module_name, name = target
    module = _imported(module_name)
    if module is None:
        module = importlib.import_module(module_name)
    function: Callable[..., Any] = getattr(module, name)
    return function


class BackendObject:
    """One backend: its :class:`Backend` name (any string for a backend added at run time), the ops it
    implements and the checks in front of them. Subclasses override :meth:`unavailable` when they do
    not run everywhere."""

    name: ClassVar[str]
    #: ``{op: (module, function)}``: the implementation :meth:`run` calls with the op's arguments.
    implementations: ClassVar[dict[str, Target]] = {}
    #: ``{op: (module, function)}``: called with the op's arguments, returns None or why not.
    checks: ClassVar[dict[str, Target]] = {}

    def unavailable(self, op: str, device: DeviceKey) -> Unavailable | None:
        """Why this backend cannot run ``op`` on ``device`` (None: it can). The base runs everywhere."""
        del op, device
        return None

    def load(self, op: str) -> None:
        """Import the modules of ``op``'s implementation and check (what :meth:`run` and :meth:`supports`
        call), if this backend has them. ``torch.compile`` cannot trace an import: the dispatch calls this
        eagerly while tracing, before the traced call looks the functions up."""
        for table in (self.implementations, self.checks):
            target = table.get(op)
            if target is not None:
                resolve(target)

    def supports(self, op: str, *args: Any, **kwargs: Any) -> str | None:
        """None when this backend takes this particular call of ``op``, else the reason in one sentence
        (the call then runs on the PyTorch backend)."""
        check = self.checks.get(op)
        if check is None:
            return None
        reason: str | None = resolve(check)(*args, **kwargs)
        return reason

    def run(self, op: str, *args: Any, **kwargs: Any) -> Any:
        """Run ``op`` on this backend with the op's arguments.

        Raises:
            KeyError: this backend has no implementation of ``op``.
        """
        return resolve(self.implementations[op])(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
