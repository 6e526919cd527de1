"""Upstream's ``mamba_ssm.ops.triton`` import paths (``selective_state_update``, ``layer_norm``,
``ssd_combined``). The implementations here are PyTorch; Triton is never imported at module level."""
