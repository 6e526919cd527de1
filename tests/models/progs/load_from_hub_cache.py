"""MambaLMHeadModel.from_pretrained of a hub name, from the cache (run under HF_HUB_OFFLINE=1).

Run as ``cd <repository> && HF_HUB_OFFLINE=1 HF_HUB_CACHE=<cache> python
tests/models/progs/load_from_hub_cache.py``; loads ``org/tiny-mamba`` and prints ``argmax N`` (the last
position's argmax for the ids 1 2 3 4), then tries ``org/not-cached`` and prints ``error MESSAGE``.
"""

import os
import sys

sys.path.insert(0, os.getcwd())  # the checkout at the working directory, as python -c had it

import torch

from mamba_ssm import MambaLMHeadModel

m = MambaLMHeadModel.from_pretrained("org/tiny-mamba")
print("argmax", m(torch.tensor([[1, 2, 3, 4]])).logits[0, -1].argmax().item())
try:
    MambaLMHeadModel.from_pretrained("org/not-cached")
except FileNotFoundError as e:
    print("error", e)
