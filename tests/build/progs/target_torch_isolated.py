"""The source-build fallback imports the target interpreter's torch under pip's build isolation.

Run as ``python -S tests/build/progs/target_torch_isolated.py ISOLATED_SITE REPO TARGET_JSON`` (no
site-packages; ``ISOLATED_SITE`` holds only the build requirements; ``TARGET_JSON``: the target
interpreter's torch); prints one JSON object: ``before`` (torch importable before), ``note``, ``torch``
(the file imported) and ``version`` (as probed).
"""

# ruff: noqa: E402  (torch is imported once the target's site is on sys.path)

import importlib.util
import json
import os
import sys

# as under pip's build isolation: no site-packages (python -S), only the build requirements
sys.path.insert(0, os.getcwd())  # python -c had the working directory first
sys.path.insert(0, sys.argv[1])

spec = importlib.util.spec_from_file_location("setup_under_test", sys.argv[2] + "/setup.py")
setup = importlib.util.module_from_spec(spec)
spec.loader.exec_module(setup)
P = setup.load_private("_build.plan")

before = importlib.util.find_spec("torch") is not None
Target = setup.load_private("_install.setup_hook").Target

note = P.use_target_torch(Target(**json.loads(sys.argv[3])))
info = setup.load_private("_build.config").probe_torch("test")
import torch

print(json.dumps({"before": before, "note": note, "torch": torch.__file__, "version": info.build.version}))
