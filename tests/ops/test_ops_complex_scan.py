"""selective_scan_fn / mamba_inner_fn with a complex A on every backend (the compiled CPU kernel, the
PyTorch fallback, the sequential ``ref``), forward and every gradient, against the complex128 sequential
recurrence of tests/oracles.py (``selective_scan_complex``, autograd for the gradients).

* Each backend on real/complex, constant/variable B and C (every form selective_scan_fn accepts:
  complex or real constant; real (re, im) pairs interleaved along time, real, or complex variable;
  1 and 2 groups), with and without D, z, delta_bias, softplus, several seqlens (one past the CPU
  kernel's tile and backward segment), fp32, fp16 and bf16 inputs, float64 on the PyTorch paths.
* Upstream mamba-ssm's test_selective_scan with wtype=complex64 (its four B/C variable/constant cases),
  written anew: upstream's shapes and input ranges, checked against the float64 recurrence.
* mamba_inner_fn with a complex A against the same recurrence composed with a float64 causal conv and
  projections (x_proj's columns (2n, 2n + 1) are (re, im) of state n, upstream's convention).
* Routing: the dispatch sends complex calls the compiled kernels cannot take (float64 / complex128, a
  _C without the complex ops) to PyTorch and says why; input errors name the argument and the fix.
"""

from __future__ import annotations

import pytest
import reference as rref  # (tests/reference.py)
import torch
from oracles import selective_scan_complex as selective_scan_complex_ref64

import mamba_ssm
from mamba_ssm.ops import selective_scan_interface as ssi

NAMES = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")


def _compiled_complex_reason():
    from mamba_ssm import _loader

    res = _loader.load()
    if not res.loaded:
        return f"mamba_ssm._C is not loaded: {res.reason}"
    from mamba_ssm._families.selective_scan import compiled_complex

    return None if compiled_complex.available() else "this _C has no complex-A ops"


@pytest.fixture(params=["compiled", "torch", "ref"])
def backend(request, monkeypatch):
    """A forced backend for the test, restored after; ``compiled`` skips where _C cannot load."""
    name = request.param
    if name == "compiled":
        why = _compiled_complex_reason()
        if why:
            pytest.skip(why)
    previous = mamba_ssm.set_backend(name)
    monkeypatch.setenv("MAMBA_SSM_NO_FALLBACK_WARNING", "1")
    yield name
    mamba_ssm.set_backend(previous)


def _bc(kind, batch, dim, n, seqlen, dtype, gen):
    """B or C of one form: ``const`` complex64, ``const_real`` float32, ``pairs`` / ``pairs2`` real
    (re, im) interleaved (1 / 2 groups), ``real`` (batch, N, L) real, ``complex`` (batch, N, L) complex64."""
    r = lambda *s: torch.randn(*s, generator=gen)
    if kind == "const":
        return torch.complex(r(dim, n), r(dim, n))
    if kind == "const_real":
        return r(dim, n)
    if kind == "pairs":
        return r(batch, n, 2 * seqlen).to(dtype)
    if kind == "pairs2":
        return r(batch, 2, n, 2 * seqlen).to(dtype)
    if kind == "real":
        return r(batch, n, seqlen).to(dtype)
    assert kind == "complex"
    return torch.complex(r(batch, n, seqlen), r(batch, n, seqlen))


