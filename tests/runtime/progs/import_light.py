"""``import mamba_ssm``: torch-free, CUDA untouched, and its lazy public names.

Run as ``cd <package copy> && python import_light.py``; prints one JSON object (torch and CUDA state after
each step, the version, file, the lazy names resolved, the optional names' presence).
"""

# ruff: noqa: E402  (the imports are ordered: each step is observed before the next import)

import os
import sys

sys.path.insert(0, os.getcwd())  # the copy at the working directory, as python -c had it
import json
import sys

out = {}
import mamba_ssm

out["torch_after_import"] = "torch" in sys.modules
out["version"] = mamba_ssm.__version__
out["file"] = mamba_ssm.__file__
out["dir_has_lazy"] = all(
    n in dir(mamba_ssm)
    for n in ("selective_scan_fn", "mamba_inner_fn", "Mamba", "set_backend", "get_backend")
)
try:
    _ = mamba_ssm.no_such_name
    out["missing_attr"] = None
except AttributeError as e:
    out["missing_attr"] = str(e)
# The backend setter works without touching torch.
mamba_ssm.set_backend("torch")
out["backend"] = mamba_ssm.get_backend()
out["torch_after_set_backend"] = "torch" in sys.modules
import torch

out["cuda_initialized_after_import"] = torch.cuda.is_initialized()
resolved = {}
for name, (module, attr) in {
    "selective_scan_fn": ("mamba_ssm.ops.selective_scan_interface", "selective_scan_fn"),
    "mamba_inner_fn": ("mamba_ssm.ops.selective_scan_interface", "mamba_inner_fn"),
    "Mamba": ("mamba_ssm.modules.mamba_simple", "Mamba"),
}.items():
    try:
        value = getattr(mamba_ssm, name)
    except ImportError as e:
        resolved[name] = f"unavailable: {type(e).__name__}: {e}"
        continue
    import importlib

    resolved[name] = value is getattr(importlib.import_module(module), attr)
out["resolved"] = resolved
optional = {}
for name, module in {
    "Mamba2": "mamba_ssm.modules.mamba2",
    "MambaLMHeadModel": "mamba_ssm.models.mixer_seq_simple",
}.items():
    import importlib.util

    try:
        exists = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        exists = False
    optional[name] = {"exists": exists, "hasattr": hasattr(mamba_ssm, name)}
out["optional"] = optional
out["cuda_initialized_after_attributes"] = torch.cuda.is_initialized()
print(json.dumps(out))
