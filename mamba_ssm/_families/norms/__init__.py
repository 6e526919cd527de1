"""The norms family (LayerNorm / RMSNorm, gated): PyTorch code and the Triton kernels' call forms."""
