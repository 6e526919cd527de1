"""Dispatch inside torch.compile(fullgraph=True): the first choice is made while tracing.

Run as ``cd <package copy> && python dispatch_in_compile.py``; prints one JSON object: ``loaded_before``,
``y``, ``warnings``, ``reason`` and ``forced`` (the error under MAMBA_SSM_BACKEND=compiled).
"""

import json
import os
import warnings

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)
import torch

from mamba_ssm import _dispatch, _loader


def f(x):
    backend = _dispatch.backend_for("selective_scan", x.device)
    return x + (1.0 if backend == "torch" else 2.0)


out = {"loaded_before": _loader.peek() is not None}
x = torch.zeros(3)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y = torch.compile(f, backend="eager", fullgraph=True)(x)  # the first dispatch happens while tracing
out["y"] = y.tolist()
out["warnings"] = [str(w.message) for w in caught if w.category.__name__ == "MambaFallbackWarning"]
out["reason"] = _loader.load().reason
torch._dynamo.reset()
os.environ["MAMBA_SSM_BACKEND"] = "compiled"
try:
    torch.compile(f, backend="eager", fullgraph=True)(x)
    out["forced"] = None
except Exception as e:  # noqa: BLE001  (any failure is the reported result)
    out["forced"] = str(e)
print(json.dumps(out))
