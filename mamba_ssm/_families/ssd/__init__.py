"""The SSD (Mamba-2) chunked scan: ``torch_impl`` (the PyTorch stages), ``torch_combined`` (the stages
composed: the PyTorch forward), ``autograd`` (gradients through autograd of the stages, the PyTorch
backward), ``triton_kernels`` (the Triton kernels), ``calls`` (each backend's form of the SSD calls and the
Triton kernels' checks), ``checks`` (argument checks), ``reference`` (plain PyTorch references),
``conv_scan`` (Mamba-2's split / conv / scan / norm composition)."""
