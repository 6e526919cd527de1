"""The CPU selective-scan kernel of mamba_ssm._C, through the compiled backend, against a float64
sequential reference (tests/oracles.py): forward, last state and every gradient."""

import pytest
import torch
from cases import BC_KINDS, assert_close, forward_grid, make_inputs, run_and_check
from oracles import selective_scan as selective_scan_ref64

#: The builds of the CPU kernel (csrc/scan_cpu*.cpp), narrowest first.
ISAS = ("generic", "avx2", "avx512")


@pytest.fixture(params=ISAS)
def isa(request, compiled, monkeypatch):
    """Runs the test with MAMBA_SSM_CPU_ISA forcing one build of the CPU kernel (read at every call),
    skipped with the reason where this CPU lacks that instruction set."""
    monkeypatch.setenv("MAMBA_SSM_CPU_ISA", request.param)
    got = torch.ops.mamba_ssm.cpu_isa()
    if got != request.param:
        flags = {"avx2": "avx2 and fma", "avx512": "avx512f, avx512dq, avx512bw, avx512vl"}[request.param]
        pytest.skip(
            f"this CPU (or this build) cannot run the {request.param} build of the CPU kernel: it "
            f"needs {flags} in /proc/cpuinfo; cpu_isa() falls back to {got}"
        )
    return got


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_forward_full_grid(compiled, dtype):
    """Every combination of seqlen {1,2,3,127,128,129}, batch {1,2}, constant/variable/grouped B and C,
    D, z, delta_bias, softplus: out and last_state."""
    n = 0
    for seqlen, batch, bc, has_D, has_z, has_bias, softplus in forward_grid():
        args = make_inputs(batch, 4, seqlen, 5, bc, has_D, has_z, has_bias, dtype, seed=n)
        try:
            run_and_check(compiled, args, softplus, dtype, grads=False)
        except AssertionError as e:
            raise AssertionError(
                f"seqlen={seqlen} batch={batch} B/C={bc} D={has_D} z={has_z} "
                f"bias={has_bias} softplus={softplus}: {e}"
            ) from None
        n += 1
    assert n == 6 * 2 * 4 * 2 * 2 * 2 * 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("bc", BC_KINDS)
