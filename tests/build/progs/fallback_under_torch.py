"""setup.py's source-build fallback under MAMBA_FALLBACK=auto and =source, with a given torch.

Run as ``python tests/build/progs/fallback_under_torch.py TORCH_SITE REPO`` (``TORCH_SITE``: a folder put first
on sys.path, holding a fake torch); prints one JSON object: ``auto`` ([mode, reason] of the plan) and
``source`` ([the error type, its message]).
"""

import importlib.util
import json
import os
import sys

sys.path.insert(0, os.getcwd())  # python -c had the working directory first
sys.path.insert(0, sys.argv[1])

spec = importlib.util.spec_from_file_location("setup_under_test", sys.argv[2] + "/setup.py")
setup = importlib.util.module_from_spec(spec)
spec.loader.exec_module(setup)
P = setup.load_private("_build.plan")

out = {}
p = P._fallback({"MAMBA_FALLBACK": "auto", "PATH": ""}, "no prebuilt wheel")
out["auto"] = [p.mode, p.reason]
try:
    P._fallback({"MAMBA_FALLBACK": "source", "PATH": ""}, "no prebuilt wheel")
    out["source"] = ["no error", ""]
except P.PreflightError as e:
    out["source"] = ["PreflightError", str(e)]
except Exception as e:  # noqa: BLE001  (any other failure is reported by type)
    out["source"] = [type(e).__name__, str(e)]
print(json.dumps(out))
