"""selective_scan_fn under MAMBA_SSM_BACKEND=compiled, ref and torch, in one process.

Run as ``cd <package copy> && python ops_under_settings.py ARGS_PT``; saves the inputs to ``ARGS_PT``
(torch.save) and prints one JSON object: ``reason`` (the loader's) and per setting ``y`` (or null),
``error`` and ``warnings``; or ``{"unavailable": ...}`` when selective_scan_fn is not importable.
"""

import json
import os
import sys
import warnings

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)
import torch

from mamba_ssm import _loader

try:
    from mamba_ssm import selective_scan_fn
except ImportError as e:
    print(json.dumps({"unavailable": str(e)}))
    sys.exit(0)
g = torch.Generator().manual_seed(2)
b, d, n, l = 1, 3, 2, 5
args = (
    torch.randn(b, d, l, generator=g),
    torch.rand(b, d, l, generator=g),
    -torch.rand(d, n, generator=g) - 0.5,
    torch.randn(b, n, l, generator=g),
    torch.randn(b, n, l, generator=g),
)
out = {"reason": _loader.load().reason}
for setting in ["compiled", "ref", "torch"]:
    os.environ["MAMBA_SSM_BACKEND"] = setting
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            y = selective_scan_fn(*args)
            out[setting] = {"y": y.tolist(), "error": None}
        except RuntimeError as e:
            out[setting] = {"y": None, "error": str(e)}
    out[setting]["warnings"] = [
        str(w.message) for w in caught if w.category.__name__ == "MambaFallbackWarning"
    ]
torch.save(args, sys.argv[1])
print(json.dumps(out))
