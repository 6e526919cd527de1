"""MambaLMHeadModel decoding: the step path of every layer (Mamba, Mamba2, MHA) gives the full pass's
logits, the prompt is processed once, greedy generate picks each full-pass argmax, cg=True on CPU."""

from __future__ import annotations

import warnings

import pytest
import torch

from mamba_ssm.models.config_mamba import MambaConfig
from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel
from mamba_ssm.modules.mamba2 import Mamba2
from mamba_ssm.modules.mamba_simple import Mamba
from mamba_ssm.utils import generation

HYBRIDS = {
    "mamba2_mha": dict(
        d_model=32,
        n_layer=4,
        vocab_size=61,
        d_intermediate=48,
        attn_layer_idx=[1, 3],
        attn_cfg=dict(num_heads=4, num_heads_kv=2, causal=True, rotary_emb_dim=8, d_conv=4),
        ssm_cfg=dict(layer="Mamba2", d_state=16, headdim=16, chunk_size=8),
    ),
    "mamba1_mha_layernorm_unfused": dict(
        d_model=32,
        n_layer=3,
        vocab_size=64,
        attn_layer_idx=[0],
        attn_cfg=dict(num_heads=2, causal=True, mlp_dim=64),
        rms_norm=False,
        fused_add_norm=False,
        residual_in_fp32=False,
        tie_embeddings=False,
        ssm_cfg=dict(d_state=8),
    ),
}


