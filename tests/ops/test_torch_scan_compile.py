"""The PyTorch fallback of the selective scan under ``torch.compile(fullgraph=True)``: the same values
and gradients as eager, also from an initial state; and the scan reaches the graph as one op, so the
graph (and the compile time) does not grow with seqlen (tracing it step by step unrolled every Python
loop of the chunked scan, and Dynamo refuses out= calls on views it cannot prove contiguous)."""

from __future__ import annotations

import pytest
import torch

import mamba_ssm
from mamba_ssm._families.selective_scan import torch_impl as torch_scan
from mamba_ssm.ops import selective_scan_interface as ssi

pytestmark = pytest.mark.skipif(
    not hasattr(torch.library, "custom_op"),
    reason="needs torch.compile and torch.library.custom_op (torch >= 2.4)",
)


@pytest.fixture(autouse=True)
def _torch_backend():
    prev = mamba_ssm.set_backend("torch")
    torch._dynamo.reset()
    yield
    mamba_ssm.set_backend(prev)
    torch._dynamo.reset()


def _inputs(seqlen, batch=2, dim=4, d_state=3, groups=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return dict(
        u=torch.randn(batch, dim, seqlen, generator=g),
        delta=torch.rand(batch, dim, seqlen, generator=g) * 0.8 - 0.4,
        A=-torch.rand(dim, d_state, generator=g) - 0.1,
        B=torch.randn(batch, groups, d_state, seqlen, generator=g),
        C=torch.randn(batch, groups, d_state, seqlen, generator=g),
        D=torch.randn(dim, generator=g),
        z=torch.randn(batch, dim, seqlen, generator=g),
        delta_bias=torch.randn(dim, generator=g) * 0.2,
    )


def _scan(u, delta, A, B, C, D, z, delta_bias):
    return ssi.selective_scan_fn(
        u, delta, A, B, C, D=D, z=z, delta_bias=delta_bias, delta_softplus=True, return_last_state=True
    )


def _run(fn, inputs, wrt):
    leaves = {k: v.clone().requires_grad_(k in wrt) for k, v in inputs.items()}
    out, last = fn(**leaves)
    w = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
    (out * w).sum().add(last.sum()).backward()
    return out.detach(), last.detach(), {k: leaves[k].grad for k in wrt}


@pytest.mark.parametrize("budget_mb", [None, "0.002"])  # one segment; several segments and a tail
def test_compiled_fullgraph_equals_eager(monkeypatch, budget_mb):
    if budget_mb:
        monkeypatch.setenv("MAMBA_SSM_SCAN_MEMORY_MB", budget_mb)
    inputs = _inputs(150)
    wrt = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")
    eager = _run(_scan, inputs, wrt)
    compiled = _run(torch.compile(_scan, fullgraph=True, backend="aot_eager"), inputs, wrt)
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(compiled[1], eager[1], rtol=1e-6, atol=1e-6)
    for k in wrt:
        torch.testing.assert_close(compiled[2][k], eager[2][k], rtol=1e-5, atol=1e-5, msg=k)
    # and eager is right: the float64 sequential loop
    ref_out, ref_last = ssi.selective_scan_ref(
        **{k: v.double() for k, v in inputs.items()}, delta_softplus=True, return_last_state=True
    )
    torch.testing.assert_close(compiled[0].double(), ref_out, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(compiled[1].double(), ref_last, rtol=1e-4, atol=1e-4)


def test_compiled_with_initial_state_equals_eager():
    inputs = _inputs(40, groups=1)
    inputs.pop("B"), inputs.pop("C")
    g = torch.Generator().manual_seed(7)
    inputs.update(
        B=torch.randn(2, 3, 40, generator=g),
        C=torch.randn(2, 3, 40, generator=g),
        initial_state=torch.randn(2, 4, 3, generator=g),
    )

    def fn(u, delta, A, B, C, D, z, delta_bias, initial_state):
        return torch_scan.selective_scan_with_state(
            u, delta, A, B, C, D, z, delta_bias, True, initial_state=initial_state
        )

    wrt = ("u", "B", "initial_state")
    eager = _run(fn, inputs, wrt)
    compiled = _run(torch.compile(fn, fullgraph=True, backend="aot_eager"), inputs, wrt)
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(compiled[1], eager[1], rtol=1e-6, atol=1e-6)
    for k in wrt:
        torch.testing.assert_close(compiled[2][k], eager[2][k], rtol=1e-5, atol=1e-5, msg=k)


def test_graph_does_not_grow_with_seqlen():
    sizes = {}
    for seqlen in (64, 1024):
        nodes = []

        def count(gm, example_inputs):
            nodes.append(len(gm.graph.nodes))
            return gm.forward

        torch._dynamo.reset()
        inputs = _inputs(seqlen)
        with torch.no_grad():
            torch.compile(_scan, fullgraph=True, backend=count)(**inputs)
        sizes[seqlen] = sum(nodes)
    assert sizes[64] == sizes[1024] and sizes[64] < 80, sizes
