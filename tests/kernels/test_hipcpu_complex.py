"""csrc's complex-A selective-scan GPU kernels (scan_complex_{fwd,bwd}.cuh) executed on the CPU through
HIP-CPU, against the complex128 sequential recurrence (tests/oracles.py,
``selective_scan_complex_ref64``; gradients by autograd).

The harness of the real-A kernels (test_hipcpu_kernels.py, hipcpu/hipcpu_build.py: one library per
layout, wave64 and wave32, every resume order of a block's threads after a barrier); the complex entry
points are driven by hipcpu/hipcpu_complex_runner.py. Covered: fp32/fp16/bf16, both sides of the
1024-step chunk, the 16-byte vector and the scalar load paths of the interleaved (re, im) B/C, constant,
variable, grouped and mixed B/C, variable B/C stored fp32 under fp16, d_state above the block's 128
threads, a slowly decaying state carried over two chunk edges, every option off, with and without
dlast_state, d_state 257 refused. Each case checks out, last_state and every gradient, and the guard
bytes around every output. test_mutation_is_caught shows that a lost conjugate in dB fails it.
"""

import functools
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "hipcpu"))

import hipcpu_build  # noqa: E402
from cases import assert_close  # noqa: E402
from oracles import selective_scan_complex as selective_scan_complex_ref64  # noqa: E402
from test_hipcpu_kernels import _view, check_guards, emulation, mutant_library, run_emulated  # noqa: E402

RUNNER = os.path.join(HERE, "hipcpu", "hipcpu_complex_runner.py")
LAYOUTS = list(hipcpu_build.LAYOUTS)
SCHEDULES = list(hipcpu_build.SCHEDULES)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
NAMES = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")


def _case(name, dtype="fp32", batch=1, dim=2, seqlen=64, dstate=4, bc="grouped2", **kw):
    c = {
        "name": name,
        "dtype": dtype,
        "batch": batch,
        "dim": dim,
        "seqlen": seqlen,
        "dstate": dstate,
        "bc": bc,
    }
    c.update({"bc_fp32": False, "D": True, "z": True, "bias": True, "softplus": True, "dlast": True})
    c.update({"misalign": 0, "a_scale": 1.0, "refused": None, "last_state": True})
    c.update(kw)
    return c


def _cases():
    out = [
        _case("chunk_edge_L1025_fp32", seqlen=1025),
        _case("chunk_edge_L1023_fp16", "fp16", seqlen=1023, bc="variable"),
        _case("grouped2_L300_bf16", "bf16", batch=2, dim=4, seqlen=300),
        _case("aligned_L1024_fp16", "fp16", seqlen=1024, bc="variable"),
        _case("scalar_L1024_fp32", seqlen=1024, bc="variable", misalign=1),
        _case("constant_L200", dim=4, seqlen=200, bc="constant"),
        _case("B_variable_L200", dim=4, seqlen=200, bc="B_variable"),
        _case("C_variable_L200_bf16", "bf16", dim=4, seqlen=200, bc="C_variable"),
        _case("bc_fp32_storage_fp16", "fp16", seqlen=130, bc_fp32=True),
        _case("dstate129", dim=1, seqlen=40, dstate=129, bc="variable"),
        # Slow decay (A / 100): the state carried into each chunk reaches every step of it.
        _case("dstate1_L2100_slow_decay", seqlen=2100, dstate=1, bc="variable", a_scale=0.01),
        _case("options_none", seqlen=77, D=False, z=False, bias=False, softplus=False),
        _case("no_dlast_state", seqlen=77, dlast=False),
        _case("seqlen1", seqlen=1, bc="variable"),
        _case("dstate257_refused", seqlen=16, dstate=257, refused="d_state > 256"),
    ]
    return out


CASES = _cases()


@functools.cache
def inputs_of(name):
    """The case's tensors: A complex64 (negative real part, imaginary parts up to about pi * d_state),
    constant B/C complex64, variable B/C real (batch, groups, d_state, 2 * seqlen) (re, im) pairs."""
    c = next(x for x in CASES if x["name"] == name)
    dtype = DTYPES[c["dtype"]]
    seed = CASES.index(c)
    g = torch.Generator().manual_seed(seed)
    batch, dim, L, N = c["batch"], c["dim"], c["seqlen"], c["dstate"]
    r = lambda *s: torch.randn(*s, generator=g)
    u = r(batch, dim, L).to(dtype)
    delta = (torch.rand(batch, dim, L, generator=g) * 1.5 - 0.5).to(dtype)
    a_im = torch.pi * torch.arange(N, dtype=torch.float32) + 0.3 * r(dim, N)
    A = torch.complex(-(0.1 + 2 * torch.rand(dim, N, generator=g)), a_im) * c["a_scale"]
    groups = 2 if c["bc"] == "grouped2" else 1
    bc_dtype = torch.float32 if c["bc_fp32"] else dtype

    def bc(variable):
        if variable:
            return r(batch, groups, N, 2 * L).to(bc_dtype)
        return torch.complex(r(dim, N), r(dim, N))

    var_b = c["bc"] in ("variable", "grouped2", "B_variable")
    var_c = c["bc"] in ("variable", "grouped2", "C_variable")
    B, C = bc(var_b), bc(var_c)
    D = r(dim) if c["D"] else None
    z = r(batch, dim, L).to(dtype) if c["z"] else None
    bias = (torch.rand(dim, generator=g) * 0.5 - 0.25) if c["bias"] else None
    dout = r(batch, dim, L).to(dtype)
    dlast = torch.complex(r(batch, dim, N), r(batch, dim, N)) if c["dlast"] else None
    return {
        "u": u,
        "delta": delta,
        "A": A,
        "B": B,
        "C": C,
        "D": D,
        "z": z,
        "delta_bias": bias,
        "dout": dout,
        "dlast_state": dlast,
    }


