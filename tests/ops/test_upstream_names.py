"""The behaviour behind upstream's names added here (test_upstream_api.py checks that they exist with
upstream's signatures), each against an independent computation: selective_state_update_ref (a float64
step, and independent of the op), SelectiveScanFn / MambaInnerFn as real autograd Functions,
rms_norm_forward, the layer_norm references with upstream's full argument lists, LayerNormFn (dropout
masks reused in the backward), LayerNormLinearFn, the gated LayerNormFn, SwiGLU, ParallelLinearFunc
without a process group (with one: tp_worker.py), utils.torch's autocast decorators, utils.determinism,
the CUDA-graph helpers' error off CUDA, ssd_minimal's segsum_unstable / test_correctness, the Triton
version flags."""

from __future__ import annotations

import importlib.metadata

import numpy as np
import pytest
import reference as ref  # (tests/reference.py)
import torch

F32, F64 = torch.float32, torch.float64


def _close(got, want, what, tol=1e-9):
    got, want = got.detach().double(), torch.as_tensor(want).detach().double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    err = float((got - want).abs().max())
    assert err <= tol * max(1.0, float(want.abs().max())), f"{what}: max error {err:.3g}"


# ---------------------------------------------------------------------------------------------- selective_state_update_ref
@pytest.mark.parametrize("heads", [True, False])
def test_selective_state_update_ref_is_an_independent_step(heads, monkeypatch):
    """One step h = exp(dt A) h + dt B x, y = h.C + D x, * silu(z), against numpy float64; it still works
    with the op replaced by one that raises (it does not call the op)."""
    import mamba_ssm.ops.triton.selective_state_update as ssu

    gen = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=gen)
    b, h, p, n, g = 3, 4, 5, 6, 2
    state = r(b, h, p, n)
    x, dt, z = r(b, h, p), torch.rand(b, h, p, generator=gen), r(b, h, p)
    A = -torch.rand(h, p, n, generator=gen) - 0.1
    B, C = r(b, g, n), r(b, g, n)
    D, bias = r(h, p), r(h, p) * 0.2
    s, xn, dtn, An, Bn, Cn, Dn, zn, bn = (t.double().numpy() for t in (state, x, dt, A, B, C, D, z, bias))
    want_state, want = s.copy(), np.zeros((b, h, p))
    for row in range(b):
        for hh in range(h):
            d = np.log1p(np.exp(dtn[row, hh] + bn[hh]))
            grp = hh // (h // g)
            want_state[row, hh] = (
                np.exp(d[:, None] * An[hh]) * s[row, hh] + (d * xn[row, hh])[:, None] * Bn[row, grp]
            )
            y = want_state[row, hh] @ Cn[row, grp] + Dn[hh] * xn[row, hh]
            want[row, hh] = y * zn[row, hh] / (1 + np.exp(-zn[row, hh]))
    monkeypatch.setattr(ssu, "selective_state_update", lambda *a, **k: (_ for _ in ()).throw(AssertionError))
    if heads:
        out = ssu.selective_state_update_ref(state, x, dt, A, B, C, D, z, bias, True)
        _close(out, want, "out", 1e-6)
        _close(state, want_state, "state", 1e-6)
    else:  # one head: (batch, dim, dstate) state, (batch, dstate) B and C
        st = state[:, 0].clone()
        out = ssu.selective_state_update_ref(
            st, x[:, 0], dt[:, 0], A[0], B[:, 0], C[:, 0], D[0], z[:, 0], bias[0], True
        )
        _close(out, want[:, 0], "out (no heads)", 1e-6)
        _close(st, want_state[:, 0], "state (no heads)", 1e-6)


