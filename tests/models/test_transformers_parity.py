"""MambaLMHeadModel against transformers' MambaForCausalLM / Mamba2ForCausalLM (an independent
implementation; a test-only dependency), run in a subprocess where mamba_ssm is blocked so transformers
takes its own PyTorch path (asserted).

Forward: random transformers models saved by transformers' own ``save_pretrained`` (one
model.safetensors, or sharded with model.safetensors.index.json) load directly with our
``from_pretrained(dir)``: fp32 logits within 1e-5 of transformers', loss gradients, and greedy generation
of 32 tokens token-identical to transformers' generate. Saved back with
``save_pretrained(transformers_format=True)`` they are the same tensors and config values transformers
wrote.
Reverse: our models written with ``save_pretrained(transformers_format=True)`` load into transformers
with the same logits and greedy tokens.
"""

from __future__ import annotations

import importlib.util
import json
import os

import hf_run
import pytest
import torch
import torch.nn.functional as F

from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel
from mamba_ssm.models.transformers_format import key_from_transformers

pytest.importorskip("transformers")
safetensors = pytest.importorskip("safetensors")

HAS_MAMBA2 = importlib.util.find_spec("mamba_ssm.modules.mamba2") is not None
NEW_TOKENS = 32

# name: (arch, transformers config, seqlen of the logits input, max_shard_size of save_pretrained)
FORWARD = {
    # vocab 100 -> 104 rows with pad_vocab_size_multiple 8; tied head; one model.safetensors.
    "mamba1_padded_vocab": (
        "mamba",
        dict(
            vocab_size=100,
            hidden_size=32,
            state_size=8,
            num_hidden_layers=2,
            expand=2,
            conv_kernel=4,
            tie_word_embeddings=True,
        ),
        21,
        None,
    ),
    # untied head with a padded vocabulary (both padded), sharded safetensors.
    "mamba1_untied_sharded": (
        "mamba",
        dict(
            vocab_size=101,
            hidden_size=32,
            state_size=8,
            num_hidden_layers=2,
            expand=2,
            conv_kernel=4,
            time_step_rank=3,
            tie_word_embeddings=False,
        ),
        19,
        "20KB",
    ),
    "mamba2_ngroups1_chunk16": (
        "mamba2",
        dict(
            vocab_size=96,
            hidden_size=32,
            state_size=16,
            num_hidden_layers=2,
            expand=2,
            head_dim=16,
            num_heads=4,
            n_groups=1,
            chunk_size=16,
            tie_word_embeddings=True,
        ),
        37,
        None,
    ),
    # transformers' Mamba2 default: an untied head; vocab 90 -> 96 rows; sharded.
    "mamba2_ngroups2_chunk64_untied_sharded": (
        "mamba2",
        dict(
            vocab_size=90,
            hidden_size=32,
            state_size=16,
            num_hidden_layers=2,
            expand=2,
            head_dim=16,
            num_heads=4,
            n_groups=2,
            chunk_size=64,
            tie_word_embeddings=False,
        ),
        70,
        "20KB",
    ),
}
# name: (arch, our MambaConfig fields)
REVERSE = {
    "mamba1": ("mamba", dict(d_model=32, n_layer=2, vocab_size=100, ssm_cfg=dict(d_state=8))),
    "mamba2": (
        "mamba2",
        dict(
            d_model=32,
            n_layer=2,
            vocab_size=93,
            tie_embeddings=False,
            ssm_cfg=dict(layer="Mamba2", d_state=16, headdim=16, ngroups=2, chunk_size=16),
        ),
    ),
}


def _wanted(arch):
    return arch == "mamba" or HAS_MAMBA2


def _inputs(seed, vocab, seqlen):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randint(0, vocab, (2, seqlen), generator=g).tolist(),
        torch.randint(0, vocab, (2, 5), generator=g).tolist(),
    )