@functools.cache
def reference_of(name):
    """complex128 forward (out, last_state) and the gradients of the loss <out, dout> + Re<last, dlast>
    (so dlast_state is the last state's gradient in PyTorch's convention, as the kernels take it)."""
    c = next(x for x in CASES if x["name"] == name)
    t = inputs_of(name)
    leaves = {}
    for k in NAMES:
        x = t[k]
        leaves[k] = None if x is None else x.to(torch.complex128 if x.is_complex() else torch.float64)
        if leaves[k] is not None:
            leaves[k].requires_grad_(True)
    out, last = selective_scan_complex_ref64(*[leaves[k] for k in NAMES], delta_softplus=c["softplus"])
    loss = (out * t["dout"].double()).sum()
    if t["dlast_state"] is not None:
        loss = loss + (last * t["dlast_state"].to(torch.complex128).conj()).real.sum()
    loss.backward()
    return out.detach(), last.detach(), {k: v.grad for k, v in leaves.items() if v is not None}


def _run(lib, cases, schedules, tmp_dir, parts=("forward", "backward")):
    return run_emulated(lib, cases, schedules, tmp_dir, parts, runner=RUNNER, inputs=inputs_of)


_RESULTS = {}


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """results(layout) -> the complex runner's results for every case and schedule (run once)."""
    return emulation(_RESULTS, CASES, tmp_path_factory, "complex-", runner=RUNNER, inputs=inputs_of)


def _pairs(x):
    return torch.view_as_real(x) if x.is_complex() else x


def check_case(case, result, parts=("forward", "backward")):
    errors = result["errors"]
    assert sorted(errors) == sorted(parts), errors
    if case["refused"]:
        for part, err in errors.items():
            assert err is not None and case["refused"] in err, f"{part}: {err}"
        return
    for part, err in errors.items():
        assert err is None, f"{part} entry point failed: {err}"
    for name, entry in result.items():
        if name != "errors":
            check_guards(name, entry)
    dtype = DTYPES[case["dtype"]]
    t = inputs_of(case["name"])
    ref_out, ref_last, grads = reference_of(case["name"])
    if "forward" in parts:
        assert_close(_view(result["out"]), ref_out, dtype, "out")
        assert_close(_view(result["last_state"]), _pairs(ref_last), dtype, "last_state")
    if "backward" not in parts:
        return
    assert_close(_view(result["du"]), grads["u"], dtype, "du")
    assert_close(_view(result["ddelta"]), grads["delta"], dtype, "ddelta")
    if t["z"] is not None:
        assert_close(_view(result["dz"]), grads["z"], dtype, "dz")
    assert_close(_view(result["dA_part"]).sum(0), _pairs(grads["A"]), dtype, "dA")
    for x in ("B", "C"):
        g = _view(result[f"d{x}"])
        g = g.view(t[x].shape) if t[x].dim() > 2 else g.sum(0)
        assert_close(g, _pairs(grads[x]), dtype, f"d{x}")
    if t["D"] is not None:
        assert_close(_view(result["dD_part"]).sum(0), grads["D"], dtype, "dD")
    if t["delta_bias"] is not None:
        assert_close(_view(result["ddelta_bias_part"]).sum(0), grads["delta_bias"], dtype, "ddelta_bias")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_emulated_complex(emulated, layout, schedule, case):
    res = emulated(layout)
    check_case(case, res["results"][schedule][CASES.index(case)])


def test_mutation_is_caught(tmp_path):
    """The test fails on a backward whose dB lacks the conjugate of the adjoint (dB = dt u Gamma instead
    of dt u conj(Gamma)): the real part stays right, the imaginary part flips sign."""
    old = "const Complex dBv = (dt[i] * uv[i]) * conj(g);"
    new = "const Complex dBv = (dt[i] * uv[i]) * g;"
    lib = mutant_library(
        tmp_path, "scan_complex_bwd.cuh", "scan_complex_bwd_fp32.cu", old, new, "mutant-complex-dB"
    )
    case = next(c for c in CASES if c["name"] == "B_variable_L200")
    res = _run(lib, [case], ["fixed"], str(tmp_path / "run"), parts=("backward",))["results"]
    assert res["fixed"][0]["errors"] == {"backward": None}, res["fixed"][0]["errors"]
    with pytest.raises(AssertionError, match="dB: .* elements off"):
        check_case(case, res["fixed"][0], parts=("backward",))
