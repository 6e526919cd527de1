"""Upstream's Mamba-3 import paths import without tilelang (and the packages without torch).

Run as ``cd <repository> && python tests/ops/progs/upstream_mamba3_paths.py``; prints one JSON object:
``torch_at_package_import``, ``callable``, ``tilelang_imported``.
"""

# ruff: noqa: E402  (the imports are ordered: each step is observed before the next import)

import os
import sys

sys.path.insert(0, os.getcwd())  # the copy at the working directory, as python -c had it
import json
import sys

out = {}

out["torch_at_package_import"] = "torch" in sys.modules
from mamba_ssm.modules.mamba3 import Mamba3
from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo import mamba3_mimo
from mamba_ssm.ops.triton.mamba3.mamba3_siso_combined import mamba3_siso_combined
from mamba_ssm.ops.triton.mamba3.mamba3_siso_step import mamba3_siso_step

out["callable"] = all(map(callable, (Mamba3, mamba3_siso_combined, mamba3_siso_step, mamba3_mimo)))
out["tilelang_imported"] = "tilelang" in sys.modules
print(json.dumps(out))
