"""What dispatch answers for selective_scan and its neighbours on the CPU, with warnings and errors.

Run as ``cd <package copy> && python dispatch_probe.py [SETTINGS_JSON]``. Without an argument prints one
JSON object (``load``, then ``get_backend`` / ``first`` / ``second`` / ``other_op`` /
``no_compiled_kernel_op``, each ``{"value", "error", "warnings"}``). With ``SETTINGS_JSON`` (a mapping of
key to environment settings, a null value unsets the variable) applies each setting in turn in this one
process, resetting the warn-once memory between them, and prints one object of those results by key.
"""

import json
import os
import sys
import warnings

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)

from mamba_ssm import _dispatch, _loader


def attempt(fn, *args):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            value = fn(*args)
            error = None
        except Exception as e:  # noqa: BLE001  (any failure is the reported result)
            value, error = None, {"type": type(e).__name__, "message": str(e)}
    ws = [
        {
            "category": w.category.__name__,
            "user_warning": issubclass(w.category, UserWarning),
            "message": str(w.message),
        }
        for w in caught
    ]
    return {"value": value, "error": error, "warnings": ws}


def run_probe():
    out = {"load": _loader.load().to_dict()}
    out["get_backend"] = attempt(_dispatch.get_backend)
    out["first"] = attempt(_dispatch.backend_for, "selective_scan", "cpu")
    out["second"] = attempt(_dispatch.backend_for, "selective_scan", "cpu")
    out["other_op"] = attempt(_dispatch.backend_for, "mamba_inner", "cpu")
    out["no_compiled_kernel_op"] = attempt(_dispatch.backend_for, "selective_state_update", "cpu")
    return out


if len(sys.argv) > 1:
    # The env is read at each call; the warn-once memory is cleared between settings (a test-only reset),
    # so each setting starts as a fresh process would.
    results = {}
    for key, settings in json.loads(sys.argv[1]).items():
        for name, value in settings.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _dispatch._reset_for_tests()
        results[key] = run_probe()
    print(json.dumps(results))
else:
    print(json.dumps(run_probe()))
