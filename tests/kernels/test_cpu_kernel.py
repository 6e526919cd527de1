"""The CPU selective-scan kernel of mamba_ssm._C, through the compiled backend, against a float64
sequential reference (tests/kernels/reference.py): forward, last state and every gradient."""
import pytest
import torch

from cases import BC_KINDS, assert_close, forward_grid, make_inputs, run_and_check
from reference import selective_scan_ref64


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
            raise AssertionError(f"seqlen={seqlen} batch={batch} B/C={bc} D={has_D} z={has_z} "
                                 f"bias={has_bias} softplus={softplus}: {e}") from None
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


@pytest.mark.parametrize("bc", ["constant", "grouped2"])
def test_long_sequences(compiled, bc):
    """Covering subset at seqlen 1000 (gradients) and 4097 (forward), past the 64-step tiles."""
    run_and_check(compiled, make_inputs(1, 4, 1000, 16, bc, True, True, True, torch.float32, seed=3), True,
                  torch.float32)
    run_and_check(compiled, make_inputs(2, 4, 4097, 16, bc, True, False, True, torch.float32, seed=4), True,
                  torch.float32, grads=False)


def test_float16_and_large_d_state(compiled):
    """fp16 inputs, and d_state 300 (the CPU kernel has no d_state limit)."""
    run_and_check(compiled, make_inputs(2, 3, 70, 4, "variable", True, True, True, torch.float16), True,
                  torch.float16)
    run_and_check(compiled, make_inputs(1, 2, 40, 300, "grouped1", True, False, False, torch.float32), False,
                  torch.float32)


def test_non_contiguous_inputs(compiled):
    """Transposed / sliced views give the same result as their contiguous copies and the reference."""
    batch, dim, seqlen, n = 2, 4, 33, 5
    g = torch.Generator().manual_seed(7)
    u = torch.randn(batch, seqlen, dim, generator=g).transpose(1, 2)          # strided
    delta = torch.rand(batch, dim, 2 * seqlen, generator=g)[:, :, ::2]       # step 2
    A = -torch.rand(n, dim, generator=g).t()                                 # transposed
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
    assert torch.ops.mamba_ssm.cpu_isa() in ("avx2", "generic")


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
    leaves = [None if x is None else x.clone().requires_grad_(x.is_floating_point()) for x in
              (u, delta, A, B, C, D, z, bias)]
    torch.library.opcheck(torch.ops.mamba_ssm.selective_scan_fwd.default, (*leaves, sp))


@pytest.mark.parametrize("case", [0, 1])
def test_opcheck_backward(compiled, case):
    u, delta, A, B, C, D, z, bias, sp = _opcheck_args()[case]
    dout = torch.randn_like(u)
    dlast = torch.randn(u.shape[0], u.shape[1], A.shape[1])
    torch.library.opcheck(torch.ops.mamba_ssm.selective_scan_bwd.default,
                          (u, delta, A, B, C, D, z, bias, sp, dout, dlast))


def test_generic_isa_build_matches(compiled, tmp_path):
    """The baseline-ISA build of the CPU kernel (MAMBA_SSM_CPU_ISA=generic) gives the same results as the
    reference, forward and backward (the AVX2 build is what the other tests exercise on x86-64)."""
    import os
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    code = (
        "import sys, torch; sys.path[:0] = [%r, %r]\n"
        "from mamba_ssm import _loader; assert _loader.load().loaded\n"
        "import mamba_ssm.ops.backends.compiled as b\n"
        "assert torch.ops.mamba_ssm.cpu_isa() == 'generic', torch.ops.mamba_ssm.cpu_isa()\n"
        "from cases import make_inputs, run_and_check\n"
        "run_and_check(b, make_inputs(2, 4, 130, 11, 'grouped2', True, True, True, torch.float32), True,"
        " torch.float32)\n"
        "print('ok')\n" % (here, os.path.dirname(os.path.dirname(here))))
    env = dict(os.environ, MAMBA_SSM_CPU_ISA="generic")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr
