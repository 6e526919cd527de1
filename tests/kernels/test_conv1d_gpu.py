"""The CUDA/HIP causal conv1d kernels of mamba_ssm._C against the float64 sequential references
(tests/kernels/conv1d_cases.py): forward, final states and every gradient for widths 2-4, both layouts,
seq_idx, initial states, fp32/fp16/bf16, a long row (many 16-position runs per row, atomics over
8 x 4096 positions for dweight); the decode update (shift, circular, padded and out-of-range slots, a
channel-last bf16 state); varlen states; a side stream.

Marked ``gpu``: skipped with the reason where no GPU is present or _C has no GPU kernel. Run by
benchmarks/gpu_check.sh on a GPU machine.
"""

import pytest
import torch
from conv1d_cases import (
    assert_close,
    make_conv_inputs,
    run_conv_and_check,
    torch_conv_silu,
    update_ref64,
    varlen_states_ref,
)

pytestmark = pytest.mark.gpu

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
DTYPE_IDS = ["fp32", "fp16", "bf16"]


@pytest.fixture(scope="module")
def conv(compiled):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA/ROCm GPU visible to torch (torch.cuda.is_available() is False)")
    from mamba_ssm._families.causal_conv1d import compiled as compiled_conv1d

    x = torch.zeros(1, 2, 3, device="cuda")
    why = compiled_conv1d.supports(x, torch.zeros(2, 4, device="cuda"))
    if why is not None:
        pytest.skip(f"the compiled conv kernels cannot run on this GPU: {why}")
    return compiled_conv1d


def _fn(conv):
    return lambda x, w, b, s, i, silu: conv.conv1d(x, w, b, s, i, silu)


@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("layout", ["contiguous", "channel_last"])
@pytest.mark.parametrize("seqlen", [1, 17, 130])
def test_forward_backward(conv, dtype, width, layout, seqlen):
    args = make_conv_inputs(
        3,
        67,
        seqlen,
        width,
        dtype,
        layout=layout,
        seq=seqlen > 2,
        pad=seqlen > 2,  # padding tokens (seq_idx -1)
        init=True,
        device="cuda",
        seed=seqlen + width,
    )
    run_conv_and_check(_fn(conv), *args, True, dtype)


@pytest.mark.parametrize("layout", ["contiguous", "channel_last"])
def test_long_rows_against_torch_conv1d(conv, layout):
    x, w, b, _, _ = make_conv_inputs(8, 256, 4096, 4, torch.float32, layout=layout, device="cuda", seed=9)
    out, _ = conv.conv1d(x, w, b, silu=True)
    assert out.stride() == x.stride()
    assert_close(out, torch_conv_silu(x.cpu(), w.cpu(), b.cpu(), True), torch.float32, "out")
    args = make_conv_inputs(4, 64, 3000, 4, torch.float32, layout=layout, init=True, device="cuda", seed=10)
    run_conv_and_check(_fn(conv), *args, True, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("mode", ["shift", "circular", "indices"])
def test_update(conv, dtype, mode):
    g = torch.Generator().manual_seed(3)
    batch, dim, seqlen, width = 4, 40, 3, 4
    n_states = 7 if mode == "indices" else batch
    state_len = 6
    x = torch.randn(batch, dim, seqlen, generator=g).to(dtype)
    state = torch.randn(n_states, state_len, dim, generator=g).to(dtype).transpose(1, 2)  # channel-last state
    w, b = torch.randn(dim, width, generator=g) * 0.5, torch.randn(dim, generator=g)
    cache = torch.tensor([0, 4, 13, 2], dtype=torch.int32) if mode == "circular" else None
    idx = torch.tensor([5, -1, 0, 3], dtype=torch.int32) if mode == "indices" else None
    ref_out, ref_state = update_ref64(x, state, w, b, True, cache, idx)
    dev_state = state.cuda()
    out = conv.update(
        x.cuda(),
        dev_state,
        w.cuda(),
        b.cuda(),
        True,
        None if cache is None else cache.cuda(),
        None if idx is None else idx.cuda(),
    )
    assert_close(out, ref_out, dtype, "out")
    assert_close(dev_state, ref_state, dtype, "conv_state")


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float64], ids=["fp32", "bf16", "fp64"]
)
def test_varlen_states(conv, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(20, 22, generator=g).to(dtype)[:, ::2]
    cu = torch.tensor([0, 5, 6, 6, 20], dtype=torch.int32)
    out = conv.varlen_states(x.cuda(), cu.cuda(), 4)
    assert torch.equal(out.cpu(), varlen_states_ref(x, cu, 4))


def test_side_stream(conv):
    args = make_conv_inputs(2, 33, 50, 4, torch.float32, seq=True, init=True, device="cuda", seed=4)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        run_conv_and_check(_fn(conv), *args, True, torch.float32)
    stream.synchronize()
