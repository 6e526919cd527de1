"""Bad input found by trying the package as a new user (clean clone, README and upstream's usage):
each error names the value and the fix instead of surfacing as an unrelated torch error, and the
accepted spellings next to each bad one still work."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from mamba_ssm import Mamba, Mamba2
from mamba_ssm.models.config_mamba import MambaConfig
from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel
from mamba_ssm.modules.mha import MHA


@pytest.mark.parametrize(
    "cls, kwargs, name",
    [
        (Mamba, dict(d_model=0), "d_model=0"),  # was torch's "groups must be a positive integer"
        (Mamba, dict(d_model=16, d_conv=0), "d_conv=0"),  # was a oneDNN convolution failure at forward
        (Mamba, dict(d_model=16, d_state=-2), "d_state=-2"),
        (Mamba, dict(d_model=16.0), "d_model=16.0"),
        (Mamba2, dict(d_model=64, headdim=32, d_conv=0), "d_conv=0"),
        (Mamba2, dict(d_model=64, headdim=0), "headdim=0"),
    ],
)
def test_non_positive_sizes_are_named(cls, kwargs, name):
    with pytest.raises(ValueError, match=rf"{cls.__name__}: {name} must be a positive integer \(.*e\.g\."):
        cls(**kwargs)


def test_expand_too_small_is_named():
    with pytest.raises(
        ValueError, match=r"d_inner = int\(expand \* d_model\) = int\(0.01 \* 16\) = 0.*expand=2"
    ):
        Mamba(d_model=16, expand=0.01)


def test_numpy_integer_sizes_still_build():
    """Sizes read from arrays / configs as numpy integers are integers too."""
    layer = Mamba(d_model=np.int64(16), d_state=np.int32(4), d_conv=np.int64(3))
    assert layer.conv1d.weight.shape == (32, 1, 3) and layer.x_proj.out_features == 1 + 2 * 4
    assert layer(torch.randn(1, 5, 16)).shape == (1, 5, 16)


def test_mamba2_ngroups_error_lists_the_divisors_that_work():
    with pytest.raises(ValueError) as info:
        Mamba2(d_model=64, headdim=16, ngroups=3)  # nheads = 128 / 16 = 8
    msg = str(info.value)
    assert "ngroups = 3 must divide nheads = 8" in msg and "128 / 16" in msg
    listed = [int(v) for v in msg.rsplit("[", 1)[1].rstrip("]").split(",")]
    assert listed == [1, 2, 4, 8]
    for g in listed:  # every suggestion builds: B and C carry g groups of d_state
        layer = Mamba2(d_model=64, headdim=16, d_state=4, ngroups=g)
        assert layer.in_proj.out_features == 2 * 128 + 2 * g * 4 + 8


def test_attn_layer_idx_outside_the_layers_is_an_error():
    cfg = dict(d_model=32, n_layer=2, vocab_size=64, attn_cfg={"num_heads": 2, "causal": True})
    with pytest.raises(ValueError, match=r"attn_layer_idx=\[1, 5\] names \[5\].*n_layer=2 layers \(0\.\.1\)"):
        MambaLMHeadModel(MambaConfig(attn_layer_idx=[1, 5], **cfg))
    model = MambaLMHeadModel(MambaConfig(attn_layer_idx=[1], **cfg))  # in range: layer 1 is attention
    assert isinstance(model.backbone.layers[1].mixer, MHA) and isinstance(
        model.backbone.layers[0].mixer, Mamba
    )


def _step_vs_full(model, prompt, max_length):
    """Largest gap between generate's per-step logits and one full forward pass over the same tokens."""
    out = model.generate(prompt, max_length=max_length, return_dict_in_generate=True, output_scores=True)
    with torch.no_grad():
        full = model(out.sequences[:, :-1]).logits[:, prompt.shape[1] - 1 :]
    return (torch.stack(out.scores, 1) - full[..., : out.scores[0].shape[-1]]).abs().max().item()


def test_non_causal_attention_in_a_language_model_warns():
    """MHA's default (upstream's) is causal=False: a hybrid LM built from attn_cfg={"num_heads": 2} sees
    later tokens, so decoding disagrees with a full pass; the warning says what to add."""
    cfg = dict(d_model=32, n_layer=2, vocab_size=64, attn_layer_idx=[1], ssm_cfg={"d_state": 4})
    torch.manual_seed(0)
    with pytest.warns(UserWarning, match=r"attention layers \[1\] are not causal.*'causal': True"):
        bad = MambaLMHeadModel(MambaConfig(attn_cfg={"num_heads": 2}, **cfg)).eval()
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        good = MambaLMHeadModel(MambaConfig(attn_cfg={"num_heads": 2, "causal": True}, **cfg)).eval()
    assert good.state_dict().keys() == bad.state_dict().keys()
    prompt = torch.tensor([[5, 9, 1, 33, 7]])
    assert _step_vs_full(good, prompt, 12) < 1e-5
    assert _step_vs_full(bad, prompt, 12) > 1e-3  # what the warning is about


def test_generate_names_a_prompt_id_outside_the_vocabulary():
    torch.manual_seed(0)
    model = MambaLMHeadModel(
        MambaConfig(d_model=16, n_layer=1, vocab_size=100, ssm_cfg={"d_state": 4})
    ).eval()
    rows = model.backbone.embedding.num_embeddings
    assert rows == 104  # padded to a multiple of pad_vocab_size_multiple=8
    for bad in (rows, -1):
        with pytest.raises(
            ValueError,
            match=rf"token id {bad}, outside the model's vocabulary of {rows} "
            rf"embedding rows \(ids 0\.\.{rows - 1}\)",
        ):
            model.generate(torch.tensor([[3, bad]]), max_length=4)
    # the last row is a valid id: greedy decoding continues with the argmax of a full forward pass
    prompt = torch.tensor([[3, rows - 1]])
    out = model.generate(prompt, max_length=3)
    with torch.no_grad():
        expected = model(prompt).logits[0, -1].argmax()
    assert out.shape == (1, 3) and out[0, 2] == expected


def test_from_pretrained_takes_a_dtype_name(tmp_path):
    torch.manual_seed(0)
    MambaLMHeadModel(
        MambaConfig(d_model=16, n_layer=1, vocab_size=40, ssm_cfg={"d_state": 4})
    ).save_pretrained(str(tmp_path))
    saved = torch.load(tmp_path / "pytorch_model.bin", map_location="cpu")
    for name in ("bfloat16", "torch.bfloat16"):
        model = MambaLMHeadModel.from_pretrained(str(tmp_path), dtype=name)
        state = model.state_dict()
        assert state["backbone.embedding.weight"].dtype == torch.bfloat16
        # each tensor cast to its parameter's dtype: Mamba keeps A_log in float32 (at full precision)
        assert state["backbone.layers.0.mixer.A_log"].dtype == torch.float32
        for key, value in saved.items():
            assert torch.equal(state[key], value.to(state[key].dtype)), key
    for bad in ("bf16", "int8", 3):
        with pytest.raises(TypeError, match=rf"dtype={bad!r} is not a floating torch dtype"):
            MambaLMHeadModel.from_pretrained(str(tmp_path), dtype=bad)
