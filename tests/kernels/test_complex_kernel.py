"""The compiled complex-A selective-scan kernels (the ``mamba_ssm::selective_scan_complex_*`` ops)
against the complex128 recurrence of tests/oracles.py.

CPU (csrc/scan_complex_cpu_impl.h; its baseline and AVX2 builds), at the kernel's own edges: d_state not a multiple of its 8 lanes and
above the GPU limit, the forward tile (256 steps) and backward segment edges, large phases |dt im A|
(the exact sin/cos path), the per-task dB/dC slabs of several threads, seqlen 0, fp16/bf16 inputs.
CUDA/HIP (csrc/scan_complex_{fwd,bwd}.cuh; marked ``gpu``, skipped with the reason where no GPU kernel
can run): fp32/fp16/bf16 with constant, variable and grouped B/C, seqlen 1 and across the 1024-step
chunks, d_state 256, non-contiguous inputs. (The public API on every backend:
tests/ops/test_ops_complex_scan.py; the GPU kernels on the CPU: test_hipcpu_complex.py.)
"""

import pytest
import torch
from cases import assert_close
from oracles import selective_scan_complex as selective_scan_complex_ref64

NAMES = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")


@pytest.fixture(scope="module")
def complex_backend(compiled):
    from mamba_ssm._families.selective_scan import compiled_complex

    if not compiled_complex.available():
        pytest.skip("this mamba_ssm._C has no complex-A ops")
    return compiled_complex


@pytest.fixture(params=["generic", "avx2"])
def isa(request, complex_backend, monkeypatch):
    """Runs the test on one build of the complex CPU kernel: MAMBA_SSM_CPU_ISA=generic forces the
    baseline build; avx2 (the build wherever the real kernel's choice is AVX2 or AVX-512) is skipped
    with the reason where this CPU lacks AVX2 and FMA."""
    monkeypatch.setenv("MAMBA_SSM_CPU_ISA", request.param)
    if torch.ops.mamba_ssm.cpu_isa() != request.param:
        pytest.skip(f"this CPU cannot run the {request.param} build (needs avx2 and fma in /proc/cpuinfo)")
    return request.param


def _inputs(batch, dim, n, seqlen, groups, dtype, seed, phase=1.0, constant_c=False, constant_b=False):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)
    a_im = phase * (torch.pi * torch.arange(n, dtype=torch.float32) + 0.3 * r(dim, n))
    A = torch.complex(-(0.05 + torch.rand(dim, n, generator=g)), a_im)
    B = torch.complex(r(dim, n), r(dim, n)) if constant_b else r(batch, groups, n, 2 * seqlen).to(dtype)
    C = torch.complex(r(dim, n), r(dim, n)) if constant_c else r(batch, groups, n, 2 * seqlen).to(dtype)
    return {
        "u": r(batch, dim, seqlen).to(dtype),
        "delta": (torch.rand(batch, dim, seqlen, generator=g) - 0.5).to(dtype),
        "A": A,
        "B": B,
        "C": C,
        "D": r(dim),
        "z": r(batch, dim, seqlen).to(dtype),
        "delta_bias": 0.2 * r(dim),
    }


def _check(backend, inp, dtype, threads=None, softplus=True, device="cpu"):
    leaves = {k: inp[k].to(device, copy=True).requires_grad_() for k in NAMES}
    prev = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        out, last = backend.selective_scan(
            *[leaves[k] for k in NAMES], delta_softplus=softplus, return_last_state=True
        )
        g = torch.Generator().manual_seed(1)
        g_out = torch.randn(out.shape, generator=g, dtype=torch.float64)
        g_last = torch.complex(*torch.randn((2,) + tuple(last.shape), generator=g, dtype=torch.float64))
        loss = (out.double() * g_out.to(device)).sum()
        loss = loss + (last.to(torch.complex128) * g_last.to(device).conj()).real.sum()
        loss.backward()
    finally:
        torch.set_num_threads(prev)
    ref = {
        k: inp[k].detach().to(torch.complex128 if inp[k].is_complex() else torch.float64).requires_grad_()
        for k in NAMES
    }
    ref_out, ref_last = selective_scan_complex_ref64(*[ref[k] for k in NAMES], delta_softplus=softplus)
    ((ref_out * g_out).sum() + (ref_last * g_last.conj()).real.sum()).backward()
    pairs = lambda x: torch.view_as_real(x.detach().cpu().resolve_conj()) if x.is_complex() else x.cpu()
    assert_close(out, ref_out, dtype, "out")
    assert_close(pairs(last), pairs(ref_last), dtype, "last_state")
    for k in NAMES:
        assert leaves[k].grad.dtype == leaves[k].dtype, k
        assert_close(pairs(leaves[k].grad), pairs(ref[k].grad), dtype, f"d{k}")


@pytest.mark.parametrize(
    "n,seqlen,groups",
    [(1, 300, 1), (33, 90, 2), (300, 20, 1), (4, 1400, 2)],
    ids=["dstate1-tile-edge", "dstate33-padded", "dstate300", "segment-edges"],
)
def test_shapes(complex_backend, isa, n, seqlen, groups):
    _check(complex_backend, _inputs(2, 4, n, seqlen, groups, torch.float32, seed=n + seqlen), torch.float32)