def test_selective_state_update_matches_its_reference():
    """The op (PyTorch path on the CPU) against upstream's pairing: the reference from the same state."""
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update, selective_state_update_ref

    gen = torch.Generator().manual_seed(1)
    b, h, p, n = 2, 4, 8, 16
    state = torch.randn(b, h, p, n, generator=gen)
    args = (torch.randn(b, h, p, generator=gen), torch.rand(b, h, p, generator=gen) - 4.0,
            -torch.rand(h, p, n, generator=gen), torch.randn(b, 1, n, generator=gen), torch.randn(b, 1, n, generator=gen))  # fmt: skip
    s1, s2 = state.clone(), state.clone()
    out = selective_state_update(s1, *args, D=torch.randn(h, p, generator=gen), dt_softplus=True)
    gen = torch.Generator().manual_seed(1)
    torch.randn(b, h, p, n, generator=gen)
    args2 = (torch.randn(b, h, p, generator=gen), torch.rand(b, h, p, generator=gen) - 4.0,
             -torch.rand(h, p, n, generator=gen), torch.randn(b, 1, n, generator=gen), torch.randn(b, 1, n, generator=gen))  # fmt: skip
    want = selective_state_update_ref(s2, *args2, D=torch.randn(h, p, generator=gen), dt_softplus=True)
    _close(out, want, "out", 1e-6)
    _close(s1, s2, "state", 1e-6)


# ---------------------------------------------------------------------------------------------- selective scan classes
def test_selective_scan_fn_and_mamba_inner_fn_are_autograd_functions():
    from mamba_ssm.ops.selective_scan_interface import MambaInnerFn, SelectiveScanFn, mamba_inner_ref

    assert issubclass(SelectiveScanFn, torch.autograd.Function)
    assert issubclass(MambaInnerFn, torch.autograd.Function)
    gen = torch.Generator().manual_seed(2)
    b, d, n, L = 2, 4, 3, 9
    leaves = [torch.randn(b, d, L, generator=gen), torch.rand(b, d, L, generator=gen),
              -torch.rand(d, n, generator=gen) - 0.1, torch.randn(b, n, L, generator=gen),
              torch.randn(b, n, L, generator=gen), torch.randn(d, generator=gen), torch.randn(b, d, L, generator=gen),
              torch.randn(d, generator=gen)]  # fmt: skip
    mine = [t.clone().requires_grad_(True) for t in leaves]
    oracle = [t.double().requires_grad_(True) for t in leaves]
    out, last = SelectiveScanFn.apply(*mine, True, True)
    want, want_last = ref.selective_scan_torch(*oracle, delta_softplus=True)
    g1, g2 = torch.randn(out.shape, generator=gen), torch.randn(last.shape, generator=gen)
    ((out * g1).sum() + (last * g2).sum()).backward()
    ((want * g1.double()).sum() + (want_last * g2.double()).sum()).backward()
    _close(out, want, "SelectiveScanFn out", 1e-5)
    for i, (a, o) in enumerate(zip(mine, oracle)):
        _close(a.grad, o.grad, f"SelectiveScanFn grad {i}", 1e-4)
    # MambaInnerFn: its gradients are those of mamba_inner_ref (PyTorch conv + sequential scan).
    dm, r = 6, 2
    xz = torch.randn(b, 2 * d, L, generator=gen)
    weights = [torch.randn(d, 1, 4, generator=gen), torch.randn(d, generator=gen),
               torch.randn(r + 2 * n, d, generator=gen) * 0.3, torch.randn(d, r, generator=gen) * 0.3,
               torch.randn(dm, d, generator=gen), None, leaves[2]]  # fmt: skip
    a1 = [xz.clone().requires_grad_(True)] + [
        w.clone().requires_grad_(True) if w is not None else None for w in weights
    ]
    a2 = [xz.double().requires_grad_(True)] + [
        w.double().requires_grad_(True) if w is not None else None for w in weights
    ]
    y1 = MambaInnerFn.apply(*a1, None, None, leaves[5], leaves[7], None, None, True)
    y2 = mamba_inner_ref(*a2, None, None, leaves[5].double(), leaves[7].double(), None, None, True)
    _close(y1, y2, "MambaInnerFn out", 1e-5)
    y1.sum().backward()
    y2.sum().backward()
    for i, (p1, p2) in enumerate(zip(a1, a2)):
        if p1 is not None:
            _close(p1.grad, p2.grad, f"MambaInnerFn grad {i}", 1e-4)


