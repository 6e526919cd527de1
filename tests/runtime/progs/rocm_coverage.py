"""Device coverage for two declared ROCm GPUs of different gfx archs (no AMD GPU needed).

Run as ``cd <package copy> && python rocm_coverage.py``; presents this torch as a ROCm 6.2 build with an
MI250X (gfx90a) and an RX 7900 XTX (gfx1100) and prints one JSON object: ``load`` and ``coverage`` by device.
"""

import json
import types

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)
import torch

# No AMD GPU here: present this torch as a ROCm 6.2 build with two GPUs of different gfx archs.
torch.__version__ = "2.14.1+rocm6.2"
torch.version.cuda = None
torch.version.hip = "6.2.41133-dd7f95766"
props = {
    0: types.SimpleNamespace(name="AMD Instinct MI250X", gcnArchName="gfx90a:sramecc+:xnack-"),
    1: types.SimpleNamespace(name="AMD Radeon RX 7900 XTX", gcnArchName="gfx1100"),
}
torch.cuda.get_device_properties = lambda i: props[i]
from mamba_ssm import _devices, _loader  # noqa: E402  (after torch is presented as ROCm)

out = {"load": _loader.load().to_dict()}
out["coverage"] = {d: _devices.device_coverage(d) for d in ["cpu", "cuda:0", "cuda:1"]}
print(json.dumps(out))
