"""Mamba-3 (Lahoti et al., arXiv:2603.15569) ops at upstream's import paths:

* :mod:`.mamba3_siso_combined`: ``mamba3_siso_combined`` (SISO, whole sequences, differentiable)
* :mod:`.mamba3_siso_step`: ``mamba3_siso_step`` (SISO, one token)
* :mod:`.mamba3_step`: ``mamba3_step`` (SISO or MIMO, one token)
* the MIMO op: :mod:`mamba_ssm.ops.tilelang.mamba3.mamba3_mimo` (upstream's path; no TileLang here)

They run Triton kernels on CUDA/ROCm devices (:mod:`mamba_ssm._families.mamba3.triton_kernels`, reached
through :func:`mamba_ssm._dispatch.call`) and the PyTorch path (:mod:`mamba_ssm._families.mamba3.torch_impl`) elsewhere. Nothing heavy is
imported at package import.
"""
