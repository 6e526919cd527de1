"""Imported first by the programs in this folder: the package copy at the working directory is imported.

The tests run each program as ``cd <copy root> && python tests/runtime/progs/NAME.py``; ``python -c`` would
put the working directory at ``sys.path[0]``, a script puts its own folder there, so this module puts the
working directory first and asserts that ``mamba_ssm`` is the copy's (never the repository's, whose
``_C`` must not be loaded).
"""

import os
import sys

sys.path.insert(0, os.getcwd())

import mamba_ssm

_expected = os.path.realpath(os.path.join(os.getcwd(), "mamba_ssm"))
_found = os.path.realpath(os.path.dirname(os.path.abspath(mamba_ssm.__file__)))
assert _found == _expected, mamba_ssm.__file__
