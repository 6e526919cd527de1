"""The install-time resolver hook, loaded from setup.py by path as a pip build would, then recorded.

Run as ``python tests/install/progs/setup_hook_run.py SETUP_PY FINAL_MODE`` (the resolver's settings in
the environment: index, CA bundle, retries); resolves the prebuilt wheel for 2.4.0.dev0, records the
outcome under ``FINAL_MODE`` and prints two lines: ``STATUS=<status> DEFERRED=<bool>``, then one JSON
object (``wheel_path``, ``deferred``, ``message``, ``status``, ``record``: the record's path, and whether
torch or mamba_ssm was imported: ``torch_imported``, ``mamba_ssm_imported``).
"""

import importlib.util
import json
import sys

spec = importlib.util.spec_from_file_location("setup_under_test", sys.argv[1])
setup = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = setup
spec.loader.exec_module(setup)
hook = setup.load_private("_install.setup_hook")
out = hook.resolve_prebuilt("2.4.0.dev0")
path = hook.record(out, hook.InstallMode(sys.argv[2]))
print(f"STATUS={out.status} DEFERRED={out.deferred}")
print(
    json.dumps(
        {
            "wheel_path": out.wheel_path,
            "deferred": out.deferred,
            "message": out.message,
            "status": out.status,
            "record": path,
            "torch_imported": "torch" in sys.modules,
            "mamba_ssm_imported": "mamba_ssm" in sys.modules,
        }
    )
)
