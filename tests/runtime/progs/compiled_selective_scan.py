"""selective_scan_fn on the CPU through the dispatcher, with the copy's compiled module.

Run as ``cd <package copy> && python compiled_selective_scan.py TENSORS_PT``; saves the inputs and the
output to ``TENSORS_PT`` (torch.save: ``inputs``, ``y``) and prints one JSON object: ``plan`` (the backend
chosen for the CPU) and ``warnings`` (the fallback messages).
"""

import json
import sys
import warnings

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)
import torch
from _scan_inputs import scan_inputs

from mamba_ssm import _dispatch, selective_scan_fn

u, delta, A, B, C, D, z, delta_bias = scan_inputs(1, batch=2, dim=8, dstate=4, seqlen=33)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    y = selective_scan_fn(u, delta, A, B, C, D, z, delta_bias, delta_softplus=True)
torch.save({"inputs": (u, delta, A, B, C, D, z, delta_bias), "y": y}, sys.argv[1])
print(
    json.dumps(
        {
            "plan": _dispatch.plan("selective_scan", "cpu").backend,
            "warnings": [str(w.message) for w in caught if w.category.__name__ == "MambaFallbackWarning"],
        }
    )
)
