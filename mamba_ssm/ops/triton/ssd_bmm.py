"""Upstream's ``mamba_ssm.ops.triton.ssd_bmm``: the chunked matrix products of the SSD (Dao & Gu,
arXiv:2405.21060, section 6: the C B^T blocks of the diagonal chunks), in PyTorch
(:mod:`mamba_ssm._families.ssd.torch_impl`; the Triton SSD kernels compute them inside their fused
chunk-scan kernel rather than as a separate stage).

    out[b, c, (g,) i, j] = a[b, c * Q + i, (g,)] . b[b, c * Q + j, (g,)]     i, j in [0, Q)
"""

from __future__ import annotations

from typing import Optional

import torch

from mamba_ssm._families.ssd import torch_impl as S
from mamba_ssm.ops.triton._helpers import init_to_zero, require

__all__ = ["_bmm_chunk_bwd", "_bmm_chunk_fwd", "init_to_zero"]


def _bmm_chunk_fwd(
    a: torch.Tensor,
    b: torch.Tensor,
    chunk_size: int,
    seq_idx: Optional[torch.Tensor] = None,
    causal: bool = False,
    output_dtype: Optional[torch.dtype] = None,
) -> torch.Tensor:
    """The per-chunk products ``a_i . b_j``.

    Args:
        a, b: (batch, seqlen, k) or (batch, seqlen, ngroups, k), the same shape. chunk_size: Q.
        seq_idx: (batch, seqlen) or None: products of positions of different sequences are 0.
        causal: products with j > i are 0. output_dtype: default a's dtype.

    Returns:
        (batch, nchunks, Q, Q) or (batch, nchunks, ngroups, Q, Q) (positions past seqlen give 0).
    """
    require("_bmm_chunk_fwd", "a", a, (None,) * a.dim())
    if a.dim() not in (3, 4) or b.shape != a.shape:
        raise ValueError(
            f"_bmm_chunk_fwd: a and b must both be (batch, seqlen, [ngroups,] k), got {tuple(a.shape)} "
            f"and {tuple(b.shape)}"
        )
    if seq_idx is not None:
        require("_bmm_chunk_fwd", "seq_idx", seq_idx, tuple(a.shape[:2]))
    return S.bmm_chunk(a, b, chunk_size, seq_idx, causal).to(output_dtype or a.dtype)


def _bmm_chunk_bwd(
    a: torch.Tensor,
    dout: torch.Tensor,
    residual: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The gradient of the other factor of :func:`_bmm_chunk_fwd`: ``out[s] = sum_l dout[..., l, s] a_l``
    within each chunk (so ``_bmm_chunk_bwd(C, dCB)`` is dB for CB = C B^T), plus ``residual``.

    Args:
        a: (batch, seqlen, [ngroups,] k). dout: (batch, nchunks, [ngroups,] Q, Q). residual: a's shape
        or None. out: a tensor of a's shape to write into, or None.

    Returns:
        a's shape, in a's dtype (or out's).
    """
    grouped = a.dim() == 4
    batch, seqlen = a.shape[:2]
    q = dout.shape[-1]
    nc = dout.shape[1]
    require("_bmm_chunk_bwd", "dout", dout, (batch, nc, *((a.shape[2],) if grouped else ()), q, q))
    cd = S.compute_dtype(a, dout)
    ac = S.chunked(a.to(cd), q)  # (batch, nchunks, Q, [g,] k)
    if grouped:
        got = torch.einsum("bcgls,bclgk->bcsgk", dout.to(cd), ac)
    else:
        got = torch.einsum("bcls,bclk->bcsk", dout.to(cd), ac)
    got = got.reshape(batch, nc * q, *a.shape[2:])[:, :seqlen]
    if residual is not None:
        require("_bmm_chunk_bwd", "residual", residual, tuple(a.shape))
        got = got + residual.to(cd)
    if out is not None:
        require("_bmm_chunk_bwd", "out", out, tuple(a.shape))
        out.copy_(got)
        return out
    return got.to(a.dtype)
