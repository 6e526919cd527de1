"""from_pretrained on every weights layout huggingface_hub writes (``save_torch_state_dict``: one
model.safetensors / pytorch_model.bin, or shards with their index), on a hub cache offline, with several
layouts at once (one warning naming the ignored ones), shard by shard, and with keys and shapes checked
before any tensor is read. transformers' own folders: test_transformers_parity.py."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import warnings
import weakref

import pytest
import torch

from mamba_ssm.models import _checkpoint
from mamba_ssm.models.config_mamba import MambaConfig
from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel
from mamba_ssm.models.transformers_format import config_from_transformers, config_to_transformers
from mamba_ssm.utils import hf

hub = pytest.importorskip("huggingface_hub")
pytest.importorskip("safetensors")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = dict(d_model=16, n_layer=2, vocab_size=50, ssm_cfg=dict(d_state=4))
IDS = torch.tensor([[3, 1, 4, 1, 5, 9, 2], [6, 5, 3, 5, 8, 9, 7]])


def _model(seed=0, **kw):
    torch.manual_seed(seed)
    return MambaLMHeadModel(MambaConfig(**{**TINY, **kw})).eval()


def _logits(model):
    with torch.no_grad():
        return model(IDS).logits


def _write(model, folder, safe, max_shard_size="1GB"):
    """config.json (ours) + the weights as huggingface_hub.save_torch_state_dict writes them."""
    os.makedirs(folder, exist_ok=True)
    hub.save_torch_state_dict(
        model.state_dict(), str(folder), safe_serialization=safe, max_shard_size=max_shard_size
    )
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(model.config.to_dict(), f)
    return sorted(os.listdir(folder))


@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "bin"])
@pytest.mark.parametrize("sharded", [False, True], ids=["one_file", "sharded"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_huggingface_hub_layouts_load_with_equal_logits(tmp_path, safe, sharded, tied):
    model = _model(tie_embeddings=tied)
    files = _write(model, tmp_path, safe, max_shard_size="8KB" if sharded else "1GB")
    index = "model.safetensors.index.json" if safe else "pytorch_model.bin.index.json"
    single = "model.safetensors" if safe else "pytorch_model.bin"
    if sharded:
        assert index in files and single not in files and len(files) > 3, files
    else:
        assert files == sorted(["config.json", single]), files
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # one layout: nothing to warn about
        loaded = MambaLMHeadModel.from_pretrained(str(tmp_path))
    assert torch.equal(_logits(loaded), _logits(model))
    assert (loaded.lm_head.weight is loaded.backbone.embedding.weight) == tied
    state = hf.load_state_dict_hf(str(tmp_path))  # upstream's function: all layouts, merged
    for key, value in model.state_dict().items():
        if key in state:
            assert torch.equal(state[key], value), key


def test_several_layouts_take_the_first_and_warn_once_naming_the_others(tmp_path):
    chosen, other_bin, other_shards = _model(1), _model(2), _model(3)
    _write(other_shards, tmp_path, safe=True, max_shard_size="8KB")
    other_bin.save_pretrained(str(tmp_path))  # pytorch_model.bin + config.json
    chosen.save_pretrained(str(tmp_path / "x"), safe_serialization=True)
    os.replace(tmp_path / "x" / "model.safetensors", tmp_path / "model.safetensors")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = MambaLMHeadModel.from_pretrained(str(tmp_path))
    assert torch.equal(_logits(loaded), _logits(chosen))
    layout_warnings = [str(w.message) for w in caught if "ignoring" in str(w.message)]
    assert len(layout_warnings) == 1, layout_warnings
    assert (
        "loading model.safetensors; ignoring model.safetensors.index.json, pytorch_model.bin"
        in (layout_warnings[0])
    )
    # without model.safetensors the sharded safetensors come before pytorch_model.bin
    os.remove(tmp_path / "model.safetensors")
    with pytest.warns(
        UserWarning, match=r"loading model\.safetensors\.index\.json; ignoring pytorch_model\.bin"
    ):
        loaded = MambaLMHeadModel.from_pretrained(str(tmp_path))
    assert torch.equal(_logits(loaded), _logits(other_shards))


def test_bin_shards_are_read_one_at_a_time(tmp_path, monkeypatch):
    """Each pytorch_model-*.bin shard is released before the next one is opened (the shapes pass and
    the copying pass alike), so at most one shard is held besides the model."""
    model = _model()
    files = _write(model, tmp_path, safe=False, max_shard_size="8KB")
    shards = [f for f in files if f.startswith("pytorch_model-")]
    assert len(shards) >= 3, files
    real, alive, opened = hf._load_bin, [], []

    class Shard(dict):  # weak-referenceable
        pass

    def tracked(path):
        gc.collect()
        assert [r for r in alive if r() is not None] == [], f"a shard is still held when {path} opens"
        shard = Shard(real(path))
        alive.append(weakref.ref(shard))
        opened.append(os.path.basename(path))
        return shard

    monkeypatch.setattr(hf, "_load_bin", tracked)
    loaded = MambaLMHeadModel.from_pretrained(str(tmp_path))
    assert sorted(opened) == sorted(shards * 2)  # shapes, then tensors
    assert torch.equal(_logits(loaded), _logits(model))


def test_safetensors_file_is_reopened_every_reopen_bytes(tmp_path, monkeypatch):
    """One model.safetensors is read through several openings of about REOPEN_BYTES each, so the pages
    mapped by one opening are let go before the next."""
    model = _model()
    model.save_pretrained(str(tmp_path), safe_serialization=True)
    os.remove(tmp_path / "pytorch_model.bin")
    nbytes = sum(v.numel() * v.element_size() for v in model.state_dict().values())
    monkeypatch.setattr(hf, "REOPEN_BYTES", 4096)
    real, openings = hf._safe_open, []

    def counted(path):
        openings.append(path)
        return real(path)

    monkeypatch.setattr(hf, "_safe_open", counted)
    loaded = MambaLMHeadModel.from_pretrained(str(tmp_path))
    assert len(openings) >= nbytes // 4096 // 2, (len(openings), nbytes)
    assert torch.equal(_logits(loaded), _logits(model))


def _forbid_reading(monkeypatch):
    def no(*a, **k):
        raise AssertionError("a tensor was read before the keys and shapes were checked")

    monkeypatch.setattr(_checkpoint, "iter_weights", no)


@pytest.mark.parametrize("safe", [True, False], ids=["safetensors", "bin"])
def test_shape_mismatch_names_key_shapes_and_cause_before_reading(tmp_path, monkeypatch, safe):
    model = _model()
    _write(model, tmp_path, safe, max_shard_size="8KB")
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["ssm_cfg"] = {"d_state": 6}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    _forbid_reading(monkeypatch)
    with pytest.raises(ValueError) as info:
        MambaLMHeadModel.from_pretrained(str(tmp_path))
    msg = str(info.value)
    # A_log is (d_inner, d_state) = (32, 4) in the file, (32, 6) in the model
    assert "backbone.layers.0.mixer.A_log: checkpoint [32, 4], model [32, 6]" in msg, msg
    assert "likely cause: the Mamba1 layer's sizes in config.json: d_model=16, ssm_cfg {'d_state': 6}" in msg

    cfg["ssm_cfg"] = {"d_state": 4}
    cfg["vocab_size"] = 70  # 72 rows with pad_vocab_size_multiple 8; the file has 56
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError) as info:
        MambaLMHeadModel.from_pretrained(str(tmp_path))
    msg = str(info.value)
    assert "checkpoint [56, 16], model [72, 16]" in msg and "vocab_size=70" in msg, msg
    assert "backbone.embedding.weight" in msg or "lm_head.weight" in msg


def test_missing_shard_and_inconsistent_index_are_named(tmp_path):
    model = _model()
    files = _write(model, tmp_path, safe=True, max_shard_size="8KB")
    index_path = tmp_path / "model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    key, shard = next(iter(index["weight_map"].items()))
    other = next(f for f in files if f.startswith("model-") and f != shard)
    index["weight_map"][key] = other  # the index puts a key in a shard that lacks it
    index_path.write_text(json.dumps(index))
    with pytest.raises(ValueError, match=f"{other} does not hold {key}.*different saves"):
        MambaLMHeadModel.from_pretrained(str(tmp_path))
    os.remove(tmp_path / other)
    with pytest.raises(FileNotFoundError, match=f"{other} does not exist, but .*index.json puts"):
        MambaLMHeadModel.from_pretrained(str(tmp_path))
    index["weight_map"][key] = "../elsewhere.safetensors"
    index_path.write_text(json.dumps(index))
    with pytest.raises(ValueError, match="not a shard file name next to the index"):
        MambaLMHeadModel.from_pretrained(str(tmp_path))


def test_tied_checkpoint_with_only_one_of_the_two_names(tmp_path):
    model = _model()
    sd = model.state_dict()
    sd["lm_head.weight"] = sd.pop("backbone.embedding.weight").clone()  # only the head's name
    torch.save(sd, tmp_path / "pytorch_model.bin")
    (tmp_path / "config.json").write_text(json.dumps(model.config.to_dict()))
    assert torch.equal(_logits(MambaLMHeadModel.from_pretrained(str(tmp_path))), _logits(model))


def test_sharded_hub_repo_from_the_cache_offline(tmp_path):
    """A hub-style cache (models--org--name/refs/main + snapshots/<commit>/) holding sharded
    safetensors and a pytorch_model.bin, read with HF_HUB_OFFLINE=1 through huggingface_hub."""
    commit = "89abcdef0123456789abcdef0123456789abcdef"
    snapshot = tmp_path / "hub" / "models--org--sharded" / "snapshots" / commit
    model = _model(5)
    _write(model, snapshot, safe=True, max_shard_size="8KB")
    _model(6).save_pretrained(str(tmp_path / "decoy"))
    os.replace(tmp_path / "decoy" / "pytorch_model.bin", snapshot / "pytorch_model.bin")
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text(commit)
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "tests", "models", "progs", "sharded_logits.py"),
            json.dumps(IDS.tolist()),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "PYTHONPATH": REPO,
            "HF_HUB_OFFLINE": "1",
            "HF_HUB_CACHE": str(tmp_path / "hub"),
            "MAMBA_SSM_NO_FALLBACK_WARNING": "1",
        },
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "loading model.safetensors.index.json; ignoring pytorch_model.bin" in proc.stdout, proc.stdout
    assert torch.equal(torch.load(tmp_path / "logits.pt"), _logits(model))


def test_no_weights_names_every_layout(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(MambaConfig(**TINY).to_dict()))
    with pytest.raises(FileNotFoundError) as info:
        MambaLMHeadModel.from_pretrained(str(tmp_path))
    for name in hf.WEIGHTS_LAYOUTS:
        assert name in str(info.value)


# ------------------------------------------------------------------ what transformers cannot represent


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(d_intermediate=64), r"d_intermediate=64 adds MLP blocks"),
        (
            dict(attn_layer_idx=[1], attn_cfg={"num_heads": 2, "causal": True}),
            r"attn_layer_idx=\[1\] adds attention layers",
        ),
        (dict(rms_norm=False), r"rms_norm=False asks for LayerNorm"),
        (dict(ssm_cfg={"layer": "Mamba2", "headdim": 8, "norm_before_gate": True}), "norm_before_gate"),
    ],
)
def test_save_transformers_format_refuses_what_transformers_lacks(tmp_path, fields, match):
    model = MambaLMHeadModel(MambaConfig(**{**TINY, **fields}))
    with pytest.raises(ValueError, match=match):
        model.save_pretrained(str(tmp_path / "out"), transformers_format=True)
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_transformers_configs_this_model_cannot_take_are_refused():
    base = {"model_type": "mamba", "hidden_size": 16, "num_hidden_layers": 2, "vocab_size": 50}
    assert config_from_transformers(base).ssm_cfg == {}  # transformers' defaults are upstream's
    with pytest.raises(ValueError, match="layer_norm_epsilon=1e-06 sets the norms' eps"):
        config_from_transformers({**base, "layer_norm_epsilon": 1e-6})
    with pytest.raises(ValueError, match="hidden_act='gelu'"):
        config_from_transformers({**base, "hidden_act": "gelu"})
    with pytest.raises(ValueError, match="model_type='falcon_mamba'"):
        config_from_transformers({**base, "model_type": "falcon_mamba"})
    m2 = {**base, "model_type": "mamba2", "num_heads": 3, "head_dim": 16}
    with pytest.raises(ValueError, match="num_heads=3 times head_dim=16 is not expand"):
        config_from_transformers(m2)
    # a config that maps both ways keeps its values
    cfg = config_from_transformers({**m2, "num_heads": 2, "time_step_limit": [0.0, 5.0], "n_groups": 2})
    assert cfg.ssm_cfg == {"layer": "Mamba2", "headdim": 16, "ngroups": 2, "dt_limit": [0.0, 5.0]}
    back = config_to_transformers(cfg)
    assert (back["num_heads"], back["head_dim"], back["n_groups"], back["time_step_limit"]) == (
        2,
        16,
        2,
        [0.0, 5.0],
    )
