"""Fixtures of the kernel tests: the compiled module, located and loaded through mamba_ssm._loader.

ci/test.sh builds ``mamba_ssm/_C.abi3.so`` in place before pytest; without it these tests skip with the
loader's reason (they never build the module themselves: that is the build tests' job).
"""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)


@pytest.fixture(scope="session")
def compiled():
    """The mamba_ssm.ops.backends.compiled module with _C loaded, or a skip naming why not."""
    from mamba_ssm import _loader

    result = _loader.load()
    if not result.loaded:
        pytest.skip(f"mamba_ssm._C is not loaded: {result.reason} (build it: "
                    "MAMBA_FORCE_BUILD=TRUE python setup.py build_ext --inplace)")
    import mamba_ssm.ops.backends.compiled as backend

    return backend
