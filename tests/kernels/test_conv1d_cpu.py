"""The CPU causal conv1d kernels of mamba_ssm._C against float64 sequential references
(tests/kernels/conv1d_cases.py) and against torch.nn.functional.conv1d(groups=dim) + SiLU: forward,
final states and every gradient over widths 2-4, both layouts (and a strided x), seq_idx (with
padding tokens, seq_idx -1), initial states; outputs that take in-place updates; the decode update (shift register, circular cache_seqlens, conv_state_indices with -1 padded
slots); varlen states; opcheck; the baseline-ISA build (MAMBA_SSM_CPU_ISA=generic) in a subprocess."""

import itertools
import os
import subprocess
import sys

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

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(scope="module")
def conv(compiled):
    from mamba_ssm._families.causal_conv1d import compiled as compiled_conv1d

    if not compiled_conv1d.available():
        pytest.skip("this mamba_ssm._C has no causal conv1d ops (rebuild it)")
    return compiled_conv1d


def _fn(conv):
    return lambda x, w, b, s, i, silu: conv.conv1d(x, w, b, s, i, silu)


@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("layout", ["contiguous", "channel_last", "strided"])
def test_forward_backward_grid(conv, width, layout):
    """Every combination of bias, SiLU, seq_idx (none, packed sequences, packed sequences with padding
    tokens), initial states at seqlen {1, 2, 5, 70}, 3 rows, 67 channels (one full 64-channel block
    and a partial one): values and gradients."""
    n = 0
    for seqlen, bias, silu, seq, init in itertools.product(
        [1, 2, 5, 70], [False, True], [False, True], [None, "seq", "pad"], [False, True]
    ):
        args = make_conv_inputs(
            3,
            67,
            seqlen,
            width,
            torch.float32,
            layout=layout,
            bias=bias,
            seq=seq is not None,
            pad=seq == "pad",
            init=init,
            seed=n,
        )
        try:
            run_conv_and_check(_fn(conv), *args, silu, torch.float32)
        except AssertionError as e:
            raise AssertionError(
                f"seqlen={seqlen} bias={bias} silu={silu} seq_idx={seq} init={init}: {e}"
            ) from None
        n += 1
    assert n == 4 * 3 * 2**3


@pytest.mark.parametrize("layout", ["contiguous", "channel_last"])
def test_output_layout_follows_x(conv, layout):
    x, w, b, _, _ = make_conv_inputs(2, 8, 9, 4, torch.float32, layout=layout)
    out, _ = conv.conv1d(x, w, b, silu=True)
    assert out.stride() == x.stride()


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"]
)
@pytest.mark.parametrize("layout", ["contiguous", "channel_last"])
def test_outputs_take_inplace_updates(conv, dtype, layout):
    """out and final_states are tensors of their own (not views of a buffer of a multi-output op), so
    ``out += ...`` under autograd works, as causal-conv1d's users do; the gradient then includes it."""
    x, w, b, _, _ = make_conv_inputs(2, 8, 9, 4, dtype, layout=layout, seed=3)
    xl = x.detach().clone().requires_grad_(True)
    out, fin = conv.conv1d(xl, w, b, silu=True)
    assert out._base is None and fin._base is None
    out += 1.0
    fin.mul_(2.0)
    out.sum().backward()
    ref = x.detach().double().requires_grad_(True)
    (torch_conv_silu(ref, w, b, True) + 1.0).sum().backward()
    assert_close(xl.grad, ref.grad, dtype, "dx after out += 1")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("layout", ["contiguous", "channel_last"])
def test_half_precision(conv, dtype, layout):
    args = make_conv_inputs(3, 20, 40, 4, dtype, layout=layout, seq=True, pad=True, init=True, seed=5)
    run_conv_and_check(_fn(conv), *args, True, dtype)


