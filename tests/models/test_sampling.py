"""Sampling: filters against a float64 reference written out here with plain Python (sorted lists, the
definitions of top-k / nucleus / min-p / CTRL's penalty), empirical frequencies of ``sample``, greedy,
seeded reproducibility, and bad arguments."""

from __future__ import annotations

import math

import pytest
import torch

from mamba_ssm.models.config_mamba import MambaConfig
from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel
from mamba_ssm.utils.generation import modify_logit_for_repetition_penalty, sample


def reference_distribution(logits, top_k=0, top_p=0.0, min_p=0.0, temperature=1.0):
    """The sampling distribution over one row of logits (a list of floats), float64."""
    scaled = [x / temperature for x in logits]
    allowed = set(range(len(scaled)))
    if top_k > 0:
        kth = sorted(scaled, reverse=True)[top_k - 1]
        allowed = {i for i in allowed if scaled[i] >= kth}

    def softmax(ids):
        m = max(scaled[i] for i in ids)
        e = {i: math.exp(scaled[i] - m) for i in ids}
        s = sum(e.values())
        return {i: v / s for i, v in e.items()}

    if 0.0 < top_p < 1.0:
        probs = softmax(allowed)
        kept, mass = set(), 0.0
        for i in sorted(probs, key=lambda j: -probs[j]):
            if kept and mass >= top_p:
                break
            kept.add(i)
            mass += probs[i]
        allowed = kept
    if min_p > 0.0:
        probs = softmax(allowed)
        top = max(probs.values())
        allowed = {i for i in allowed if probs[i] >= min_p * top}
    probs = softmax(allowed)
    return [probs.get(i, 0.0) for i in range(len(logits))]


LOGITS = torch.tensor([2.0, -1.0, 0.5, 3.1, 1.7, -0.3, 2.9, 0.0, -2.5, 1.2])
SETTINGS = [
    dict(top_k=0),
    dict(top_k=3),
    dict(top_k=0, top_p=0.7),
    dict(top_k=0, top_p=0.95, temperature=0.5),
    dict(top_k=0, min_p=0.2),
    dict(top_k=5, top_p=0.8, temperature=1.5),
    dict(top_k=0, top_p=0.9, min_p=0.3, temperature=0.7),
]


@pytest.mark.parametrize("kw", SETTINGS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_sample_frequencies_follow_the_reference(kw):
    expected = torch.tensor(reference_distribution(LOGITS.tolist(), **kw), dtype=torch.float64)
    n = 40000
    torch.manual_seed(0)
    draws = sample(LOGITS.repeat(n, 1), **kw)
    freq = torch.bincount(draws, minlength=LOGITS.numel()).double() / n
    assert torch.all(freq[expected == 0] == 0), (freq, expected)  # filtered tokens are never drawn
    sigma = torch.sqrt(expected * (1 - expected) / n)
    assert torch.all((freq - expected).abs() <= 5 * sigma + 1e-12), (freq, expected)


def test_top_k_1_is_argmax_whatever_else_is_set():
    logits = torch.randn(6, 50)
    got = sample(logits, top_k=1, top_p=0.5, min_p=0.5, temperature=3.0)
    assert torch.equal(got, logits.argmax(-1))


def test_repetition_penalty_against_ctrl_definition():
    logits = torch.tensor([[1.0, -2.0, 0.5, 3.0, -0.1, 0.0]])
    prev = torch.tensor([[3, 1, 1, 5, 4]])
    want = logits.clone()
    for t in set(prev[0].tolist()):
        x = float(logits[0, t])
        want[0, t] = x / 1.3 if x > 0 else x * 1.3
    got = modify_logit_for_repetition_penalty(logits.clone(), prev, 1.3)
    torch.testing.assert_close(got, want)


def _model():
    torch.manual_seed(0)
    return MambaLMHeadModel(MambaConfig(d_model=32, n_layer=2, vocab_size=64, ssm_cfg=dict(d_state=8))).eval()


def test_generate_scores_carry_the_repetition_penalty():
    model = _model()
    prompt = torch.randint(0, 64, (2, 5))
    teacher = torch.randint(0, 64, (2, 12))
    teacher[:, :5] = prompt
    out = model.generate(
        prompt,
        max_length=12,
        repetition_penalty=1.5,
        teacher_outputs=teacher,
        output_scores=True,
        return_dict_in_generate=True,
    )
    with torch.no_grad():
        full = model(teacher).logits
    for step, score in enumerate(out.scores):
        pos = 5 + step
        want = full[:, pos - 1].clone()
        for row in range(2):
            for t in set(teacher[row, :pos].tolist()):
                x = float(want[row, t])
                want[row, t] = x / 1.5 if x > 0 else x * 1.5
        torch.testing.assert_close(score, want, rtol=1e-4, atol=1e-4)


def test_seeded_sampled_generation_is_reproducible():
    model = _model()
    prompt = torch.randint(0, 64, (2, 4))
    kw = dict(max_length=24, top_k=0, top_p=0.9, min_p=0.05, temperature=1.3, repetition_penalty=1.1)
    torch.manual_seed(7)
    a = model.generate(prompt, **kw)
    torch.manual_seed(7)
    b = model.generate(prompt, **kw)
    torch.manual_seed(8)
    c = model.generate(prompt, **kw)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    assert torch.equal(
        model.generate(prompt, max_length=24, top_k=1), model.generate(prompt, max_length=24)
    )  # top_k=1 is the greedy default


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(top_p=1.5), "top_p=1.5"),
        (dict(min_p=-0.1), "min_p=-0.1"),
        (dict(temperature=0.0), "temperature=0.0"),
        (dict(top_k=-2), "top_k=-2"),
        (dict(repetition_penalty=0.0), "repetition_penalty=0.0"),
    ],
)
def test_bad_sampling_arguments_are_named(kw, match):
    with pytest.raises(ValueError, match=match):
        _model().generate(torch.zeros(1, 2, dtype=torch.long), max_length=5, **kw)
