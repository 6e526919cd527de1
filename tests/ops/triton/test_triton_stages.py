"""The SSD stage functions of upstream's stage modules (ssd_chunk_state, ssd_state_passing) and
ssd_combined's ``_mamba_chunk_scan_combined_fwd`` / ``_bwd`` on their Triton path, under Triton's
interpreter on CPU tensors (the dispatcher picks Triton only on a GPU, so it is told here that Triton runs
on the CPU: the calls take their real route, through ``mamba_ssm._dispatch``, to the interpreted kernels). Checked against the float64 per-timestep recurrence (references.py)
and against the PyTorch stages (checked against float64 references in tests/ops/test_ssd_stages.py),
with packed sequences and padding tokens.
"""

import pytest
import references as R
import torch

from mamba_ssm import _dispatch
from mamba_ssm._backends import triton as triton_backend
from mamba_ssm._families.packing import seq_idx_from_cu_seqlens
from mamba_ssm.ops.triton import ssd_chunk_state, ssd_combined, ssd_state_passing


@pytest.fixture
def on_triton(interpreted, monkeypatch):
    """The dispatcher believes Triton runs on the CPU: the stage functions and ssd_combined's entry points
    run the interpreted kernels."""
    monkeypatch.delenv("MAMBA_SSM_BACKEND", raising=False)
    monkeypatch.setattr(triton_backend, "triton_unavailable", lambda device: None)
    _dispatch._reset_for_tests()
    yield interpreted
    _dispatch._reset_for_tests()


def _close(got, want, what, tol=2e-4):
    got, want = got.detach().double(), want.detach().double()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    scale = max(1.0, float(want.abs().max()))
    err = float((got - want).abs().max())
    assert err <= tol * scale, f"{what}: max error {err:.3g} > {tol * scale:.3g}"


def _inputs(b, l, h, p, g, n, seed):
    gen = torch.Generator().manual_seed(seed)
    return (
        torch.randn(b, l, h, p, generator=gen),
        torch.rand(b, l, h, generator=gen) * 0.5 - 0.2,
        -(torch.rand(h, generator=gen) + 0.3),
        torch.randn(b, l, g, n, generator=gen),
        torch.randn(b, l, g, n, generator=gen),
    )


def _stages(x, dt, A, B, seq, Q, bias, h0):
    cs, d = ssd_chunk_state._chunk_cumsum_fwd(dt, A, Q, dt_bias=bias, dt_softplus=True)
    S = ssd_chunk_state._chunk_state_fwd(B, x, d, cs, seq_idx=seq)
    H, final = ssd_state_passing._state_passing_fwd(
        S.flatten(3), cs[..., -1], h0.flatten(2), seq_idx=seq, chunk_size=Q
    )
    return cs, d, S, H, final


def test_stage_functions_on_triton(on_triton):
    b, l, h, p, g, n, Q = 2, 45, 2, 8, 1, 16, 16
    x, dt, A, B, C = _inputs(b, l, h, p, g, n, seed=0)
    bias = torch.randn(h) * 0.2
    h0 = torch.randn(b, h, p, n)
    seq = torch.zeros(b, l, dtype=torch.int32)
    seq[:, 20:] = 1
    seq[0, 38:] = -1
    seq[1, 28:33] = -1
    got = _stages(x, dt, A, B, seq, Q, bias, h0)
    with pytest.MonkeyPatch.context() as mp:  # the same calls on the PyTorch stages
        mp.setenv("MAMBA_SSM_BACKEND", "torch")
        want = _stages(x, dt, A, B, seq, Q, bias, h0)
    for name, a, w in zip(("dA_cumsum", "dt_out", "chunk states", "entering states", "final"), got, want):
        _close(a, w, name)
    _, f_ref = R.ssd_recurrence(
        x, dt, A, B, C, dt_bias=bias, initial_states=h0, seq_idx=seq, dt_softplus=True
    )
    _close(got[4].view(f_ref.shape), f_ref, "final vs recurrence")


def test_chunk_state_varlen_on_triton(on_triton):
    l, h, p, g, n, Q = 50, 2, 4, 1, 16, 16
    x, dt, A, B, C = _inputs(1, l, h, p, g, n, seed=1)
    cu = torch.tensor([0, 12, 12, 30, 41])  # an empty sequence; rows 41.. are padding
    seq = seq_idx_from_cu_seqlens(cu, l)
    cs, d, S, H, _ = _stages(x, dt, A, B, seq, Q, None, torch.zeros(1, h, p, n))
    got = ssd_chunk_state.chunk_state_varlen(B[0], x[0], d[0], cs[0], cu, H[0].view(S.shape[1:]))
    ends = [None if e == s else e - 1 for s, e in zip(cu[:-1].tolist(), cu[1:].tolist())]
    _, _, want = R.ssd_recurrence(x, dt, A, B, C, seq_idx=seq, dt_softplus=True, states_at=ends)
    _close(got, want, "varlen states")


def test_combined_fwd_bwd_entry_points_on_triton(on_triton):
    b, l, h, p, g, n, Q = 1, 37, 2, 8, 1, 16, 16
    x, dt, A, B, C = _inputs(b, l, h, p, g, n, seed=2)
    D, z = torch.randn(h, p), torch.randn(b, l, h, p)
    bias = torch.randn(h) * 0.2
    seq = torch.zeros(b, l, dtype=torch.int32)
    seq[:, 25:] = -1
    out = ssd_combined._mamba_chunk_scan_combined_fwd(
        x, dt, A, B, C, Q, D=D, z=z, dt_bias=bias, seq_idx=seq, dt_softplus=True
    )
    leaves = [t.double().requires_grad_(True) for t in (x, dt, A, B, C, D, z, bias)]
    y_ref, _ = R.ssd_recurrence(
        *leaves[:5], D=leaves[5], z=leaves[6], dt_bias=leaves[7], seq_idx=seq, dt_softplus=True
    )
    _close(out[0], y_ref, "out")
    assert out[2].shape == (b, h, 3, Q) and out[4].shape == (b, 3, h, p, n)
    dout = torch.randn(y_ref.shape, dtype=torch.float64)
    (y_ref * dout).sum().backward()
    grads = ssd_combined._mamba_chunk_scan_combined_bwd(
        dout.float(), x, dt, A, B, C, out[0], Q, D=D, z=z, dt_bias=bias, seq_idx=seq, dt_softplus=True
    )
    for name, got, leaf in zip(("x", "dt", "A", "B", "C", "D", "z", "dt_bias"), grads, leaves):
        _close(got, leaf.grad, f"d{name}", 5e-4)


def test_state_dtype_on_triton(on_triton):
    x, dt, A, B, C = _inputs(1, 40, 2, 8, 1, 16, seed=3)
    full = ssd_combined.mamba_chunk_scan_combined(x, dt, A, B, C, 16, dt_softplus=True)
    same = ssd_combined.mamba_chunk_scan_combined(
        x, dt, A, B, C, 16, dt_softplus=True, state_dtype=torch.float32
    )
    rounded = ssd_combined.mamba_chunk_scan_combined(
        x, dt, A, B, C, 16, dt_softplus=True, state_dtype=torch.bfloat16
    )
    assert torch.equal(full, same) and not torch.equal(full, rounded)
    _close(rounded, full, "state_dtype=bfloat16", 3e-2)
