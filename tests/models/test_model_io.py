"""MambaConfig / from_pretrained / save_pretrained / utils.hf: upstream's checkpoint layout, vocab
padding, minimal hub configs, safetensors, the hub cache offline, and a clear error for each bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from mamba_ssm.models.config_mamba import MambaConfig
from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel, create_block
from mamba_ssm.utils.hf import load_config_hf, load_state_dict_hf

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = dict(d_model=16, n_layer=2, vocab_size=50, ssm_cfg=dict(d_state=4))


def _saved(tmp_path, **kw):
    torch.manual_seed(0)
    model = MambaLMHeadModel(MambaConfig(**{**TINY, **kw})).eval()
    model.save_pretrained(str(tmp_path))
    return model


def test_defaults_are_upstreams():
    c = MambaConfig()
    assert (
        c.d_model,
        c.d_intermediate,
        c.n_layer,
        c.vocab_size,
        c.ssm_cfg,
        c.attn_layer_idx,
        c.attn_cfg,
        c.rms_norm,
        c.residual_in_fp32,
        c.fused_add_norm,
        c.pad_vocab_size_multiple,
        c.tie_embeddings,
    ) == (2560, 0, 64, 50277, {}, [], {}, True, True, True, 8, True)


def test_checkpoint_keys_and_vocab_padding():
    model = MambaLMHeadModel(
        MambaConfig(d_model=16, n_layer=2, vocab_size=50277, d_intermediate=24, ssm_cfg=dict(d_state=4))
    )
    keys = set(model.state_dict())
    assert model.backbone.embedding.weight.shape == (50280, 16)
    assert model.lm_head.weight is model.backbone.embedding.weight
    per_layer = {
        "mixer.A_log",
        "mixer.D",
        "mixer.in_proj.weight",
        "mixer.conv1d.weight",
        "mixer.conv1d.bias",
        "mixer.x_proj.weight",
        "mixer.dt_proj.weight",
        "mixer.dt_proj.bias",
        "mixer.out_proj.weight",
        "norm.weight",
        "norm2.weight",
        "mlp.fc1.weight",
        "mlp.fc2.weight",
    }
    want = {"backbone.embedding.weight", "backbone.norm_f.weight", "lm_head.weight"}
    want |= {f"backbone.layers.{i}.{k}" for i in range(2) for k in per_layer}
    assert keys == want
    # GatedMLP hidden width 24 rounded up to a multiple of 128.
    assert model.backbone.layers[0].mlp.fc1.weight.shape == (256, 16)


def test_save_and_load_round_trip_bin_and_safetensors(tmp_path):
    model = _saved(tmp_path / "bin")
    with open(tmp_path / "bin" / "config.json") as f:
        assert json.load(f) == MambaConfig(**TINY).to_dict()
    ids = torch.randint(0, 50, (2, 7))
    with torch.no_grad():
        want = model(ids).logits
        got = MambaLMHeadModel.from_pretrained(str(tmp_path / "bin"))(ids).logits
    assert torch.equal(got, want)

    model.save_pretrained(str(tmp_path / "safe"), safe_serialization=True)
    os.remove(tmp_path / "safe" / "pytorch_model.bin")  # only model.safetensors is left to read
    loaded = MambaLMHeadModel.from_pretrained(str(tmp_path / "safe"), dtype=torch.float64)
    assert loaded.lm_head.weight is loaded.backbone.embedding.weight
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, want.double(), rtol=1e-5, atol=1e-5)


def test_minimal_hub_config_takes_the_defaults(tmp_path):
    model = _saved(tmp_path)
    minimal = dict(
        d_model=16,
        n_layer=2,
        vocab_size=50,
        ssm_cfg=dict(d_state=4),
        rms_norm=True,
        residual_in_fp32=True,
        fused_add_norm=True,
        pad_vocab_size_multiple=8,
    )
    with open(tmp_path / "config.json", "w") as f:
        json.dump(minimal, f)
    loaded = MambaLMHeadModel.from_pretrained(str(tmp_path))
    assert loaded.config == model.config
    assert load_config_hf(str(tmp_path)) == minimal


def test_unknown_ssm_layer(tmp_path):
    with pytest.raises(ValueError, match=r"'Mamba4'.*\['Mamba1', 'Mamba2', 'Mamba3'\]"):
        MambaLMHeadModel(MambaConfig(**{**TINY, "ssm_cfg": {"layer": "Mamba4"}}))
    with pytest.raises(ValueError, match="Mamba4"):
        create_block(16, 0, ssm_cfg={"layer": "Mamba4"}, layer_idx=0)


def test_missing_and_corrupt_files(tmp_path):
    _saved(tmp_path)
    config = tmp_path / "config.json"
    weights = tmp_path / "pytorch_model.bin"
    good = config.read_text()
    config.write_text("{not json")
    with pytest.raises(ValueError, match=r"config\.json is not valid JSON"):
        MambaLMHeadModel.from_pretrained(str(tmp_path))
    config.write_text(json.dumps({**json.loads(good), "hidden_size": 16}))
    with pytest.raises(ValueError, match="unknown MambaConfig field.*hidden_size"):
        MambaLMHeadModel.from_pretrained(str(tmp_path))
    config.unlink()
    with pytest.raises(FileNotFoundError, match=r"config\.json does not exist"):
        MambaLMHeadModel.from_pretrained(str(tmp_path))
    config.write_text(good)
    weights.write_bytes(b"\x00garbage, not a checkpoint")
    with pytest.raises(ValueError, match="not a readable PyTorch checkpoint"):
        MambaLMHeadModel.from_pretrained(str(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
    with (
        pytest.raises(ValueError, match="not a readable safetensors file"),
        pytest.warns(UserWarning, match="loading model.safetensors; ignoring pytorch_model.bin"),
    ):
        load_state_dict_hf(str(tmp_path))
    weights.unlink()
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(
        FileNotFoundError, match=r"has no weights: none of model\.safetensors, .*pytorch_model\.bin"
    ):
        MambaLMHeadModel.from_pretrained(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="is not a directory"):
        MambaLMHeadModel.from_pretrained(str(tmp_path / "nowhere"))


def test_missing_and_unexpected_keys_are_listed(tmp_path):
    model = _saved(tmp_path)
    sd = model.state_dict()
    sd.pop("backbone.layers.1.mixer.D")
    sd["backbone.embeddings.weight"] = sd.pop("backbone.embedding.weight")  # transformers' name
    sd.pop("lm_head.weight")
    torch.save(sd, tmp_path / "pytorch_model.bin")
    with pytest.raises(KeyError) as info:
        MambaLMHeadModel.from_pretrained(str(tmp_path))
    msg = str(info.value)
    assert "missing keys: backbone.embedding.weight, backbone.layers.1.mixer.D, lm_head.weight" in msg
    assert "unexpected keys: backbone.embeddings.weight" in msg
    assert "transformers' names with a mamba-ssm config.json" in msg


def test_max_length_shorter_than_prompt():
    model = MambaLMHeadModel(MambaConfig(**TINY))
    with pytest.raises(ValueError, match="max_length=4 must be larger than the prompt's 6 tokens"):
        model.generate(torch.zeros(1, 6, dtype=torch.long), max_length=4)
    with pytest.raises(ValueError, match="integer tensor"):
        model.generate(torch.zeros(1, 6), max_length=8)


def test_hub_name_without_huggingface_hub(monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(
        FileNotFoundError, match="needs the huggingface_hub package: pip install huggingface_hub"
    ):
        load_config_hf("state-spaces/mamba-130m")


def _run(prog, env):
    """Run ``tests/models/progs/<prog>.py`` in the repository; its stdout."""
    proc = subprocess.run(
        [sys.executable, os.path.join(REPO, "tests", "models", "progs", prog + ".py")],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": REPO, **env},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_hub_name_read_from_the_cache_offline(tmp_path):
    """A hub-style cache (models--org--name/refs/main + snapshots/<commit>/...) read with HF_HUB_OFFLINE=1."""
    pytest.importorskip("huggingface_hub")
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = tmp_path / "hub" / "models--org--tiny-mamba" / "snapshots" / commit
    model = _saved(snapshot)
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text(commit)
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        want = model(ids).logits[0, -1].argmax().item()
    out = _run(
        "load_from_hub_cache",
        {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub")},
    )
    assert f"argmax {want}" in out
    assert (
        "config.json of 'org/not-cached' is not in the Hugging Face cache" in out
        and "HF_HUB_OFFLINE=1" in out
    )


def test_import_stays_torch_free_and_exports_the_model():
    out = _run(
        "import_models_light",
        {},
    )
    assert "ok" in out
