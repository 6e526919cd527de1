"""_dispatch.fallback_for_call: per-call fallbacks warn once per reason; forcing compiled raises.

Run as ``cd <package copy> && python fallback_for_call.py``; prints one JSON object (``a``, ``b``: the
backends chosen, ``warnings``: the fallback messages, ``forced``: the error under set_backend("compiled")).
"""

import json
import warnings

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)

from mamba_ssm import _dispatch

out = {}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out["a"] = _dispatch.fallback_for_call("selective_scan", "cpu", "d_state 512 exceeds the kernel's 256")
    out["b"] = _dispatch.fallback_for_call("selective_scan", "cpu", "d_state 300 exceeds the kernel's 256")
out["warnings"] = [str(w.message) for w in caught if w.category.__name__ == "MambaFallbackWarning"]
_dispatch.set_backend("compiled")
try:
    _dispatch.fallback_for_call("selective_scan", "cpu", "d_state 512 exceeds the kernel's 256")
    out["forced"] = None
except RuntimeError as e:
    out["forced"] = str(e)
print(json.dumps(out))
