"""The ops, modules and generation import without triton and without the compiled module.

Run as ``cd <repository> && python tests/ops/progs/ops_import_light.py``; prints ``ok``.
"""

import os
import sys

sys.path.insert(0, os.getcwd())  # the checkout at the working directory, as python -c had it

import mamba_ssm.modules.mamba_simple
import mamba_ssm.ops.causal_conv1d
import mamba_ssm.ops.selective_scan_interface
import mamba_ssm.ops.triton.layer_norm
import mamba_ssm.ops.triton.layernorm_gated
import mamba_ssm.ops.triton.selective_state_update
import mamba_ssm.ops.triton.ssd_combined
import mamba_ssm.utils.generation  # noqa: F401

assert "triton" not in sys.modules, "triton imported"
assert "mamba_ssm._families.selective_scan.compiled" not in sys.modules
print("ok")
