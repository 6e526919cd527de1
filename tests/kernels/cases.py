"""Inputs of the kernel tests (shared by the CPU and GPU tests)."""

import collections
import hashlib
import itertools

import torch
from oracles import selective_scan as selective_scan_ref64

BC_KINDS = ("constant", "variable", "grouped1", "grouped2")


def make_inputs(batch, dim, seqlen, d_state, bc, has_D, has_z, has_bias, dtype, device="cpu", seed=0):
    """Random inputs in the ranges Mamba uses: A < 0, delta around softplus's range."""
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=1.0, dt=dtype):
        return (torch.randn(*shape, generator=g) * scale).to(dt).to(device)

    u = rnd(batch, dim, seqlen)
    delta = (torch.rand(batch, dim, seqlen, generator=g) * 1.5 - 0.5).to(dtype).to(device)
    A = (-torch.rand(dim, d_state, generator=g) * 2 - 0.1).to(device)
    if bc == "constant":
        B, C = rnd(dim, d_state, dt=torch.float32), rnd(dim, d_state, dt=torch.float32)
    elif bc == "variable":
        B, C = rnd(batch, d_state, seqlen), rnd(batch, d_state, seqlen)
    else:
        groups = int(bc[-1])
        B, C = rnd(batch, groups, d_state, seqlen), rnd(batch, groups, d_state, seqlen)
    D = rnd(dim, dt=torch.float32) if has_D else None
    z = rnd(batch, dim, seqlen) if has_z else None
    bias = (torch.rand(dim, generator=g) * 0.5 - 0.25).to(device) if has_bias else None
    return u, delta, A, B, C, D, z, bias


def tolerances(dtype):
    """(rtol, atol) for outputs whose scale is ~1: fp32 accumulates rounding over seqlen; fp16/bf16
    outputs are rounded to 11 / 8 significant bits."""
    return {torch.float32: (2e-4, 2e-4), torch.float16: (5e-3, 5e-3), torch.bfloat16: (2e-2, 2e-2)}[dtype]


def assert_close(actual, expected, dtype, what, scale_floor=1.0):
    """Compare against a float64 reference with a tolerance relative to the reference's scale."""
    rtol, atol = tolerances(dtype)
    expected = expected.double()
    actual = actual.detach().double().to(expected.device)
    scale = max(expected.abs().max().item(), scale_floor) if expected.numel() else 1.0
    err = (actual - expected).abs()
    bound = atol * scale + rtol * expected.abs()
    bad = err > bound
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {bad.numel()} elements off; max error {err.max().item():.3e} "
        f"(scale {scale:.3e}, dtype {dtype})"
    )


#: float64 references already computed, by input (see ``_reference``); least recently used dropped first.
_REFERENCES: "collections.OrderedDict[tuple, tuple]" = collections.OrderedDict()
_REFERENCES_KEPT = 256
_NAMES = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")


def _input_key(args, softplus, grads, last_state):
    """What the reference depends on: every input's dtype, shape and bytes, and the options."""
    h = hashlib.sha256()
    for x in args:
        if x is None:
            h.update(b"none;")
            continue
        x = x.detach().cpu().contiguous()
        h.update(f"{x.dtype}{tuple(x.shape)};".encode())
        h.update(x.reshape(-1).view(torch.uint8).numpy().tobytes())
    return (h.hexdigest(), bool(softplus), bool(grads), bool(last_state))


def _reference(args, softplus, grads, last_state):
    """(out, last_state, {input name: gradient} or None, g_out, g_last) of the float64 sequential
    reference on ``args`` (the loss of the gradients: sum(out * g_out) (+ sum(last * g_last))).

    Computed once per distinct input: the per-ISA CPU tests hand identical inputs to each build of the
    kernel, and the reference (autograd through a Python loop over time) costs far more than the kernel."""
    key = _input_key(args, softplus, grads, last_state)
    if key in _REFERENCES:
        _REFERENCES.move_to_end(key)
        return _REFERENCES[key]
    ref_leaves = [None if x is None else x.detach().double().cpu().requires_grad_(grads) for x in args]
    ref_out, ref_last = selective_scan_ref64(*ref_leaves, delta_softplus=softplus)
    ref_grads = None
    gen = torch.Generator().manual_seed(1)
    g_out = torch.randn(ref_out.shape, generator=gen, dtype=torch.float64)
    g_last = torch.randn(ref_last.shape, generator=gen, dtype=torch.float64)
    if grads:
        ref_loss = (ref_out * g_out).sum() + ((ref_last * g_last).sum() if last_state else 0)
        ref_loss.backward()
        ref_grads = {n: r.grad for n, r in zip(_NAMES, ref_leaves) if r is not None}
    entry = (ref_out.detach(), ref_last.detach(), ref_grads, g_out, g_last)
    _REFERENCES[key] = entry
    if len(_REFERENCES) > _REFERENCES_KEPT:
        _REFERENCES.popitem(last=False)
    return entry


def run_and_check(backend, args, softplus, dtype, grads=True, last_state=True):
    """Forward (+ backward through out and last_state) against the float64 reference."""
    u, delta, A, B, C, D, z, bias = args
    leaves = [None if x is None else x.detach().clone().requires_grad_(grads) for x in args]
    out, last = backend.selective_scan(*leaves, delta_softplus=softplus, return_last_state=True)
    assert out.dtype == u.dtype and out.shape == u.shape
    assert last.dtype == torch.float32 and last.shape == (u.shape[0], u.shape[1], A.shape[1])
    ref_out, ref_last, ref_grads, g_out, g_last = _reference(args, softplus, grads, last_state)
    assert_close(out, ref_out, dtype, "out")
    if last_state:
        assert_close(last, ref_last, dtype, "last_state")
    if not grads:
        return
    dev = u.device
    loss = (out.double() * g_out.to(dev)).sum()
    if last_state:
        loss = loss + (last.double() * g_last.to(dev)).sum()
    loss.backward()
    for name, x in zip(_NAMES, leaves):
        if x is None:
            continue
        assert x.grad is not None, f"no gradient for {name}"
        assert x.grad.dtype == x.dtype and x.grad.shape == x.shape, name
        assert_close(x.grad, ref_grads[name], dtype, f"d{name}")


def forward_grid():
    """The full forward product of the runtime issue: seqlen x batch x B/C kind x D x z x bias x softplus."""
    return itertools.product(
        (1, 2, 3, 127, 128, 129), (1, 2), BC_KINDS, (False, True), (False, True), (False, True), (False, True)
    )
