"""A user script calling a Mamba block: its fallback warning must name the script's marked line, not torch's.

Run as ``cd <package copy> && python warning_user_line_module.py``; prints a JSON list of
[filename, lineno] of each MambaFallbackWarning.
"""

import json
import warnings

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)
import torch

from mamba_ssm import Mamba

block = Mamba(d_model=8, d_state=4, d_conv=4, expand=2).double()
x = torch.randn(1, 5, 8, dtype=torch.float64)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    block(x)  # USER LINE
print(json.dumps([[w.filename, w.lineno] for w in caught if w.category.__name__ == "MambaFallbackWarning"]))
