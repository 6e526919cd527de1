"""CONTRIBUTING.md's two recipes, followed at run time with a toy op, a running sum over the last dim.

"How to add an op": implementations in a module of their own (written here under a temporary directory
on sys.path, as a family's ``torch_impl.py`` would be), one ``TABLE`` entry, the implementation and its
check in the backend objects' tables, and ``_dispatch.call``. "How to add a backend": a
``BackendObject`` subclass registered with ``mamba_ssm._backends.register`` and placed in the op's
entry. Values are compared with a float64 running sum written here; which implementation ran is what
the toy module records. Everything is put back afterwards and checked to be.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import warnings
from typing import ClassVar

import pytest
import torch

from mamba_ssm import _backends, _dispatch
from mamba_ssm._backends import BackendObject, Target, Unavailable
from mamba_ssm._backends.pytorch import PyTorchBackend
from mamba_ssm._dispatch import Backend, MambaFallbackWarning
from mamba_ssm._dispatch import table as dispatch_table

OP = "toy_running_sum"
MODULE = "mamba_recipe_toy_ops"
LIMIT = 8  # the toy kernel's check refuses rows longer than this

# The toy family: a "kernel" (torch.cumsum) with a check, and a PyTorch implementation (an explicit
# loop). Each records that it ran.
SOURCE = f"""
import torch

ran = []


def running_sum_kernel(x):
    ran.append("kernel")
    return torch.cumsum(x, dim=-1)


def running_sum_unsupported(x):
    return "rows longer than {LIMIT}" if x.shape[-1] > {LIMIT} else None


def running_sum_torch(x):
    ran.append("torch")
    out = torch.empty_like(x)
    acc = torch.zeros_like(x[..., 0])
    for t in range(x.shape[-1]):
        acc = acc + x[..., t]
        out[..., t] = acc
    return out
"""


class ToyBackend(BackendObject):
    """The recipe's backend: runs the toy op on the CPU (unless told it is down)."""

    name: ClassVar[str] = "toy"
    implementations: ClassVar[dict[str, Target]] = {OP: (MODULE, "running_sum_kernel")}
    checks: ClassVar[dict[str, Target]] = {OP: (MODULE, "running_sum_unsupported")}
    down: ClassVar[str | None] = None

    def unavailable(self, op: str, device: object) -> Unavailable | None:
        if self.down is not None:
            return Unavailable(self.down, None)
        return None


class ToyCompiled(ToyBackend):
    """The same kernel standing in for the compiled backend (the one a request can force)."""

    name: ClassVar[str] = Backend.COMPILED


def running_sum_f64(x: torch.Tensor) -> torch.Tensor:
    """The float64 running sum of each row of a 2-D tensor, in plain Python."""
    rows = [list(itertools.accumulate(float(v) for v in row)) for row in x.double().tolist()]
    return torch.tensor(rows, dtype=torch.float64)


def ran() -> list[str]:
    return sys.modules[MODULE].ran


def rows(n: int) -> torch.Tensor:
    return torch.randn(3, n, generator=torch.Generator().manual_seed(n))


@contextlib.contextmanager
def toy_op(tmp_path, entry, backend=ToyBackend):
    """The toy op and ``backend`` added as CONTRIBUTING says, with ``entry`` its TABLE entry; all put back
    (and the dispatch's caches, warnings and override forgotten) on leaving."""
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    registry = dict(_backends.BACKENDS)
    sys.modules.pop(MODULE, None)
    with pytest.MonkeyPatch.context() as mp:
        for var in (_dispatch.ENV_BACKEND, _dispatch.ENV_NO_WARNING, _dispatch.ENV_CONV1D):
            mp.delenv(var, raising=False)
        mp.syspath_prepend(str(tmp_path))
        mp.setitem(dispatch_table.TABLE, OP, entry)
        mp.setitem(PyTorchBackend.implementations, OP, (MODULE, "running_sum_torch"))
        _dispatch._reset_for_tests()
        replaced = _backends.register(backend())
        try:
            yield
        finally:
            if replaced is None:
                del _backends.BACKENDS[backend.name]
            else:
                _backends.register(replaced)
            sys.modules.pop(MODULE, None)
            _dispatch._reset_for_tests()
    assert_restored(registry)


