"""setup.py loads the repository's resolver hook (what its ``main`` passes to the plan) without torch or
mamba_ssm.

Run as ``cd / && python -I tests/build/progs/setup_hook_by_path.py SETUP_PY`` (isolated: the repository is
not on sys.path); prints the sorted list of torch / mamba_ssm modules imported (``[]`` expected).
"""

import importlib.util
import sys

spec = importlib.util.spec_from_file_location("setup_under_test", sys.argv[1])
m = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = m
spec.loader.exec_module(m)
hook = m.load_private("_install.setup_hook")
assert callable(hook.resolve_prebuilt)
assert callable(hook.requested)
assert callable(hook.record)
print(sorted(k for k in sys.modules if k == "torch" or k.split(".")[0] == "mamba_ssm"))
