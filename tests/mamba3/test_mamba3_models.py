"""Language models with Mamba3 layers (SISO, MIMO, a hybrid with causal MHA): the checkpoint layout
(upstream's config.json + pytorch_model.bin, every Mamba-3 key and shape as the layer defines them), a
save_pretrained -> from_pretrained round trip, and greedy generate (prompt once, then each layer's step
path) == the argmax loop over full forward passes."""

from __future__ import annotations

import json

import pytest
import torch

from mamba_ssm.models.config_mamba import MambaConfig
from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel

MODELS = {
    "siso": {
        "d_model": 32,
        "n_layer": 2,
        "vocab_size": 61,
        "ssm_cfg": {"layer": "Mamba3", "d_state": 16, "headdim": 8, "chunk_size": 4},
    },
    "mimo-outproj-norm": {
        "d_model": 32,
        "n_layer": 2,
        "vocab_size": 61,
        "d_intermediate": 48,
        "ssm_cfg": {
            "layer": "Mamba3",
            "d_state": 16,
            "headdim": 8,
            "chunk_size": 2,
            "is_mimo": True,
            "mimo_rank": 2,
            "is_outproj_norm": True,
            "rope_fraction": 1.0,
        },
    },
    "hybrid-mha": {
        "d_model": 32,
        "n_layer": 3,
        "vocab_size": 61,
        "attn_layer_idx": [1],
        "attn_cfg": {"num_heads": 4, "causal": True},
        "ssm_cfg": {"layer": "Mamba3", "d_state": 16, "headdim": 8, "chunk_size": 4, "ngroups": 2},
    },
}


def _model(name, dtype=torch.float64):
    torch.manual_seed(0)
    model = MambaLMHeadModel(MambaConfig(**MODELS[name]), dtype=dtype).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def _mixer_keys(cfg, d_model):
    """The Mamba-3 keys and shapes from the layer's definition (issue 19's parameter list)."""
    N, P, G = cfg["d_state"], cfg["headdim"], cfg.get("ngroups", 1)
    R = cfg.get("mimo_rank", 4) if cfg.get("is_mimo") else 1
    d_inner = 2 * d_model
    H = d_inner // P
    angles = int(N * cfg.get("rope_fraction", 0.5)) // 2 * 2 // 2
    keys = {
        "in_proj.weight": (2 * d_inner + 2 * N * G * R + 3 * H + angles, d_model),
        "dt_bias": (H,),
        "B_bias": (H, R, N),
        "C_bias": (H, R, N),
        "B_norm.weight": (N,),
        "C_norm.weight": (N,),
        "D": (H,),
        "out_proj.weight": (d_model, d_inner),
    }
    if cfg.get("is_mimo"):
        keys.update({f"mimo_{w}": (H, R, P) for w in "xzo"})
    if cfg.get("is_outproj_norm"):
        keys["norm.weight"] = (d_inner,)
    return keys


@pytest.mark.parametrize("name", list(MODELS))
def test_save_load_round_trip_in_upstreams_layout(name, tmp_path):
    model = _model(name)
    model.save_pretrained(str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json", "pytorch_model.bin"]
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["ssm_cfg"] == MODELS[name]["ssm_cfg"]
    state = torch.load(tmp_path / "pytorch_model.bin", weights_only=True)
    fields = MODELS[name]
    want = _mixer_keys(fields["ssm_cfg"], fields["d_model"])
    for i in range(fields["n_layer"]):
        prefix = f"backbone.layers.{i}.mixer."
        got = {k[len(prefix) :]: tuple(v.shape) for k, v in state.items() if k.startswith(prefix)}
        if i in fields.get("attn_layer_idx", []):
            assert "in_proj.weight" in got and "dt_bias" not in got  # the MHA layer
        else:
            assert got == want, (i, got)
    loaded = MambaLMHeadModel.from_pretrained(str(tmp_path), dtype=torch.float64)
    assert loaded.config == model.config
    for k, v in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[k], v), k
    ids = torch.randint(0, 61, (2, 9))
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, model(ids).logits)


@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_generate_equals_the_argmax_loop(name):
    model = _model(name)
    prompt = torch.randint(0, 61, (2, 6))  # chunk_size 4 / 2: the prompt ends off a chunk edge
    with torch.no_grad():
        got = model.generate(prompt, max_length=15)
        seq = prompt
        while seq.shape[1] < 15:
            nxt = model(seq).logits[:, -1].argmax(-1)
            seq = torch.cat([seq, nxt[:, None]], dim=1)
    assert torch.equal(got, seq)


def test_decode_logits_match_the_full_pass_float32():
    """Teacher-forced decoding in float32: every step's logits == the full pass's at that position."""
    model = _model("mimo-outproj-norm", dtype=torch.float32)
    tokens = torch.randint(0, 61, (2, 12))
    with torch.no_grad():
        out = model.generate(
            tokens[:, :5],
            max_length=12,
            teacher_outputs=tokens,
            output_scores=True,
            return_dict_in_generate=True,
        )
        full = model(tokens).logits
    steps = torch.stack(out.scores, dim=1)  # logits for positions 5..11, from tokens 0..4, then one at a time
    err = float((steps - full[:, 4:11]).abs().max())
    assert err <= 1e-4 * max(1.0, float(full.abs().max())), err