def _perturbed(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One transformers subprocess for every case: {("forward"|"reverse", name): (inputs, outputs)}."""
    from mamba_ssm.models.config_mamba import MambaConfig

    work = tmp_path_factory.mktemp("hf_parity")
    tasks, keys = [], []
    for i, (name, (arch, cfg, seqlen, shard)) in enumerate(FORWARD.items()):
        if not _wanted(arch):
            continue
        ids, prompt = _inputs(i, cfg["vocab_size"], seqlen)
        task = {
            "kind": "make",
            "arch": arch,
            "config": cfg,
            "seed": 100 + i,
            "input_ids": ids,
            "prompt": prompt,
            "new_tokens": NEW_TOKENS,
            "out": str(work / f"fwd_{name}.pt"),
            "save_dir": str(work / f"hf_saved_{name}"),
        }
        if shard:
            task["max_shard_size"] = shard
        tasks.append(task)
        keys.append(("forward", name))
    ours = {}
    for i, (name, (arch, fields)) in enumerate(REVERSE.items()):
        if not _wanted(arch):
            continue
        torch.manual_seed(200 + i)
        model = _perturbed(MambaLMHeadModel(MambaConfig(**fields)), 300 + i).eval()
        model.save_pretrained(str(work / f"hf_{name}"), transformers_format=True)
        ids, prompt = _inputs(50 + i, fields["vocab_size"], 29)
        tasks.append(
            {
                "kind": "load",
                "arch": arch,
                "dir": str(work / f"hf_{name}"),
                "input_ids": ids,
                "prompt": prompt,
                "new_tokens": NEW_TOKENS,
                "out": str(work / f"rev_{name}.pt"),
            }
        )
        keys.append(("reverse", name))
        ours[name] = model
    outputs = hf_run.run_reference(tasks, str(work), timeout=900)
    return {"work": work, "ours": ours, **{k: (t, o) for k, t, o in zip(keys, tasks, outputs)}}


def _check_reference_path(out):
    path = out["reference_path"]
    assert "mamba_ssm" in path["refused"], path  # transformers asked for our package and was refused
    assert path["imported"] == [], path
    assert path["torch_path"] and all(path["torch_path"].values()), path


def _case(reference, kind, name, arch):
    if not _wanted(arch):
        pytest.skip("mamba_ssm.modules.mamba2 is not in this build yet")
    return reference[(kind, name)]


def _tensors(folder):
    """Every tensor of a transformers folder (one file or shards), read with safetensors."""
    out = {}
    for name in sorted(os.listdir(folder)):
        if name.endswith(".safetensors"):
            with safetensors.safe_open(os.path.join(folder, name), "pt") as f:
                out.update({k: f.get_tensor(k) for k in f.keys()})
    return out


@pytest.mark.parametrize("name", list(FORWARD))
def test_transformers_folder_loads_directly_with_same_logits_gradients_tokens(reference, name):
    arch, cfg, _, shard = FORWARD[name]
    task, out = _case(reference, "forward", name, arch)
    _check_reference_path(out)
    folder = task["save_dir"]
    files = os.listdir(folder)
    assert ("model.safetensors.index.json" in files) == bool(shard), files
    vocab = cfg["vocab_size"]
    vocab_padded = -(-vocab // 8) * 8

    model = MambaLMHeadModel.from_pretrained(folder)
    assert model.config.vocab_size == vocab
    assert model.lm_head.weight.shape == (vocab_padded, cfg["hidden_size"])
    assert (model.lm_head.weight is model.backbone.embedding.weight) == cfg["tie_word_embeddings"]
    ids = torch.tensor(task["input_ids"])
    logits = model(ids).logits
    assert logits.dtype == torch.float32 and logits.shape == (*ids.shape, vocab_padded)
    torch.testing.assert_close(logits[..., :vocab], out["logits"], rtol=0, atol=1e-5)

    # Loss (next-token cross entropy, as transformers' labels=input_ids) and its gradients.
    loss = F.cross_entropy(logits[:, :-1, :vocab].reshape(-1, vocab), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(loss, out["loss"], rtol=0, atol=1e-5)
    loss.backward()
    ours = dict(model.named_parameters())
    if cfg["tie_word_embeddings"]:
        ours["lm_head.weight"] = model.lm_head.weight
    assert out["grads"], "the reference produced no gradients"
    for key, grad in out["grads"].items():
        mine = ours[key_from_transformers(key)].grad
        torch.testing.assert_close(
            mine[: grad.shape[0]], grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{key}: {m}"
        )

    prompt = torch.tensor(task["prompt"])
    seq = model.generate(prompt, max_length=prompt.shape[1] + NEW_TOKENS, vocab_size=vocab)
    assert seq.shape == out["generated"].shape
    assert torch.equal(seq, out["generated"])


@pytest.mark.parametrize("name", list(FORWARD))
def test_transformers_folder_round_trips(reference, name, tmp_path):
    """Loaded and saved back with transformers_format=True: transformers' own tensors (names, shapes,
    values) and every config value written equals the one transformers wrote."""
    arch, cfg, _, _ = FORWARD[name]
    task, _ = _case(reference, "forward", name, arch)
    MambaLMHeadModel.from_pretrained(task["save_dir"]).save_pretrained(
        str(tmp_path), transformers_format=True
    )
    theirs, back = _tensors(task["save_dir"]), _tensors(str(tmp_path))
    assert sorted(back) == sorted(theirs)
    for key, value in theirs.items():
        assert back[key].dtype == value.dtype and torch.equal(back[key], value), key
    with open(os.path.join(task["save_dir"], "config.json")) as f:
        their_cfg = json.load(f)
    with open(tmp_path / "config.json") as f:
        our_cfg = json.load(f)
    differing = {k: (v, their_cfg.get(k)) for k, v in our_cfg.items() if their_cfg.get(k, v) != v}
    assert not differing, differing
    assert {"model_type", "hidden_size", "vocab_size", "tie_word_embeddings"} <= set(our_cfg)


@pytest.mark.parametrize("name", list(REVERSE))
def test_our_checkpoint_loads_into_transformers(reference, name):
    arch, fields = REVERSE[name]
    task, out = _case(reference, "reverse", name, arch)
    _check_reference_path(out)
    model = reference["ours"][name]
    vocab = fields["vocab_size"]
    ids = torch.tensor(task["input_ids"])
    with torch.no_grad():
        logits = model(ids).logits
    assert out["logits"].shape == (*ids.shape, vocab)  # transformers has the unpadded vocabulary
    torch.testing.assert_close(logits[..., :vocab], out["logits"], rtol=0, atol=1e-5)
    prompt = torch.tensor(task["prompt"])
    seq = model.generate(prompt, max_length=prompt.shape[1] + NEW_TOKENS, vocab_size=vocab)
    assert torch.equal(seq, out["generated"])
