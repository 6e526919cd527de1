"""The Mamba-2 block: upstream's constructor defaults and state_dict layout, the output and gradients
against a float64 per-timestep recurrence written here, decode == full pass, prefill in pieces == full
pass, packed sequences (seq_idx, cu_seqlens) == separate ones."""

from __future__ import annotations

import inspect
import math

import pytest
import reference as ref  # (tests/reference.py)
import torch
import torch.nn.functional as F

from mamba_ssm.modules.mamba2 import Mamba2
from mamba_ssm.modules.mamba2_simple import Mamba2Simple
from mamba_ssm.utils.generation import InferenceParams

D_MODEL = 32


# ----------------------------------------------------------------------------------------------------
# The float64 reference: the Mamba-2 block (arXiv:2405.21060, section 7.1) one timestep at a time.
# ----------------------------------------------------------------------------------------------------
def reference_mamba2(m, u, seq_idx=None):
    """m's block in float64 from its parameters: in_proj, causal depthwise conv + silu over (x, B, C)
    (restarting where seq_idx changes), h_t = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T, y_t = h_t C_t + D x_t,
    gated RMSNorm per group (or the silu(z) gate), the gated-MLP part, out_proj.

    Works for Mamba2 and Mamba2Simple (per-head D, norm(y * silu(z)), ``init_states`` as h_0).
    Returns (out (batch, seqlen, d_model), {name: float64 leaf parameter}) so gradients can be taken.
    """
    d_ssm = getattr(m, "d_ssm", m.d_inner)
    D_has_hdim, rmsnorm = getattr(m, "D_has_hdim", False), getattr(m, "rmsnorm", True)
    norm_before_gate = getattr(m, "norm_before_gate", False)
    P = {k: v.detach().double().clone().requires_grad_(True) for k, v in m.named_parameters()}
    u = u.double()
    b, L, _ = u.shape
    H, Pd, N, G = m.nheads, m.headdim, m.d_state, m.ngroups
    d_mlp = m.d_inner - d_ssm
    zxbcdt = u @ P["in_proj.weight"].T
    if "in_proj.bias" in P:
        zxbcdt = zxbcdt + P["in_proj.bias"]
    z0, x0 = zxbcdt[..., :d_mlp], zxbcdt[..., d_mlp : 2 * d_mlp]
    z = zxbcdt[..., 2 * d_mlp : 2 * d_mlp + d_ssm]
    xBC = zxbcdt[..., 2 * d_mlp + d_ssm : 2 * d_mlp + 2 * d_ssm + 2 * G * N]
    dt_raw = zxbcdt[..., 2 * d_mlp + 2 * d_ssm + 2 * G * N :]
    w = P["conv1d.weight"][:, 0, :]  # (conv_dim, K)
    K = w.shape[1]
    conv = []
    for t in range(L):
        acc = torch.zeros(b, xBC.shape[-1], dtype=torch.float64)
        for k in range(K):
            s = t - (K - 1) + k
            if s < 0:
                continue
            same = torch.ones(b, 1, dtype=torch.float64)
            if seq_idx is not None:
                same = (seq_idx[:, s] == seq_idx[:, t]).double().unsqueeze(-1)
            acc = acc + w[:, k] * xBC[:, s] * same
        if "conv1d.bias" in P:
            acc = acc + P["conv1d.bias"]
        conv.append(acc * torch.sigmoid(acc))
    xBC = torch.stack(conv, 1)
    x = xBC[..., :d_ssm].reshape(b, L, H, Pd)
    Bm = xBC[..., d_ssm : d_ssm + G * N].reshape(b, L, G, N).repeat_interleave(H // G, dim=2)
    Cm = xBC[..., d_ssm + G * N :].reshape(b, L, G, N).repeat_interleave(H // G, dim=2)
    dt = F.softplus(dt_raw + P["dt_bias"])
    if tuple(m.dt_limit) != (0.0, float("inf")):
        dt = dt.clamp(*m.dt_limit)
    A = -torch.exp(P["A_log"])
    Dp = P["D"].reshape(H, Pd) if D_has_hdim else P["D"][:, None].expand(H, Pd)
    h = torch.zeros(b, H, Pd, N, dtype=torch.float64)
    if "init_states" in P:
        h = h + P["init_states"]
    ys = []
    for t in range(L):
        if seq_idx is not None and t > 0:
            h = h * (seq_idx[:, t] == seq_idx[:, t - 1]).double().view(b, 1, 1, 1)
        decay = torch.exp(dt[:, t] * A)  # (b, H)
        h = decay[..., None, None] * h + (dt[:, t, :, None] * x[:, t])[..., None] * Bm[:, t, :, None, :]
        ys.append((h * Cm[:, t, :, None, :]).sum(-1) + Dp * x[:, t])
    y = torch.stack(ys, 1).reshape(b, L, d_ssm)
    gate = z * torch.sigmoid(z)
    if rmsnorm:

        def rms(v):
            g = v.reshape(b, L, G, d_ssm // G)
            return (g / torch.sqrt((g * g).mean(-1, keepdim=True) + m.norm.eps)).reshape(b, L, d_ssm)

        y = rms(y) * P["norm.weight"] * gate if norm_before_gate else rms(y * gate) * P["norm.weight"]
    else:
        y = y * gate
    if d_mlp:
        y = torch.cat([z0 * torch.sigmoid(z0) * x0, y], -1)
    out = y @ P["out_proj.weight"].T
    if "out_proj.bias" in P:
        out = out + P["out_proj.bias"]
    return out, P


def _assert_close(actual, expected, what, rel=2e-5):
    actual, expected = actual.detach().double(), expected.detach().double()
    scale = float(expected.abs().max()) + 1e-12
    err = float((actual - expected).abs().max())
    assert err <= rel * scale, f"{what}: max |err| {err:.3g} > {rel} * max |expected| {scale:.3g}"


def _model(seed=0, **kw):
    torch.manual_seed(seed)
    kw = {"d_state": 8, "headdim": 8, "chunk_size": 16, "layer_idx": 0, **kw}
    m = Mamba2(D_MODEL, **kw)
    with torch.no_grad():  # away from the init, so every term matters
        m.D.uniform_(-1, 1)
        if m.rmsnorm:
            m.norm.weight.uniform_(0.5, 1.5)
        if m.conv1d.bias is not None:
            m.conv1d.bias.uniform_(-0.2, 0.2)
    return m


# ----------------------------------------------------------------------------------------------------
def test_constructor_defaults_are_upstreams():
    params = inspect.signature(Mamba2.__init__).parameters
    expected = {
        "d_state": 128,
        "d_conv": 4,
        "conv_init": None,
        "expand": 2,
        "headdim": 64,
        "d_ssm": None,
        "ngroups": 1,
        "A_init_range": (1, 16),
        "D_has_hdim": False,
        "rmsnorm": True,
        "norm_before_gate": False,
        "dt_min": 0.001,
        "dt_max": 0.1,
        "dt_init_floor": 1e-4,
        "dt_limit": (0.0, float("inf")),
        "bias": False,
        "conv_bias": True,
        "chunk_size": 256,
        "use_mem_eff_path": True,
        "layer_idx": None,
        "process_group": None,
        "sequence_parallel": True,
        "device": None,
        "dtype": None,
    }
    assert list(params)[1:] == ["d_model", *expected]
    assert {k: params[k].default for k in expected} == expected
    fwd = inspect.signature(Mamba2.forward).parameters
    assert list(fwd) == ["self", "u", "seqlen", "seq_idx", "cu_seqlens", "inference_params"]


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(d_state=16, ngroups=2, D_has_hdim=True, bias=True),
        dict(d_ssm=32, rmsnorm=False, conv_bias=False, d_conv=3),
    ],
)
def test_state_dict_is_upstreams_layout(kw):
    m = Mamba2(D_MODEL, headdim=16, **kw)
    d_inner = 2 * D_MODEL
    d_ssm = kw.get("d_ssm", d_inner)
    n, g, k = kw.get("d_state", 128), kw.get("ngroups", 1), kw.get("d_conv", 4)
    nheads = d_ssm // 16
    conv_dim = d_ssm + 2 * g * n
    want = {
        "in_proj.weight": (2 * d_inner + 2 * g * n + nheads, D_MODEL),
        "conv1d.weight": (conv_dim, 1, k),
        "dt_bias": (nheads,),
        "A_log": (nheads,),
        "D": (d_ssm,) if kw.get("D_has_hdim") else (nheads,),
        "out_proj.weight": (D_MODEL, d_inner),
    }
    if kw.get("conv_bias", True):
        want["conv1d.bias"] = (conv_dim,)
    if kw.get("rmsnorm", True):
        want["norm.weight"] = (d_ssm,)
    if kw.get("bias"):
        want["in_proj.bias"] = (2 * d_inner + 2 * g * n + nheads,)
        want["out_proj.bias"] = (D_MODEL,)
    assert {k_: tuple(v.shape) for k_, v in m.state_dict().items()} == want
    Mamba2(D_MODEL, headdim=16, **kw).load_state_dict(
        {k_: torch.randn(s) for k_, s in want.items()}, strict=True
    )


def test_initialisation_follows_the_paper():
    torch.manual_seed(0)
    m = Mamba2(64, d_state=8, headdim=8, A_init_range=(2, 5), dt_min=0.01, dt_max=0.05)
    A = -torch.exp(m.A_log.detach())
    assert A.shape == (16,) and float(A.max()) <= -2 * 0.999 and float(A.min()) >= -5 * 1.001
    dt = F.softplus(m.dt_bias.detach())
    assert float(dt.min()) >= 0.01 * 0.999 and float(dt.max()) <= 0.05 * 1.001
    assert torch.equal(m.D.detach(), torch.ones(16)) and torch.equal(m.norm.weight.detach(), torch.ones(128))
    m = Mamba2(64, d_state=8, headdim=8, conv_init=0.1)
    assert float(m.conv1d.weight.detach().abs().max()) <= 0.1


CONFIGS = {
    "default": dict(),
    "groups2_hdimD_bias": dict(ngroups=2, D_has_hdim=True, bias=True),
    "no_norm": dict(rmsnorm=False),
    "norm_first_limit": dict(norm_before_gate=True, dt_limit=(0.02, 0.08)),
    "mlp_part": dict(d_ssm=32, ngroups=2),
    "conv3_nobias": dict(d_conv=3, conv_bias=False, chunk_size=8),
}


@pytest.mark.parametrize("mem_eff", [True, False])
@pytest.mark.parametrize("name", list(CONFIGS))
def test_output_and_gradients_match_float64_recurrence(name, mem_eff):
    m = _model(use_mem_eff_path=mem_eff, **CONFIGS[name])
    torch.manual_seed(1)
    u = torch.randn(2, 37, D_MODEL, requires_grad=True)  # 37: not a multiple of the chunk
    out = m(u)
    exp, P = reference_mamba2(m, u.detach())
    _assert_close(out, exp, f"{name} output")
    g = torch.randn_like(out)
    out.backward(g)
    exp.backward(g.double())
    for k, p in m.named_parameters():
        _assert_close(p.grad, P[k].grad, f"{name} d{k}", rel=1e-4)


def test_flattened_input_with_seqlen():
    m = _model()
    u = torch.randn(3, 20, D_MODEL)
    with torch.no_grad():
        out = m(u.reshape(60, D_MODEL), seqlen=20)
        exp, _ = reference_mamba2(m, u)
    assert out.shape == (60, D_MODEL)
    _assert_close(out.reshape(3, 20, D_MODEL), exp, "flattened")


_full_and_in_pieces = ref.full_and_in_pieces


@pytest.mark.parametrize("L", [1, 3, 29, 30, 64, 257])
def test_token_by_token_decode_equals_full_pass(L):
    m = _model(ngroups=2, chunk_size=64 if L > 64 else 16)
    torch.manual_seed(L)
    x = torch.randn(2, L, D_MODEL)
    full, dec, _ = _full_and_in_pieces(m, x, list(range(L + 1)))
    _assert_close(dec, full, f"decode L={L}", rel=1e-5)


@pytest.mark.parametrize("name", ["no_norm", "norm_first_limit", "mlp_part", "conv3_nobias"])
def test_decode_equals_full_pass_across_configs(name):
    m = _model(**CONFIGS[name])
    x = torch.randn(2, 21, D_MODEL)
    full, dec, _ = _full_and_in_pieces(m, x, [0, 5] + list(range(6, 22)))
    _assert_close(dec, full, f"{name} prompt-then-decode", rel=1e-5)


@pytest.mark.parametrize("bounds", [[0, 10, 30, 45], [0, 1, 2, 40, 45], [0, 17, 18, 33, 45]])
def test_prefill_in_pieces_carrying_state_equals_full_pass(bounds):
    m = _model(chunk_size=8)
    x = torch.randn(2, 45, D_MODEL)
    full, pieces, ip = _full_and_in_pieces(m, x, bounds)
    _assert_close(pieces, full, f"pieces {bounds}", rel=1e-5)
    # The cached states are those after the whole sequence: one more token agrees with a longer full pass.
    nxt = torch.randn(2, 1, D_MODEL)
    with torch.no_grad():
        step_out = m(nxt, inference_params=ip)
        longer = m(torch.cat([x, nxt], 1))
    _assert_close(step_out, longer[:, -1:], "token after pieces", rel=1e-5)


LENGTHS = [7, 20, 1, 13]


def _packed(lengths, seed=3):
    torch.manual_seed(seed)
    seqs = [torch.randn(1, n, D_MODEL) for n in lengths]
    seq_idx = torch.cat([torch.full((n,), i, dtype=torch.int32) for i, n in enumerate(lengths)]).unsqueeze(0)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    return seqs, torch.cat(seqs, 1), seq_idx, cu


@pytest.mark.parametrize("mem_eff", [True, False])
def test_seq_idx_packing_equals_separate_sequences(mem_eff):
    m = _model(chunk_size=8, use_mem_eff_path=mem_eff)
    seqs, packed, seq_idx, cu = _packed(LENGTHS)
    with torch.no_grad():
        out = m(packed, seq_idx=seq_idx)
        alone = torch.cat([m(s) for s in seqs], 1)
        from_cu = m(packed, cu_seqlens=cu)  # seq_idx derived from cu_seqlens
    _assert_close(out, alone, "seq_idx packing", rel=1e-5)
    _assert_close(from_cu, alone, "cu_seqlens packing", rel=1e-5)
    exp, _ = reference_mamba2(m, packed, seq_idx=seq_idx)
    _assert_close(out, exp, "seq_idx vs float64")


def test_cu_seqlens_prefill_states_equal_per_sequence_states_and_decode_continues():
    m = _model(chunk_size=8, ngroups=2)
    seqs, packed, seq_idx, cu = _packed(LENGTHS)
    with torch.no_grad():
        ip = InferenceParams(max_seqlen=32, max_batch_size=len(LENGTHS))
        m(packed, seq_idx=seq_idx, cu_seqlens=cu, inference_params=ip)
        conv_state, ssm_state = ip.key_value_memory_dict[0]
        assert conv_state.shape[0] == ssm_state.shape[0] == len(LENGTHS)
        for i, s in enumerate(seqs):
            one = InferenceParams(max_seqlen=32, max_batch_size=1)
            m(s, inference_params=one)
            c1, s1 = one.key_value_memory_dict[0]
            _assert_close(conv_state[i : i + 1], c1, f"conv state of sequence {i}", rel=1e-6)
            _assert_close(ssm_state[i : i + 1], s1, f"ssm state of sequence {i}", rel=1e-5)
        # One decode step for the batch of sequences == each sequence's next token in a full pass.
        nxt = torch.randn(len(LENGTHS), 1, D_MODEL)
        ip.seqlen_offset = 1
        step = m(nxt, inference_params=ip)
        for i, s in enumerate(seqs):
            full = m(torch.cat([s, nxt[i : i + 1]], 1))
            _assert_close(step[i : i + 1], full[:, -1:], f"decode after cu_seqlens, sequence {i}", rel=1e-5)


def test_allocate_inference_cache_shapes_and_dtypes():
    m = _model(ngroups=2)
    conv_state, ssm_state = m.allocate_inference_cache(3, 100)
    assert conv_state.shape == (3, m.d_ssm + 2 * 2 * 8, 4) and conv_state.dtype == m.conv1d.weight.dtype
    assert ssm_state.shape == (3, m.nheads, 8, 8) and ssm_state.dtype == m.in_proj.weight.dtype
    assert not conv_state.any() and not ssm_state.any()
    c16, s16 = m.allocate_inference_cache(2, 10, dtype=torch.float16)
    assert c16.dtype == s16.dtype == torch.float16


def test_bad_input_is_a_clear_error():
    m = _model()
    with pytest.raises(ValueError, match="d_model=32"):
        m(torch.randn(2, 5, 31))
    with pytest.raises(ValueError, match="one token at a time"):
        m.step(torch.randn(2, 3, D_MODEL), *m.allocate_inference_cache(2, 3))
    with pytest.raises(ValueError, match="layer_idx"):
        Mamba2(D_MODEL, d_state=8, headdim=8)(
            torch.randn(1, 2, D_MODEL), inference_params=InferenceParams(max_seqlen=2, max_batch_size=1)
        )
    with pytest.raises(ValueError, match="multiple of headdim"):
        Mamba2(30, headdim=8)
    with pytest.raises(ValueError, match="ngroups"):
        Mamba2(D_MODEL, headdim=16, ngroups=3)
    with pytest.raises(ValueError, match="batch of one"):
        m(torch.randn(2, 4, D_MODEL), cu_seqlens=torch.tensor([0, 2, 4]))
    with pytest.raises(ValueError, match="cu_seqlens"):
        m(torch.randn(1, 4, D_MODEL), cu_seqlens=torch.tensor([0, 2, 5]))


def test_float64_module_matches_reference_tightly():
    m = _model(ngroups=2, dtype=torch.float64)
    u = torch.randn(1, 19, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        out = m(u)
    exp, _ = reference_mamba2(m, u)
    # A = -exp(A_log.float()) as upstream: A itself is float32-rounded, the rest runs in float64.
    _assert_close(out, exp, "float64", rel=1e-8)
    assert math.isfinite(float(out.sum()))


@pytest.mark.parametrize("mem_eff", [True, False])
@pytest.mark.parametrize("kw", [dict(), dict(ngroups=2, learnable_init_states=True, dt_limit=(0.01, 0.1))])
def test_mamba2_simple_matches_float64_recurrence(kw, mem_eff):
    torch.manual_seed(5)
    m = Mamba2Simple(D_MODEL, d_state=8, headdim=16, chunk_size=8, use_mem_eff_path=mem_eff, **kw)
    with torch.no_grad():
        m.D.uniform_(-1, 1)
        m.norm.weight.uniform_(0.5, 1.5)
        if kw.get("learnable_init_states"):
            m.init_states.normal_()
    u = torch.randn(2, 21, D_MODEL, requires_grad=True)
    out = m(u)
    exp, P = reference_mamba2(m, u.detach())
    _assert_close(out, exp, "Mamba2Simple output")
    out.backward(torch.ones_like(out))
    exp.backward(torch.ones_like(exp))
    for k, p in m.named_parameters():
        _assert_close(p.grad, P[k].grad, f"Mamba2Simple d{k}", rel=1e-4)
    keys = {
        "in_proj.weight",
        "conv1d.weight",
        "conv1d.bias",
        "dt_bias",
        "A_log",
        "D",
        "norm.weight",
        "out_proj.weight",
    } | ({"init_states"} if kw.get("learnable_init_states") else set())
    assert set(m.state_dict()) == keys


@pytest.mark.parametrize(
    ("d_model", "headdim", "d_ssm"),
    [(97, 64, None), (40, 64, None), (30, 8, None), (101, 16, None), (64, 16, 200)],
)
def test_bad_headdim_error_suggests_sizes_that_build(d_model, headdim, d_ssm):
    """Each size the "multiple of headdim" error suggests builds a Mamba2 whose heads tile d_ssm, and no
    suggestion is a degenerate headdim below 8."""
    import re

    with pytest.raises(ValueError, match="multiple of headdim") as caught:
        Mamba2(d_model, headdim=headdim, d_state=8, d_ssm=d_ssm)
    text = str(caught.value)
    suggested_models = [int(v) for v in re.findall(r"d_model=(\d+)", text)]
    suggested_ssm = [int(v) for v in re.findall(r"d_ssm=(\d+)", text)]
    suggested_heads = [int(v) for v in re.findall(r"headdim=(\d+) \(", text)]
    assert suggested_models or suggested_ssm or suggested_heads, text
    assert all(h >= 8 for h in suggested_heads), text
    for size in suggested_models:
        m = Mamba2(size, headdim=headdim, d_state=8, d_ssm=d_ssm)
        assert m.nheads * m.headdim == m.d_ssm
    for size in suggested_ssm:
        m = Mamba2(d_model, headdim=headdim, d_state=8, d_ssm=size)
        assert m.nheads * m.headdim == size
    for h in suggested_heads:
        m = Mamba2(d_model, headdim=h, d_state=8, d_ssm=d_ssm)
        assert m.nheads * m.headdim == m.d_ssm
