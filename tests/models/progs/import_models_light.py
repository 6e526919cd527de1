"""``import mamba_ssm`` stays torch-free; the model, its blocks and the generation helpers import.

Run as ``cd <repository> && python tests/models/progs/import_models_light.py``; prints ``ok``.
"""

# ruff: noqa: E402  (the imports come after the torch-free check)

import os
import sys

sys.path.insert(0, os.getcwd())  # the checkout at the working directory, as python -c had it

import mamba_ssm  # noqa: F401

assert "torch" not in sys.modules, "import mamba_ssm imported torch"

from mamba_ssm import MambaLMHeadModel
from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel as MambaLMHeadModelInModule
from mamba_ssm.modules.block import Block  # noqa: F401
from mamba_ssm.modules.mha import MHA  # noqa: F401
from mamba_ssm.modules.mlp import GatedMLP  # noqa: F401
from mamba_ssm.utils.generation import GenerationMixin, InferenceParams, decode, sample  # noqa: F401
from mamba_ssm.utils.hf import load_config_hf, load_state_dict_hf  # noqa: F401

assert MambaLMHeadModel is MambaLMHeadModelInModule
print("ok")
