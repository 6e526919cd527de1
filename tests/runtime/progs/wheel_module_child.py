"""A package copy laid out as the per-platform wheel (``mamba_ssm/_kernels/<folder>/_C.abi3.so``): which
module the running torch chooses, what loading it gives, and what the user is told.

Run as ``cd <package copy> && python wheel_module_child.py OUT_DIR``. The environment may present this
torch as another build (no such torch installed here), the way PyPI ships it:

* ``MAMBA_SSM_TEST_PRESENT_TORCH``: JSON ``{"version": ..., "cuda": ..., "hip": ...}`` written over
  ``torch.__version__`` / ``torch.version.cuda`` / ``torch.version.hip`` before mamba_ssm looks;
* ``MAMBA_SSM_TEST_FAKE_GPU``: ``rocm`` (an MI250X, gfx90a) or ``cuda`` (an H100, 9.0) presented as GPU 0;
* ``MAMBA_SSM_TEST_RUN_SCAN=1``: run selective_scan_fn twice on the CPU (inputs and outputs saved to
  ``OUT_DIR/tensors.pt``; the fallback warnings recorded);
* ``MAMBA_SSM_TEST_DOCTOR_CHECK=1``: doctor's report with ``--check``.

Prints one JSON object: ``load`` (the LoadResult), ``plan_cpu`` / ``plan_gpu`` (the dispatch's choice),
``coverage``, ``warnings``, ``registered`` (the ``mamba_ssm::`` ops), ``doctor_code``, ``doctor`` (what
``doctor --json`` prints) and ``doctor_text`` (what ``doctor`` prints), from one report.
"""

# ruff: noqa: E402  (the imports are ordered: torch is presented before mamba_ssm looks at it)

import json
import os
import sys
import types
import warnings

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)
import torch

present = json.loads(os.environ.get("MAMBA_SSM_TEST_PRESENT_TORCH") or "null")
if present is not None:
    torch.__version__ = present["version"]
    torch.version.cuda = present.get("cuda")
    torch.version.hip = present.get("hip")
fake_gpu = os.environ.get("MAMBA_SSM_TEST_FAKE_GPU")
if fake_gpu:
    props = types.SimpleNamespace(
        name="AMD Instinct MI250X" if fake_gpu == "rocm" else "NVIDIA H100",
        gcnArchName="gfx90a:sramecc+:xnack-" if fake_gpu == "rocm" else None,
        major=9,
        minor=0,
        total_memory=64 * 2**30,
    )
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_properties = lambda i=None: props
    torch.cuda.get_device_capability = lambda i=None: (props.major, props.minor)

from mamba_ssm import _dispatch, _loader

out = {"load": _loader.load().to_dict()}
plan = _dispatch.plan("selective_scan", "cpu")
out["plan_cpu"] = {"backend": plan.backend, "reason": plan.reason, "fix": plan.fix}
if fake_gpu:
    from mamba_ssm import _devices
    from mamba_ssm._backends import compiled as backends

    out["coverage"] = {"cuda:0": _devices.device_coverage("cuda:0")}
    gone = backends.compiled_unavailable("selective_scan", _devices.device_key("cuda:0"))
    out["compiled_gpu"] = None if gone is None else {"reason": gone.reason, "fix": gone.fix}
out["registered"] = sorted(
    n.split("::", 1)[1] for n in torch._C._dispatch_get_all_op_names() if n.startswith("mamba_ssm::")
)
if os.environ.get("MAMBA_SSM_TEST_RUN_SCAN") == "1":
    from _scan_inputs import scan_inputs

    from mamba_ssm import selective_scan_fn

    u, delta, A, B, C, D, z, delta_bias = scan_inputs(0, batch=2, dim=4, dstate=3, seqlen=37)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y1 = selective_scan_fn(u, delta, A, B, C, D, z, delta_bias, delta_softplus=True)
        y2 = selective_scan_fn(u, delta, A, B, C, D, z, delta_bias, delta_softplus=True)
    torch.save(
        {"inputs": (u, delta, A, B, C, D, z, delta_bias), "y1": y1, "y2": y2},
        os.path.join(sys.argv[1], "tensors.pt"),
    )
    out["warnings"] = [str(w.message) for w in caught if w.category.__name__ == "MambaFallbackWarning"]
from mamba_ssm._doctor import collect, render_text

report = collect(check=os.environ.get("MAMBA_SSM_TEST_DOCTOR_CHECK") == "1")
out["doctor"] = report.to_dict()
out["doctor_code"] = report.exit_code
out["doctor_text"] = render_text(report)
print(json.dumps(out))
