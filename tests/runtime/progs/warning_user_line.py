"""A user script whose fallback warnings must name its own two marked lines (not mamba_ssm's).

Run as ``cd <package copy> && python warning_user_line.py``; prints a JSON list of [filename, lineno] of
each MambaFallbackWarning.
"""

import json
import warnings

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)
import torch

from mamba_ssm import _dispatch

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    _dispatch.backend_for("selective_scan", torch.device("cpu"))  # USER LINE A
    _dispatch.fallback_for_call("selective_scan", "cpu", "d_state too large")  # USER LINE B
print(json.dumps([[w.filename, w.lineno] for w in caught if w.category.__name__ == "MambaFallbackWarning"]))
