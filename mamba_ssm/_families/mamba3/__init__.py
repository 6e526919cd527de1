"""The Mamba-3 family (SISO, MIMO, decode step): states, the PyTorch implementation, the Triton kernels'
call forms."""
