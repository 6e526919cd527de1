"""Shared pytest configuration: the repository root (``mamba_ssm``, ``build_matrix``) and this folder
(``oracles``, the float64 references every test compares against) on sys.path."""

import os
import sys

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS)
for _path in (TESTS, REPO_ROOT):
    if _path not in sys.path:
        sys.path.insert(0, _path)
