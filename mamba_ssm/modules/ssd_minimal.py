"""The minimal SSD algorithm of Mamba-2 (Dao & Gu, arXiv:2405.21060, section 6 "SSD algorithm"),
with upstream's import path ``mamba_ssm.modules.ssd_minimal``: a short, readable form of the chunked
algorithm in plain PyTorch, for study and as a cross-check of the fused scan.

It works on the *discretised* SSM (the caller has already multiplied by dt):

    h_t = exp(A_t) h_{t-1} + B_t X_t^T        h_t: (d_head, d_state) per head
    Y_t = h_t C_t

The sequence is cut into blocks of ``block_len``; the paper's four steps are

1. the diagonal blocks: inside a block, Y = (L o C B^T) X with the 1-semiseparable decay matrix
   ``L[i, j] = exp(A_{j+1} + ... + A_i)`` (i >= j, zero above the diagonal);
2. each block's end state from its own inputs, decayed to the end of the block;
3. the recurrence across blocks (itself a 1-SS matrix over the block end states);
4. the off-diagonal blocks: each position reads the state entering its block, decayed to itself.
"""

from __future__ import annotations

import torch

__all__ = ["segsum", "segsum_unstable", "ssd_minimal_discrete", "test_correctness"]


def segsum(x: torch.Tensor) -> torch.Tensor:
    """Stable segment sums: ``out[..., i, j] = x[..., j+1] + ... + x[..., i]`` for i >= j, -inf above
    the diagonal (so ``exp(out)`` is the lower-triangular decay matrix L of the paper).

    x: (..., T) float. Returns (..., T, T) in x's dtype. Computed as differences of masked cumulative
    sums over the j axis (no subtraction of large cumulative sums, so no cancellation).
    """
    T = x.shape[-1]
    # rep[..., k, j] = x[..., k] where k > j, else 0; the cumulative sum over k up to i is the answer.
    rep = x.unsqueeze(-1).expand(*x.shape, T)
    strictly_below = torch.ones(T, T, dtype=torch.bool, device=x.device).tril(-1)
    out = torch.cumsum(rep.masked_fill(~strictly_below, 0), dim=-2)
    on_or_below = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    return out.masked_fill(~on_or_below, float("-inf"))


def segsum_unstable(x: torch.Tensor) -> torch.Tensor:
    """:func:`segsum` the direct way, ``cumsum(x)_i - cumsum(x)_j`` (i >= j, -inf above the diagonal):
    the same values, but the difference of two large cumulative sums loses precision on long sequences
    (the paper's "naive" form, kept for comparison)."""
    T = x.shape[-1]
    cs = torch.cumsum(x, dim=-1)
    out = cs.unsqueeze(-1) - cs.unsqueeze(-2)
    on_or_below = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
    return out.masked_fill(~on_or_below, float("-inf"))


