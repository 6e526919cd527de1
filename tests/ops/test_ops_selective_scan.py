"""selective_scan_fn against the float64 sequential reference (tests/reference.py).

* The full product of seqlen {1, 2, 3, 127, 128, 129} x batch {1, 2} x B/C {constant, variable,
  grouped 1, grouped 2} x D x z x delta_bias x softplus x return_last_state x {fp32, bf16} on the
  PyTorch fallback (backend forced to ``torch``; a small memory budget in half the cases so several
  segments and a tail segment are exercised).
* A pairwise covering subset of the same factors under the default backend (the compiled CPU kernel
  when ``mamba_ssm._C`` is loaded), and at seqlen 1000 and 4097.
* Non-contiguous views, gradients of every input (autograd through a float64 sequential loop, itself
  checked by finite differences), input validation.
"""

from __future__ import annotations

import itertools
import os
import sys

import pytest
import torch

_HERE = os.path.dirname(os.path.abspath(__file__))

import reference as ref  # noqa: E402  (tests/reference.py)

from mamba_ssm._families.selective_scan import torch_impl as torch_scan  # noqa: E402
from mamba_ssm.ops import selective_scan_interface as ssi  # noqa: E402

DIM, D_STATE = 4, 3
SEQLENS = [1, 2, 3, 127, 128, 129]
FACTORS = {
    "batch": [1, 2],
    "bc": ["constant", "variable", "grouped1", "grouped2"],
    "has_D": [False, True],
    "has_z": [False, True],
    "has_bias": [False, True],
    "softplus": [False, True],
    "last": [False, True],
    "dtype": [torch.float32, torch.bfloat16],
}


@pytest.fixture
def backend(request, monkeypatch):
    """Force a backend for the test (``torch`` or ``auto``), restoring the previous choice after."""
    import mamba_ssm

    name = request.param
    previous = mamba_ssm.set_backend(name)
    monkeypatch.setenv("MAMBA_SSM_NO_FALLBACK_WARNING", "1")
    yield name
    mamba_ssm.set_backend(previous)


def _check_case(
    seqlen, batch, bc, has_D, has_z, has_bias, softplus, last, dtype, seed=0, dim=DIM, d_state=D_STATE
):
    inp = ref.make_scan_inputs(
        batch, dim, d_state, seqlen, bc, has_D, has_z, has_bias, softplus, dtype, seed=seed
    )
    expected, expected_last = ref.selective_scan(**inp)
    got = ssi.selective_scan_fn(**inp, return_last_state=last)
    if last:
        got, got_last = got
        assert got_last.shape == (batch, dim, d_state)
        assert got_last.dtype == torch.float32
        ref.assert_close(
            got_last,
            expected_last,
            torch.float32 if dtype == torch.float32 else dtype,
            "last state",
            scale=max(1.0, float(abs(expected_last).max())),
        )
    assert got.dtype == dtype and got.shape == (batch, dim, seqlen)
    scale = max(1.0, float(abs(expected).max()))
    ref.assert_close(got, expected, dtype, f"out (L={seqlen}, bc={bc})", scale=scale)


FULL = list(itertools.product(SEQLENS, *FACTORS.values()))


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
@pytest.mark.parametrize("case", FULL, ids=lambda c: "-".join(str(x).replace("torch.", "") for x in c))
def test_full_product_on_fallback(backend, case, monkeypatch):
    seqlen, batch, bc, has_D, has_z, has_bias, softplus, last, dtype = case
    if (has_D + has_z + has_bias + softplus) % 2:
        # A 0.01 MiB budget gives segments of a few chunks and a tail: exercise the carry between them.
        monkeypatch.setenv("MAMBA_SSM_SCAN_MEMORY_MB", "0.01")
    _check_case(seqlen, batch, bc, has_D, has_z, has_bias, softplus, last, dtype)


PAIRWISE = ref.pairwise({"seqlen": SEQLENS, **FACTORS})


@pytest.mark.parametrize("backend", ["auto"], indirect=True)
@pytest.mark.parametrize(
    "case", PAIRWISE, ids=lambda c: "-".join(str(v).replace("torch.", "") for v in c.values())
)
def test_pairwise_default_backend(backend, case):
    _check_case(
        case["seqlen"],
        case["batch"],
        case["bc"],
        case["has_D"],
        case["has_z"],
        case["has_bias"],
        case["softplus"],
        case["last"],
        case["dtype"],
    )


