"""The SSD's gradients through autograd of the PyTorch stages (:mod:`.torch_impl`): the helper the stage
modules' backward pieces use (:func:`grads`), the in-chunk output and chunk-state gradients together
(``_chunk_scan_chunk_state_bwd_dx``), and the PyTorch form of the call ``ssd_chunk_scan_bwd``
(``_mamba_chunk_scan_combined_bwd``: the forward recomputed with a graph and differentiated).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union

import torch

from mamba_ssm._families.ssd import torch_combined as T
from mamba_ssm._families.ssd import torch_impl as S

__all__ = [
    "Grads",
    "GradsAndOut",
    "chunk_scan_chunk_state_bwd_dx",
    "f32",
    "finish_backward",
    "grads",
    "or_zeros",
    "torch_chunk_scan_bwd",
]

_Opt = Optional[torch.Tensor]
#: ``_mamba_chunk_scan_combined_bwd``'s result: (dx, ddt, dA, dB, dC, dD, dz, ddt_bias,
#: dinitial_states), None for an input that is None.
Grads = tuple[_Opt, _Opt, _Opt, _Opt, _Opt, _Opt, _Opt, _Opt, _Opt]
#: The same with out (after the z gate) last (``recompute_output``).
GradsAndOut = tuple[_Opt, _Opt, _Opt, _Opt, _Opt, _Opt, _Opt, _Opt, _Opt, torch.Tensor]


def f32(t: torch.Tensor) -> torch.Tensor:
    """float32, or float64 for float64 (the stages' result dtypes)."""
    return t if t.dtype == torch.float64 else t.float()


def or_zeros(g: Optional[torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """``g``, or zeros of ``like``'s shape in the stages' compute dtype where nothing depended on the
    input (:func:`grads`'s None)."""
    return g if g is not None else torch.zeros_like(like, dtype=S.compute_dtype(like))


def grads(
    fn: Callable[..., Union[torch.Tensor, Sequence[torch.Tensor]]],
    inputs: Sequence[Optional[torch.Tensor]],
    wrt: Sequence[int],
    outputs_grads: Sequence[Optional[torch.Tensor]],
) -> tuple[Optional[torch.Tensor], ...]:
    """The gradients of ``fn(*inputs)``'s outputs, weighted by ``outputs_grads``, with respect to
    ``inputs[i]`` for i in ``wrt`` (float copies of them; None where nothing depends on one).

    Raises:
        TypeError: ``inputs[i]`` is None for an i in ``wrt``."""
    leaves = list(inputs)
    made: dict[int, torch.Tensor] = {}
    for i in wrt:
        t = inputs[i]
        if t is None:
            raise TypeError(f"_grads: input {i} is None; it has no gradient")
        made[i] = leaves[i] = t.detach().to(S.compute_dtype(t)).requires_grad_(True)
    with torch.enable_grad():
        result = fn(*leaves)
    outs = (result,) if isinstance(result, torch.Tensor) else tuple(result)
    pairs = [(o, g) for o, g in zip(outs, outputs_grads) if g is not None]
    got: tuple[Optional[torch.Tensor], ...] = torch.autograd.grad(
        [o for o, _ in pairs],
        [made[i] for i in wrt],
        [g.to(o.dtype) for o, g in pairs],
        allow_unused=True,
    )
    return got


def chunk_scan_chunk_state_bwd_dx(
    x: torch.Tensor,
    dt: torch.Tensor,
    dA_cumsum: torch.Tensor,
    B: torch.Tensor,
    CB: torch.Tensor,
    dout: torch.Tensor,
    dstates: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    seq_idx: Optional[torch.Tensor] = None,
    dx: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """``_chunk_scan_chunk_state_bwd_dx`` (shapes checked by it): the gradients with respect to x, dt
    and D of the in-chunk output term given dout plus those of the chunks' own end states given
    dstates: (dx in x's dtype (written into ``dx`` when given), ddt float32 (float64 for float64
    inputs), dD in D's dtype or None)."""
    batch, seqlen, nheads, headdim = x.shape
    ngroups, nchunks = B.shape[2], dt.shape[2]
    C0 = x.new_zeros(batch, seqlen, ngroups, 1)  # no state term in the output: it depends on neither x nor dt
    states0 = x.new_zeros(batch, nchunks, nheads, headdim, 1)

    def both(
        x_: torch.Tensor, dt_: torch.Tensor, D_: Optional[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        y = S.chunk_scan(CB, x_, dt_, dA_cumsum, C0, states0, D_, None, seq_idx)[0]
        return y, S.chunk_state(B, x_, dt_, dA_cumsum, seq_idx)

    wrt = [0, 1] + ([2] if D is not None else [])
    got = grads(both, (x, dt, D), wrt, (dout, dstates))
    g_dt = got[1] if got[1] is not None else torch.zeros_like(dt, dtype=S.compute_dtype(dt))
    g_x = or_zeros(got[0], x)
    if dx is not None:
        dx.copy_(g_x)
    else:
        dx = g_x.to(x.dtype)
    dD = or_zeros(got[2], D).to(D.dtype) if D is not None else None
    return dx, f32(g_dt), dD


def finish_backward(
    grads_: list[Optional[torch.Tensor]],
    y: torch.Tensor,
    dx: Optional[torch.Tensor],
    ddt: Optional[torch.Tensor],
    dB: Optional[torch.Tensor],
    dC: Optional[torch.Tensor],
    dz: Optional[torch.Tensor],
    recompute_output: bool,
) -> Union[Grads, GradsAndOut]:
    """The nine gradients written into the buffers given for them (dx, ddt, dB, dC, dz), as
    ``_mamba_chunk_scan_combined_bwd`` returns them (with out last when ``recompute_output``)."""
    for i, buf in ((0, dx), (1, ddt), (3, dB), (4, dC), (6, dz)):
        g = grads_[i]
        if buf is not None and g is not None:
            buf.copy_(g)
            grads_[i] = buf
    g0, g1, g2, g3, g4, g5, g6, g7, g8 = grads_
    if recompute_output:
        return (g0, g1, g2, g3, g4, g5, g6, g7, g8, y)
    return (g0, g1, g2, g3, g4, g5, g6, g7, g8)


def torch_chunk_scan_bwd(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    chunk_size: int,
    D: Optional[torch.Tensor],
    z: Optional[torch.Tensor],
    dt_bias: Optional[torch.Tensor],
    initial_states: Optional[torch.Tensor],
    seq_idx: Optional[torch.Tensor],
    dt_softplus: bool,
    dt_limit: Sequence[float],
    state_dtype: Optional[torch.dtype],
    dout: torch.Tensor,
    dfinal_states: Optional[torch.Tensor],
) -> tuple[list[Optional[torch.Tensor]], torch.Tensor]:
    """``_mamba_chunk_scan_combined_bwd`` in PyTorch: the forward recomputed with a graph and
    differentiated; (the nine gradients in the inputs' dtypes, out in x's dtype)."""
    inputs = [x, dt, A, B, C, D, z, dt_bias, initial_states]
    leaves = [t.detach().requires_grad_(True) if t is not None else None for t in inputs]
    lx, ldt, lA, lB, lC, lD, lz, lbias, linit = leaves
    if lx is None or ldt is None or lA is None or lB is None or lC is None:
        raise TypeError("_mamba_chunk_scan_combined_bwd: x, dt, A, B and C are required")
    with torch.enable_grad():
        r = T.forward(
            lx, ldt, lA, lB, lC, chunk_size, lD, lz, lbias, linit, seq_idx, None, dt_softplus, dt_limit,
            state_dtype,
        )  # fmt: skip
        outs, gouts = [r["out"]], [dout]
        if dfinal_states is not None:
            outs.append(r["final"])
            gouts.append(dfinal_states)
        present = [t for t in leaves if t is not None]
        got = iter(
            torch.autograd.grad(
                outs, present, [g.to(o.dtype) for o, g in zip(outs, gouts)], allow_unused=True
            )
        )
    result: list[Optional[torch.Tensor]] = []  # (dx, ddt, dA, dB, dC, dD, dz, ddt_bias, dinitial_states)
    for src in inputs:
        if src is None:
            result.append(None)
            continue
        g = next(got)
        result.append(g.to(src.dtype) if g is not None else torch.zeros_like(src))
    return result, r["out"].detach().to(x.dtype)