def test_rms_norm_forward():
    from mamba_ssm.ops.selective_scan_interface import rms_norm_forward

    x, w = torch.randn(3, 5, 8, dtype=torch.bfloat16), torch.rand(8) + 0.5
    got = rms_norm_forward(x, w, None, eps=1e-5)
    xd = x.double().numpy()
    want = xd / np.sqrt((xd * xd).mean(-1, keepdims=True) + 1e-5) * w.double().numpy()
    assert got.dtype == torch.bfloat16
    _close(got, want, "rms_norm_forward", 1e-2)


# ---------------------------------------------------------------------------------------------- norms
def _np_norm(x, w, b, eps, rms):
    if not rms:
        x = x - x.mean(-1, keepdims=True)
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w
    return y + b if b is not None else y


@pytest.mark.parametrize("rms", [False, True])
def test_norm_refs_take_upstreams_full_arguments(rms):
    """x' = dropout(x * rowscale) + dropout(x1) + residual with the given masks; out = norm(x') * w + b,
    out1 with weight1 / bias1, x' last with prenorm."""
    from mamba_ssm.ops.triton.layer_norm import layer_norm_ref, rms_norm_ref

    gen = torch.Generator().manual_seed(3)
    r = lambda *s: torch.randn(*s, generator=gen, dtype=F64)
    x, x1, res = r(4, 6), r(4, 6), r(4, 6)
    w, b, w1, b1, rowscale = r(6), r(6), r(6), r(6), r(4)
    m, m1 = torch.rand(4, 6, generator=gen) > 0.3, torch.rand(4, 6, generator=gen) > 0.3
    fn = rms_norm_ref if rms else layer_norm_ref
    out, out1, resid = fn(x, w, b, res, x1, w1, b1, 1e-5, 0.3, rowscale, True, m, m1)
    xn = lambda t: t.numpy()
    want_resid = xn(x) * xn(rowscale)[:, None] * xn(m) / 0.7 + xn(x1) * xn(m1) / 0.7 + xn(res)
    _close(resid, want_resid, "x'")
    _close(out, _np_norm(want_resid, xn(w), xn(b), 1e-5, rms), "out")
    _close(out1, _np_norm(want_resid, xn(w1), xn(b1), 1e-5, rms), "out1")
    plain = fn(x, w, b, residual=res, eps=1e-5)
    _close(plain, _np_norm(xn(x) + xn(res), xn(w), xn(b), 1e-5, rms), "plain")


def test_layer_norm_fn_class_reuses_its_dropout_masks():
    """LayerNormFn draws the masks once: the outputs it returns and its gradients are the reference's
    with those masks."""
    from mamba_ssm.ops.triton.layer_norm import LayerNormFn, layer_norm_ref

    torch.manual_seed(4)
    x, x1, res = (torch.randn(5, 8, requires_grad=True) for _ in range(3))
    w, b = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
    out, resid, m, m1 = LayerNormFn.apply(
        x, w, b, res, x1, None, None, 1e-5, 0.25, None, True, True, False, True
    )
    assert m.dtype == torch.bool and 0 < int(m.sum()) < m.numel()
    leaves = [t.detach().double().requires_grad_(True) for t in (x, w, b, res, x1)]
    want, want_resid = layer_norm_ref(leaves[0], leaves[1], leaves[2], leaves[3], leaves[4], eps=1e-5,
                                      dropout_p=0.25, prenorm=True, dropout_mask=m, dropout_mask1=m1)  # fmt: skip
    _close(out, want, "out", 1e-5)
    _close(resid, want_resid, "residual stream", 1e-6)
    g = torch.randn(out.shape)
    ((out * g).sum() + resid.sum()).backward()
    ((want * g.double()).sum() + want_resid.sum()).backward()
    for name, a, o in zip(("x", "weight", "bias", "residual", "x1"), (x, w, b, res, x1), leaves):
        _close(a.grad, o.grad, f"d{name}", 1e-4)


