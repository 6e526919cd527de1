"""Every ```python block of README.md runs, as written, on the CPU (each in a fresh interpreter).

The blocks run offline (HF_HUB_OFFLINE=1) against a Hugging Face cache in which the hub ids the README
names hold a tiny model in that repository's layout (``state-spaces/mamba-130m-hf``: transformers'
MambaForCausalLM folder, config.json + model.safetensors), so the hub code path runs without a network."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _blocks():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        return re.findall(r"^```python\n(.*?)^```", f.read(), flags=re.S | re.M)


def test_readme_has_the_model_examples():
    text = "\n".join(_blocks())
    for name in (
        "from mamba_ssm import Mamba\n",
        "from mamba_ssm import Mamba2",
        "MambaLMHeadModel.from_pretrained",
        ".generate(",
    ):
        assert name in text


# hub id -> MambaConfig fields of the tiny stand-in written in transformers' format
HUB_STAND_INS = {"state-spaces/mamba-130m-hf": dict(d_model=32, n_layer=2, vocab_size=100)}


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    """A Hugging Face cache (models--org--name/refs/main + snapshots/<commit>/) of HUB_STAND_INS."""
    import torch

    from mamba_ssm.models.config_mamba import MambaConfig
    from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel

    cache = tmp_path_factory.mktemp("hub")
    commit = "0" * 40
    for repo_id, fields in HUB_STAND_INS.items():
        repo = cache / ("models--" + repo_id.replace("/", "--"))
        torch.manual_seed(0)
        MambaLMHeadModel(MambaConfig(**fields)).save_pretrained(
            str(repo / "snapshots" / commit), transformers_format=True
        )
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(commit)
    return cache


def test_readme_names_only_hub_ids_the_test_serves():
    text = "\n".join(_blocks())
    named = set(re.findall(r'from_pretrained\("([\w.-]+/[\w.-]+)"', text))
    assert named <= set(HUB_STAND_INS), named - set(HUB_STAND_INS)


@pytest.mark.parametrize("index", range(len(_blocks())))
def test_readme_example_runs(index, tmp_path, hub_cache):
    code = _blocks()[index]
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_CACHE": str(hub_cache),
        "PYTHONPATH": REPO,
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        "MAMBA_SSM_NO_FALLBACK_WARNING": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"README example {index} failed:\n{code}\n{proc.stdout}\n{proc.stderr}"
