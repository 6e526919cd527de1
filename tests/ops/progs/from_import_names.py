"""``from mamba_ssm import X``: a missing name explains itself; the layers are exported.

Run as ``cd <repository> && python tests/ops/progs/from_import_names.py``; prints one JSON object:
``torch_after_import``, ``NoSuchThing`` (the ImportError), ``NoSuchThing_hasattr``, ``Mamba2``, ``Mamba3``.
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
try:
    exec("from mamba_ssm import NoSuchThing")
    out["NoSuchThing"] = None
except ImportError as e:
    out["NoSuchThing"] = str(e)
out["NoSuchThing_hasattr"] = hasattr(mamba_ssm, "NoSuchThing")
from mamba_ssm import Mamba2, Mamba3
from mamba_ssm.modules.mamba2 import Mamba2 as Mamba2InModule
from mamba_ssm.modules.mamba3 import Mamba3 as Mamba3InModule

out["Mamba2"] = Mamba2 is Mamba2InModule
out["Mamba3"] = Mamba3 is Mamba3InModule
print(json.dumps(out))
