"""Shared pytest configuration: the repository root (``mamba_ssm``, ``build_matrix``) and this folder
(``oracles``, the float64 references every test compares against) on sys.path, and the CUDA toolkit
root in ``CUDA_HOME`` where only a wrapper script names it (as ``ci/env.sh`` does), so that the source
build commands the tests compare against do not depend on how the caller's shell was set up."""

import os
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS)
for _path in (TESTS, REPO_ROOT):
    if _path not in sys.path:
        sys.path.insert(0, _path)

# The printed source-build command carries ``CUDA_HOME=<root>`` exactly when the caller's environment
# would make torch guess a wrong toolkit root; tests that check that case unset CUDA_HOME themselves.
from mamba_ssm._compat.cudahome import wrapper_toolkit_root  # noqa: E402 (torch-free)

_root = wrapper_toolkit_root(os.environ)
if _root is not None:
    os.environ["CUDA_HOME"] = _root