def test_pairwise_design_covers_every_pair():
    factors = {"seqlen": SEQLENS, **FACTORS}
    rows = PAIRWISE
    for a, b in itertools.combinations(factors, 2):
        seen = {(repr(r[a]), repr(r[b])) for r in rows}
        want = {(repr(x), repr(y)) for x in factors[a] for y in factors[b]}
        assert seen == want, (a, b)
    assert len(rows) < len(FULL) / 50


LONG = ref.pairwise(
    {
        "seqlen": [1000, 4097],
        "bc": ["constant", "variable", "grouped2"],
        "flags": [(False, False, False, False), (True, True, True, True)],
        "dtype": [torch.float32, torch.bfloat16],
    }
)


@pytest.mark.parametrize("backend", ["torch", "auto"], indirect=True)
@pytest.mark.parametrize(
    "case", LONG, ids=lambda c: "-".join(str(v).replace("torch.", "") for v in c.values())
)
def test_long_sequences(backend, case, monkeypatch):
    if backend == "torch" and case["seqlen"] == 4097:
        monkeypatch.setenv("MAMBA_SSM_SCAN_MEMORY_MB", "0.05")  # several segments + a tail segment
    has_D, has_z, has_bias, softplus = case["flags"]
    _check_case(case["seqlen"], 2, case["bc"], has_D, has_z, has_bias, softplus, True, case["dtype"], seed=1)


@pytest.mark.parametrize("backend", ["torch", "auto"], indirect=True)
def test_non_contiguous_views(backend):
    torch.manual_seed(3)
    batch, dim, n, L = 2, 4, 5, 70
    u = torch.randn(batch, L, dim).transpose(1, 2)  # (b, d, L) strided
    delta = (torch.rand(batch, dim, 2 * L) * 0.3)[..., ::2]  # step 2 along L
    A = (-torch.rand(n, dim) - 0.1).t()  # transposed
    B = torch.randn(batch, 2, L, n).transpose(2, 3)
    C = torch.randn(batch, 2, L, n).transpose(2, 3)  # grouped, strided
    D = torch.randn(2 * dim)[::2]
    z = torch.randn(batch, dim, L + 5)[..., 5:]
    bias = torch.randn(dim, 3)[:, 1]
    for t in (u, delta, A, B, C, D, z, bias):
        assert not t.is_contiguous()
    out, last = ssi.selective_scan_fn(u, delta, A, B, C, D, z, bias, True, True)
    exp, exp_last = ref.selective_scan(u, delta, A, B, C, D, z, bias, True)
    ref.assert_close(out, exp, torch.float32, "out", scale=float(abs(exp).max()))
    ref.assert_close(last, exp_last, torch.float32, "last", scale=float(abs(exp_last).max()))


def test_float64_inputs_compute_in_float64():
    inp = ref.make_scan_inputs(2, 4, 3, 50, "variable", True, True, True, True, torch.float64)
    inp["A"] = inp["A"].double()
    out, last = torch_scan.selective_scan(**inp, return_last_state=True)
    exp, exp_last = ref.selective_scan(**inp)
    assert out.dtype == torch.float64 and last.dtype == torch.float64
    ref.assert_close(out, exp, torch.float64, "out")
    ref.assert_close(last, exp_last, torch.float64, "last")


def test_state_carried_across_segments_and_initial_state():
    """selective_scan_with_state: forced tiny segments/chunks, an initial state, A > 0 (growth)."""
    inp = ref.make_scan_inputs(2, 4, 3, 53, "variable", False, False, False, False, torch.float64, seed=5)
    inp["A"] = inp["A"].double() * 0.1
    inp["A"][0] = 0.05  # a growing channel
    h0 = torch.randn(2, 4, 3, dtype=torch.float64)
    for segment, chunk in ((8, 4), (12, 4), (53, 8), (5, 5)):
        out, last = torch_scan.selective_scan_with_state(
            inp["u"],
            inp["delta"],
            inp["A"],
            inp["B"],
            inp["C"],
            initial_state=h0,
            segment=segment,
            chunk=chunk,
        )
        exp, exp_last = ref.selective_scan(
            inp["u"], inp["delta"], inp["A"], inp["B"], inp["C"], initial_state=h0
        )
        ref.assert_close(out, exp, torch.float64, f"out seg={segment}")
        ref.assert_close(last, exp_last, torch.float64, f"last seg={segment}")