def test_layer_norm_linear_fn():
    from mamba_ssm.ops.triton.layer_norm import LayerNormLinearFn, layer_norm_linear_fn

    assert issubclass(LayerNormLinearFn, torch.autograd.Function)
    gen = torch.Generator().manual_seed(5)
    x, res = torch.randn(3, 7, 8, generator=gen), torch.randn(3, 7, 8, generator=gen)
    nw, lw, lb = (
        torch.rand(8, generator=gen) + 0.5,
        torch.randn(5, 8, generator=gen),
        torch.randn(5, generator=gen),
    )
    lw.requires_grad_(True)
    out, resid = layer_norm_linear_fn(
        x, nw, None, lw, lb, residual=res, eps=1e-5, prenorm=True, is_rms_norm=True
    )
    s = (x + res).double().numpy()
    normed = _np_norm(s, nw.double().numpy(), None, 1e-5, True)
    _close(out, normed @ lw.detach().double().numpy().T + lb.double().numpy(), "out", 1e-5)
    _close(resid, s, "residual stream", 1e-6)
    out.sum().backward()
    _close(lw.grad, np.ones((3, 7, 5)).reshape(-1, 5).T @ normed.reshape(-1, 8), "dlinear_weight", 1e-5)


def test_gated_layer_norm_fn_class():
    from mamba_ssm.ops.triton.layernorm_gated import LayerNormFn, rms_norm_ref

    assert issubclass(LayerNormFn, torch.autograd.Function)
    gen = torch.Generator().manual_seed(6)
    x, z = torch.randn(4, 12, generator=gen, requires_grad=True), torch.randn(4, 12, generator=gen)
    w = torch.rand(12, generator=gen) + 0.5
    out = LayerNormFn.apply(x, w, None, z, 1e-5, 4, False, True)
    xd = x.detach().double().requires_grad_(True)
    want = rms_norm_ref(xd, w.double(), None, z=z.double(), eps=1e-5, group_size=4, norm_before_gate=False)
    _close(out, want, "out", 1e-5)
    out.sum().backward()
    want.sum().backward()
    _close(x.grad, xd.grad, "dx", 1e-4)


def test_swiglu():
    from mamba_ssm.ops.triton.k_activations import SwiGLU, swiglu

    assert issubclass(SwiGLU, torch.autograd.Function)
    xy = torch.randn(3, 10, requires_grad=True)
    out = swiglu(xy)
    x, y = xy.detach().double().numpy()[:, :5], xy.detach().double().numpy()[:, 5:]
    _close(out, x / (1 + np.exp(-x)) * y, "swiglu", 1e-6)
    out.sum().backward()
    sig = 1 / (1 + np.exp(-x))
    _close(xy.grad, np.concatenate([y * sig * (1 + x * (1 - sig)), x * sig], 1), "dxy", 1e-5)


def test_parallel_linear_func_without_a_process_group():
    from mamba_ssm.distributed.tensor_parallel import ParallelLinearFunc, parallel_linear_func

    assert issubclass(ParallelLinearFunc, torch.autograd.Function)
    x, w, b = torch.randn(4, 6, requires_grad=True), torch.randn(3, 6), torch.randn(3)
    out = parallel_linear_func(x, w, b)
    _close(out, x.detach().double().numpy() @ w.double().numpy().T + b.double().numpy(), "out", 1e-6)
    out.sum().backward()
    _close(x.grad, np.ones((4, 3)) @ w.double().numpy(), "dx", 1e-6)


