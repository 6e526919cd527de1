"""Mamba-2's block after in_proj (arXiv:2405.21060, Figure 6) as one composition: split zxbcdt, causal
conv1d on (x, B, C), the SSD, the gated RMSNorm (or the z gate), the gated-MLP channels, out_proj.

The conv, the scan and the norm are arguments (:class:`ConvScanSteps`): ``mamba_split_conv1d_scan_combined``
passes the public ops (each dispatched), ``mamba_split_conv1d_scan_ref`` the references; this module only
composes them and checks the sizes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional, Protocol, Sequence, Union

import torch
import torch.nn.functional as F

from mamba_ssm._families.ssd import torch_combined as T

__all__ = ["ConvScanSteps", "SplitSizes", "reference_scan", "split_conv1d_scan", "split_sizes"]


class ConvStep(Protocol):
    """The causal conv1d: x (batch, channels, seqlen), weight (channels, width) -> x's shape."""

    def __call__(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: Optional[torch.Tensor],
        seq_idx: Optional[torch.Tensor],
        activation: Optional[str],
    ) -> torch.Tensor: ...


class ScanStep(Protocol):
    """The SSD with ``mamba_chunk_scan_combined``'s arguments (dt through softplus): (out in x's dtype,
    the final states float32, or None unless ``return_final_states``)."""

    def __call__(
        self,
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
        dt_limit: Sequence[float],
        return_final_states: bool,
        state_dtype: Optional[torch.dtype],
    ) -> tuple[torch.Tensor, Optional[torch.Tensor]]: ...


class NormStep(Protocol):
    """The gated RMSNorm: y, z (..., dim), weight (dim,) -> y's shape and dtype."""

    def __call__(
        self,
        y: torch.Tensor,
        weight: torch.Tensor,
        z: torch.Tensor,
        eps: float,
        group_size: int,
        norm_before_gate: bool,
    ) -> torch.Tensor: ...


class ConvScanSteps(NamedTuple):
    """The three steps :func:`split_conv1d_scan` composes."""

    conv: ConvStep
    scan: ScanStep
    norm: NormStep


@dataclass(frozen=True)
class SplitSizes:
    """The sizes of zxbcdt's parts: (batch, seqlen), the heads, dim = nheads * headdim, the B/C groups
    and their dstate, and d_nonssm (the gated-MLP channels of each of z0 and x0)."""

    batch: int
    seqlen: int
    nheads: int
    headdim: int
    dim: int
    ngroups: int
    dstate: int
    d_nonssm: int


def split_sizes(
    fn: str,
    zxbcdt: torch.Tensor,
    conv1d_weight: torch.Tensor,
    A: torch.Tensor,
    D: Optional[torch.Tensor],
    headdim: Optional[int],
    ngroups: int,
) -> SplitSizes:
    """zxbcdt's parts' sizes, checked.

    Raises:
        ValueError: zxbcdt not 3-D, no headdim to infer (a 1-D D), or channel counts that do not add up
            (the message names them)."""
    if zxbcdt.dim() != 3:
        raise ValueError(f"{fn}: zxbcdt must be (batch, seqlen, channels), got {tuple(zxbcdt.shape)}")
    nheads = A.shape[0]
    if headdim is None:
        if D is None or D.dim() != 2:
            raise ValueError(f"{fn}: pass headdim (or a D of shape (nheads, headdim))")
        headdim = D.shape[1]
    dim = nheads * headdim
    b, l, total = zxbcdt.shape
    conv_dim = conv1d_weight.shape[0]
    dstate = (conv_dim - dim) // (2 * ngroups)
    d_nonssm = (total - 2 * dim - 2 * ngroups * dstate - nheads) // 2
    if (
        dstate < 1
        or dim + 2 * ngroups * dstate != conv_dim
        or d_nonssm < 0
        or 2 * d_nonssm + 2 * dim + 2 * ngroups * dstate + nheads != total
    ):
        raise ValueError(
            f"{fn}: zxbcdt's last dim {total} and conv1d_weight's {conv_dim} channels are not "
            f"2 * d_nonssm + 2 * dim + 2 * ngroups * dstate + nheads and dim + 2 * ngroups * dstate with "
            f"dim = {dim}, ngroups = {ngroups}, nheads = {nheads}"
        )
    return SplitSizes(b, l, nheads, headdim, dim, ngroups, dstate, d_nonssm)


