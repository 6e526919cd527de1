"""Device coverage and dispatch plans for four declared CUDA devices (no GPU needed).

Run as ``cd <package copy> && python device_coverage.py``; replaces torch.cuda.get_device_capability by
capabilities 8.0, 8.6, 7.5 and 12.0 and prints one JSON object: ``load``, ``cuda_initialized``,
``coverage`` and ``plans`` by device, and ``calls`` (the capability queries made).
"""

import json

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)
import torch

from mamba_ssm import _devices, _dispatch, _loader

caps = {0: (8, 0), 1: (8, 6), 2: (7, 5), 3: (12, 0)}
calls = []


def fake_capability(i):  # no GPU here: declare four, and count the queries
    calls.append(i)
    return caps[i]


torch.cuda.get_device_capability = fake_capability
out = {"load": _loader.load().to_dict(), "cuda_initialized": torch.cuda.is_initialized()}
devices = ["cpu", "cuda:0", "cuda:1", "cuda:2", "cuda:3"]
out["coverage"] = {d: _devices.device_coverage(d) for d in devices}
out["plans"] = {d: _dispatch.plan("selective_scan", d).backend for d in devices}
out["calls"] = calls
print(json.dumps(out))