def make_complex_inputs(batch, dim, n, seqlen, b_kind, c_kind, dtype, D=True, z=True, bias=True, seed=0):
    """Inputs in S4D's ranges: A with a negative real part and imaginary parts up to about pi * n."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(batch, dim, seqlen, generator=g).to(dtype)
    delta = (torch.rand(batch, dim, seqlen, generator=g) * 1.5 - 1.0).to(dtype)
    a_re = -(0.05 + torch.rand(dim, n, generator=g))
    a_im = torch.pi * torch.arange(n, dtype=torch.float32) + 0.3 * torch.randn(dim, n, generator=g)
    A = torch.complex(a_re, a_im)
    B = _bc(b_kind, batch, dim, n, seqlen, dtype, g)
    C = _bc(c_kind, batch, dim, n, seqlen, dtype, g)
    wdt = torch.float64 if dtype == torch.float64 else torch.float32
    if dtype == torch.float64:
        A = A.to(torch.complex128)
    return {
        "u": u,
        "delta": delta,
        "A": A,
        "B": B,
        "C": C,
        "D": torch.randn(dim, generator=g).to(wdt) if D else None,
        "z": torch.randn(batch, dim, seqlen, generator=g).to(dtype) if z else None,
        "delta_bias": (0.3 * torch.randn(dim, generator=g)).to(wdt) if bias else None,
    }


def _close(actual, expected, dtype, what):
    """|actual - expected| <= atol * scale + rtol * |expected| with the dtype's tolerances (float32's for
    float64), scale = max(1, max |expected|); complex tensors compared as (re, im) pairs."""
    expected = expected.detach()
    if expected.is_complex():
        assert actual.is_complex(), f"{what}: expected a complex tensor, got {actual.dtype}"
        actual, expected = torch.view_as_real(actual.detach().resolve_conj()), torch.view_as_real(expected)
    scale = max(1.0, float(expected.abs().max())) if expected.numel() else 1.0
    rref.assert_close(actual, expected, torch.float32 if dtype == torch.float64 else dtype, what, scale=scale)


def check_against_reference(inp, softplus, dtype, grads=True):
    """selective_scan_fn (the backend in force) vs selective_scan_complex_ref64: out, last state and,
    through a loss of both, the gradient of every input (each in its input's dtype and shape)."""
    leaves = {k: None if v is None else v.detach().clone().requires_grad_(grads) for k, v in inp.items()}
    out, last = ssi.selective_scan_fn(
        *[leaves[k] for k in NAMES], delta_softplus=softplus, return_last_state=True
    )
    u = inp["u"]
    assert out.dtype == u.dtype and out.shape == u.shape
    wide = u.dtype == torch.float64
    assert last.dtype == (torch.complex128 if wide else torch.complex64)
    assert last.shape == (u.shape[0], u.shape[1], inp["A"].shape[1])

    def to_ref(x):
        if x is None:
            return None
        return x.detach().to(torch.complex128 if x.is_complex() else torch.float64).requires_grad_(grads)

    ref = {k: to_ref(v) for k, v in inp.items()}
    ref_out, ref_last = selective_scan_complex_ref64(*[ref[k] for k in NAMES], delta_softplus=softplus)
    _close(out, ref_out, dtype, "out")
    _close(last, ref_last, dtype, "last_state")
    if not grads:
        return
    gen = torch.Generator().manual_seed(7)
    g_out = torch.randn(ref_out.shape, generator=gen, dtype=torch.float64)
    g_last = torch.complex(*torch.randn((2,) + tuple(ref_last.shape), generator=gen, dtype=torch.float64))
    loss = (out.double() * g_out).sum() + (last.to(torch.complex128) * g_last.conj()).real.sum()
    loss.backward()
    ((ref_out * g_out).sum() + (ref_last * g_last.conj()).real.sum()).backward()
    for k in NAMES:
        if leaves[k] is None:
            continue
        x = leaves[k]
        assert x.grad is not None, f"no gradient for {k}"
        assert x.grad.dtype == x.dtype and x.grad.shape == x.shape, (k, x.grad.dtype, x.grad.shape)
        _close(x.grad, ref[k].grad, dtype, f"d{k}")


# (seqlen, B form, C form, dtype, D, z, delta_bias, softplus)
CASES = [
    (37, "const", "const", torch.float32, True, True, True, True),
    (37, "pairs", "pairs", torch.float32, True, True, True, True),
    (37, "pairs2", "pairs2", torch.float32, False, False, False, False),
    (29, "pairs", "const", torch.float32, True, False, True, True),
    (29, "const", "pairs", torch.float32, False, True, False, True),
    (1, "pairs", "pairs", torch.float32, True, True, True, True),
    (23, "const_real", "complex", torch.float32, True, True, True, True),
    (23, "real", "const_real", torch.float32, True, False, True, False),
    (700, "pairs2", "pairs2", torch.float32, True, True, True, True),
    (64, "pairs", "pairs", torch.float16, True, True, True, True),
    (64, "pairs2", "const", torch.bfloat16, True, True, True, True),
]


@pytest.mark.parametrize("case", CASES, ids=[f"L{c[0]}-{c[1]}-{c[2]}-{str(c[3])[6:]}" for c in CASES])
def test_complex_scan_vs_recurrence(backend, case):
    seqlen, b_kind, c_kind, dtype, D, z, bias, softplus = case
    if seqlen > 100 and backend == "ref":
        pytest.skip("the long case is for the chunked and compiled scans")
    inp = make_complex_inputs(2, 4, 5, seqlen, b_kind, c_kind, dtype, D, z, bias, seed=seqlen)
    check_against_reference(inp, softplus, dtype)


@pytest.mark.parametrize("backend", ["torch", "ref"], indirect=True)
def test_complex_scan_float64(backend):
    """complex128 A with float64 inputs (the PyTorch paths), tight tolerances."""
    inp = make_complex_inputs(2, 4, 4, 19, "pairs2", "const", torch.float64, seed=3)
    inp["B"] = inp["B"].double()
    inp["C"] = inp["C"].to(torch.complex128)
    leaves = {k: None if v is None else v.clone().requires_grad_() for k, v in inp.items()}
    out, last = ssi.selective_scan_fn(
        *[leaves[k] for k in NAMES], delta_softplus=True, return_last_state=True
    )
    ref_out, ref_last = selective_scan_complex_ref64(*[inp[k] for k in NAMES], delta_softplus=True)
    assert last.dtype == torch.complex128
    assert torch.allclose(out, ref_out, rtol=1e-10, atol=1e-10)
    assert torch.allclose(last, ref_last, rtol=1e-10, atol=1e-10)
    out.sum().backward()
    ref_leaves = {k: None if v is None else v.clone().requires_grad_() for k, v in inp.items()}
    selective_scan_complex_ref64(*[ref_leaves[k] for k in NAMES], delta_softplus=True)[0].sum().backward()
    for k in NAMES:
        assert torch.allclose(leaves[k].grad, ref_leaves[k].grad, rtol=1e-9, atol=1e-9), k


@pytest.mark.parametrize("is_variable_B", [False, True])
@pytest.mark.parametrize("is_variable_C", [False, True])
def test_upstream_selective_scan_complex64(is_variable_B, is_variable_C):
    """Upstream's test_selective_scan with wtype=complex64, itype=float32 (varBC_groups 1, D, z,
    delta_bias, softplus, return_last_state; batch 2, dim 4, d_state 8, seqlen 128) on the default
    backend, with upstream's input ranges: A = -0.5 * rand (complex), variable B/C as (batch, d_state,
    2 * seqlen) real pairs, constant ones complex64; checked against the float64 recurrence."""
    torch.random.manual_seed(0)
    batch, dim, dstate, seqlen = 2, 4, 8, 128
    A = -0.5 * torch.rand(dim, dstate, dtype=torch.complex64)
    B = (
        torch.randn(batch, dstate, 2 * seqlen)
        if is_variable_B
        else torch.randn(dim, dstate, dtype=torch.complex64)
    )
    C = (
        torch.randn(batch, dstate, 2 * seqlen)
        if is_variable_C
        else torch.randn(dim, dstate, dtype=torch.complex64)
    )
    inp = {
        "u": torch.randn(batch, dim, seqlen),
        "delta": 0.5 * torch.rand(batch, dim, seqlen),
        "A": A,
        "B": B,
        "C": C,
        "D": torch.randn(dim),
        "z": torch.randn(batch, dim, seqlen),
        "delta_bias": 0.5 * torch.rand(dim),
    }
    check_against_reference(inp, True, torch.float32)
    # Upstream compares selective_scan_fn with its selective_scan_ref; ours agree too.
    fn_out = ssi.selective_scan_fn(*[inp[k] for k in NAMES], delta_softplus=True)
    ref_out = ssi.selective_scan_ref(*[inp[k] for k in NAMES], delta_softplus=True)
    assert torch.allclose(fn_out, ref_out, rtol=6e-4, atol=2e-3)


def _conv_silu64(x, w, b):
    """Causal depthwise conv1d + SiLU in float64: out[t] = silu(b + sum_k w[k] x[t - (W - 1) + k])."""
    W = w.shape[-1]
    y = torch.nn.functional.conv1d(x, w.reshape(w.shape[0], 1, W), b, padding=W - 1, groups=x.shape[1])
    return torch.nn.functional.silu(y[..., : x.shape[-1]])


@pytest.mark.parametrize("variable", [True, False], ids=["BC-from-x_proj", "BC-constant"])
def test_mamba_inner_fn_complex(variable):
    """mamba_inner_fn with complex A (upstream's test_mamba_inner_fn with wtype=complex64: x_proj has
    dt_rank + 2 * d_state rows per input-dependent B / C) vs conv + projections + the recurrence in
    float64, output and the gradients of xz, x_proj_weight and A; mamba_inner_ref's output too."""
    g = torch.Generator().manual_seed(5)
    batch, dim, seqlen, n, rank, d_model = 2, 6, 24, 3, 4, 5
    r = lambda *s, scale=1.0: (scale * torch.randn(*s, generator=g)).requires_grad_()
    xz = r(batch, 2 * dim, seqlen)
    conv_w, conv_b = r(dim, 1, 4, scale=0.5), r(dim, scale=0.1)
    rows = rank + (4 * n if variable else 0)
    x_proj, dt_proj, out_proj = r(rows, dim, scale=0.3), r(dim, rank, scale=0.3), r(d_model, dim, scale=0.3)
    A = torch.complex(-(0.1 + torch.rand(dim, n, generator=g)), torch.pi * torch.rand(dim, n, generator=g))
    A.requires_grad_()
    B = (
        None
        if variable
        else torch.complex(torch.randn(dim, n, generator=g), torch.randn(dim, n, generator=g))
    )
    C = (
        None
        if variable
        else torch.complex(torch.randn(dim, n, generator=g), torch.randn(dim, n, generator=g))
    )
    D, dt_bias = r(dim), r(dim, scale=0.2)
    args = (xz, conv_w, conv_b, x_proj, dt_proj, out_proj, None, A, B, C, D, dt_bias)
    out = ssi.mamba_inner_fn(*args, delta_softplus=True)

    d64 = [
        None if t is None else t.detach().to(torch.complex128 if t.is_complex() else torch.float64)
        for t in args
    ]
    for t in d64:
        if t is not None:
            t.requires_grad_()
    xz64, w64, b64, xp64, dtp64, op64, _, A64, B64, C64, D64, db64 = d64
    x, z = xz64[:, :dim], xz64[:, dim:]
    xc = _conv_silu64(x, w64, b64)
    x_dbl = torch.einsum("bdl,rd->blr", xc, xp64)  # (batch, seqlen, rows)
    delta = torch.einsum("blr,dr->bdl", x_dbl[..., :rank], dtp64)
    if variable:  # columns rank + 2n, rank + 2n + 1: (re, im) of B's state n; then C's
        Bc = torch.complex(x_dbl[..., rank : rank + 2 * n : 2], x_dbl[..., rank + 1 : rank + 2 * n : 2])
        Cc = torch.complex(x_dbl[..., rank + 2 * n :: 2], x_dbl[..., rank + 2 * n + 1 :: 2])
        B64, C64 = Bc.transpose(1, 2), Cc.transpose(1, 2)  # (batch, N, L) complex
    y, _ = selective_scan_complex_ref64(xc, delta, A64, B64, C64, D64, z, db64, delta_softplus=True)
    ref = torch.einsum("bdl,ed->ble", y, op64)
    _close(out, ref, torch.float32, "mamba_inner_fn out")
    detached = [t.detach() if isinstance(t, torch.Tensor) else t for t in args]
    _close(ssi.mamba_inner_ref(*detached, delta_softplus=True), ref, torch.float32, "mamba_inner_ref out")
    gen = torch.Generator().manual_seed(9)
    g_out = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    (out.double() * g_out).sum().backward()
    (ref * g_out).sum().backward()
    for name, leaf, leaf64 in (("xz", xz, xz64), ("x_proj_weight", x_proj, xp64), ("A", A, A64)):
        _close(leaf.grad, leaf64.grad, torch.float32, f"d{name}")


@pytest.mark.parametrize("backend", ["compiled"], indirect=True)
def test_compiled_routing_complex(backend):
    """The compiled backend takes complex64 calls; it says why it cannot take a complex128 A or float64
    inputs (forced: a RuntimeError naming the reason)."""
    from mamba_ssm._families.selective_scan import compiled

    inp = make_complex_inputs(1, 2, 3, 8, "pairs", "const", torch.float32)
    assert compiled.supports(**{k: inp[k] for k in NAMES}) is None
    wide = make_complex_inputs(1, 2, 3, 8, "pairs", "const", torch.float64)
    reason = compiled.supports(**{k: wide[k] for k in NAMES})
    assert reason == "the compiled kernels take complex64 A, got torch.complex128"
    with pytest.raises(RuntimeError, match="complex64 A"):
        ssi.selective_scan_fn(**wide)
    wide["A"] = wide["A"].to(torch.complex64)
    reason = compiled.supports(**{k: wide[k] for k in NAMES})
    assert reason == "the compiled kernels take float32/float16/bfloat16 u, got torch.float64"


def test_auto_falls_back_for_float64(monkeypatch):
    """Under ``auto`` a float64 / complex128 call runs on PyTorch (the compiled kernels take float32,
    float16, bfloat16 with complex64) and matches the recurrence."""
    previous = mamba_ssm.set_backend("auto")
    monkeypatch.setenv("MAMBA_SSM_NO_FALLBACK_WARNING", "1")
    try:
        inp = make_complex_inputs(2, 4, 4, 17, "pairs", "pairs", torch.float64, seed=4)
        check_against_reference(inp, True, torch.float64, grads=False)
    finally:
        mamba_ssm.set_backend(previous)


def test_older_build_without_complex_ops_is_a_reason(monkeypatch):
    """A _C built before the complex ops: supports() names the missing kernels (the call then runs on
    PyTorch)."""
    if _compiled_complex_reason() is not None and "not loaded" in _compiled_complex_reason():
        pytest.skip(_compiled_complex_reason())
    from mamba_ssm._families.selective_scan import compiled, compiled_complex

    monkeypatch.setattr(compiled_complex, "_AVAILABLE", False)
    inp = make_complex_inputs(1, 2, 3, 8, "pairs", "const", torch.float32)
    reason = compiled.supports(**{k: inp[k] for k in NAMES})
    assert reason is not None and "without the complex-A kernels" in reason


@pytest.mark.parametrize(
    "what,error,match",
    [
        ("complex128", TypeError, "complex A has dtype complex128; expected complex64"),
        ("pairs_wrong_len", ValueError, r"variable B with complex A must have shape"),
        ("const_f16", TypeError, "constant C has dtype float16 with complex A"),
        ("complex128_var", TypeError, "variable B has dtype complex128"),
        ("complex", TypeError, "D has complex dtype"),
        ("groups3", ValueError, "same number of groups"),
    ],
)
def test_complex_input_errors(what, error, match):
    inp = make_complex_inputs(2, 6, 3, 10, "pairs2", "pairs2", torch.float32)
    if what == "complex128":
        inp["A"] = inp["A"].to(torch.complex128)
    elif what == "pairs_wrong_len":
        inp["B"] = torch.randn(2, 3, 21)
    elif what == "const_f16":
        inp["C"] = torch.randn(6, 3).half()
    elif what == "complex128_var":
        inp["B"] = torch.randn(2, 3, 10, dtype=torch.complex128)
    elif what == "complex":
        inp["D"] = torch.randn(6, dtype=torch.complex64)
    elif what == "groups3":
        inp["C"] = torch.randn(2, 3, 3, 20)
    with pytest.raises(error, match=match):
        ssi.selective_scan_fn(**inp)
