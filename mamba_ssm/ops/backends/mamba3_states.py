"""Mamba-3's recurrent state record and the helpers its PyTorch path and its Triton kernels share
(:mod:`mamba_ssm.ops.triton.mamba3.mamba3_torch`, :mod:`mamba_ssm.ops.triton._kernels.mamba3`): the
state between calls, the rotation of d_state pairs by the data-dependent angles (Mamba-3, arXiv
2603.15569: the complex-valued state as a rotary embedding), packed sequences run one at a time, and
the padding tokens of packed sequences (the rule of :mod:`mamba_ssm.ops.backends._packing`: seq_idx
:data:`~mamba_ssm.ops.backends._packing.PADDING`, output 0, no state read or written). torch only (no
triton), so both paths import it.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

__all__ = ["Mamba3States", "compute_dtype", "drop_padding", "per_sequence", "rotate"]


class Mamba3States(NamedTuple):
    """The recurrent state between calls (one row per sequence): ``angle`` (S, nheads, num_angles),
    ``ssm`` (S, nheads, headdim, d_state), ``k`` (S, R, nheads, d_state) (the last rotated, biased key),
    ``v`` (S, nheads, headdim) (the last value, before mimo_x)."""

    angle: torch.Tensor
    ssm: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor


def compute_dtype(t: torch.Tensor) -> torch.dtype:
    """float64 for float64 tensors, else float32."""
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def rotate(x, theta, pairing):
    """x (..., n) turned by theta (..., a) (broadcast against x's leading dims): pair i of
    ``"adjacent"`` is (2i, 2i+1), of ``"halves"`` (i, i + n/2), for i < a; other entries unchanged.
    Each pair (x1, x2) becomes (x1 cos - x2 sin, x1 sin + x2 cos)."""
    a = theta.shape[-1]
    n = x.shape[-1]
    cos, sin = torch.cos(theta), torch.sin(theta)
    if pairing == "adjacent":
        x1, x2 = x[..., 0 : 2 * a : 2], x[..., 1 : 2 * a : 2]
        r1, r2 = x1 * cos - x2 * sin, x1 * sin + x2 * cos
        return torch.cat([torch.stack([r1, r2], dim=-1).flatten(-2), x[..., 2 * a :]], dim=-1)
    half = n // 2
    x1, x2 = x[..., :a], x[..., half : half + a]
    r1, r2 = x1 * cos - x2 * sin, x1 * sin + x2 * cos
    return torch.cat([r1, x[..., a:half], r2, x[..., half + a :]], dim=-1)


def drop_padding(
    out: torch.Tensor, states: Optional[Mamba3States], seq_idx: Optional[torch.Tensor]
) -> tuple[torch.Tensor, Optional[Mamba3States]]:
    """The chunked scan's results with padding (``seq_idx`` (b, l) < 0) taken out: ``out`` (b, l, ...)
    is 0 on padding rows (so no gradient flows from them), and ``states`` (a :class:`Mamba3States` of
    each row's end, or None) is zero for a row whose last token is padding (it ends in no sequence, as
    Mamba-2's final state). Returns (out, states)."""
    if seq_idx is None:
        return out, states
    real = (seq_idx >= 0).to(out.device)
    out = torch.where(real.view(*real.shape, *([1] * (out.dim() - 2))), out, out.new_zeros(()))
    if states is not None:
        ends = real[:, -1]
        states = Mamba3States(
            *(torch.where(ends.view(-1, *([1] * (s.dim() - 1))), s, s.new_zeros(())) for s in states)
        )
    return out, states


def per_sequence(scan, arguments, initial_states, cu_seqlens, return_final_states):
    """Packed sequences (batch 1, ``cu_seqlens``, checked) one at a time through ``scan`` (a chunked
    scan with the arguments of :func:`mamba_ssm.ops.triton.mamba3.mamba3_torch.mamba3_chunk_scan_torch`;
    ``arguments``: its keyword arguments but initial_states, seq_idx, cu_seqlens and
    return_final_states): each sequence starts from its row of ``initial_states`` (zeros when None) and
    ends in its own final state (an empty sequence's is its initial state, zero when None); the rows
    after ``cu_seqlens[-1]`` are padding: output 0, never scanned. Returns what that function returns."""
    v, q = arguments["v"], arguments["q"]
    cdtype = compute_dtype(v)
    R, n, h, p = q.shape[2], q.shape[-1], v.shape[2], v.shape[3]
    a = arguments["angles"].shape[-1]
    outs, finals = [], []
    bounds = cu_seqlens.to(torch.long).tolist()
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        init = None if initial_states is None else Mamba3States(*(s[i : i + 1] for s in initial_states))
        if hi == lo:
            if init is None:
                init = Mamba3States(
                    v.new_zeros(1, h, a, dtype=cdtype),
                    v.new_zeros(1, h, p, n, dtype=cdtype),
                    v.new_zeros(1, R, h, n, dtype=cdtype),
                    v.new_zeros(1, h, p),
                )
            finals.append(init)
            continue
        one = dict(arguments)
        for key in ("q", "k", "v", "angles", "z"):
            if one[key] is not None:
                one[key] = one[key][:, lo:hi]
        for key in ("adt", "dt", "trap"):
            one[key] = one[key][..., lo:hi]
        res = scan(**one, initial_states=init, return_final_states=True)
        outs.append(res[0])
        finals.append(res[1])
    token = (h, p) if arguments.get("mimo_o") is not None else (R, h, p)
    outs.append(v.new_zeros(1, v.shape[1] - bounds[-1], *token))  # the padding rows
    out = torch.cat(outs, dim=1)
    if not return_final_states:
        return out
    return out, Mamba3States(
        *(torch.cat([f[i].to(cdtype if i < 3 else v.dtype) for f in finals]) for i in range(4))
    )
