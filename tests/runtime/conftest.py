"""Shared by the runtime tests: tests/runtime/reference.py (the float64 sequential references) loaded
once and registered as the module ``mamba_runtime_reference``.

A unique name rather than ``reference``: tests/kernels puts its own ``reference`` module on sys.path.
pytest imports this file before the test modules of this folder, so they can
``import mamba_runtime_reference as ref``. Also the ``conv_backend`` fixture (a test once per backend
choice).
"""

import importlib.util
import os
import sys

import pytest

REFERENCE_MODULE = "mamba_runtime_reference"

if REFERENCE_MODULE not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        REFERENCE_MODULE, os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference.py")
    )
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[REFERENCE_MODULE] = _module
    _spec.loader.exec_module(_module)


@pytest.fixture(params=["auto", "torch"])
def conv_backend(request):
    """Each conv test twice: the backend auto picks (mamba_ssm._C's kernels when they are built) and the
    PyTorch path."""
    import mamba_ssm  # noqa: PLC0415

    prev = mamba_ssm.set_backend(request.param)
    yield request.param
    mamba_ssm.set_backend(prev)
