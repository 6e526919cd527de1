"""The baseline-ISA build of the compiled causal conv1d passes the CPU checks.

Run as ``cd <repository> && MAMBA_SSM_CPU_ISA=generic python tests/kernels/progs/conv1d_generic_isa.py``
(the ISA is chosen once per process); loads the in-place ``_C``, checks that ``cpu_isa()`` is ``generic``,
runs conv1d over both layouts and widths 2-4 and one state update against the float64 references of
``tests/kernels/conv1d_cases.py``, and prints ``generic ok``.
"""

import os
import sys

# The checkout at the working directory, then tests/kernels (conv1d_cases) before it.
sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch
from conv1d_cases import assert_close, make_conv_inputs, run_conv_and_check, update_ref64

from mamba_ssm import _loader

r = _loader.load()
assert r.loaded, r.reason
# The kernels' Python side is imported once the library is loaded, as a user's first call would.
import mamba_ssm._families.selective_scan.compiled  # noqa: E402, F401
from mamba_ssm._families.causal_conv1d import compiled as conv  # noqa: E402

assert torch.ops.mamba_ssm.cpu_isa() == "generic", torch.ops.mamba_ssm.cpu_isa()


def fn(x, w, b, s, i, silu):
    return conv.conv1d(x, w, b, s, i, silu)


for layout in ("contiguous", "channel_last"):
    for width in (2, 3, 4):
        inputs = make_conv_inputs(
            2, 70, 37, width, torch.float32, layout=layout, seq=True, pad=True, init=True, seed=width
        )
        run_conv_and_check(fn, *inputs, True, torch.float32)
x = torch.randn(2, 5, 3)
st = torch.randn(2, 5, 6)
w = torch.randn(5, 4)
b = torch.randn(5)
cache = torch.tensor([3, 8], dtype=torch.int32)
ro, rs = update_ref64(x, st, w, b, True, cache, None)
assert_close(conv.update(x, st, w, b, True, cache, None), ro, torch.float32, "out")
assert_close(st, rs, torch.float32, "state")
print("generic ok")