def ssd_minimal_discrete(
    X: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    block_len: int,
    initial_states: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chunked SSD on the discretised SSM (arXiv:2405.21060, section 6).

    Args:
        X: (batch, length, n_heads, d_head), the input already multiplied by dt.
        A: (batch, length, n_heads), the log-decay dt * A (<= 0 for a stable SSM).
        B, C: (batch, length, n_heads, d_state) (one group per head; repeat groups beforehand).
        block_len: the block (chunk) length; ``length`` must be a multiple of it.
        initial_states: (batch, n_heads, d_head, d_state) state before the first step, or None (zeros).

    Returns:
        (Y (batch, length, n_heads, d_head), final_state (batch, n_heads, d_head, d_state)), in X's dtype.

    Raises:
        TypeError: the four inputs do not share one floating dtype.
        ValueError: shapes that disagree, or ``length`` not a multiple of ``block_len``.
    """
    if not (X.dtype == A.dtype == B.dtype == C.dtype) or not X.is_floating_point():
        raise TypeError(
            f"ssd_minimal_discrete: X, A, B, C must share one float dtype, got {X.dtype}, "
            f"{A.dtype}, {B.dtype}, {C.dtype}; cast them (e.g. .double())"
        )
    if X.dim() != 4:
        raise ValueError(
            f"ssd_minimal_discrete: X must be (batch, length, n_heads, d_head), got {tuple(X.shape)}"
        )
    b, l, h, p = X.shape
    if tuple(A.shape) != (b, l, h):
        raise ValueError(f"ssd_minimal_discrete: A must have shape {(b, l, h)}, got {tuple(A.shape)}")
    if B.dim() != 4 or B.shape[:3] != (b, l, h) or C.shape != B.shape:
        raise ValueError(
            f"ssd_minimal_discrete: B and C must both be ({b}, {l}, {h}, d_state), got "
            f"{tuple(B.shape)} and {tuple(C.shape)}"
        )
    if not isinstance(block_len, int) or block_len < 1 or l % block_len:
        raise ValueError(
            f"ssd_minimal_discrete: length {l} must be a multiple of block_len={block_len!r}; "
            f"pad the sequence or pick a divisor"
        )
    n = B.shape[-1]
    c = l // block_len
    # (batch, chunks, block, ...); A as (batch, heads, chunks, block).
    Xc = X.reshape(b, c, block_len, h, p)
    Bc = B.reshape(b, c, block_len, h, n)
    Cc = C.reshape(b, c, block_len, h, n)
    Ac = A.reshape(b, c, block_len, h).permute(0, 3, 1, 2)
    A_cum = torch.cumsum(Ac, dim=-1)

    # 1. Diagonal blocks: Y_diag[i] = sum_{j <= i} (C_i . B_j) L[i, j] X_j.
    L = torch.exp(segsum(Ac))  # (b, h, c, i, j)
    Y_diag = torch.einsum("bcihn,bcjhn,bhcij,bcjhp->bcihp", Cc, Bc, L, Xc)

    # 2. Each block's end state from its own inputs.
    decay_to_end = torch.exp(A_cum[..., -1:] - A_cum)  # (b, h, c, j)
    states = torch.einsum("bcjhn,bhcj,bcjhp->bchpn", Bc, decay_to_end, Xc)

    # 3. Across blocks: the state entering block k, from the initial state and earlier blocks' ends.
    if initial_states is None:
        initial_states = torch.zeros(b, h, p, n, dtype=X.dtype, device=X.device)
    elif tuple(initial_states.shape) != (b, h, p, n):
        raise ValueError(
            f"ssd_minimal_discrete: initial_states must have shape {(b, h, p, n)}, got "
            f"{tuple(initial_states.shape)}"
        )
    states = torch.cat([initial_states.to(X.dtype).unsqueeze(1), states], dim=1)  # (b, c+1, h, p, n)
    block_decay = torch.nn.functional.pad(A_cum[..., -1], (1, 0))  # (b, h, c+1)
    across = torch.exp(segsum(block_decay))  # (b, h, c+1, c+1)
    carried = torch.einsum("bhzc,bchpn->bzhpn", across, states)
    entering, final_state = carried[:, :-1], carried[:, -1]

    # 4. Off-diagonal blocks: position i of block k reads the entering state decayed to i.
    decay_in = torch.exp(A_cum)  # (b, h, c, i)
    Y_off = torch.einsum("bcihn,bchpn,bhci->bcihp", Cc, entering, decay_in)

    Y = (Y_diag + Y_off).reshape(b, l, h, p)
    return Y, final_state


def test_correctness(  # upstream's signature and defaults (PT028: a pytest-style name, not a test)
    batch: int = 2,  # noqa: PT028
    seqlen: int = 128,  # noqa: PT028
    chunk_size: int = 32,  # noqa: PT028
    dim: int = 64,  # noqa: PT028
    headdim: int = 16,  # noqa: PT028
    dstate: int = 8,  # noqa: PT028
    seed: int = 0,  # noqa: PT028
) -> None:
    """Check :func:`ssd_minimal_discrete` against ``mamba_chunk_scan_combined`` on random inputs (upstream
    ships this check as a function): on the GPU when one is available, else on the CPU, in float32.

    Raises:
        AssertionError: the outputs differ by more than float32 rounding.
    """
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    device = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator(device="cpu").manual_seed(seed)
    nheads = dim // headdim
    x = torch.randn(batch, seqlen, nheads, headdim, generator=g).to(device)
    dt = torch.nn.functional.softplus(torch.randn(batch, seqlen, nheads, generator=g) - 4).to(device)
    A = (-torch.exp(torch.rand(nheads, generator=g))).to(device)
    B = torch.randn(batch, seqlen, nheads, dstate, generator=g).to(device)
    C = torch.randn(batch, seqlen, nheads, dstate, generator=g).to(device)
    want = mamba_chunk_scan_combined(x, dt, A, B, C, chunk_size)
    got, _ = ssd_minimal_discrete(x * dt.unsqueeze(-1), A * dt, B, C, chunk_size)
    err = float((got - want).abs().max())
    scale = float(want.abs().max())
    assert err <= 1e-3 * max(scale, 1.0), (  # noqa: S101 - upstream's check raises AssertionError
        f"ssd_minimal_discrete vs mamba_chunk_scan_combined: max error {err:.3g}"
    )
