"""The messages of the warnings one selective_scan dispatch on the CPU raises.

Run as ``cd <package copy> && python fallback_warnings.py``; prints them as a JSON list.
"""

import json
import warnings

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)

from mamba_ssm import _dispatch

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    _dispatch.backend_for("selective_scan", "cpu")
print(json.dumps([str(w.message) for w in caught]))
