"""Padded varlen and padding tokens (the packed-sequence rule of mamba_ssm/_families/packing.py), through the
public ops on the CPU, against the float64 references of tests/reference.py: cu_seqlens whose
last entry is below the number of tokens, empty sequences (zero states), seq_idx -1 tokens (output 0,
no state read or written) in causal_conv1d_fn and the SSD's PyTorch path, and the op outputs taking
in-place updates. (The kernels: tests/kernels for the conv, tests/ops/triton for the Triton SSD; the model:
tests/models/test_lm_decode.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import reference as ref  # (tests/reference.py)
import torch

from mamba_ssm._families.packing import seq_idx_from_cu_seqlens
from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn, causal_conv1d_varlen_states
from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

F32 = torch.float32


def _padded_seq_idx():
    # row 0: two sequences, then padding; row 1: padding, a sequence, padding, a sequence
    return torch.tensor(
        [
            [0] * 6 + [1] * 7 + [-1] * 5,
            [-1] * 3 + [4] * 5 + [-1] * 4 + [5] * 6,
        ],
        dtype=torch.int32,
    )


def test_seq_idx_from_cu_seqlens_marks_the_tail_as_padding():
    cu = torch.tensor([0, 3, 3, 5])
    got = seq_idx_from_cu_seqlens(cu, 8)
    assert got.dtype == torch.int32 and got.tolist() == [[0, 0, 0, 2, 2, -1, -1, -1]]
    with pytest.raises(ValueError, match="at most the 4 packed tokens"):
        seq_idx_from_cu_seqlens(cu, 4)
    with pytest.raises(ValueError, match="non-decreasing"):
        seq_idx_from_cu_seqlens(torch.tensor([0, 4, 2]), 8)
    with pytest.raises(ValueError, match="integer tensor"):
        seq_idx_from_cu_seqlens(torch.tensor([0.0, 2.0]), 8)


@pytest.mark.parametrize("layout", ["contiguous", "channel_last"])
def test_conv_padding_tokens_output_zero(conv_backend, layout):
    """seq_idx -1 tokens output 0 (bias and SiLU included) and no other token reads them; the final
    states are the row's last sequence's inputs (zero for the row ending in padding)."""
    torch.manual_seed(0)
    sid = _padded_seq_idx()
    x = torch.randn(2, 18, 6).transpose(1, 2) if layout == "channel_last" else torch.randn(2, 6, 18)
    w, b = torch.randn(6, 4), torch.randn(6)
    out, final = causal_conv1d_fn(x, w, b, seq_idx=sid, return_final_states=True, activation="silu")
    ref.assert_close(out, ref.causal_conv1d(x, w, b, silu=True, seq_idx=sid), F32, "out")
    assert not out[0, :, 13:].any() and not out[1, :, :3].any() and not out[1, :, 8:12].any()
    assert not final[0].any(), "row 0 ends in padding: no final state"
    ref.assert_close(final[1], x[1, :, 15:], F32, "final states of row 1's last sequence")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_conv_output_takes_inplace_updates(conv_backend, dtype):
    """out is a tensor of its own in either layout (upstream returns a plain tensor): ``out += ...``
    under autograd works and its gradient is the reference's."""
    torch.manual_seed(1)
    x = torch.randn(2, 9, 8).transpose(1, 2).to(dtype).requires_grad_(True)  # channel-last
    w = torch.randn(8, 4)
    out = causal_conv1d_fn(x, w, None, activation="silu")
    out += 1.0
    out.mul_(2.0)
    (out.float() * torch.arange(9.0)).sum().backward()
    xd = x.detach().double().requires_grad_(True)
    pre = torch.nn.functional.conv1d(torch.nn.functional.pad(xd, (3, 0)), w.double().unsqueeze(1), groups=8)
    ((torch.nn.functional.silu(pre) + 1.0) * 2.0 * torch.arange(9.0)).sum().backward()
    ref.assert_close(x.grad, xd.grad, dtype, "dx")


