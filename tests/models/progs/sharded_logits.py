"""MambaLMHeadModel.from_pretrained of a sharded hub checkpoint; saves the logits of given ids.

Run as ``cd <folder> && HF_HUB_OFFLINE=1 HF_HUB_CACHE=<cache> python tests/models/progs/sharded_logits.py
IDS_JSON`` (``IDS_JSON``: a nested list of token ids) with the repository on PYTHONPATH; loads
``org/sharded``, prints ``warnings [...]`` (the loader's "ignoring" warnings) and saves the logits to
``logits.pt`` in the working directory.
"""

import json
import sys
import warnings

import torch

from mamba_ssm import MambaLMHeadModel

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    m = MambaLMHeadModel.from_pretrained("org/sharded")
print("warnings", [str(w.message) for w in caught if "ignoring" in str(w.message)])
with torch.no_grad():
    torch.save(m(torch.tensor(json.loads(sys.argv[1]))).logits, "logits.pt")