def test_strong_decay_does_not_overflow():
    """delta * A of -200 per step: every factor is exp of a non-positive number, nothing overflows."""
    inp = ref.make_scan_inputs(1, 4, 3, 300, "variable", False, False, False, False, torch.float32, seed=2)
    inp["delta"] = inp["delta"] * 0 + 10.0
    inp["A"] = inp["A"] * 10
    out, last = torch_scan.selective_scan(**inp, return_last_state=True)
    exp, exp_last = ref.selective_scan(**inp)
    ref.assert_close(out, exp, torch.float32, "out", scale=float(abs(exp).max()))


def test_plan_chunks_bounds_memory():
    seg, chunk = torch_scan.plan_chunks(2, 64, 16, 1_000_000, budget=64 * 2**20)
    assert seg % chunk == 0 and 4 <= chunk <= 128
    assert seg * 2 * 64 * 16 * 4 * 6 <= 64 * 2**20
    seg_big, _ = torch_scan.plan_chunks(2, 64, 256, 1_000_000, budget=64 * 2**20)
    assert seg_big < seg  # larger d_state -> shorter segments
    for seqlen in (1, 10, 129, 5000):
        seg, chunk = torch_scan.plan_chunks(1, 1, 1, seqlen, budget=4096)
        pieces = torch_scan._segments(seqlen, seg, chunk)
        assert pieces[0][0] == 0 and pieces[-1][1] == seqlen
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
        assert all((e - s) % t == 0 and e - s <= max(seg, t) for s, e, t in pieces)


# ----------------------------------------------------------------------------------------------------
# Gradients
# ----------------------------------------------------------------------------------------------------


def test_gradient_oracle_matches_finite_differences():
    """The float64 autograd loop used as the gradient oracle agrees with finite differences."""
    inp = ref.make_scan_inputs(1, 2, 2, 5, "variable", True, True, True, True, torch.float64, seed=4)
    inp["A"] = inp["A"].double()
    inp["D"] = inp["D"].double()
    inp["delta_bias"] = inp["delta_bias"].double()
    names = ["u", "delta", "A", "B", "C", "D", "z", "delta_bias"]
    tensors = [inp[k].clone().requires_grad_() for k in names]

    def f(*ts):
        return ref.selective_scan_torch(*ts, delta_softplus=True)[0]

    assert torch.autograd.gradcheck(f, tensors)


GRAD_CASES = [
    (1, "variable", True),
    (37, "constant", True),
    (64, "grouped2", False),
    (128, "mixed", True),
    (200, "grouped1", True),
    (256, "variable", False),
]


def _grad_check(
    seqlen,
    bc,
    flags,
    dtype=torch.float32,
    budget=None,
    monkeypatch=None,
    batch=2,
    dim=4,
    time_strided=False,
):
    inp = ref.make_scan_inputs(batch, dim, 3, seqlen, bc, flags, flags, flags, flags, dtype, seed=seqlen)
    names = [k for k in ("u", "delta", "A", "B", "C", "D", "z", "delta_bias") if inp[k] is not None]
    if time_strided:  # same values, time not the innermost dimension (as Mamba's projections give them)
        for k in ("u", "delta", "B", "C", "z"):
            if inp[k] is not None and inp[k].dim() >= 3:
                inp[k] = inp[k].transpose(-1, -2).contiguous().transpose(-1, -2)
                assert inp[k].stride(-1) != 1
    if budget and monkeypatch is not None:
        monkeypatch.setenv("MAMBA_SSM_SCAN_MEMORY_MB", budget)
    leaves = {k: inp[k].clone().requires_grad_() for k in names}  # clone keeps the strides
    args = {**inp, **leaves}
    out, last = ssi.selective_scan_fn(**args, return_last_state=True)
    g = torch.Generator().manual_seed(7)
    w_out = torch.randn(out.shape, generator=g)
    w_last = torch.randn(last.shape, generator=g)
    ((out.float() * w_out).sum() + (last * w_last).sum()).backward()
    leaves64 = {k: inp[k].double().requires_grad_() for k in names}
    args64 = {**inp, **leaves64}
    out64, last64 = ref.selective_scan_torch(**args64)
    ((out64 * w_out.double()).sum() + (last64 * w_last.double()).sum()).backward()
    for k in names:
        exp = leaves64[k].grad
        scale = max(1.0, float(exp.abs().max()))
        ref.assert_close(
            leaves[k].grad,
            exp,
            torch.float32 if dtype == torch.float32 else dtype,
            f"d{k} (L={seqlen}, bc={bc})",
            scale=scale,
        )


