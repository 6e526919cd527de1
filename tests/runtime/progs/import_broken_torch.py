"""``import mamba_ssm`` with a torch that fails to import (PYTHONPATH puts a broken torch first).

Run as ``cd <package copy> && python import_broken_torch.py``; prints one JSON object: ``version``,
``backend``, ``op`` (the ImportError of selective_scan_fn) and ``load`` (the loader's result).
"""

# ruff: noqa: E402  (the imports are ordered: each step is observed before the next import)

import os
import sys

sys.path.insert(0, os.getcwd())  # the copy at the working directory, as python -c had it
import json
import sys

import mamba_ssm

out = {"version": mamba_ssm.__version__, "backend": mamba_ssm.get_backend()}
try:
    _ = mamba_ssm.selective_scan_fn
    out["op"] = None
except ImportError as e:
    out["op"] = str(e)
from mamba_ssm import _loader

out["load"] = _loader.load().to_dict()
print(json.dumps(out))
