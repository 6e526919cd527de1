"""A Mamba block under ``torch.compile(fullgraph=True)`` on the first call of the process: the backends'
implementation modules are not imported yet when tracing starts (dynamo cannot trace an import).

Run as ``cd <repository> && python tests/ops/progs/compile_first_call.py``; prints one JSON object:
``imported_before`` (the op implementations' modules already imported when tracing began), ``backend``
and ``target`` (what runs the conv on the CPU, and the module it runs), ``max_err`` (compiled vs eager).
"""

import json
import os
import sys

sys.path.insert(0, os.getcwd())  # the checkout at the working directory

import torch

from mamba_ssm.modules.mamba_simple import Mamba

torch.manual_seed(0)
block = Mamba(d_model=16, d_state=8, d_conv=4, expand=2)
x = torch.randn(2, 12, 16)
imported_before = sorted(name for name in sys.modules if name.startswith("mamba_ssm._families"))
compiled = torch.compile(block, fullgraph=True, backend="eager")
with torch.no_grad():
    got = compiled(x)
    want = block(x)

from mamba_ssm import _dispatch  # noqa: E402
from mamba_ssm._backends import BACKENDS  # noqa: E402

backend = str(_dispatch.plan("causal_conv1d", "cpu").backend)
target = BACKENDS[backend].implementations["causal_conv1d"][0]
print(
    json.dumps(
        {
            "imported_before": imported_before,
            "backend": backend,
            "target": target,
            "max_err": float((got - want).abs().max()),
        }
    )
)