@pytest.mark.parametrize("backend", ["torch", "auto"], indirect=True)
@pytest.mark.parametrize("seqlen,bc,flags", GRAD_CASES)
def test_gradients_of_every_input(backend, seqlen, bc, flags, monkeypatch):
    _grad_check(seqlen, bc, flags, budget="0.01" if flags else None, monkeypatch=monkeypatch)


@pytest.mark.parametrize("backend", ["torch", "auto"], indirect=True)
@pytest.mark.parametrize("bc", ["variable", "grouped2"])
def test_gradients_time_strided_inputs(backend, bc, monkeypatch):
    """u, delta, B, C and z with time not the innermost dimension, over several segments and chunks."""
    _grad_check(300, bc, True, budget="0.01", monkeypatch=monkeypatch, time_strided=True)


@pytest.mark.parametrize("backend", ["torch"], indirect=True)
def test_gradients_bf16(backend):
    _grad_check(100, "variable", True, dtype=torch.bfloat16)


@pytest.mark.parametrize("backend", ["torch", "auto"], indirect=True)
def test_gradients_long_sequence(backend, monkeypatch):
    _grad_check(3000, "variable", True, budget="0.05", monkeypatch=monkeypatch, batch=1, dim=2)


# ----------------------------------------------------------------------------------------------------
# selective_scan_ref, the ``ref`` backend, autocast
# ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bc", ["constant", "variable", "grouped2"])
def test_selective_scan_ref_matches_reference(bc):
    inp = ref.make_scan_inputs(2, 4, 3, 40, bc, True, True, True, True, torch.float32, seed=9)
    out, last = ssi.selective_scan_ref(**inp, return_last_state=True)
    exp, exp_last = ref.selective_scan(**inp)
    ref.assert_close(out, exp, torch.float32, "ref out", scale=float(abs(exp).max()))
    ref.assert_close(last, exp_last, torch.float32, "ref last", scale=float(abs(exp_last).max()))


@pytest.mark.parametrize("backend", ["ref"], indirect=True)
def test_ref_backend_dispatch(backend):
    inp = ref.make_scan_inputs(1, 4, 3, 20, "variable", True, False, True, True, torch.float32, seed=1)
    exp, _ = ref.selective_scan(**inp)
    ref.assert_close(ssi.selective_scan_fn(**inp), exp, torch.float32, "ref backend")


@pytest.mark.parametrize("backend", ["torch", "auto"], indirect=True)
def test_autocast_keeps_fp32_accuracy(backend):
    inp = ref.make_scan_inputs(2, 4, 3, 64, "variable", True, True, True, True, torch.float32, seed=11)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = ssi.selective_scan_fn(**inp)
    exp, _ = ref.selective_scan(**inp)
    assert out.dtype == torch.float32
    ref.assert_close(out, exp, torch.float32, "autocast", scale=float(abs(exp).max()))


# ----------------------------------------------------------------------------------------------------
# Input validation
# ----------------------------------------------------------------------------------------------------


def _good():
    return ref.make_scan_inputs(2, 4, 3, 10, "variable", True, True, True, True, torch.float32)