@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("layout", ["contiguous", "channel_last"])
def test_against_torch_conv1d(conv, width, layout):
    """The Mamba case (no seq_idx / initial states) against F.conv1d(groups=dim) + SiLU, a long row."""
    x, w, b, _, _ = make_conv_inputs(3, 130, 1031, width, torch.float32, layout=layout, seed=width)
    for silu in (False, True):
        out, _ = conv.conv1d(x, w, b, silu=silu)
        assert_close(out, torch_conv_silu(x, w, b, silu), torch.float32, f"silu={silu}")


def _update_case(batch, dim, seqlen, width, state_len, n_states, dtype, seed, layout="contiguous"):
    g = torch.Generator().manual_seed(seed)
    x = (
        torch.randn(batch, dim, seqlen, generator=g).to(dtype)
        if seqlen
        else torch.randn(batch, dim, generator=g)
    )
    if layout == "channel_last":  # Mamba-2 keeps conv_state as a transposed (batch, state_len, dim) tensor
        state = torch.randn(n_states, state_len, dim, generator=g).to(dtype).transpose(1, 2)
    else:
        state = torch.randn(n_states, dim, state_len, generator=g).to(dtype)
    w = torch.randn(dim, width, generator=g) * 0.5
    b = torch.randn(dim, generator=g) * 0.3
    return x.to(dtype), state, w, b


@pytest.mark.parametrize("width", [2, 3, 4])
@pytest.mark.parametrize("seqlen", [0, 1, 3, 7])  # 0: x is (batch, dim), one step
@pytest.mark.parametrize("mode", ["shift", "circular"])
@pytest.mark.parametrize("layout", ["contiguous", "channel_last"])
def test_update(conv, width, seqlen, mode, layout):
    """Decode steps against the float64 reference: out, and the state after the call (in place)."""
    state_len = width + 1 if mode == "shift" else 6
    x, state, w, b = _update_case(
        3, 9, seqlen, width, state_len, 3, torch.float32, seed=seqlen * 10 + width, layout=layout
    )
    cache = torch.tensor([0, 4, 13], dtype=torch.int32) if mode == "circular" else None
    ref_out, ref_state = update_ref64(x, state, w, b, True, cache, None)
    xs = x.unsqueeze(-1) if x.dim() == 2 else x
    out = conv.update(xs, state, w, b, True, cache, None)
    out = out.squeeze(-1) if x.dim() == 2 else out
    assert_close(out, ref_out, torch.float32, "out")
    assert_close(state, ref_state, torch.float32, "conv_state")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("circular", [False, True])
def test_update_state_indices_and_padding(conv, dtype, circular):
    """conv_state_indices picks rows of a larger state; -1 slots give 0 and leave every row untouched."""
    x, state, w, b = _update_case(4, 6, 2, 4, 5, 7, dtype, seed=3)
    idx = torch.tensor([5, -1, 0, -7], dtype=torch.int32)  # any negative index is a padded slot
    cache = torch.tensor([2, 9, 0, 1], dtype=torch.int32) if circular else None
    before = state.clone()
    ref_out, ref_state = update_ref64(x, state, w, b, False, cache, idx)
    out = conv.update(x, state, w, b, False, cache, idx)
    assert_close(out, ref_out, dtype, "out")
    assert torch.equal(out[1], torch.zeros_like(out[1])) and torch.equal(out[3], torch.zeros_like(out[3]))
    assert_close(state, ref_state, dtype, "conv_state")
    for row in (1, 2, 3, 4, 6):  # rows no slot points at
        assert torch.equal(state[row], before[row])


def test_update_rejects_bad_indices(conv):
    x, state, w, b = _update_case(2, 4, 1, 4, 4, 2, torch.float32, seed=0)
    with pytest.raises(
        RuntimeError, match=r"conv_state_indices\[1\] = 2 is not a row of conv_state \(2 rows"
    ):
        conv.update(x, state, w, b, False, None, torch.tensor([0, 2], dtype=torch.int32))
    with pytest.raises(RuntimeError, match="state_len >= width - 1"):
        conv.update(x, state[:, :, :2], w, b, False, None, None)


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.bfloat16, torch.float64], ids=["fp32", "bf16", "fp64"]
)
def test_varlen_states(conv, dtype):
    g = torch.Generator().manual_seed(0)
    cu = torch.tensor([0, 5, 6, 6, 20], dtype=torch.int32)  # lengths 5, 1, 0, 14
    base = torch.randn(20, 2 * 11, generator=g).to(dtype)
    x = base[:, ::2]  # a strided (total, dim) view, as the xBC slice of Mamba-2's in_proj output
    out = conv.varlen_states(x, cu, 4)
    assert out.shape == (4, 11, 4) and out.dtype == dtype
    assert torch.equal(out, varlen_states_ref(x, cu, 4))


