"""The CUDA/HIP selective-scan kernels of mamba_ssm._C against the float64 sequential reference.

Marked ``gpu``: skipped with the reason where no GPU is present or _C has no GPU kernel. Run by
benchmarks/gpu_check.sh on the reference GPU machine (H200). Covers fp32/fp16/bf16 forward and backward
over constant/variable/grouped B and C, chunk boundaries (the kernels scan 1024-step chunks), seqlen 1,
seqlen 2049 with delta_bias + softplus, dim 65,536 (one block per channel on blockIdx.x), d_state 256,
non-contiguous inputs, a side stream and a second device.
"""

import pytest
import torch
from cases import BC_KINDS, make_inputs, run_and_check

pytestmark = pytest.mark.gpu

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_IDS = ["fp32", "fp16", "bf16"]


@pytest.fixture(scope="module")
def gpu(compiled):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA/ROCm GPU visible to torch (torch.cuda.is_available() is False)")
    probe = make_inputs(1, 2, 4, 2, "constant", False, False, False, torch.float32, device="cuda")
    why = compiled.supports(*probe)
    if why is not None:
        pytest.skip(f"the compiled kernels cannot run on this GPU: {why}")
    return compiled


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("bc", BC_KINDS)
@pytest.mark.parametrize("seqlen", [1, 3, 129])
@pytest.mark.parametrize("options", ["none", "all"])
def test_forward_backward(gpu, dtype, bc, seqlen, options):
    on = options == "all"
    args = make_inputs(2, 4, seqlen, 8, bc, on, on, on, dtype, device="cuda", seed=seqlen)
    run_and_check(gpu, args, on, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("bc", BC_KINDS)
def test_chunk_boundary(gpu, dtype, bc):
    """seqlen 1025: one full 1,024-step chunk, then a chunk with a single valid step."""
    args = make_inputs(2, 4, 1025, 8, bc, True, True, True, dtype, device="cuda", seed=1025)
    run_and_check(gpu, args, True, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_seqlen_2049_delta_bias_softplus(gpu, dtype):
    """Past two full chunks; the padded tail of the last chunk must not leak through softplus(bias)."""
    args = make_inputs(2, 3, 2049, 16, "variable", True, True, True, dtype, device="cuda", seed=5)
    run_and_check(gpu, args, True, dtype)


def test_dim_65536(gpu):
    """More channels than a y/z grid dimension allows (65,535)."""
    args = make_inputs(1, 65536, 9, 4, "variable", True, False, True, torch.float32, device="cuda", seed=6)
    run_and_check(gpu, args, True, torch.float32)


def test_d_state_limit(gpu):
    args = make_inputs(1, 2, 40, 256, "grouped1", True, True, False, torch.float32, device="cuda", seed=7)
    run_and_check(gpu, args, False, torch.float32)
    big = make_inputs(1, 2, 4, 257, "constant", False, False, False, torch.float32, device="cuda")
    why = gpu.supports(*big)
    assert why is not None and "d_state" in why


def test_non_contiguous_and_side_stream(gpu):
    g = torch.Generator().manual_seed(8)
    batch, dim, seqlen, n = 2, 4, 300, 6
    u = torch.randn(batch, seqlen, dim, generator=g).cuda().transpose(1, 2)
    delta = torch.rand(batch, dim, 2 * seqlen, generator=g).cuda()[:, :, ::2]
    A = -torch.rand(n, dim, generator=g).cuda().t()
    B = torch.randn(batch, 1, seqlen, n, generator=g).cuda().transpose(2, 3)
    C = torch.randn(batch, 1, n, seqlen, generator=g).cuda()
    D = torch.randn(dim, generator=g).cuda()
    args = (u, delta, A, B, C, D, None, None)
    run_and_check(gpu, args, True, torch.float32)
    expected = gpu.selective_scan(*[None if x is None else x.contiguous() for x in args], delta_softplus=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = gpu.selective_scan(*args, delta_softplus=True)
    side.synchronize()
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_second_device(gpu):
    if torch.cuda.device_count() < 2:
        pytest.skip("only one GPU: the cuda:1 check needs two")
    args = make_inputs(2, 4, 70, 8, "variable", True, True, True, torch.float32, device="cuda:1", seed=9)
    run_and_check(gpu, args, True, torch.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_d_state_1_across_chunks(gpu, dtype):
    """d_state 1 over three chunks: the only state's carry crosses chunk boundaries with no other
    state's barrier in between (the forward kernel's end-of-chunk barrier orders it)."""
    args = make_inputs(2, 3, 2100, 1, "variable", True, True, True, dtype, device="cuda", seed=11)
    run_and_check(gpu, args, True, dtype)