@pytest.mark.parametrize(
    "change,exc,words",
    [
        (lambda a: a.update(u=a["u"][0]), ValueError, ["u", "rank 3", "(4, 10)"]),
        (lambda a: a.update(delta=a["delta"][:, :, :9]), ValueError, ["delta", "(2, 4, 9)", "(2, 4, 10)"]),
        (lambda a: a.update(A=a["A"][:3]), ValueError, ["A", "(3, 3)", "dim = 4"]),
        (lambda a: a.update(B=a["B"][:1]), ValueError, ["variable B", "(1, 3, 10)", "(2, 3, 10)"]),
        (
            lambda a: a.update(C=torch.randn(2, 3, 3, 10)),
            ValueError,
            ["grouped C", "(2, 3, 3, 10)", "dividing dim = 4"],
        ),
        (lambda a: a.update(B=torch.randn(2, 3)), ValueError, ["constant B", "(4, 3)", "(2, 3)"]),
        (lambda a: a.update(C=torch.randn(3)), ValueError, ["C", "rank 2", "(3,)"]),
        (lambda a: a.update(D=torch.randn(5)), ValueError, ["D", "(4,)", "(5,)"]),
        (lambda a: a.update(z=torch.randn(2, 4, 11)), ValueError, ["z", "(2, 4, 11)"]),
        (lambda a: a.update(delta_bias=torch.randn(4, 1)), ValueError, ["delta_bias", "(4, 1)"]),
        (lambda a: a.update(B=torch.randn(2, 2, 3, 10)), ValueError, ["group", "B", "C"]),
        (lambda a: a.update(A=a["A"].to(torch.complex128)), TypeError, ["A", "complex128", "complex64"]),
        (lambda a: a.update(u=a["u"].to(torch.int64)), TypeError, ["u", "int64", "float"]),
        (lambda a: a.update(C=a["C"].numpy()), TypeError, ["C", "torch.Tensor", "ndarray"]),
        (lambda a: a.update(D=torch.randn(4, device="meta")), ValueError, ["D", "meta", "cpu"]),
    ],
)
def test_bad_input_names_argument_received_and_expected(change, exc, words):
    args = _good()
    change(args)
    with pytest.raises(exc) as info:
        ssi.selective_scan_fn(**args)
    text = str(info.value)
    for w in words:
        assert w in text, (w, text)


@pytest.mark.parametrize("backend", ["torch", "auto"], indirect=True)
def test_large_d_state_has_no_limit(backend):
    """d_state 300 (past the 256 of upstream's kernels), forward and gradients."""
    inp = ref.make_scan_inputs(1, 2, 300, 40, "variable", True, True, True, True, torch.float32, seed=12)
    out, last = ssi.selective_scan_fn(**inp, return_last_state=True)
    exp, exp_last = ref.selective_scan(**inp)
    ref.assert_close(out, exp, torch.float32, "out", scale=float(abs(exp).max()))
    ref.assert_close(last, exp_last, torch.float32, "last", scale=float(abs(exp_last).max()))
    _grad_check(30, "variable", True, batch=1, dim=2)


def test_ops_import_without_triton_or_compiled_module():
    import subprocess

    root = os.path.dirname(os.path.dirname(_HERE))
    proc = subprocess.run(
        [sys.executable, os.path.join(_HERE, "progs", "ops_import_light.py")],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


@pytest.mark.parametrize("bc,segment,chunk", [("variable", 4, 2), ("constant", 6, 3), ("grouped2", 9, 4)])
def test_fallback_gradcheck_with_initial_state(bc, segment, chunk):
    """Finite differences through the fallback's custom backward, initial state included, with the
    segment and chunk boundaries forced inside the sequence."""
    inp = ref.make_scan_inputs(1, 2, 2, 9, bc, True, True, True, True, torch.float64, seed=13)
    names = ["u", "delta", "A", "B", "C", "D", "z", "delta_bias"]
    leaves = [inp[k].double().clone().requires_grad_() for k in names]
    h0 = torch.randn(1, 2, 2, dtype=torch.float64, requires_grad=True)

    def f(u, delta, A, B, C, D, z, delta_bias, h0):
        out, last = torch_scan.selective_scan_with_state(
            u, delta, A, B, C, D, z, delta_bias, True, initial_state=h0, segment=segment, chunk=chunk
        )
        return out, last

    assert torch.autograd.gradcheck(f, (*leaves, h0))
