"""The PyTorch fallback's CPU choices (issue 13): the thread count of its core, the segment plan.

Correctness of the chunked scan itself is test_ops_selective_scan.py's (against the float64 loop).
"""

from __future__ import annotations

import pytest
import torch

from mamba_ssm._families.selective_scan import torch_impl as torch_scan


def _inputs(batch=2, dim=4, d_state=3, seqlen=40, requires_grad=False):
    g = torch.Generator().manual_seed(0)
    u = torch.randn(batch, dim, seqlen, generator=g)
    delta = torch.rand(batch, dim, seqlen, generator=g)
    A = -torch.rand(dim, d_state, generator=g) - 0.1
    B = torch.randn(batch, d_state, seqlen, generator=g)
    C = torch.randn(batch, d_state, seqlen, generator=g)
    return [x.requires_grad_(requires_grad) for x in (u, delta, A, B, C)]


def _threads_seen_by_core(monkeypatch):
    """Wraps the core's state passes to record torch.get_num_threads() while they run."""
    seen = []
    fwd, rev = torch_scan._forward_states, torch_scan._reverse_states

    def fwd_spy(*a, **k):
        seen.append(("fwd", torch.get_num_threads()))
        return fwd(*a, **k)

    def rev_spy(*a, **k):
        seen.append(("rev", torch.get_num_threads()))
        return rev(*a, **k)

    monkeypatch.setattr(torch_scan, "_forward_states", fwd_spy)
    monkeypatch.setattr(torch_scan, "_reverse_states", rev_spy)
    return seen


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def test_core_runs_single_threaded_and_restores(monkeypatch, two_threads):
    """Forward and backward core ops run at one thread; torch's count is back afterwards."""
    monkeypatch.delenv("MAMBA_SSM_SCAN_THREADS", raising=False)
    seen = _threads_seen_by_core(monkeypatch)
    xs = _inputs(requires_grad=True)
    y = torch_scan.selective_scan(*xs)
    assert torch.get_num_threads() == 2
    y.sum().backward()
    assert torch.get_num_threads() == 2
    kinds = {k for k, _ in seen}
    assert kinds == {"fwd", "rev"} and all(n == 1 for _, n in seen), seen


@pytest.mark.parametrize("value, expected", [("0", 2), ("2", 2), ("1", 1)])
def test_scan_threads_env(monkeypatch, two_threads, value, expected):
    monkeypatch.setenv("MAMBA_SSM_SCAN_THREADS", value)
    seen = _threads_seen_by_core(monkeypatch)
    torch_scan.selective_scan(*_inputs())
    assert seen and all(n == expected for _, n in seen), seen
    assert torch.get_num_threads() == 2


@pytest.mark.parametrize("value", ["two", "-1"])
def test_scan_threads_env_rejects_bad_values(monkeypatch, value):
    monkeypatch.setenv("MAMBA_SSM_SCAN_THREADS", value)
    with pytest.raises(ValueError, match=f"MAMBA_SSM_SCAN_THREADS={value!r}"):
        torch_scan.selective_scan(*_inputs())


def test_threads_restored_when_the_core_raises(monkeypatch, two_threads):
    monkeypatch.delenv("MAMBA_SSM_SCAN_THREADS", raising=False)

    def boom(*a, **k):
        raise RuntimeError("boom")

    monkeypatch.setattr(torch_scan, "_forward_states", boom)
    with pytest.raises(RuntimeError, match="boom"):
        torch_scan.selective_scan(*_inputs())
    assert torch.get_num_threads() == 2


def test_cpu_segments_grow_with_the_step_size(monkeypatch):
    """256 timesteps' worth of buffers, clamped to 8-64 MiB: narrow models get 256+ step segments (a
    fixed 8 MiB gave 160 at dim 64), wide ones stay within 64 MiB."""
    monkeypatch.delenv("MAMBA_SSM_SCAN_MEMORY_MB", raising=False)
    per_step = lambda b, d, n: b * d * n * 4 * torch_scan._BUFFERS
    seg, chunk = torch_scan.plan_chunks(2, 64, 16, 100_000)
    assert seg >= 256 and seg % chunk == 0
    assert seg * per_step(2, 64, 16) <= 64 * 2**20
    seg, _ = torch_scan.plan_chunks(1, 1536, 16, 100_000)
    assert 64 * 2**20 // 2 < seg * per_step(1, 1536, 16) <= 64 * 2**20
    seg, _ = torch_scan.plan_chunks(1, 4, 1, 100_000)  # tiny steps: the 8 MiB floor
    assert seg * per_step(1, 4, 1) > 4 * 2**20
    seg, _ = torch_scan.plan_chunks(2, 64, 16, 300)  # never longer than the sequence
    assert seg <= 300
    monkeypatch.setenv("MAMBA_SSM_SCAN_MEMORY_MB", "8")
    seg, _ = torch_scan.plan_chunks(2, 64, 16, 100_000)
    assert seg * per_step(2, 64, 16) <= 8 * 2**20
