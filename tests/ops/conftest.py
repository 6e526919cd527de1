"""Fixtures shared by the op tests: ``conv_backend`` (a conv test once per backend choice)."""

import pytest


@pytest.fixture(params=["auto", "torch"])
def conv_backend(request):
    """Each conv test twice: the backend auto picks (mamba_ssm._C's kernels when they are built) and the
    PyTorch path."""
    import mamba_ssm

    prev = mamba_ssm.set_backend(request.param)
    yield request.param
    mamba_ssm.set_backend(prev)