def test_varlen_states_padded_cu_seqlens(conv_backend):
    """causal_conv1d_varlen_states(torch.randn(10, 8), [0, 4, 7], 4) reads only x[cu[i]:cu[i+1]]
    (upstream's behaviour); an empty sequence gets zero states; the output takes in-place updates."""
    x = torch.randn(10, 8)
    states = causal_conv1d_varlen_states(x, torch.tensor([0, 4, 7, 7]), 4)
    np.testing.assert_array_equal(states[0].numpy(), x[0:4].T.numpy())
    np.testing.assert_array_equal(states[1, :, 1:].numpy(), x[4:7].T.numpy())
    assert not states[1, :, 0].any() and not states[2].any()
    states += 1.0
    with pytest.raises(ValueError, match="at most the 10 packed tokens"):
        causal_conv1d_varlen_states(x, torch.tensor([0, 4, 11]), 4)


def _ssd_inputs(b, l, h, p, g, n, seed):
    gen = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=gen)
    x, B, C = r(b, l, h, p), r(b, l, g, n), r(b, l, g, n)
    dt = torch.rand(b, l, h, generator=gen) * 0.5 - 0.3
    A = -(torch.rand(h, generator=gen) + 0.3)
    return x, dt, A, B, C, r(h, p), r(b, l, h, p), r(h) * 0.2, r(b, h, p, n)


def test_ssd_padding_tokens_against_float64_recurrence():
    """The SSD (PyTorch path on the CPU) with seq_idx -1 tokens: output 0 there (D and z included),
    sequences around them exact, the initial state unread when the row starts with padding, a zero
    final state for the row ending in padding."""
    x, dt, A, B, C, D, z, dt_bias, h0 = _ssd_inputs(2, 18, 2, 4, 1, 8, seed=2)
    sid = _padded_seq_idx()
    kw = dict(D=D, z=z, dt_bias=dt_bias, dt_softplus=True, initial_states=h0, seq_idx=sid)
    y, final = mamba_chunk_scan_combined(x, dt, A, B, C, 8, return_final_states=True, **kw)
    kw.pop("initial_states")
    y_ref, f_ref, _ = ref.ssd(x, dt, A, B, C, initial_states=h0, **kw)
    ref.assert_close(y, y_ref, F32, "y")
    ref.assert_close(final, f_ref, F32, "final_states")
    assert not y[0, 13:].any() and not y[1, :3].any() and not final[0].any()


def test_ssd_padding_gradients_match_finite_differences():
    """The PyTorch path's gradients with padding tokens (float64 gradcheck: independent of autograd's
    formulas), through out and the final state."""
    x, dt, A, B, C, D, z, dt_bias, h0 = (t.double() for t in _ssd_inputs(2, 18, 2, 2, 1, 3, seed=3))
    sid = _padded_seq_idx()

    def fn(x, dt, B, C, D, z, h0):
        y, final = mamba_chunk_scan_combined(
            x, dt, A, B, C, 4, D=D, z=z, dt_bias=dt_bias, initial_states=h0, seq_idx=sid,
            dt_softplus=True, return_final_states=True,
        )  # fmt: skip
        return y, final

    leaves = [t.requires_grad_(True) for t in (x, dt, B, C, D, z, h0)]
    assert torch.autograd.gradcheck(fn, leaves, eps=1e-6, atol=1e-6, fast_mode=True)
    y, _ = fn(*leaves)
    y.sum().backward()
    assert not leaves[0].grad[0, 13:].any(), "padding inputs get no gradient"


def test_ssd_varlen_states_padded_cu_seqlens_and_empty_sequences():
    """return_varlen_states with cu_seqlens[-1] < seqlen (the tail is padding, output 0) and empty
    sequences (zero states), each state the float64 recurrence's at its sequence's last token."""
    x, dt, A, B, C, D, _, _, _ = _ssd_inputs(1, 30, 2, 4, 1, 8, seed=4)
    cu = torch.tensor([0, 7, 7, 19, 23, 23], dtype=torch.int32)
    y, varlen = mamba_chunk_scan_combined(x, dt, A, B, C, 8, D=D, cu_seqlens=cu, return_varlen_states=True)
    sid = seq_idx_from_cu_seqlens(cu, 30)
    y_ref, _, states = ref.ssd(x, dt, A, B, C, D=D, seq_idx=sid)
    ref.assert_close(y, y_ref, F32, "y")
    assert not y[0, 23:].any()
    for i, (s, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        want = states[0, e - 1] if e > s else np.zeros(states.shape[2:])
        ref.assert_close(varlen[i], want, F32, f"state of sequence {i}")
