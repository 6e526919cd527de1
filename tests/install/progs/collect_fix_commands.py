"""The fix commands the runtime and the resolver print, for an incompatible build and each recorded outcome.

Run as ``python tests/install/progs/collect_fix_commands.py VERSION INDEX_URL`` with the venv's python (mamba-ssm
installed there); writes one install record per scenario (a custom-index prebuilt, no candidate, an
unreachable index, deferred, a requested skip) and prints one JSON object of the commands printed:
``incompatible``, ``main``, ``no_candidate_msg``, ``setup_probe_torch`` (setup.py's fix when torch is
missing from the build environment; "" when it has none for this version) and ``<scenario>:missing|mismatch|FIX_REINSTALL``.
"""

import json
import sys

from mamba_ssm import _advice, _loader
from mamba_ssm._build.config import _no_isolation_fix
from mamba_ssm._install import record as D

out = {
    "incompatible": _loader.load().fix,
    "main": _advice.reinstall_command(),
    "no_candidate_msg": _advice.resolver_no_candidate_fix(sys.argv[1]),
    "setup_probe_torch": _no_isolation_fix() or "",
}
ident = D.dist_info_identity()
base = {
    "package_version": sys.argv[1],
    "wheel": None,
    "environment": "torch 2.14.1+cu130, x86_64",
    "message": "m",
    "install": ident.to_dict() if ident else None,
}
scenarios = {
    "prebuilt_custom_index": dict(base, status="prebuilt", final_mode="prebuilt", index=sys.argv[2]),
    "no_candidate": dict(base, status="no-candidate", final_mode="python", index=sys.argv[2]),
    "unreachable": dict(base, status="error", error_kind="index-dns", final_mode="python", index=sys.argv[2]),
    "deferred": dict(base, status="deferred", final_mode="deferred", index=sys.argv[2]),
    "skip_requested": dict(
        base,
        status="requested",
        final_mode="python",
        requested="MAMBA_SKIP_CUDA_BUILD=TRUE",
        message="MAMBA_SKIP_CUDA_BUILD=TRUE: the resolver was not asked",
    ),
}
for name, rec in scenarios.items():
    D.write_record(D.InstallRecord.from_dict(rec))
    current = _loader.install_record()
    out[name + ":missing"] = _advice.missing_kernels_fix(current)
    out[name + ":mismatch"] = _advice.mismatch_fix(current)
    out[name + ":FIX_REINSTALL"] = _advice.reinstall_command(index=_advice.recorded_index(current))
print(json.dumps(out))
