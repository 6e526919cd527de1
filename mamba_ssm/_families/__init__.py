"""The op families' implementations, one package per family: PyTorch code (``torch_impl``), Triton
kernels (``triton_kernels``), the compiled kernels' face (``compiled``), autograd, references and the
argument checks. The backends (:mod:`mamba_ssm._backends`) call them; the public functions live in
:mod:`mamba_ssm.ops`. This package imports nothing (the layering test keeps it so)."""
