"""Build a CPU-only ``mamba_ssm._C`` in place in the checkout at the working directory.

Run as ``cd <checkout> && python <this file>``: it imports that checkout's ``setup.py`` (not this file's
repository) and builds against the running Python's torch, whatever torch's accelerator. The binding
follows ``MAMBA_TORCH_STABLE_ABI`` as ``setup.py`` documents it. Used by ``bench_stable_abi.py`` and
``tests/build/test_stable_abi_two_torches.py``.
"""

import os
import sys

sys.path.insert(0, os.getcwd())  # the checkout's setup.py, not this script's folder
sys.argv = ["setup.py", "build_ext", "--inplace"]

from setuptools import setup  # noqa: E402

import setup as S  # noqa: E402

cfg = S.resolve_config(cpu_only=True)
setup(**S.setup_kwargs(S.BuildPlan(S.BuildMode.SOURCE, config=cfg), S.package_version()))
