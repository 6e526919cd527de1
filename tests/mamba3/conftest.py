"""tests/mamba3: the float64 oracle (mamba3_reference.py, next to the tests) importable as a plain module,
and one intra-op thread (tiny shapes; fair to a loaded 2-core CI machine)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