def test_varlen_states_padding_and_empty_sequences(conv):
    """cu_seqlens ending before the last token (the rows after it are padding) and empty sequences
    (zero states), the padded-varlen rule; the output is a plain tensor."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(10, 8, generator=g)
    cu = torch.tensor([0, 4, 7, 7], dtype=torch.int32)  # rows 7..9 are padding, the last sequence empty
    out = conv.varlen_states(x, cu, 4)
    assert out._base is None
    assert torch.equal(out, varlen_states_ref(x, cu, 4))
    assert torch.equal(out[2], torch.zeros(8, 4))
    assert torch.equal(out[1, :, 1:], x[4:7].t())  # never the padding rows after it


def test_varlen_states_rejects_bad_cu_seqlens(conv):
    with pytest.raises(RuntimeError, match="cu_seqlens must be non-decreasing"):
        conv.varlen_states(torch.zeros(5, 3), torch.tensor([0, 4, 2], dtype=torch.int32), 3)


def test_kernel_errors_name_the_argument(conv):
    x = torch.randn(2, 4, 8)
    with pytest.raises(RuntimeError, match="width 5 is not supported"):
        conv.conv1d(x, torch.randn(4, 5))
    with pytest.raises(RuntimeError, match=r"initial_states must be \(batch, dim, width - 1\)"):
        conv.conv1d(x, torch.randn(4, 4), initial_states=torch.randn(2, 4, 2))
    assert "float64" in conv.supports(x.double(), torch.randn(4, 4))
    assert "width 2, 3 or 4" in conv.supports(x, torch.randn(4, 5))


def _opcheck_cases():
    cases = {}
    for name, layout, seq, init in (
        ("plain", "contiguous", False, False),
        ("all", "contiguous", True, True),
        ("channel_last", "channel_last", True, True),
    ):
        cases[name] = make_conv_inputs(
            3, 5, 11, 4, torch.float32, layout=layout, seq=seq, pad=seq, init=init, seed=2
        )
    return cases


@pytest.mark.parametrize("case", ["plain", "all", "channel_last"])
def test_opcheck_forward_backward(conv, case):
    """torch.library.opcheck: schema, fake implementation (strides included), autograd, AOT dispatch."""
    x, w, b, s, i = _opcheck_cases()[case]
    leaves = [None if t is None else t.clone().requires_grad_(True) for t in (x, w, b, i)]
    torch.library.opcheck(
        torch.ops.mamba_ssm.causal_conv1d_fwd.default, (leaves[0], leaves[1], leaves[2], s, leaves[3], True)
    )
    dout = (
        torch.randn(x.shape).transpose(1, 2).contiguous().transpose(1, 2)
        if case == "channel_last"
        else torch.randn(x.shape)
    )
    torch.library.opcheck(
        torch.ops.mamba_ssm.causal_conv1d_bwd.default,
        (x, w, b, s, i, dout, torch.randn(3, 5, 3) if case != "plain" else None, True),
    )


@pytest.mark.parametrize("with_options", [False, True])
def test_opcheck_update_and_varlen(conv, with_options):
    x, state, w, b = _update_case(3, 5, 2, 4, 4, 4, torch.float32, seed=1)
    cache = torch.tensor([1, 0, 7], dtype=torch.int32) if with_options else None
    idx = torch.tensor([2, -1, 0], dtype=torch.int32) if with_options else None
    torch.library.opcheck(
        torch.ops.mamba_ssm.causal_conv1d_update.default, (x, state, w, b, True, cache, idx)
    )
    torch.library.opcheck(
        torch.ops.mamba_ssm.causal_conv1d_varlen_states.default,
        (torch.randn(9, 5), torch.tensor([0, 4, 9], dtype=torch.int32), 3),
    )


def test_isa_reported(conv):
    """cpu_isa() names the best CPU build this processor runs (the conv kernels use the AVX2 build there
    when it is avx512 too); it agrees with the CPU's flags."""
    isa = torch.ops.mamba_ssm.cpu_isa()
    assert isa in ("avx512", "avx2", "generic"), isa
    try:
        with open("/proc/cpuinfo") as fh:
            flags = set(fh.read().split())
    except OSError:
        return
    if isa == "avx512":
        assert "avx512f" in flags
    if isa in ("avx512", "avx2"):
        assert {"avx2", "fma"} <= flags
    elif {"avx2", "fma"} <= flags and not os.environ.get("MAMBA_SSM_CPU_ISA"):
        raise AssertionError(f"the CPU has AVX2+FMA, yet cpu_isa() is {isa}")


