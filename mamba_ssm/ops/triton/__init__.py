"""Upstream's ``mamba_ssm.ops.triton`` import paths (``selective_state_update``, ``layer_norm``,
``layernorm_gated``, ``ssd_combined``, the SSD stage modules ``ssd_chunk_state``, ``ssd_state_passing``,
``ssd_bmm``, ``ssd_chunk_scan``, ``k_activations``, ``softplus``). Each public function runs its Triton
kernel (:mod:`mamba_ssm._families.triton_kernels`) on CUDA/ROCm devices when triton >= 3.0 imports, and its
PyTorch implementation otherwise; triton is never imported at module level (only once a GPU call needs
it), except by ``softplus``, which defines a Triton device function as upstream's does."""
