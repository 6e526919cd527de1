"""MambaLMHeadModel against transformers' MambaForCausalLM / Mamba2ForCausalLM (an independent
implementation; a test-only dependency), run in a subprocess where mamba_ssm is blocked so transformers
takes its own PyTorch path (asserted).

Forward: random transformers models saved in upstream's checkpoint format by our own key mapping
(hf_convert.py) and loaded with our from_pretrained(dir): fp32 logits within 1e-5, loss gradients, and
greedy generation of 32 tokens token-identical to transformers' generate.
Reverse: our save_pretrained output, renamed as README documents, loads into transformers with the same
logits and greedy tokens.
"""

from __future__ import annotations

import importlib.util

import hf_convert
import pytest
import torch
import torch.nn.functional as F

from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel

pytest.importorskip("transformers")
pytest.importorskip("safetensors")

HAS_MAMBA2 = importlib.util.find_spec("mamba_ssm.modules.mamba2") is not None
NEW_TOKENS = 32

# name: (arch, transformers config, seqlen of the logits input, minimal config.json)
FORWARD = {
    # vocab 100 -> 104 rows with pad_vocab_size_multiple 8; a hub-style minimal config.json.
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
        True,
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
        False,
    ),
    "mamba2_ngroups2_chunk64_untied": (
        "mamba2",
        dict(
            vocab_size=96,
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
        False,
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
            vocab_size=96,
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
    for i, (name, (arch, cfg, seqlen, _)) in enumerate(FORWARD.items()):
        if not _wanted(arch):
            continue
        ids, prompt = _inputs(i, cfg["vocab_size"], seqlen)
        tasks.append(
            {
                "kind": "make",
                "arch": arch,
                "config": cfg,
                "seed": 100 + i,
                "input_ids": ids,
                "prompt": prompt,
                "new_tokens": NEW_TOKENS,
                "out": str(work / f"fwd_{name}.pt"),
            }
        )
        keys.append(("forward", name))
    ours = {}
    for i, (name, (arch, fields)) in enumerate(REVERSE.items()):
        if not _wanted(arch):
            continue
        torch.manual_seed(200 + i)
        model = _perturbed(MambaLMHeadModel(MambaConfig(**fields)), 300 + i).eval()
        model.save_pretrained(str(work / f"ours_{name}"))
        hf_cfg = hf_convert.ours_to_hf(str(work / f"ours_{name}"), str(work / f"hf_{name}"), arch)
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
        ours[name] = (model, hf_cfg)
    outputs = hf_convert.run_reference(tasks, str(work), timeout=900)
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


@pytest.mark.parametrize("name", list(FORWARD))
def test_transformers_checkpoint_loads_with_same_logits_gradients_tokens(reference, name, tmp_path):
    arch, cfg, _, minimal = FORWARD[name]
    task, out = _case(reference, "forward", name, arch)
    _check_reference_path(out)
    vocab = cfg["vocab_size"]
    fields = hf_convert.hf_to_ours_config(arch, cfg, minimal=minimal)
    vocab_padded = hf_convert.padded(vocab, 8)
    hf_convert.write_ours(
        str(tmp_path), fields, hf_convert.hf_to_ours_state_dict(out["state_dict"], vocab_padded)
    )

    model = MambaLMHeadModel.from_pretrained(str(tmp_path))
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
    assert out["grads"], "the reference produced no gradients"
    for key, grad in out["grads"].items():
        mine = ours[hf_convert.EMBED_OURS if key == hf_convert.EMBED_HF else key].grad
        torch.testing.assert_close(
            mine[: grad.shape[0]], grad, rtol=1e-4, atol=1e-5, msg=lambda m: f"{key}: {m}"
        )

    prompt = torch.tensor(task["prompt"])
    seq = model.generate(prompt, max_length=prompt.shape[1] + NEW_TOKENS, vocab_size=vocab)
    assert seq.shape == out["generated"].shape
    assert torch.equal(seq, out["generated"])


@pytest.mark.parametrize("name", list(REVERSE))
def test_our_checkpoint_loads_into_transformers(reference, name):
    arch, fields = REVERSE[name]
    task, out = _case(reference, "reverse", name, arch)
    _check_reference_path(out)
    model, _ = reference["ours"][name]
    ids = torch.tensor(task["input_ids"])
    with torch.no_grad():
        logits = model(ids).logits
    torch.testing.assert_close(logits, out["logits"], rtol=0, atol=1e-5)
    prompt = torch.tensor(task["prompt"])
    seq = model.generate(prompt, max_length=prompt.shape[1] + NEW_TOKENS)
    assert torch.equal(seq, out["generated"])
