"""The Mamba3 layer: upstream's constructor defaults and state_dict layout, the output and every
parameter's gradient against the float64 oracle (mamba3_reference.layer) for SISO, MIMO, the
out-projection norm (fused and not) and rope_fraction 1.0 with groups; packed sequences; decoding:
step after a prefill (ending at chunk edges) == the full forward in float32 and bfloat16, and a prefill
continued several tokens at a time; cu_seqlens with padding rows and an empty sequence."""

from __future__ import annotations

import inspect
import re

import mamba3_reference as ref
import pytest
import torch

from mamba_ssm import Mamba3
from mamba_ssm.utils.generation import InferenceParams

D_MODEL = 16
SMALL = {"d_state": 8, "headdim": 4, "chunk_size": 4}
VARIANTS = {
    "siso": {},
    "siso-outproj-norm": {"is_outproj_norm": True},
    "siso-rope1.0-groups": {"rope_fraction": 1.0, "ngroups": 2},
    "mimo": {"is_mimo": True, "mimo_rank": 2},
    "mimo-fused-norm": {"is_mimo": True, "mimo_rank": 2, "is_outproj_norm": True},
    "mimo-unfused-norm-rope1.0": {
        "is_mimo": True,
        "mimo_rank": 3,
        "is_outproj_norm": True,
        "fuse_pregate_headwise_norm": False,
        "rope_fraction": 1.0,
    },
}


def _layer(variant, dtype=torch.float64, seed=0, **extra):
    torch.manual_seed(seed)
    m = Mamba3(D_MODEL, **SMALL, **VARIANTS[variant], dtype=dtype, layer_idx=0, **extra)
    with torch.no_grad():  # move every parameter off its initial value (ones, 1/R, ...)
        for p in m.parameters():
            p.add_(0.2 * torch.randn_like(p))
    return m


def _cfg(m):
    return {
        "d_state": m.d_state,
        "headdim": m.headdim,
        "ngroups": m.ngroups,
        "mimo_rank": m.mimo_rank,
        "is_mimo": m.is_mimo,
        "num_rope_angles": m.num_rope_angles,
        "is_outproj_norm": m.is_outproj_norm,
        "A_floor": m.A_floor,
    }


def _close(got, want, tol, what):
    got, want = got.detach().double(), want.detach().double()
    scale = max(1.0, float(want.abs().max()))
    err = float((got - want).abs().max())
    assert err <= tol * scale, f"{what}: max abs error {err:.3g} > {tol * scale:.3g}"


