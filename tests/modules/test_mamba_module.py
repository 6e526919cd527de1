"""The Mamba block: upstream's state_dict layout, decode == full pass, prefill in pieces == full pass."""

from __future__ import annotations

import math

import pytest
import reference as ref  # (tests/reference.py)
import torch

from mamba_ssm.modules.mamba_simple import Mamba
from mamba_ssm.utils.generation import InferenceParams

RTOL, ATOL = 1e-4, 1e-5


def _upstream_layout(d_model, d_state=16, d_conv=4, expand=2, dt_rank="auto", conv_bias=True, bias=False):
    """The parameter names and shapes upstream's Mamba documents (written out independently)."""
    d_inner = expand * d_model
    r = math.ceil(d_model / 16) if dt_rank == "auto" else dt_rank
    out = {
        "A_log": (d_inner, d_state),
        "D": (d_inner,),
        "in_proj.weight": (2 * d_inner, d_model),
        "conv1d.weight": (d_inner, 1, d_conv),
        "x_proj.weight": (r + 2 * d_state, d_inner),
        "dt_proj.weight": (d_inner, r),
        "dt_proj.bias": (d_inner,),
        "out_proj.weight": (d_model, d_inner),
    }
    if conv_bias:
        out["conv1d.bias"] = (d_inner,)
    if bias:
        out["in_proj.bias"] = (2 * d_inner,)
        out["out_proj.bias"] = (d_model,)
    return out


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(d_model=16),
        dict(d_model=40, d_state=8, d_conv=3, expand=3),
        dict(d_model=24, dt_rank=5, conv_bias=False, bias=True),
    ],
)
def test_state_dict_matches_upstream_layout(kwargs):
    m = Mamba(**kwargs)
    got = {k: tuple(v.shape) for k, v in m.state_dict().items()}
    assert got == _upstream_layout(**kwargs)
    # A checkpoint with exactly that layout loads strictly.
    sd = {k: torch.randn(s) for k, s in _upstream_layout(**kwargs).items()}
    Mamba(**kwargs).load_state_dict(sd, strict=True)


def test_initialisation_follows_the_paper():
    torch.manual_seed(0)
    m = Mamba(32, d_state=8, dt_min=0.001, dt_max=0.1)
    A = -torch.exp(m.A_log)
    torch.testing.assert_close(A, -torch.arange(1, 9, dtype=torch.float32).repeat(64, 1))
    dt = torch.nn.functional.softplus(m.dt_proj.bias.detach())
    assert float(dt.min()) >= 0.001 * 0.999 and float(dt.max()) <= 0.1 * 1.001
    assert torch.equal(m.D.detach(), torch.ones(64))


def _model(seed=0, **kw):
    torch.manual_seed(seed)
    m = Mamba(16, d_state=8, layer_idx=0, **kw)
    m.eval()
    return m


_full_and_in_pieces = ref.full_and_in_pieces


@pytest.mark.parametrize("L", [1, 3, 29, 30, 64])
def test_token_by_token_decode_equals_full_pass(L):
    m = _model(L)
    x = torch.randn(2, L, 16)
    full, pieces, _ = _full_and_in_pieces(m, x, list(range(L + 1)))
    torch.testing.assert_close(pieces, full, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("L,cuts", [(29, [2, 3, 17]), (30, [1, 2, 3, 10]), (64, [32]), (64, [5, 6, 40, 63])])
def test_prefill_in_pieces_equals_full_pass(L, cuts):
    m = _model(L)
    x = torch.randn(2, L, 16)
    full, pieces, _ = _full_and_in_pieces(m, x, [0, *cuts, L])
    torch.testing.assert_close(pieces, full, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("prompt", [1, 2, 3, 4, 9])
def test_prompt_then_decode_including_prompts_shorter_than_d_conv(prompt):
    m = _model(prompt)
    x = torch.randn(1, prompt + 6, 16)
    # The prompt in one piece, then one token at a time.
    full, pieces, ip = _full_and_in_pieces(m, x, [0, *range(prompt, prompt + 7)])
    conv_state, ssm_state = ip.key_value_memory_dict[0]
    assert conv_state.shape == (1, 32, 4) and ssm_state.shape == (1, 32, 8)
    torch.testing.assert_close(pieces, full, rtol=RTOL, atol=ATOL)


def test_fast_and_slow_paths_agree_and_train():
    m = _model(1)
    slow = _model(1, use_fast_path=False)
    x = torch.randn(2, 21, 16, requires_grad=True)
    y = m(x)
    torch.testing.assert_close(y, slow(x), rtol=RTOL, atol=ATOL)
    y.pow(2).mean().backward()
    for name, p in m.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert x.grad is not None


def test_cache_allocation_and_reset():
    m = _model()
    conv_state, ssm_state = m.allocate_inference_cache(3, 100)
    assert conv_state.shape == (3, 32, 4) and ssm_state.shape == (3, 32, 8)
    assert not conv_state.any() and not ssm_state.any()
    ip = InferenceParams(max_seqlen=10, max_batch_size=3, lengths_per_sample=torch.tensor([3, 4, 5]))
    ip.seqlen_offset = 7
    ip.reset(20, 2)
    assert (ip.max_seqlen, ip.max_batch_size, ip.seqlen_offset) == (20, 2, 0)
    assert not ip.lengths_per_sample.any()
    with pytest.raises(ValueError, match="layer_idx"):
        Mamba(16)(torch.randn(1, 2, 16), inference_params=InferenceParams(4, 1))
    with pytest.raises(ValueError, match="d_model=16"):
        m(torch.randn(1, 2, 15))
