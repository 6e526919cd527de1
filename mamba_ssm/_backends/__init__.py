"""The backends: one object per backend (:class:`~.base.BackendObject`), each saying whether it can run
an op on a device (``unavailable``), whether it takes one particular call (``supports``) and running it
(``run``) with the implementations of :mod:`mamba_ssm._families`.

:data:`BACKENDS` is the registry the dispatch (:mod:`mamba_ssm._dispatch`) asks. Importing this package
imports no torch and no implementation: those come at the first call that needs them.
"""

from __future__ import annotations

from .base import Backend, BackendObject, Target, Unavailable, resolve
from .compiled import CompiledBackend
from .package import PackageBackend
from .pytorch import PyTorchBackend
from .reference import ReferenceBackend
from .triton import TritonBackend

__all__ = ["BACKENDS", "Backend", "BackendObject", "Target", "Unavailable", "register", "resolve"]

#: ``{name: backend object}``: every backend an op's table entry may name (keys: plain strings, which
#: :class:`Backend` members find).
BACKENDS: dict[str, BackendObject] = {
    str(backend.name): backend
    for backend in (
        CompiledBackend(),
        TritonBackend(),
        PackageBackend(),
        PyTorchBackend(),
        ReferenceBackend(),
    )
}


def register(backend: BackendObject) -> BackendObject | None:
    """Add (or replace) ``backend`` under its name; returns the one it replaced, or None."""
    previous = BACKENDS.get(backend.name)
    BACKENDS[str(backend.name)] = backend
    return previous