# ---------------------------------------------------------------------------------------------- utils
def test_custom_fwd_custom_bwd_decorate_a_function():
    """@custom_fwd(cast_inputs=...) casts a Function's floating inputs under autocast (here the CPU's,
    by passing device_type) and runs the forward with autocast off; @custom_bwd runs the backward in the
    forward's autocast state; the bare forms wrap without arguments (torch.amp's, device "cuda")."""
    from mamba_ssm.utils.torch import custom_bwd, custom_fwd, deprecated

    assert deprecated == hasattr(torch.amp, "custom_fwd")
    seen = {}

    class Square(torch.autograd.Function):
        @staticmethod
        @custom_fwd(cast_inputs=torch.float64, device_type="cpu")
        def forward(ctx, x):
            seen["forward"] = (x.dtype, torch.is_autocast_enabled("cpu"))
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @custom_bwd(device_type="cpu")
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    x = torch.randn(3, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = Square.apply(x)
    assert seen["forward"] == (torch.float64, False) and y.dtype == torch.float64
    y.sum().backward()
    _close(x.grad, 2 * x.detach(), "gradient")

    class Plain(torch.autograd.Function):  # the bare decorator forms of upstream's Functions
        @staticmethod
        @custom_fwd
        def forward(ctx, x):
            return x + 1

        @staticmethod
        @custom_bwd
        def backward(ctx, g):
            return g

    assert torch.equal(Plain.apply(torch.zeros(2)), torch.ones(2))


def test_determinism_switches_and_helpers(monkeypatch):
    from mamba_ssm.utils import determinism as det

    monkeypatch.delenv("MAMBA_DETERMINISTIC", raising=False)
    det.set_deterministic_mode(None)
    assert det.use_deterministic_mode() == torch.are_deterministic_algorithms_enabled()
    monkeypatch.setenv("MAMBA_DETERMINISTIC", "1")
    assert det.use_deterministic_mode()
    monkeypatch.setenv("MAMBA_DETERMINISTIC", "0")
    assert not det.use_deterministic_mode()
    det.set_deterministic_mode(True)
    try:
        assert det.use_deterministic_mode()

        class Cfg:
            def __init__(self, m, n, stages):
                self.kwargs, self.num_stages = {"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n}, stages

        configs = [Cfg(128, 64, 3), Cfg(32, 32, 4), Cfg(64, 64, 2)]
        monkeypatch.delenv("TRITON_CACHE_AUTOTUNING", raising=False)
        monkeypatch.setattr(det, "_warned", False)
        with pytest.warns(UserWarning, match="deterministic mode"):
            picked = det.autotune_configs(configs)
        assert picked == [configs[1]]  # 32*32*4 < 64*64*2 < 128*64*3
        monkeypatch.setenv("TRITON_AUTOTUNE_BLOCK_SIZE_M", "64")
        assert det.autotune_configs(configs) == [configs[2]]
        buf, stride = det.alloc_tile_workspace((2, 3), 4, torch.float32, "cpu", True)
        assert buf.shape == (2, 3, 4) and stride == 1 and not buf.any()
        buf[..., 1] = 2.0
        assert torch.equal(det.finalize_tile_workspace(buf, True), torch.full((2, 3), 2.0))
    finally:
        det.set_deterministic_mode(None)
    assert det.autotune_configs(configs) is configs if not det.use_deterministic_mode() else True
    plain, stride = det.alloc_tile_workspace((5,), 4, torch.float32, "cpu", False)
    assert plain.shape == (5,) and stride == 0 and det.finalize_tile_workspace(plain, False) is plain
    assert det.alloc_tile_workspace(None, 4, torch.float32, "cpu", True) == (None, 0)


def test_triton_version_flags():
    """TRITON_22 / TRITON3 / TRITON_HAS_CACHE_RESULTS / TRITON_VERSION from the installed triton's
    metadata (triton not imported)."""
    from packaging.version import Version

    from mamba_ssm.ops.triton import ssd_chunk_scan, ssd_combined
    from mamba_ssm.utils import determinism

    try:
        have = Version(importlib.metadata.version("triton"))
    except importlib.metadata.PackageNotFoundError:
        have = Version("0.0.0")
    assert determinism.TRITON_VERSION.release[:3] == have.release[:3]
    assert ssd_combined.TRITON_22 == ssd_chunk_scan.TRITON_22 == (have >= Version("2.2"))
    assert (have >= Version("3.4")) == determinism.TRITON_HAS_CACHE_RESULTS


def test_layer_norm_autotune_configs_and_prune():
    triton = pytest.importorskip("triton")
    from mamba_ssm.ops.triton import layer_norm

    configs = layer_norm.configs_autotune
    assert [c.num_warps for c in configs] == [1, 2, 4, 8, 16, 32]
    assert all(c.num_warps * 32 <= 1024 for c in layer_norm.pruned_configs_autotune)
    assert layer_norm.config_prune([triton.Config({}, num_warps=64)]) == []


def test_cuda_graph_helpers_say_they_need_cuda():
    from mamba_ssm.models.config_mamba import MambaConfig
    from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel
    from mamba_ssm.utils.generation import InferenceParams, capture_graph, update_graph_cache

    model = MambaLMHeadModel(MambaConfig(d_model=16, n_layer=1, vocab_size=32, ssm_cfg={"d_state": 4}))
    with pytest.raises(
        RuntimeError, match="capture_graph: CUDA graphs need a model on a CUDA device, this one is on cpu"
    ):
        capture_graph(model, InferenceParams(max_seqlen=8, max_batch_size=1), 1, 8)
    with pytest.raises(RuntimeError, match="update_graph_cache: CUDA graphs need"):
        update_graph_cache(model, None, 1, 4, 8)


@pytest.mark.gpu
def test_update_graph_cache_replays_the_eager_decode_step():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from mamba_ssm.models.config_mamba import MambaConfig
    from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel
    from mamba_ssm.utils.generation import InferenceParams, update_graph_cache

    torch.manual_seed(0)
    model = MambaLMHeadModel(
        MambaConfig(
            d_model=64, n_layer=2, vocab_size=64, ssm_cfg={"layer": "Mamba2", "headdim": 32, "d_state": 16}
        ),
        device="cuda",
    )
    prompt = torch.randint(0, 64, (2, 5), device="cuda")
    tok = torch.randint(0, 64, (2, 1), device="cuda")
    # As upstream's decode: capture first (the warm-up steps scribble on the caches), then prefill into them.
    cache = update_graph_cache(model, None, 2, 5, 16)
    model(prompt, inference_params=cache.inference_params)
    got = cache.run(tok, None, 5)
    eager = InferenceParams(max_seqlen=16, max_batch_size=2)
    model(prompt, inference_params=eager)
    eager.seqlen_offset = 5
    want = model(tok, inference_params=eager, num_last_tokens=1).logits
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)


def test_ssd_minimal_extras():
    from mamba_ssm.modules.ssd_minimal import segsum, segsum_unstable, test_correctness

    x = torch.randn(2, 9, dtype=F64)
    got, want = segsum_unstable(x), segsum(x)
    finite = torch.isfinite(want)
    assert torch.equal(finite, torch.isfinite(got))
    _close(got[finite], want[finite], "segsum_unstable", 1e-12)
    test_correctness(batch=1, seqlen=40, chunk_size=8, dim=16, headdim=8, dstate=4)


def test_outputs_take_inplace_updates():
    """Upstream's ops return tensors of their own: ``out.add_(...)`` under autograd works on every output
    (a view returned by a Function cannot take it), and the gradient then matches the plain op's."""
    from mamba_ssm.ops.selective_scan_interface import SelectiveScanFn
    from mamba_ssm.ops.triton.ssd_combined import MambaChunkScanCombinedFn, mamba_chunk_scan_combined

    gen = torch.Generator().manual_seed(9)
    x = torch.randn(2, 37, 2, 4, generator=gen)
    rest = (torch.rand(2, 37, 2, generator=gen), -torch.rand(2, generator=gen) - 0.2,
            torch.randn(2, 37, 1, 8, generator=gen), torch.randn(2, 37, 1, 8, generator=gen))  # fmt: skip
    grads = []
    for fn in (
        lambda t: mamba_chunk_scan_combined(t, *rest, 16, return_final_states=True),
        lambda t: MambaChunkScanCombinedFn.apply(
            t, *rest, 16, None, None, None, None, None, None, False, (0.0, float("inf")), True
        ),
    ):
        leaf = x.clone().requires_grad_(True)
        out, final = fn(leaf)
        assert out._base is None and final._base is None
        out.mul_(2.0)
        final.add_(1.0)
        (out.sum() + final.sum()).backward()
        grads.append(leaf.grad)
    _close(grads[1], grads[0], "gradient after in-place updates", 1e-6)
    u = torch.randn(2, 4, 9, generator=gen, requires_grad=True)
    out, last = SelectiveScanFn.apply(u, torch.rand(2, 4, 9), -torch.rand(4, 3), torch.randn(2, 3, 9),
                                      torch.randn(2, 3, 9), None, None, None, False, True)  # fmt: skip
    out += 1.0
    last *= 2.0
    (out.sum() + last.sum()).backward()
    assert torch.isfinite(u.grad).all()
