"""Rules shared by the runtime, the install-time resolver, setup.py and the release tooling.

Pure Python: nothing here imports torch or ``mamba_ssm/__init__``. Every module can also be loaded by
file path (``importlib.util.spec_from_file_location``), which setup.py does inside isolated builds.

* ``versions``: torch / CUDA / ROCm / nvcc / hipcc version strings (``TorchBuild``).
* ``archs``: compute capabilities, arch-list syntax, gencode flags, GPU coverage, gfx targets.
* ``buildinfo``: the build-info record of ``mamba_ssm._C`` and the compatibility rule.
* ``variant``: the wheel variant key and its local version label.
"""