def test_generic_isa_build_matches():
    """The baseline-ISA build (MAMBA_SSM_CPU_ISA=generic) passes the same checks: a subprocess, since the
    choice is made once per process."""
    env = dict(os.environ, MAMBA_SSM_CPU_ISA="generic")
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "progs", "conv1d_generic_isa.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0 and "generic ok" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-4000:]


@pytest.mark.parametrize("layout", ["contiguous", "channel_last"])
def test_public_ops_under_torch_compile(conv, layout):
    """causal_conv1d_fn (values and gradients) and causal_conv1d_update (in-place state) through
    torch.compile(fullgraph=True): the dispatch is decided at trace time and the compiled ops trace
    through their fake implementations (aot_eager: no C++ codegen, so the test stays short)."""
    import mamba_ssm
    from mamba_ssm.ops import causal_conv1d as cc

    prev = mamba_ssm.set_backend("auto")
    torch._dynamo.reset()
    try:
        assert cc.implementation("cpu") == "compiled"
        x, w, b, s, i = make_conv_inputs(
            2, 6, 19, 4, torch.float32, layout=layout, seq=True, pad=True, init=True, seed=8
        )

        def conv_fn(x, w, b, s, i):
            out, fin = cc.causal_conv1d_fn(
                x, w, b, seq_idx=s, initial_states=i, return_final_states=True, activation="silu"
            )
            return out, fin

        def run(fn):
            leaves = [t.detach().clone().requires_grad_(True) for t in (x, w, b, i)]
            out, fin = fn(leaves[0], leaves[1], leaves[2], s, leaves[3])
            (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().add(fin.sum()).backward()
            return [out.detach(), fin.detach()] + [t.grad for t in leaves]

        compiled = torch.compile(conv_fn, fullgraph=True, backend="aot_eager")
        for got, want, name in zip(run(compiled), run(conv_fn), ("out", "final", "dx", "dw", "db", "dinit")):
            torch.testing.assert_close(got, want, msg=name)

        def step(x, state, w, b):
            return cc.causal_conv1d_update(x, state, w, b, "silu")

        xs, st = torch.randn(3, 6), torch.randn(3, 6, 4)
        st_eager = st.clone()
        want = step(xs, st_eager, w, b)
        got = torch.compile(step, fullgraph=True, backend="aot_eager")(xs, st, w, b)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(st, st_eager)
    finally:
        mamba_ssm.set_backend(prev)
        torch._dynamo.reset()


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("layout", ["contiguous", "channel_last"])
def test_thread_counts(conv, torch_threads, threads, layout):
    """A call large enough to be split across threads (2 x 67 x 520 elements, over the serial cutoff
    of 2^16; 67 channels: a full 64-channel block and a partial one) at 1-3 torch threads, packed
    sequences and initial states included: values and every gradient against the float64 reference."""
    torch_threads(threads)
    args = make_conv_inputs(
        2, 67, 520, 4, torch.float32, layout=layout, bias=True, seq=True, init=True, seed=threads
    )
    run_conv_and_check(_fn(conv), *args, True, torch.float32)
