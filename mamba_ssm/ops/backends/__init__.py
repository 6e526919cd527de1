"""Selective-scan backends: :mod:`.torch_scan` (the PyTorch fallback, always available) and
:mod:`.compiled` (the kernels of ``mamba_ssm._C``, imported only by the dispatcher)."""
