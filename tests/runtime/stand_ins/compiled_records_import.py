"""Test stand-in for the kernels part's Python face: records that dispatch imported it.

Copied over ``mamba_ssm/_families/selective_scan/compiled.py`` in a package copy (test_dispatch_backend.py); writes
``imported`` to the file named by MAMBA_SSM_TEST_COMPILED_IMPORTED when imported.
"""

import os

IMPORTED = True
with open(os.environ["MAMBA_SSM_TEST_COMPILED_IMPORTED"], "w") as fh:
    fh.write("imported")
