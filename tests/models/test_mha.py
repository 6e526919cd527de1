"""MHA against a float64 naive attention written out independently (explicit loops over heads, rotary
as a complex rotation z * e^{i p theta}, the conv as a sum of shifted inputs), and KV-cache decoding
against the full pass."""

from __future__ import annotations

import cmath
import math

import pytest
import torch

from mamba_ssm.modules.mha import MHA
from mamba_ssm.utils.generation import InferenceParams


def _rotate(x, positions, rot_dim, base, interleaved):
    """x (seqlen, head_dim) float64, rotated pair by pair with complex numbers."""
    out = x.clone()
    half = rot_dim // 2
    for t, p in enumerate(positions):
        for i in range(half):
            theta = p * base ** (-2.0 * i / rot_dim)
            a, b = (2 * i, 2 * i + 1) if interleaved else (i, i + half)
            z = complex(float(x[t, a]), float(x[t, b])) * cmath.exp(1j * theta)
            out[t, a], out[t, b] = z.real, z.imag
    return out


def naive_mha(m, x, positions=None):
    """float64 reference of MHA's forward for x (batch, seqlen, embed_dim)."""
    x = x.double()
    sd = {k: v.double() for k, v in m.state_dict().items()}
    batch, seqlen, _ = x.shape
    positions = list(range(seqlen)) if positions is None else positions
    proj = x @ sd["in_proj.weight"].T + (sd["in_proj.bias"] if "in_proj.bias" in sd else 0)
    qkv, mlp = proj[..., : m.qkv_dim], proj[..., m.qkv_dim :]
    if m.d_conv:
        w, bias = sd["conv1d.weight"][:, 0], sd["conv1d.bias"]
        conv = torch.zeros_like(qkv)
        for t in range(seqlen):
            acc = bias.clone().expand(batch, -1).clone()
            for j in range(m.d_conv):
                src = t - (m.d_conv - 1) + j
                if src >= 0:
                    acc = acc + w[:, j] * qkv[:, src]
            conv[:, t] = acc
        qkv = conv
    H, Hkv, d = m.num_heads, m.num_heads_kv, m.head_dim
    q = qkv[..., : H * d].reshape(batch, seqlen, H, d)
    k = qkv[..., H * d : (H + Hkv) * d].reshape(batch, seqlen, Hkv, d)
    v = qkv[..., (H + Hkv) * d :].reshape(batch, seqlen, Hkv, d)
    scale = m.softmax_scale if m.softmax_scale is not None else 1.0 / math.sqrt(d)
    out = torch.zeros(batch, seqlen, H, d, dtype=torch.float64)
    for b in range(batch):
        for h in range(H):
            hk = h // (H // Hkv)
            qh, kh = q[b, :, h], k[b, :, hk]
            if m.rotary_emb_dim:
                qh = _rotate(qh, positions, m.rotary_emb_dim, m.rotary_emb.base, m.rotary_emb.interleaved)
                kh = _rotate(kh, positions, m.rotary_emb_dim, m.rotary_emb.base, m.rotary_emb.interleaved)
            scores = qh @ kh.T * scale
            if m.causal:
                scores = scores.masked_fill(torch.ones(seqlen, seqlen).triu(1).bool(), float("-inf"))
            p = torch.exp(scores - scores.max(-1, keepdim=True).values)
            out[b, :, h] = (p / p.sum(-1, keepdim=True)) @ v[b, :, hk]
    out = out.reshape(batch, seqlen, H * d)
    if m.mlp_dim:
        up, gate = mlp[..., : m.mlp_dim // 2], mlp[..., m.mlp_dim // 2 :]
        out = torch.cat([out, up * gate * torch.sigmoid(gate)], dim=-1)
    return out @ sd["out_proj.weight"].T + (sd["out_proj.bias"] if "out_proj.bias" in sd else 0)


CONFIGS = {
    "plain": dict(num_heads=4),
    "causal_gqa": dict(num_heads=4, num_heads_kv=2, causal=True),
    "causal_rotary": dict(num_heads=2, causal=True, rotary_emb_dim=8),
    "rotary_interleaved_mqa_conv": dict(
        num_heads=4, num_heads_kv=1, causal=True, rotary_emb_dim=6, rotary_emb_interleaved=True, d_conv=3
    ),
    "headdim_mlp_nobias": dict(
        num_heads=3,
        head_dim=10,
        mlp_dim=40,
        qkv_proj_bias=False,
        out_proj_bias=False,
        causal=True,
        softmax_scale=0.2,
    ),
}


def _mha(kw, seed=0):
    torch.manual_seed(seed)
    m = MHA(32, layer_idx=0, **kw)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m


@pytest.mark.parametrize("name", list(CONFIGS))
def test_mha_matches_float64_naive_attention(name):
    m = _mha(CONFIGS[name])
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        out = m(x)
    torch.testing.assert_close(out.double(), naive_mha(m, x), rtol=1e-5, atol=2e-6)


def test_upstream_parameter_layout():
    m = MHA(64, 4, num_heads_kv=2, mlp_dim=100, d_conv=4, rotary_emb_dim=8)
    shapes = {k: tuple(v.shape) for k, v in m.state_dict().items()}
    qkv = 16 * (4 + 2 * 2)  # head_dim 16
    assert shapes == {
        "in_proj.weight": (qkv + 256, 64),
        "in_proj.bias": (qkv + 256,),
        "conv1d.weight": (qkv, 1, 4),
        "conv1d.bias": (qkv,),
        "out_proj.weight": (64, 64 + 128),
        "out_proj.bias": (64,),
    }


@pytest.mark.parametrize("name", ["causal_gqa", "rotary_interleaved_mqa_conv", "headdim_mlp_nobias"])
def test_kv_cache_decode_matches_full_pass(name):
    m = _mha(CONFIGS[name], seed=1)
    x = torch.randn(3, 12, 32)
    with torch.no_grad():
        full = m(x)
        params = InferenceParams(max_seqlen=16, max_batch_size=3)
        pieces = []
        for start, stop in ((0, 5), (5, 8), (8, 9), (9, 10), (10, 11), (11, 12)):  # prompt, a chunk, steps
            pieces.append(m(x[:, start:stop], inference_params=params))
            params.seqlen_offset += stop - start
    torch.testing.assert_close(torch.cat(pieces, 1), full, rtol=1e-5, atol=1e-5)


def test_per_row_positions_decode_matches_full_pass():
    """The CUDA-graph form of a step (positions from lengths_per_sample, whole masked cache)."""
    m = _mha(CONFIGS["rotary_interleaved_mqa_conv"], seed=2)
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        full = m(x)
        params = InferenceParams(max_seqlen=8, max_batch_size=2)
        outs = [m(x[:, :5], inference_params=params)]
        params.seqlen_offset = 5
        params.lengths_per_sample = torch.full((2,), 5, dtype=torch.int32)
        for t in range(5, 8):
            outs.append(m(x[:, t : t + 1], inference_params=params))
            params.seqlen_offset += 1
            params.lengths_per_sample += 1
    torch.testing.assert_close(torch.cat(outs, 1), full, rtol=1e-5, atol=1e-5)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="num_heads_kv=3"):
        MHA(32, 4, num_heads_kv=3)
    with pytest.raises(ValueError, match="rotary_emb_dim=5"):
        MHA(32, 4, rotary_emb_dim=5)
    with pytest.raises(ValueError, match="embed_dim=30"):
        MHA(30, 4)
    m = MHA(32, 4, layer_idx=0, causal=True)
    with pytest.raises(ValueError, match="positions"):
        m(torch.randn(1, 5, 32), inference_params=InferenceParams(max_seqlen=4, max_batch_size=1))
    with pytest.raises(ValueError, match="layer_idx"):
        MHA(32, 4)(torch.randn(1, 2, 32), inference_params=InferenceParams(max_seqlen=4, max_batch_size=1))
