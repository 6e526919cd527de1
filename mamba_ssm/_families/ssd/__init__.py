"""The SSD (Mamba-2) chunked scan: its PyTorch stages and Triton kernels."""
