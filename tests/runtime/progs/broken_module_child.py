"""One broken ``_C``: import, loader result, dispatch plan, selective_scan_fn and doctor.

Run as ``cd <package copy> && python broken_module_child.py TENSORS_PT``; saves selective_scan_fn's inputs
and two outputs to ``TENSORS_PT`` and prints one JSON object (torch/CUDA state, ``load``, ``plan``,
``warnings``, ``doctor_code``, ``doctor``).
"""

# ruff: noqa: E402  (the imports are ordered: each step is observed before the next import)

import contextlib
import io
import json
import sys
import warnings

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)

out = {"torch_imported_by_import": "torch" in sys.modules}
import torch

out["cuda_initialized_after_import"] = torch.cuda.is_initialized()
from mamba_ssm import _dispatch, _loader

r = _loader.load()
out["load"] = r.to_dict()
_choice = _dispatch.plan("selective_scan", "cpu")
out["plan"] = {"backend": _choice.backend, "reason": _choice.reason}
try:
    from mamba_ssm import selective_scan_fn
except ImportError as e:
    out["ops_unavailable"] = f"{type(e).__name__}: {e}"
else:
    from _scan_inputs import scan_inputs

    u, delta, A, B, C, D, z, delta_bias = scan_inputs(0, batch=2, dim=4, dstate=3, seqlen=7)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y1 = selective_scan_fn(u, delta, A, B, C, D, z, delta_bias, delta_softplus=True)
        y2 = selective_scan_fn(u, delta, A, B, C, D, z, delta_bias, delta_softplus=True)
    torch.save({"inputs": (u, delta, A, B, C, D, z, delta_bias), "y1": y1, "y2": y2}, sys.argv[1])
    out["warnings"] = [
        {
            "category": w.category.__name__,
            "user_warning": issubclass(w.category, UserWarning),
            "message": str(w.message),
        }
        for w in caught
        if w.category.__name__ == "MambaFallbackWarning"
    ]
    out["cuda_initialized_after_ops"] = torch.cuda.is_initialized()
from mamba_ssm.__main__ import main

buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    out["doctor_code"] = main(["doctor", "--json"])
out["doctor"] = json.loads(buf.getvalue())
print(json.dumps(out))