def test_upstream_constructor_defaults_and_state_dict():
    sig = inspect.signature(Mamba3.__init__).parameters
    defaults = {k: v.default for k, v in sig.items() if v.default is not inspect.Parameter.empty}
    assert defaults == {
        "d_state": 128,
        "expand": 2,
        "headdim": 64,
        "ngroups": 1,
        "rope_fraction": 0.5,
        "dt_min": 0.001,
        "dt_max": 0.1,
        "dt_init_floor": 1e-4,
        "A_floor": 1e-4,
        "is_outproj_norm": False,
        "is_mimo": False,
        "mimo_rank": 4,
        "fuse_pregate_headwise_norm": True,
        "chunk_size": 64,
        "dropout": 0.0,
        "layer_idx": None,
        "n_layer": None,
        "device": None,
        "dtype": None,
    }
    d, N, P, G, R = 64, 16, 8, 2, 4
    d_inner, H = 2 * d, 2 * d // P
    A = (N // 2) // 2  # rope_fraction 0.5: half of d_state rotates, one angle per pair
    m = Mamba3(
        d,
        d_state=N,
        headdim=P,
        ngroups=G,
        is_mimo=True,
        mimo_rank=R,
        is_outproj_norm=True,
        dtype=torch.bfloat16,
    )
    shapes = {k: (tuple(v.shape), v.dtype) for k, v in m.state_dict().items()}
    bf, f32 = torch.bfloat16, torch.float32
    assert shapes == {
        "in_proj.weight": ((2 * d_inner + 2 * N * G * R + 3 * H + A, d), bf),
        "dt_bias": ((H,), f32),
        "B_bias": ((H, R, N), f32),
        "C_bias": ((H, R, N), f32),
        "B_norm.weight": ((N,), bf),
        "C_norm.weight": ((N,), bf),
        "D": ((H,), f32),
        "mimo_x": ((H, R, P), f32),
        "mimo_z": ((H, R, P), f32),
        "mimo_o": ((H, R, P), f32),
        "norm.weight": ((d_inner,), bf),
        "out_proj.weight": ((d, d_inner), bf),
    }
    assert torch.equal(m.mimo_x, torch.full((H, R, P), 1 / R)) and torch.equal(m.mimo_z, torch.ones(H, R, P))
    assert torch.equal(m.B_bias, torch.ones(H, R, N)) and torch.equal(m.D, torch.ones(H))
    dt = torch.nn.functional.softplus(m.dt_bias)
    assert bool(((dt >= 1e-3 * 0.999) & (dt <= 0.1 * 1.001)).all())
    siso = Mamba3(d, d_state=N, headdim=P)
    assert set(siso.state_dict()) == {
        "in_proj.weight",
        "dt_bias",
        "B_bias",
        "C_bias",
        "B_norm.weight",
        "C_norm.weight",
        "D",
        "out_proj.weight",
    }
    assert siso.in_proj.weight.shape == (2 * d_inner + 2 * N + 3 * H + A, d) and siso.B_bias.shape == (
        H,
        1,
        N,
    )
    assert siso.in_proj.bias is None and siso.out_proj.bias is None


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_forward_and_parameter_gradients_match_the_reference(variant):
    m = _layer(variant)
    u = torch.randn(2, 11, D_MODEL, dtype=torch.float64, requires_grad=True)
    params = {k: v.detach().clone().requires_grad_(True) for k, v in m.state_dict().items()}
    out = m(u)
    uref = u.detach().clone().requires_grad_(True)
    want = ref.layer(params, _cfg(m), uref)
    _close(out, want, 1e-10, f"{variant} out")
    w = torch.randn_like(want)
    (out * w).sum().backward()
    (want * w).sum().backward()
    _close(u.grad, uref.grad, 1e-10, f"{variant} du")
    for name, p in m.named_parameters():
        _close(p.grad, params[name].grad, 1e-10, f"{variant} d{name}")


@pytest.mark.parametrize("variant", ["siso", "mimo-fused-norm"])
def test_float32_layer_within_1e_4(variant):
    m64 = _layer(variant)
    m32 = _layer(variant, dtype=torch.float32)
    m32.load_state_dict(m64.state_dict())
    u = torch.randn(2, 11, D_MODEL, dtype=torch.float64)
    _close(m32(u.float()), ref.layer(dict(m64.state_dict()), _cfg(m64), u), 1e-4, f"{variant} fp32")


@pytest.mark.parametrize("variant", ["siso", "mimo"])
def test_packed_sequences_equal_separate_ones(variant):
    m = _layer(variant)
    lengths = [5, 1, 7]
    seqs = [torch.randn(1, n, D_MODEL, dtype=torch.float64) for n in lengths]
    packed = torch.cat(seqs, dim=1)
    cu = torch.tensor([0, 5, 6, 13], dtype=torch.int32)
    seq_idx = torch.repeat_interleave(torch.arange(3), torch.tensor(lengths)).unsqueeze(0)
    params = InferenceParams(max_seqlen=16, max_batch_size=3)
    by_cu = m(packed, cu_seqlens=cu, inference_params=params)
    by_idx = m(packed, seq_idx=seq_idx)
    _close(
        by_idx,
        ref.layer(dict(m.state_dict()), _cfg(m), packed, seq_idx=seq_idx),
        1e-10,
        "seq_idx vs reference",
    )
    alone = torch.cat([m(s) for s in seqs], dim=1)
    _close(by_cu, alone, 1e-10, "cu_seqlens")
    _close(by_idx, alone, 1e-10, "seq_idx")
    # the cache holds each sequence's final state: one decode step per sequence as a batch of three
    nxt = torch.randn(3, 1, D_MODEL, dtype=torch.float64)
    params.seqlen_offset = 13
    stepped = m(nxt, inference_params=params)
    for i, s in enumerate(seqs):
        full = m(torch.cat([s, nxt[i : i + 1]], dim=1))
        _close(stepped[i], full[0, -1:], 1e-10, f"step after packed prefill, sequence {i}")


@pytest.mark.parametrize(
    "variant", ["siso", "siso-outproj-norm", "mimo-fused-norm", "mimo-unfused-norm-rope1.0"]
)
def test_padded_cu_seqlens_equal_each_sequence_alone(variant):
    """cu_seqlens that ends 3 rows before the tokens (padding) and holds an empty sequence: each
    sequence's output rows, du and every parameter's gradient == the float64 oracle run on each
    sequence alone; the padding rows' output is out_proj of the scan's zero row (0: out_proj has no
    bias, as Mamba2's padding rows) and their du is 0; the cache holds each sequence's final state
    (zero for the empty one): one decode step per sequence == the oracle on the sequence plus that
    token."""
    m = _layer(variant)
    cu = torch.tensor([0, 5, 5, 9], dtype=torch.int32)
    bounds = cu.tolist()
    total = 12
    u = torch.randn(1, total, D_MODEL, dtype=torch.float64, requires_grad=True)
    params = {k: v.detach().clone().requires_grad_(True) for k, v in m.state_dict().items()}
    cache = InferenceParams(max_seqlen=16, max_batch_size=3)
    out = m(u, cu_seqlens=cu, inference_params=cache)
    uref = u.detach().clone().requires_grad_(True)
    alone = [ref.layer(params, _cfg(m), uref[:, lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
    want = torch.cat(alone + [torch.zeros(1, total - bounds[-1], D_MODEL, dtype=torch.float64)], dim=1)
    _close(out, want, 1e-10, f"{variant} out")
    assert bool((out[:, bounds[-1] :] == 0).all()), "padding rows are not 0"
    w = torch.randn_like(want)
    (out * w).sum().backward()
    (want * w).sum().backward()
    _close(u.grad, uref.grad, 1e-10, f"{variant} du")
    assert bool((u.grad[:, bounds[-1] :] == 0).all()), "du is not 0 on the padding rows"
    for name, p in m.named_parameters():
        # float32 parameters (dt_bias, D, ...) hold their gradient rounded once, the oracle's sum of
        # three float32 gradients is rounded at each term
        tol = 1e-10 if p.dtype == torch.float64 else 4 * torch.finfo(torch.float32).eps
        _close(p.grad, params[name].grad, tol, f"{variant} d{name}")
    nxt = torch.randn(3, 1, D_MODEL, dtype=torch.float64)
    cache.seqlen_offset = total
    with torch.no_grad():
        stepped = m(nxt, inference_params=cache)
        for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
            full = ref.layer(params, _cfg(m), torch.cat([u[:, lo:hi].detach(), nxt[i : i + 1]], dim=1))
            _close(stepped[i], full[0, -1:], 1e-10, f"{variant} step after the packed prefill, sequence {i}")


def _decode(m, u, prefill):
    """Prefill ``prefill`` tokens, then one step per remaining token; the outputs concatenated."""
    params = InferenceParams(max_seqlen=u.shape[1], max_batch_size=u.shape[0])
    outs = [m(u[:, :prefill], inference_params=params)]
    params.seqlen_offset = prefill
    for t in range(prefill, u.shape[1]):
        outs.append(m(u[:, t : t + 1], inference_params=params))
        params.seqlen_offset += 1
    return torch.cat(outs, dim=1)


@pytest.mark.parametrize("variant", ["siso", "siso-outproj-norm", "mimo", "mimo-unfused-norm-rope1.0"])
@pytest.mark.parametrize("prefill", [3, 4, 5, 8])  # chunk_size 4: ends before, at and after chunk edges
def test_step_after_prefill_equals_the_full_forward_fp32(variant, prefill):
    m = _layer(variant, dtype=torch.float32)
    u = torch.randn(2, 10, D_MODEL)
    with torch.no_grad():
        _close(_decode(m, u, prefill), m(u), 1e-4, f"{variant} prefill {prefill}")


@pytest.mark.parametrize("variant", ["siso", "mimo-fused-norm"])
@pytest.mark.parametrize("prefill", [4, 5])
def test_step_after_prefill_bf16_within_a_small_factor_of_bf16_rounding(variant, prefill):
    """bfloat16 decoding is compared with the float64 layer (same weights): its error may be at most
    a small multiple of the error of the bfloat16 full forward pass (PyTorch's own bf16 rounding)."""
    m16 = _layer(variant, dtype=torch.bfloat16)
    m64 = _layer(variant)
    m64.load_state_dict({k: v.double() for k, v in m16.state_dict().items()})
    u = torch.randn(2, 10, D_MODEL).to(torch.bfloat16)
    with torch.no_grad():
        exact = m64(u.double())
        full_err = float((m16(u).double() - exact).abs().max())
        step_err = float((_decode(m16, u, prefill).double() - exact).abs().max())
    assert step_err <= 3 * full_err + 1e-3, (step_err, full_err)


@pytest.mark.parametrize("variant", ["siso", "mimo"])
def test_prefill_continued_several_tokens_at_a_time(variant):
    m = _layer(variant)
    u = torch.randn(2, 12, D_MODEL, dtype=torch.float64)
    params = InferenceParams(max_seqlen=12, max_batch_size=2)
    parts = [m(u[:, :5], inference_params=params)]
    params.seqlen_offset = 5
    parts.append(m(u[:, 5:11], inference_params=params))
    params.seqlen_offset = 11
    parts.append(m(u[:, 11:], inference_params=params))
    _close(torch.cat(parts, dim=1), m(u), 1e-10, variant)


def test_step_accepts_two_and_three_dims_and_updates_in_place():
    m = _layer("mimo")
    cache = m.allocate_inference_cache(2, 8)
    assert [tuple(c.shape) for c in cache] == [(2, 8, 2), (2, 8, 4, 8), (2, 2, 8, 8), (2, 8, 4)]
    assert [c.dtype for c in cache] == [torch.float64] * 4
    u = torch.randn(2, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        out2, *_states = m.step(u, *[c.clone() for c in cache])
        out3, *states3 = m.step(u.unsqueeze(1), *cache)
    assert out2.shape == (2, D_MODEL) and out3.shape == (2, 1, D_MODEL)
    _close(out3[:, 0], out2, 0, "same step")
    assert all(s is c for s, c in zip(states3, cache)) and float(cache[1].abs().max()) > 0
    f32 = Mamba3(D_MODEL, **SMALL, dtype=torch.bfloat16).allocate_inference_cache(1, 4)
    assert [c.dtype for c in f32] == [torch.float32, torch.float32, torch.bfloat16, torch.bfloat16]


def test_bad_configurations_and_inputs_are_named():
    with pytest.raises(ValueError, match="rope_fraction must be 0.5 or 1.0"):
        Mamba3(D_MODEL, **SMALL, rope_fraction=0.25)
    with pytest.raises(ValueError, match="must be a positive multiple of headdim"):
        Mamba3(D_MODEL, headdim=5)
    with pytest.raises(ValueError, match=r"ngroups = 3 must divide nheads = 8; choose among \[1, 2, 4, 8\]"):
        Mamba3(D_MODEL, headdim=4, ngroups=3)
    with pytest.raises(ValueError, match="leaves no pair of d_state entries to rotate"):
        Mamba3(D_MODEL, d_state=1, headdim=4)
    with pytest.warns(UserWarning, match=r"ignoring unknown arguments \['d_conv'\]"):
        Mamba3(D_MODEL, **SMALL, d_conv=4)
    m = _layer("siso")
    with pytest.raises(ValueError, match="Mamba3.forward: the input must have shape"):
        m(torch.randn(2, 3, D_MODEL + 1, dtype=torch.float64))
    with pytest.raises(ValueError, match="cu_seqlens packs sequences into a batch of one"):
        m(torch.randn(2, 3, D_MODEL, dtype=torch.float64), cu_seqlens=torch.tensor([0, 3]))
    for bad in ([0, 4], [0, 2, 1, 3], [1, 3]):  # past the 3 tokens, decreasing, not from 0
        with pytest.raises(
            ValueError,
            match=r"Mamba3.forward: cu_seqlens must be non-decreasing cumulative lengths from 0 to at most "
            rf"the 3 packed tokens \(rows after the last entry are padding\), got {re.escape(str(bad))}",
        ):
            m(torch.randn(1, 3, D_MODEL, dtype=torch.float64), cu_seqlens=torch.tensor(bad))
    with pytest.raises(ValueError, match="decodes one token at a time"):
        m.step(torch.randn(2, 2, D_MODEL, dtype=torch.float64), *m.allocate_inference_cache(2, 4))
    no_idx = Mamba3(D_MODEL, **SMALL)
    with pytest.raises(ValueError, match="needs layer_idx"):
        no_idx(torch.randn(1, 3, D_MODEL), inference_params=InferenceParams(max_seqlen=4, max_batch_size=1))
