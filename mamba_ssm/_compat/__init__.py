"""Rules shared by the runtime, the install-time resolver, setup.py and the release tooling.

Pure Python: nothing here imports torch or ``mamba_ssm/__init__``'s heavy parts. The release tooling
imports it as ``mamba_ssm._compat``; setup.py, which must not run ``mamba_ssm/__init__.py``, reaches it
through its ``load_private`` (relative imports only, so both ways work).

* ``versions``: torch / CUDA / ROCm / nvcc / hipcc version strings (``TorchBuild``), the torch ABI kind
  (``TorchAbi``).
* ``archs``: compute capabilities, arch-list syntax, gencode flags, GPU coverage (and the GPUs no build
  for a CUDA serves), gfx targets.
* ``buildinfo``: the build-info record of ``mamba_ssm._C`` and the compatibility rule.
* ``variant``: the wheel variant key and its local version label.
* ``textenum``: ``TextEnum``, the str-valued enum of every closed vocabulary.
"""
