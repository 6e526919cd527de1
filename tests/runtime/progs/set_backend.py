"""mamba_ssm.set_backend / get_backend: overriding the environment, validation, restoring.

Run as ``cd <package copy> && python set_backend.py`` (under MAMBA_SSM_BACKEND=torch); turns every warning
into an error and prints one JSON object of what each call returned or raised.
"""

import json
import warnings

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)

import mamba_ssm
from mamba_ssm import _dispatch

warnings.simplefilter("error")  # no fallback warning may escape in this script
out = {}
out["same_function"] = (
    mamba_ssm.set_backend is _dispatch.set_backend and mamba_ssm.get_backend is _dispatch.get_backend
)
out["env"] = mamba_ssm.get_backend()
out["prev1"] = mamba_ssm.set_backend("ref")
out["after_ref"] = [mamba_ssm.get_backend(), _dispatch.backend_for("selective_scan", "cpu")]
out["prev2"] = mamba_ssm.set_backend("cuda")
out["after_cuda"] = mamba_ssm.get_backend()
try:
    _dispatch.backend_for("selective_scan", "cpu")
    out["forced"] = None
except RuntimeError as e:
    out["forced"] = str(e)
try:
    mamba_ssm.set_backend("fast")
    out["bad"] = None
except ValueError as e:
    out["bad"] = str(e)
out["still"] = mamba_ssm.get_backend()
try:
    _dispatch.backend_for("selective_scan_typo", "cpu")
    out["bad_op"] = None
except ValueError as e:
    out["bad_op"] = str(e)
out["prev3"] = mamba_ssm.set_backend(None)
out["restored"] = mamba_ssm.get_backend()
print(json.dumps(out))
