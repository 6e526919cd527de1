"""Seeded selective-scan inputs shared by the programs in this folder (imported by them, not run)."""

import torch


def scan_inputs(seed, batch, dim, dstate, seqlen):
    """The eight float32 CPU tensors of ``selective_scan_fn(u, delta, A, B, C, D, z, delta_bias)``.

    Drawn in that order from a generator seeded with ``seed``: u, B, C, z standard normal; delta in
    [0, 0.5); A in (-1.5, -0.5] of shape (dim, dstate); D normal of shape (dim,); delta_bias in [0, 0.1).
    u, delta, z are (batch, dim, seqlen); B, C are (batch, dstate, seqlen).
    """
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(batch, dim, seqlen, generator=g)
    delta = torch.rand(batch, dim, seqlen, generator=g) * 0.5
    A = -torch.rand(dim, dstate, generator=g) - 0.5
    B = torch.randn(batch, dstate, seqlen, generator=g)
    C = torch.randn(batch, dstate, seqlen, generator=g)
    D = torch.randn(dim, generator=g)
    z = torch.randn(batch, dim, seqlen, generator=g)
    delta_bias = torch.rand(dim, generator=g) * 0.1
    return u, delta, A, B, C, D, z, delta_bias