def assert_restored(registry):
    """(d): the registry, the table, the PyTorch backend's table and the request are as before."""
    assert registry == _backends.BACKENDS
    assert all(_backends.BACKENDS[name] is obj for name, obj in registry.items())
    assert OP not in dispatch_table.TABLE
    assert OP not in PyTorchBackend.implementations
    assert MODULE not in sys.modules
    assert _dispatch.set_backend(None) is None  # no override left behind
    with pytest.raises(ValueError, match=OP):
        _dispatch.call(OP, rows(4))


def test_the_first_backend_of_the_entry_that_can_run_runs_the_op(tmp_path):
    x = rows(LIMIT)
    with toy_op(tmp_path, ("toy", Backend.TORCH)):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the op's own kernel: no fallback, no warning
            out = _dispatch.call(OP, x)
        assert ran() == ["kernel"]
        torch.testing.assert_close(out.double(), running_sum_f64(x), rtol=1e-5, atol=1e-5)
        assert _dispatch.plan(OP, "cpu").backend == "toy"
        ToyBackend.down = "the toy kernels are down"
        try:
            _dispatch._reset_for_tests()
            out = _dispatch.call(OP, x)
        finally:
            ToyBackend.down = None
        assert ran() == ["kernel", "torch"]  # not available: the next backend of the entry
        torch.testing.assert_close(out.double(), running_sum_f64(x), rtol=1e-5, atol=1e-5)
    with toy_op(tmp_path, (Backend.TORCH, "toy")):  # the entry's order decides
        out = _dispatch.call(OP, x)
        assert ran() == ["torch"]
        torch.testing.assert_close(out.double(), running_sum_f64(x), rtol=1e-5, atol=1e-5)


def test_the_request_filters_the_entry(tmp_path):
    x = rows(5)
    with toy_op(tmp_path, ("toy", Backend.TORCH)):
        assert _dispatch.set_backend("torch") is None
        out = _dispatch.call(OP, x)
        assert ran() == ["torch"]
        torch.testing.assert_close(out.double(), running_sum_f64(x), rtol=1e-5, atol=1e-5)
        assert _dispatch.set_backend(None) == "torch"
        _dispatch.call(OP, x)
        assert ran() == ["torch", "kernel"]


def test_a_call_the_check_refuses_falls_back_to_pytorch_with_a_warning(tmp_path):
    long = rows(LIMIT + 4)
    with toy_op(tmp_path, ("toy", Backend.TORCH)):
        with pytest.warns(MambaFallbackWarning, match=f"{OP} call .* rows longer than {LIMIT}"):
            out = _dispatch.call(OP, long)
        assert ran() == ["torch"]
        torch.testing.assert_close(out.double(), running_sum_f64(long), rtol=1e-5, atol=1e-5)
        _dispatch.call(OP, rows(LIMIT))  # a call the check takes runs on the kernel
        assert ran() == ["torch", "kernel"]


def test_forcing_the_backend_a_call_cannot_run_on_raises(tmp_path):
    long = rows(LIMIT + 4)
    with toy_op(tmp_path, (Backend.COMPILED, Backend.TORCH), backend=ToyCompiled):
        assert _dispatch.set_backend("compiled") is None
        out = _dispatch.call(OP, rows(LIMIT))
        assert ran() == ["kernel"]
        torch.testing.assert_close(out.double(), running_sum_f64(rows(LIMIT)), rtol=1e-5, atol=1e-5)
        with pytest.raises(RuntimeError, match=f"compiled backend was forced .* rows longer than {LIMIT}"):
            _dispatch.call(OP, long)
        assert ran() == ["kernel"]  # nothing ran
        _dispatch.set_backend("auto")
        with pytest.warns(MambaFallbackWarning, match=f"rows longer than {LIMIT}"):
            _dispatch.call(OP, long)
        assert ran() == ["kernel", "torch"]
