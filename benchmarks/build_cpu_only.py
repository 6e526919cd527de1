"""Build a CPU-only ``mamba_ssm._C`` in place in the checkout at the working directory.

Run as ``cd <checkout> && python <this file>``: it loads that checkout's build modules through its
``setup.py``'s ``load_private`` (not this file's repository) and builds against the running Python's
torch, whatever torch's accelerator. The binding follows ``MAMBA_TORCH_STABLE_ABI`` as ``setup.py``
documents it. Used by ``bench_stable_abi.py`` and
``tests/build/test_stable_abi_two_torches.py``.
"""

import os
import sys

sys.path.insert(0, os.getcwd())  # the checkout's setup.py, not this script's folder
sys.argv = ["setup.py", "build_ext", "--inplace"]

from setuptools import setup  # noqa: E402

import setup as S  # noqa: E402

config = S.load_private("_build.config")
plan = S.load_private("_build.plan")
commands = S.load_private("_build.commands")
settings = S.load_private("_build.settings")
cfg = config.resolve_config(cpu_only=True)
setup(**commands.setup_kwargs(plan.BuildPlan(plan.BuildMode.SOURCE, config=cfg), settings.package_version()))
