"""What ``mamba_ssm._C`` of the checkout at the working directory looks like under the running torch.

Run as ``cd <checkout> && python <this file>``; prints one JSON object: ``torch`` (its version),
``loaded`` / ``reason`` (the loader's answer), ``abi`` (the build's torch ABI line, or null) and ``ops``
(the names registered under ``mamba_ssm::``, sorted).
"""

import json
import os
import sys

sys.path.insert(0, os.getcwd())  # the checkout's mamba_ssm, not this script's folder

import torch

from mamba_ssm import _loader

result = _loader.load()
ops = sorted(
    name.split("::", 1)[1] for name in torch._C._dispatch_get_all_op_names() if name.startswith("mamba_ssm::")
)
print(
    json.dumps(
        {
            "torch": torch.__version__,
            "loaded": result.loaded,
            "reason": result.reason,
            "abi": result.build_info.describe_abi() if result.build_info else None,
            "ops": ops,
        }
    )
)