def test_large_phase_uses_exact_sincos(complex_backend, isa):
    """Phases dt im A of 8,000-15,000 rad, past sincos_approx's 8192, where the kernel uses std::sin /
    std::cos. dt = 0.5 and im A with few significant bits make every phase exact in fp32, so the
    float64 reference sees the same angles."""
    inp = _inputs(1, 2, 3, 40, 1, torch.float32, seed=11, constant_c=True)
    inp["delta"] = torch.full_like(inp["delta"], 0.5)
    inp["delta_bias"] = torch.zeros(2)
    inp["A"] = torch.complex(
        inp["A"].real, torch.tensor([[16000.5, 20000.25, 30000.75], [17000.0, 24000.5, 29000.25]])
    )
    _check(complex_backend, inp, torch.float32, softplus=False)


def test_thread_slabs(complex_backend, isa):
    """Two threads and one batch: the channels split into two tasks whose dB/dC slabs are summed."""
    _check(complex_backend, _inputs(1, 6, 5, 50, 2, torch.float32, seed=3), torch.float32, threads=2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_half_inputs(complex_backend, dtype):
    _check(complex_backend, _inputs(2, 4, 5, 70, 2, dtype, seed=5), dtype)


def test_seqlen_zero(complex_backend):
    inp = _inputs(2, 3, 4, 0, 1, torch.float32, seed=0)
    leaves = {k: inp[k].clone().requires_grad_() for k in NAMES}
    out, last = complex_backend.selective_scan(*[leaves[k] for k in NAMES], return_last_state=True)
    assert out.shape == (2, 3, 0) and torch.equal(last, torch.zeros(2, 3, 4, dtype=torch.complex64))
    (last.real.sum() + last.imag.sum()).backward()
    assert torch.equal(leaves["A"].grad, torch.zeros_like(inp["A"]))
    assert leaves["u"].grad.shape == (2, 3, 0)


@pytest.fixture(scope="module")
def gpu_backend(complex_backend, compiled):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA/ROCm GPU visible to torch (torch.cuda.is_available() is False)")
    probe = {k: v.cuda() for k, v in _inputs(1, 2, 2, 3, 1, torch.float32, seed=0).items()}
    why = compiled.supports(*[probe[k] for k in NAMES])
    if why is not None:
        pytest.skip(f"the compiled complex kernels cannot run on this GPU: {why}")
    return complex_backend


@pytest.mark.gpu
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"]
)
@pytest.mark.parametrize("bc", ["variable", "grouped2", "constant", "mixed"])
@pytest.mark.parametrize("seqlen", [1, 129])
def test_gpu(gpu_backend, dtype, bc, seqlen):
    groups = 2 if bc == "grouped2" else 1
    inp = _inputs(
        2,
        4,
        8,
        seqlen,
        groups,
        dtype,
        seed=seqlen,
        constant_b=bc == "constant",
        constant_c=bc not in {"variable", "grouped2"},
    )
    _check(gpu_backend, inp, dtype, device="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_gpu_chunk_edge(gpu_backend, dtype):
    """seqlen 1025: one full 1,024-step chunk, then a chunk with one valid step (the carried state)."""
    _check(gpu_backend, _inputs(2, 4, 8, 1025, 2, dtype, seed=1025), dtype, device="cuda")


@pytest.mark.gpu
def test_gpu_dstate256_two_chunks(gpu_backend):
    _check(gpu_backend, _inputs(1, 2, 256, 2049, 1, torch.float32, seed=2), torch.float32, device="cuda")


@pytest.mark.gpu
def test_gpu_noncontiguous(gpu_backend):
    """u, delta, z as transposed views and B as a strided slice: the binding makes them contiguous."""
    inp = _inputs(2, 4, 8, 300, 1, torch.float32, seed=4)
    for k in ("u", "delta", "z"):
        inp[k] = inp[k].transpose(0, 1).contiguous().transpose(0, 1)
    inp["B"] = torch.cat([inp["B"], inp["B"]], dim=1)[:, ::2]
    assert not inp["u"].is_contiguous() and not inp["B"].is_contiguous()
    _check(gpu_backend, inp, torch.float32, device="cuda")


def test_conjugate_view_and_complex128_operands(complex_backend):
    """The op reads a conjugate view's values (not its raw memory) and converts complex128 constant
    B/C: A passed as ``X.conj()`` (conjugate bit set), B and C complex128, against the reference on the
    same values."""
    inp = _inputs(2, 3, 4, 30, 1, torch.float32, seed=7, constant_b=True, constant_c=True)
    A_view = inp["A"].conj()  # values conj(A); memory holds A
    assert A_view.is_conj()
    B, C = inp["B"].to(torch.complex128), inp["C"].to(torch.complex128)
    args = (inp["u"], inp["delta"], A_view, B, C, inp["D"], inp["z"], inp["delta_bias"], True)
    out, last = torch.ops.mamba_ssm.selective_scan_complex_fwd(*args)
    ref = {k: inp[k].to(torch.complex128 if inp[k].is_complex() else torch.float64) for k in NAMES}
    ref["A"] = ref["A"].conj().resolve_conj()
    ref_out, ref_last = selective_scan_complex_ref64(*[ref[k] for k in NAMES], delta_softplus=True)
    assert_close(out, ref_out, torch.float32, "out")
    assert_close(torch.view_as_real(last), torch.view_as_real(ref_last), torch.float32, "last_state")


def test_doctor_reports_complex_a(complex_backend):
    """``python -m mamba_ssm doctor`` says complex A runs the compiled kernels of this build."""
    from mamba_ssm import _doctor

    report = _doctor.collect()
    assert report.compiled_module.complex_a is True
    assert report.to_dict()["compiled_module"]["complex_a"] is True
    assert "complex A (selective_scan_fn, mamba_inner_fn): compiled kernels" in _doctor.render_text(report)