def _model(fields, seed=0):
    torch.manual_seed(seed)
    model = MambaLMHeadModel(MambaConfig(**fields)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


@pytest.mark.parametrize("name", list(HYBRIDS))
def test_hybrid_decode_matches_full_pass(name, monkeypatch):
    model = _model(HYBRIDS[name])
    vocab = model.lm_head.weight.shape[0]
    prompt = torch.randint(0, vocab, (2, 11))
    teacher = torch.randint(0, vocab, (2, 30))
    teacher[:, :11] = prompt
    calls, steps = [], []
    forward = model.forward
    monkeypatch.setattr(
        model, "forward", lambda ids, **kw: (calls.append(tuple(ids.shape)), forward(ids, **kw))[1]
    )
    for cls in (Mamba, Mamba2):
        monkeypatch.setattr(
            cls, "step", (lambda f: lambda self, *a: (steps.append(self.layer_idx), f(self, *a))[1])(cls.step)
        )
    out = model.generate(
        prompt, max_length=30, teacher_outputs=teacher, output_scores=True, return_dict_in_generate=True
    )
    assert torch.equal(out.sequences, teacher)
    # The prompt once, then one token per call; every SSM layer's step ran for each new token.
    assert calls == [(2, 11)] + [(2, 1)] * 18
    n_ssm = HYBRIDS[name]["n_layer"] - len(HYBRIDS[name]["attn_layer_idx"])
    assert len(steps) == 18 * n_ssm
    with torch.no_grad():
        full = forward(teacher).logits
    torch.testing.assert_close(torch.stack(out.scores, 1), full[:, 10:29], rtol=1e-4, atol=1e-4)


def test_greedy_generate_picks_full_pass_argmax():
    model = _model(HYBRIDS["mamba2_mha"], seed=3)
    prompt = torch.randint(0, 61, (3, 6))
    seq = model.generate(prompt, max_length=20, vocab_size=61)
    with torch.no_grad():
        logits = model(seq).logits[:, 5:19, :61]
    assert torch.equal(seq[:, :6], prompt)
    assert torch.equal(seq[:, 6:], logits.argmax(-1))


def test_cg_on_cpu_runs_the_same_decode_and_says_so_once(monkeypatch):
    monkeypatch.setattr(generation, "_CG_NOTICE_GIVEN", False)
    model = _model(HYBRIDS["mamba2_mha"], seed=4)
    prompt = torch.randint(0, 61, (1, 4))
    plain = model.generate(prompt, max_length=12)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = model.generate(prompt, max_length=12, cg=True)
        second = model.generate(prompt, max_length=12, cg=True)
    notes = [w for w in caught if "CUDA graphs" in str(w.message)]
    assert len(notes) == 1 and "cpu" in str(notes[0].message)
    assert torch.equal(first, plain) and torch.equal(second, plain)


def test_eos_stops_and_pads_finished_rows():
    model = _model(HYBRIDS["mamba2_mha"], seed=5)
    prompt = torch.randint(0, 61, (2, 4))
    free = model.generate(prompt, max_length=24)
    eos = int(free[0, 6])  # the third generated token of row 0
    seq = model.generate(prompt, max_length=24, eos_token_id=eos)
    row0 = seq[0, 4:].tolist()
    first = row0.index(eos)
    assert first <= 2 and all(t == eos for t in row0[first:])
    for row in range(2):
        gen = free[row, 4:].tolist()
        stop = gen.index(eos) + 1 if eos in gen else len(gen)
        assert seq[row, 4 : 4 + stop].tolist() == gen[:stop]
    if eos not in free[1, 4:].tolist():
        assert seq.shape[1] == 24


def test_streamer_gets_prompt_then_each_token():
    class Recorder:
        def __init__(self):
            self.items, self.ended = [], False

        def put(self, t):
            self.items.append(t.clone())

        def end(self):
            self.ended = True

    model = _model(HYBRIDS["mamba2_mha"], seed=6)
    prompt = torch.randint(0, 61, (1, 3))
    rec = Recorder()
    seq = model.generate(prompt, max_length=9, streamer=rec)
    assert rec.ended and torch.equal(rec.items[0], prompt)
    assert torch.equal(torch.cat([t.reshape(1, -1) for t in rec.items[1:]], 1), seq[:, 3:])


def test_enable_timing_prints_prompt_and_decode_times(capsys):
    model = _model(HYBRIDS["mamba2_mha"], seed=7)
    model.generate(torch.randint(0, 61, (1, 3)), max_length=6, enable_timing=True)
    out = capsys.readouterr().out
    assert "prompt (1 x 3 tokens)" in out and "decoding 3 tokens" in out


@pytest.mark.parametrize("mem_eff", [True, False])
def test_padded_varlen_prefill_then_batched_decode_equals_per_sequence_generate(mem_eff):
    """Upstream's generation with padding (its tests/test_generation.py, varlen with padding): prompts of
    several sequences packed in one row, followed by padding tokens (seq_idx -1) that cu_seqlens leaves
    out as an empty last sequence (cu_seqlens[-1] < tokens); one prefill fills a cache row per sequence,
    then the rows decode as a batch. Each sequence's scores equal its own generate() with
    teacher_outputs and its full-pass logits; the empty sequence's cached states are zero."""
    fields = dict(
        d_model=32,
        n_layer=2,
        vocab_size=61,
        ssm_cfg=dict(layer="Mamba2", d_state=16, headdim=16, chunk_size=8, use_mem_eff_path=mem_eff),
    )
    model = _model(fields, seed=3)
    vocab = model.config.vocab_size
    lengths, genlen, n_pad = [19, 7, 12], 5, 9
    g = torch.Generator().manual_seed(0)
    seqs = [torch.randint(0, vocab, (1, n), generator=g) for n in lengths]
    prompts = [s[:, :-genlen] for s in seqs]
    pad_ids = torch.randint(0, vocab, (1, n_pad), generator=g)
    packed = torch.cat([*prompts, pad_ids], dim=1)
    prompt_lens = [n - genlen for n in lengths]
    cu = torch.tensor([0, *torch.tensor(prompt_lens).cumsum(0).tolist()], dtype=torch.int32)
    cu = torch.cat([cu, cu[-1:]])  # an empty last sequence: the padding belongs to none
    seq_idx = torch.cat(
        [torch.full((n,), i, dtype=torch.int32) for i, n in enumerate(prompt_lens)]
        + [torch.full((n_pad,), -1, dtype=torch.int32)]
    ).unsqueeze(0)
    assert int(cu[-1]) < packed.shape[1]
    batch = len(lengths) + 1
    with torch.no_grad():
        ip = generation.InferenceParams(max_seqlen=64, max_batch_size=batch)
        logits = model(packed, inference_params=ip, seq_idx=seq_idx, cu_seqlens=cu).logits
        for conv_state, ssm_state in ip.key_value_memory_dict.values():
            assert conv_state.shape[0] == ssm_state.shape[0] == batch
            assert not conv_state[-1].any() and not ssm_state[-1].any(), "the empty sequence's states"
        scores = [logits[0, (cu[1:-1] - 1).long()]]  # the last prompt token of each real sequence
        for i in range(genlen - 1):
            ip.seqlen_offset += 1
            tokens = torch.stack([s[0, -genlen + i] for s in seqs] + [pad_ids[0, 0]]).view(batch, 1)
            scores.append(model(tokens, inference_params=ip, num_last_tokens=1).logits[:-1, -1])
        varlen = torch.stack(scores, dim=1)  # (num_seqs, genlen, vocab)
        for i, s in enumerate(seqs):
            loop = model.generate(
                s[:, :-genlen],
                max_length=s.shape[1],
                output_scores=True,
                return_dict_in_generate=True,
                teacher_outputs=s,
            ).scores
            loop = torch.stack(loop, dim=1)[0]
            full = model(s).logits[0, -genlen - 1 : -1]
            torch.testing.assert_close(varlen[i], loop, rtol=1e-4, atol=1e-4, msg=f"sequence {i} vs generate")
            torch.testing.assert_close(
                varlen[i], full, rtol=1e-4, atol=1e-4, msg=f"sequence {i} vs full pass"
            )