def reference_scan(
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
    dt_limit: Sequence[float],
    return_final_states: bool,
    state_dtype: Optional[torch.dtype],
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The :class:`ScanStep` of the reference: the PyTorch SSD (:func:`.torch_combined.forward`),
    always with its final states."""
    del return_final_states
    r = T.forward(
        x, dt, A, B, C, chunk_size, D, z, dt_bias, initial_states, seq_idx, None, True, dt_limit, state_dtype
    )
    return r["out"].to(x.dtype), r["final"].float()


def split_conv1d_scan(
    fn: str,
    steps: ConvScanSteps,
    zxbcdt: torch.Tensor,
    conv1d_weight: torch.Tensor,
    conv1d_bias: Optional[torch.Tensor],
    dt_bias: Optional[torch.Tensor],
    A: torch.Tensor,
    D: Optional[torch.Tensor],
    chunk_size: int,
    initial_states: Optional[torch.Tensor],
    seq_idx: Optional[torch.Tensor],
    dt_limit: Sequence[float],
    return_final_states: bool,
    activation: Optional[str],
    rmsnorm_weight: Optional[torch.Tensor],
    rmsnorm_eps: float,
    outproj_weight: Optional[torch.Tensor],
    outproj_bias: Optional[torch.Tensor],
    headdim: Optional[int],
    ngroups: int,
    norm_before_gate: bool,
    state_dtype: Optional[torch.dtype],
) -> Union[torch.Tensor, tuple[torch.Tensor, Optional[torch.Tensor]]]:
    """``mamba_split_conv1d_scan_combined``'s composition with ``steps`` (arguments and result as that
    function documents; ``fn`` names it in errors): out, or (out, the final states) with
    ``return_final_states``.

    Raises:
        ValueError: as :func:`split_sizes`."""
    s = split_sizes(fn, zxbcdt, conv1d_weight, A, D, headdim, ngroups)
    b, l, nheads, hd, dim, dstate = s.batch, s.seqlen, s.nheads, s.headdim, s.dim, s.dstate
    z0, x0, z, xBC, dt = torch.split(
        zxbcdt, [s.d_nonssm, s.d_nonssm, dim, dim + 2 * ngroups * dstate, nheads], dim=-1
    )
    cw = conv1d_weight.reshape(conv1d_weight.shape[0], -1)
    xBC = steps.conv(xBC.transpose(1, 2), cw, conv1d_bias, seq_idx, activation).transpose(1, 2)
    x, Bm, Cm = torch.split(xBC, [dim, ngroups * dstate, ngroups * dstate], dim=-1)
    zs = None if rmsnorm_weight is not None else z.reshape(b, l, nheads, hd)
    y, final = steps.scan(
        x.reshape(b, l, nheads, hd), dt, A, Bm.reshape(b, l, ngroups, dstate),
        Cm.reshape(b, l, ngroups, dstate), chunk_size, D, zs, dt_bias, initial_states, seq_idx, dt_limit,
        return_final_states, state_dtype,
    )  # fmt: skip
    y = y.reshape(b, l, dim)
    if rmsnorm_weight is not None:
        y = steps.norm(y, rmsnorm_weight, z, rmsnorm_eps, dim // ngroups, norm_before_gate)
    if s.d_nonssm > 0:  # the gated-MLP channels in front of the SSM's (Mamba2 with d_ssm < d_inner)
        y = torch.cat([F.silu(z0) * x0, y], dim=-1)
    if outproj_weight is not None:
        y = F.linear(y, outproj_weight, outproj_bias)
    return (y, final) if return_final_states else y