@pytest.mark.parametrize("seqlen", [1, 3, 64, 65, 129, 256])
@pytest.mark.parametrize("options", ["none", "all"])
def test_gradients(compiled, dtype, bc, seqlen, options):
    """Gradients of every input (through out and last_state), with all options off or all on."""
    on = options == "all"
    args = make_inputs(2, 6, seqlen, 7, bc, on, on, on, dtype, seed=seqlen)
    run_and_check(compiled, args, on, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_each_isa(compiled, isa, dtype):
    """The grid above runs the widest build; each build (forced) on a covering subset: every B/C kind,
    seqlen 1 / 64 / 129, all options off and on, forward and every gradient."""
    n = 0
    for bc in BC_KINDS:
        for seqlen in (1, 64, 129):
            for on in (False, True):
                args = make_inputs(2, 6, seqlen, 7 if on else 16, bc, on, on, on, dtype, seed=n)
                try:
                    run_and_check(compiled, args, on, dtype)
                except AssertionError as e:
                    raise AssertionError(f"B/C={bc} seqlen={seqlen} options={on}: {e}") from None
                n += 1


@pytest.mark.parametrize("bc", ["constant", "grouped2"])
def test_long_sequences(compiled, isa, bc):
    """Past the tiles and segments: seqlen 2100 at d_state 64 (gradients; the backward keeps 2048-step
    segments there, 1 MiB of decays and states, so the first one's states are recomputed from pass 1)
    and seqlen 2100 (forward, past four 512-step forward tiles)."""
    run_and_check(
        compiled,
        make_inputs(1, 2, 2100, 64, bc, True, True, True, torch.float32, seed=3),
        True,
        torch.float32,
    )
    run_and_check(
        compiled,
        make_inputs(2, 4, 2100, 16, bc, True, False, True, torch.float32, seed=4),
        True,
        torch.float32,
        grads=False,
    )


def test_two_channel_passes_across_segments(compiled, isa):
    """d_state 16 over 8200 steps: the backward's 8192-step segments at d_state 16 (pass 1 runs), with
    the recompute / reverse passes taking two channels of a group at once where the build does (AVX-512;
    two groups of three channels also leave single channels). The float64 per-timestep reference
    is too slow at this length, so the float64 PyTorch fallback (a chunked parallel scan: a separate
    implementation, itself checked against that reference in tests/ops) is the reference."""
    from mamba_ssm._families.selective_scan import torch_impl as torch_scan

    args = make_inputs(2, 6, 8200, 16, "grouped2", True, True, True, torch.float32, seed=5)
    leaves = [None if x is None else x.detach().clone().requires_grad_() for x in args]
    out, last = compiled.selective_scan(*leaves, delta_softplus=True, return_last_state=True)
    ref = [None if x is None else x.detach().double().requires_grad_() for x in args]
    ref_out, ref_last = torch_scan.selective_scan(*ref, delta_softplus=True, return_last_state=True)
    assert_close(out, ref_out, torch.float32, "out")
    assert_close(last, ref_last, torch.float32, "last_state")
    gen = torch.Generator().manual_seed(1)
    g_out = torch.randn(ref_out.shape, generator=gen, dtype=torch.float64)
    g_last = torch.randn(ref_last.shape, generator=gen, dtype=torch.float64)
    ((out.double() * g_out).sum() + (last.double() * g_last).sum()).backward()
    ((ref_out * g_out).sum() + (ref_last * g_last).sum()).backward()
    for name, x, r in zip(("u", "delta", "A", "B", "C", "D", "z", "delta_bias"), leaves, ref):
        assert_close(x.grad, r.grad, torch.float32, f"d{name}")


@pytest.mark.parametrize("d_state", [1, 16, 17, 32, 40, 300])
def test_d_states(compiled, isa, d_state):
    """d_state around the vector widths (8 and 16 lanes; the AVX-512 loops for 16 and 32), and 300 (the
    CPU kernel has no d_state limit)."""
    for bc in ("variable", "constant"):
        run_and_check(
            compiled,
            make_inputs(2, 3, 70, d_state, bc, True, True, True, torch.float32, seed=d_state),
            True,
            torch.float32,
        )


def test_float16(compiled, isa):
    """fp16 inputs, read and written in fp16 by the kernel."""
    run_and_check(
        compiled, make_inputs(2, 3, 70, 4, "variable", True, True, True, torch.float16), True, torch.float16
    )
    run_and_check(
        compiled,
        make_inputs(1, 5, 530, 16, "grouped1", True, True, True, torch.float16, seed=2),
        True,
        torch.float16,
    )


@pytest.mark.parametrize("mix", ["bf16_u_fp32_bc", "fp16_u_fp32_delta", "bf16_u_fp16_z", "fp32_u_bf16_bc"])
def test_mixed_dtypes(compiled, mix):
    """Each per-sequence tensor is read in its own dtype (fp32 B/C with half u, and so on): results and
    gradients against the float64 reference, each gradient in its input's dtype."""
    low = {
        "bf16_u_fp32_bc": torch.bfloat16,
        "fp16_u_fp32_delta": torch.float16,
        "bf16_u_fp16_z": torch.bfloat16,
        "fp32_u_bf16_bc": torch.float32,
    }[mix]
    u, delta, A, B, C, D, z, bias = make_inputs(
        2, 4, 150, 16, "grouped2", True, True, True, torch.float32, seed=9
    )
    u = u.to(low)
    if mix == "fp16_u_fp32_delta":
        z = z.to(low)
    elif mix == "bf16_u_fp16_z":
        delta, z = delta.to(low), z.to(torch.float16)
    elif mix == "fp32_u_bf16_bc":
        B, C = B.to(torch.bfloat16), C.to(torch.bfloat16)
    else:
        delta, z = delta.to(low), z.to(low)
    args = (u, delta, A, B, C, D, z, bias)
    coarsest = torch.bfloat16 if torch.bfloat16 in (u.dtype, delta.dtype, z.dtype, B.dtype) else torch.float16
    leaves = [x.detach().clone().requires_grad_() for x in args]
    out, last = compiled.selective_scan(*leaves, delta_softplus=True, return_last_state=True)
    assert out.dtype == u.dtype
    ref = [x.detach().double().requires_grad_() for x in args]
    ref_out, ref_last = selective_scan_ref64(*ref, delta_softplus=True)
    assert_close(out, ref_out, coarsest, "out")
    assert_close(last, ref_last, coarsest, "last_state")
    g = torch.randn(ref_out.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    (out.double() * g).sum().backward()
    (ref_out * g).sum().backward()
    for name, x, r in zip(("u", "delta", "A", "B", "C", "D", "z", "delta_bias"), leaves, ref):
        assert x.grad.dtype == x.dtype, name
        assert_close(x.grad, r.grad, coarsest, f"grad {name}")


def test_half_rounding(compiled, isa):
    """fp16 / bf16 results are rounded to nearest even: with the identity scan (A = 0 -> decay 1, one
    step, B = C = 1, delta = 1) out = u exactly, and D = 0.5 makes out = 1.5 u, whose fp16 / bf16
    rounding torch computes independently from the exact float64 value."""
    for dtype in (torch.float16, torch.bfloat16):
        top = 50000.0 if dtype == torch.float16 else 2e38  # finite inputs; 1.5 u overflows fp16 past 43690
        u = torch.linspace(-top, top, 4001, dtype=torch.float64)
        u = torch.cat([u, torch.tensor([6.1e-5, 5.96e-8, 3.0e-8, 1e-6, -2.5e-7, 65504.0, 65519.0])]).to(dtype)
        n = u.numel()
        uu = u.reshape(1, n, 1)
        delta = torch.ones(1, n, 1, dtype=dtype)
        A = torch.zeros(n, 1)
        B = torch.ones(n, 1)
        C = torch.zeros(n, 1)  # y = C h = 0, so out = D u
        D = torch.full((n,), 1.5)
        out = compiled.selective_scan(uu, delta, A, B, C, D)
        expected = (u.double() * 1.5).to(dtype)
        torch.testing.assert_close(out.reshape(-1), expected, rtol=0, atol=0, equal_nan=True)


def test_non_contiguous_inputs(compiled):
    """Transposed / sliced views give the same result as their contiguous copies and the reference."""
    batch, dim, seqlen, n = 2, 4, 33, 5
    g = torch.Generator().manual_seed(7)
    u = torch.randn(batch, seqlen, dim, generator=g).transpose(1, 2)  # strided
    delta = torch.rand(batch, dim, 2 * seqlen, generator=g)[:, :, ::2]  # step 2
    A = -torch.rand(n, dim, generator=g).t()  # transposed
    B = torch.randn(batch, 1, seqlen, n, generator=g).transpose(2, 3)
    C = torch.randn(batch, 1, n, seqlen + 3, generator=g)[..., 3:]
    D = torch.randn(2 * dim, generator=g)[::2]
    z = torch.randn(dim, batch, seqlen, generator=g).transpose(0, 1)
    bias = torch.rand(dim, generator=g)
    assert not any(x.is_contiguous() for x in (u, delta, A, B, C, D, z))
    args = (u, delta, A, B, C, D, z, bias)
    run_and_check(compiled, args, True, torch.float32)
    out_nc = compiled.selective_scan(*args, delta_softplus=True)
    out_c = compiled.selective_scan(*[x.contiguous() for x in args], delta_softplus=True)
    torch.testing.assert_close(out_nc, out_c, rtol=0, atol=0)


def test_matches_reference_without_last_state_gradient(compiled):
    """A loss on out alone (dlast_state None in the backward) and on last_state alone."""
    args = make_inputs(2, 3, 50, 6, "variable", True, True, True, torch.float32, seed=11)
    leaves = [x.clone().requires_grad_() for x in args]
    out = compiled.selective_scan(*leaves, delta_softplus=True)
    assert isinstance(out, torch.Tensor)
    out.sum().backward()
    ref = [x.double().requires_grad_() for x in args]
    ref_out, _ = selective_scan_ref64(*ref, delta_softplus=True)
    ref_out.sum().backward()
    for x, r in zip(leaves, ref):
        assert_close(x.grad, r.grad, torch.float32, "grad (loss on out)")
    leaves = [x.clone().requires_grad_() for x in args]
    _, last = compiled.selective_scan(*leaves, delta_softplus=True, return_last_state=True)
    last.pow(2).sum().backward()
    ref = [x.double().requires_grad_() for x in args]
    _, ref_last = selective_scan_ref64(*ref, delta_softplus=True)
    ref_last.pow(2).sum().backward()
    for x, r in zip(leaves, ref):
        if r.grad is None:  # D and z do not reach the state: their gradient is zero
            assert x.grad is None or not x.grad.any()
            continue
        assert_close(x.grad, r.grad, torch.float32, "grad (loss on last_state)", scale_floor=1e-3)


def test_supports(compiled):
    """supports(): None for what the kernels run, a reason naming the problem otherwise."""
    args = make_inputs(1, 4, 8, 3, "grouped2", True, True, True, torch.float32)
    assert compiled.supports(*args) is None
    u, delta, A, B, C, D, z, bias = args
    why = compiled.supports(u.double(), delta, A, B, C, D, z, bias)
    assert why is not None and "float64" in why
    C1 = C[:, :1].contiguous()
    why = compiled.supports(u, delta, A, B, C1, D, z, bias)
    assert why is not None and "groups" in why
    why = compiled.supports(u, delta, A, B, C[:, 0], D, z, bias)  # (batch, N, L): one group vs two
    assert why is not None and "groups" in why
    assert compiled.supports(u, delta, A, B, C[0, 0, :, 0].expand(4, 3).contiguous(), D, z, bias) is None
    meta = [None if x is None else x.to("meta") for x in args]
    why = compiled.supports(*meta)
    assert why is not None and "meta" in why


def test_build_info_op(compiled):
    """The embedded build record is reachable from the loaded library and names the CPU kernel."""
    import json

    info = json.loads(torch.ops.mamba_ssm.build_info())
    assert "cpu" in info["kernels"]
    assert info["schema"] == 1
    assert torch.ops.mamba_ssm.cpu_isa() in ISAS


def _opcheck_args():
    return [
        make_inputs(2, 4, 17, 3, "variable", True, True, True, torch.float32) + (True,),
        make_inputs(1, 4, 9, 5, "constant", False, False, False, torch.float32) + (False,),
        make_inputs(2, 4, 5, 2, "grouped2", True, False, True, torch.bfloat16) + (True,),
    ]


@pytest.mark.parametrize("case", [0, 1, 2])
def test_opcheck_forward(compiled, case):
    """torch.library.opcheck: schema, fake implementation, autograd registration, AOT dispatch."""
    u, delta, A, B, C, D, z, bias, sp = _opcheck_args()[case]
    leaves = [
        None if x is None else x.clone().requires_grad_(x.is_floating_point())
        for x in (u, delta, A, B, C, D, z, bias)
    ]
    torch.library.opcheck(torch.ops.mamba_ssm.selective_scan_fwd.default, (*leaves, sp))


@pytest.mark.parametrize("case", [0, 1])
def test_opcheck_backward(compiled, case):
    u, delta, A, B, C, D, z, bias, sp = _opcheck_args()[case]
    dout = torch.randn_like(u)
    dlast = torch.randn(u.shape[0], u.shape[1], A.shape[1])
    torch.library.opcheck(
        torch.ops.mamba_ssm.selective_scan_bwd.default, (u, delta, A, B, C, D, z, bias, sp, dout, dlast)
    )


def test_cpu_isa_choice(compiled, monkeypatch):
    """cpu_isa() names the widest build this CPU runs (AVX-512 where /proc/cpuinfo lists avx512f/dq/bw/vl,
    then AVX2 with FMA); MAMBA_SSM_CPU_ISA caps it; an unknown value is an error naming the choices."""
    import platform

    monkeypatch.delenv("MAMBA_SSM_CPU_ISA", raising=False)
    widest = torch.ops.mamba_ssm.cpu_isa()
    flags = set()
    if platform.machine() in ("x86_64", "AMD64"):
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    if {"avx512f", "avx512dq", "avx512bw", "avx512vl", "avx2", "fma"} <= flags:
        assert widest == "avx512"
    elif {"avx2", "fma"} <= flags:
        assert widest == "avx2"
    else:
        assert widest == "generic"
    from mamba_ssm import _doctor

    assert _doctor.collect().to_dict()["compiled_module"]["cpu_isa"] == widest
    monkeypatch.setenv("MAMBA_SSM_CPU_ISA", "generic")
    assert torch.ops.mamba_ssm.cpu_isa() == "generic"
    monkeypatch.setenv("MAMBA_SSM_CPU_ISA", "sse9")
    with pytest.raises(Exception, match="MAMBA_SSM_CPU_ISA=sse9.*generic, avx2 or avx512"):
        torch.ops.mamba_ssm.cpu_isa()
    args = make_inputs(1, 2, 5, 3, "variable", False, False, False, torch.float32)
    with pytest.raises(Exception, match="MAMBA_SSM_CPU_ISA=sse9"):
        compiled.selective_scan(*args)


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
@pytest.mark.parametrize("shape", [(1, 1), (2, 6), (3, 7)], ids=lambda s: f"b{s[0]}d{s[1]}")
def test_thread_counts(compiled, torch_threads, threads, shape):
    """Forward, last state and every gradient at 1-5 threads, with one task (batch*dim 1), tasks that
    split evenly and tasks that do not (6 / 7 channels, grouped B/C so that the backward's split of
    channels, which follows the thread count, crosses a group): each against the float64 reference."""
    torch_threads(threads)
    batch, dim = shape
    bc = "grouped2" if dim % 2 == 0 else "variable"
    args = make_inputs(batch, dim, 70, 5, bc, True, True, True, torch.float32, seed=threads * 10 + dim)
    run_and_check(compiled, args, True, torch.float32)
