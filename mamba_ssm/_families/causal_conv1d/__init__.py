"""The causal conv1d family: checks, the PyTorch implementation, the compiled kernels' call forms."""
