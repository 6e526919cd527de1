"""The Mamba-3 layer (Lahoti, Li, Chen, Wang, Bick, Kolter, Dao, Gu, "Mamba-3: Improved Sequence Modeling
using State Space Principles", arXiv:2603.15569) with upstream's constructor arguments, defaults,
parameter names and shapes, so upstream's configs and checkpoints load with ``strict=True``.

With ``d_inner = expand * d_model``, ``nheads = d_inner / headdim``, R = mimo_rank (1 without MIMO),
G = ngroups and A_n = num_rope_angles = (d_state * rope_fraction rounded down to even) / 2:

    in_proj     Linear(d_model, 2 d_inner + 2 d_state G R + 3 nheads + A_n), no bias, output split as
                z, x, B, C, dd_dt, dd_A, trap, angles
    dt_bias     (nheads,) float32, inverse softplus of a log-uniform dt in [dt_min, dt_max]
    B_bias, C_bias  (nheads, R, d_state) float32, ones
    B_norm, C_norm  RMSNorm over d_state (eps 1e-5), weight (d_state,)
    D           (nheads,) float32, ones
    mimo_x, mimo_z, mimo_o  (nheads, R, headdim) float32, 1/R, 1, 1/R (MIMO only)
    norm        gated RMSNorm over groups of headdim, norm before gate, weight (d_inner,)
                (``is_outproj_norm`` only)
    out_proj    Linear(d_inner, d_model), no bias

Per token: A = -max(f(dd_A), A_floor) with f(x) = 1 + x (x >= 0), 1 / (1 - x) (x < 0); dt =
softplus(dd_dt + dt_bias); B and C through their RMSNorm; then the exponential-trapezoidal scan with
the rotation of B and C (:mod:`mamba_ssm._families.mamba3.torch_impl` states it), SISO through
:func:`~mamba_ssm.ops.triton.mamba3.mamba3_siso_combined.mamba3_siso_combined` (adjacent pairs rotate)
and MIMO through :func:`~mamba_ssm.ops.tilelang.mamba3.mamba3_mimo.mamba3_mimo` (entries i and
i + d_state/2 rotate); y gated by silu(z) (or the gated norm); out_proj.

Decode cache (``allocate_inference_cache``; ``step`` updates it in place): angle (batch, nheads, A_n)
and ssm (batch, nheads, headdim, d_state) in float32, k (batch, R, nheads, d_state) (the last rotated,
biased key) and v (batch, nheads, headdim) (the last x) in the layer's dtype.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.types import Device

from mamba_ssm._families.packing import check_cu_seqlens
from mamba_ssm.modules._common import (
    FactoryKwargs,
    check_positive_sizes,
    check_sequence_input,
    inverse_softplus_dt,
    set_flag,
)
from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo import mamba3_mimo
from mamba_ssm.ops.triton.layernorm_gated import RMSNorm as RMSNormGated
from mamba_ssm.ops.triton.mamba3.mamba3_siso_combined import mamba3_siso_combined
from mamba_ssm.ops.triton.mamba3.mamba3_step import mamba3_step

if TYPE_CHECKING:
    from mamba_ssm.utils.generation import InferenceParams

__all__ = ["Mamba3", "heavy_tail_activation"]

#: The decode cache: (angle, ssm, k, v) (module docstring).
_Cache = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def heavy_tail_activation(x: torch.Tensor) -> torch.Tensor:
    """Mamba-3's activation of the data-dependent A: 1 + x for x >= 0, 1 / (1 - x) for x < 0
    (positive, continuous, differentiable at 0)."""
    return x.clamp(min=0) + torch.reciprocal(1 - x.clamp(max=0))


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype Mamba-3's scan computes in for parameters / inputs of ``dtype``."""
    return torch.float64 if dtype == torch.float64 else torch.float32


class Mamba3(nn.Module):
    """One Mamba-3 mixer layer: (batch, seqlen, d_model) -> (batch, seqlen, d_model).

    Args (upstream's names and defaults):
        d_model: model width. d_state: state size N (128). expand: d_inner = expand * d_model (2).
        headdim: channels per head P (64). ngroups: B/C heads, each shared by nheads / ngroups heads (1).
        rope_fraction: share of d_state that rotates, 0.5 or 1.0 (0.5).
        dt_min, dt_max, dt_init_floor: initial dt log-uniform in [dt_min, dt_max], floored.
        A_floor: the smallest -A (1e-4).
        is_outproj_norm: the gated RMSNorm (per head) before out_proj instead of the plain silu(z) gate.
        is_mimo: multi-input multi-output with mimo_rank ranks (4); mimo_rank is 1 without it.
        fuse_pregate_headwise_norm: with MIMO and is_outproj_norm, apply the norm inside the MIMO op
            (same math; True).
        chunk_size: tokens per chunk of the scan (64; upstream recommends 64 / mimo_rank for MIMO).
        dropout, n_layer: accepted and unused (upstream's). layer_idx: key of this layer's cache in
            ``inference_params.key_value_memory_dict``. device, dtype: of the parameters (dt_bias, D,
            the biases and the MIMO projections are float32 whatever dtype says, as upstream's).
        kwargs: accepted and ignored (upstream absorbs them too), with a warning naming them.

    Raises:
        ValueError: a non-positive size, d_inner not a multiple of headdim, ngroups not dividing nheads,
            rope_fraction not 0.5 or 1.0, no angle to rotate, a non-positive mimo_rank or chunk_size.
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 128,
        expand: float = 2,
        headdim: int = 64,
        ngroups: int = 1,
        rope_fraction: float = 0.5,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        dt_init_floor: float = 1e-4,
        A_floor: float = 1e-4,
        is_outproj_norm: bool = False,
        is_mimo: bool = False,
        mimo_rank: int = 4,
        fuse_pregate_headwise_norm: bool = True,
        chunk_size: int = 64,
        dropout: float = 0.0,
        layer_idx: int | None = None,
        n_layer: int | None = None,
        device: Device = None,
        dtype: torch.dtype | None = None,
        **kwargs: Any,
    ) -> None:
        factory_kwargs: FactoryKwargs = {"device": device, "dtype": dtype}
        super().__init__()
        check_positive_sizes("Mamba3", d_model=d_model, d_state=d_state, headdim=headdim)
        if kwargs:
            warnings.warn(
                f"Mamba3: ignoring unknown arguments {sorted(kwargs)} (upstream's Mamba3 absorbs them too)",
                UserWarning,
                stacklevel=2,
            )
        self.d_model = d_model
        self.d_state = d_state
        self.expand = expand
        self.headdim = headdim
        self.chunk_size = chunk_size
        self.layer_idx = layer_idx
        self.A_floor = A_floor
        self.is_outproj_norm = is_outproj_norm
        self.is_mimo = is_mimo
        self.mimo_rank = mimo_rank if is_mimo else 1
        self.fuse_pregate_headwise_norm = bool(fuse_pregate_headwise_norm and is_mimo and is_outproj_norm)
        self.d_inner = int(expand * d_model)
        if self.d_inner <= 0 or self.d_inner % headdim:
            raise ValueError(
                f"Mamba3: d_inner = expand * d_model = {self.d_inner} must be a positive multiple of "
                f"headdim = {headdim}; choose d_model, expand and headdim so that it is"
            )
        self.nheads = self.d_inner // headdim
        self.ngroups = self.num_bc_heads = ngroups
        if isinstance(ngroups, bool) or not isinstance(ngroups, int) or ngroups < 1 or self.nheads % ngroups:
            divisors = [g for g in range(1, self.nheads + 1) if self.nheads % g == 0]
            raise ValueError(
                f"Mamba3: ngroups = {ngroups!r} must divide nheads = {self.nheads}; choose among {divisors}"
            )
        if rope_fraction not in (0.5, 1.0):
            raise ValueError(f"Mamba3: rope_fraction must be 0.5 or 1.0, got {rope_fraction!r}")
        self.rope_fraction = rope_fraction
        self.rotary_dim_divisor = int(2 / rope_fraction)
        self.split_tensor_size = int(d_state * rope_fraction) // 2 * 2
        self.num_rope_angles = self.split_tensor_size // 2
        if self.num_rope_angles < 1:
            raise ValueError(
                f"Mamba3: d_state = {d_state} with rope_fraction = {rope_fraction} leaves no pair of "
                f"d_state entries to rotate; use d_state >= {int(2 / rope_fraction)}"
            )
        if isinstance(self.mimo_rank, bool) or not isinstance(self.mimo_rank, int) or self.mimo_rank < 1:
            raise ValueError(f"Mamba3: mimo_rank must be a positive int, got {mimo_rank!r}")
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"Mamba3: chunk_size must be a positive int, got {chunk_size!r}")

        R, H, N = self.mimo_rank, self.nheads, d_state
        d_in_proj = 2 * self.d_inner + 2 * N * ngroups * R + 3 * H + self.num_rope_angles
        self.in_proj = nn.Linear(d_model, d_in_proj, bias=False, **factory_kwargs)
        self.dt_bias = nn.Parameter(
            inverse_softplus_dt(H, dt_min, dt_max, dt_init_floor, device=device, dtype=torch.float32)
        )
        set_flag(self.dt_bias, "_no_weight_decay")
        self.B_bias = nn.Parameter(torch.ones(H, R, N, device=device, dtype=torch.float32))
        self.C_bias = nn.Parameter(torch.ones(H, R, N, device=device, dtype=torch.float32))
        self.B_norm = RMSNormGated(N, eps=1e-5, **factory_kwargs)
        self.C_norm = RMSNormGated(N, eps=1e-5, **factory_kwargs)
        if is_mimo:
            ones = torch.ones(H, R, headdim, device=device, dtype=torch.float32)
            self.mimo_x = nn.Parameter(ones / R)
            self.mimo_z = nn.Parameter(ones.clone())
            self.mimo_o = nn.Parameter(ones / R)
        self.D = nn.Parameter(torch.ones(H, device=device, dtype=torch.float32))
        set_flag(self.D, "_no_weight_decay")
        if is_outproj_norm:
            self.norm = RMSNormGated(
                self.d_inner, eps=1e-5, norm_before_gate=True, group_size=headdim, **factory_kwargs
            )
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False, **factory_kwargs)

    # ------------------------------------------------------------------------------------------------
    @property
    def _gate_in_op(self) -> bool:
        """The z gate (and for MIMO the mimo_o sum) runs inside the scan op, not after it."""
        return self.fuse_pregate_headwise_norm or not self.is_outproj_norm

    def _project(self, u: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """in_proj and the per-token preprocessing of u (..., d_model): returns z, x (..., nheads,
        headdim), B, C (..., R, ngroups, d_state) after their norms, ADT, DT, trap (..., nheads) and
        the angles (..., nheads, num_rope_angles) in the compute dtype."""
        H, P, N, G, R = self.nheads, self.headdim, self.d_state, self.ngroups, self.mimo_rank
        cdtype = _compute_dtype(u.dtype)
        z, x, B, C, dd_dt, dd_A, trap, angles = torch.split(
            self.in_proj(u),
            [self.d_inner, self.d_inner, N * G * R, N * G * R, H, H, H, self.num_rope_angles],
            dim=-1,
        )
        lead = u.shape[:-1]
        B = self.B_norm(B.reshape(*lead, R, G, N))
        C = self.C_norm(C.reshape(*lead, R, G, N))
        A = -torch.clamp(heavy_tail_activation(dd_A.to(cdtype)), min=self.A_floor)
        DT = F.softplus(dd_dt.to(cdtype) + self.dt_bias.to(cdtype))
        angles = angles.to(cdtype).unsqueeze(-2).expand(*lead, H, self.num_rope_angles)
        return z.reshape(*lead, H, P), x.reshape(*lead, H, P), B, C, A * DT, DT, trap, angles

    def _norm_after(self, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """The gated RMSNorm when it runs outside the op: y (..., h, p) (SISO) or (..., R, h, p) (MIMO,
        then each rank gated by silu(z * mimo_z_r) and summed with mimo_o) -> (..., d_inner)."""
        if not self.is_mimo:
            normed: torch.Tensor = self.norm(y.flatten(-2), z.flatten(-2))
            return normed
        cdtype = _compute_dtype(y.dtype)
        zr = z.to(cdtype).unsqueeze(-3) * self.mimo_z.to(cdtype).transpose(0, 1)
        y = self.norm(y.to(cdtype).flatten(-2), zr.flatten(-2)).unflatten(-1, (self.nheads, self.headdim))
        return (y * self.mimo_o.to(cdtype).transpose(0, 1)).sum(-3).flatten(-2)

    def forward(
        self,
        u: torch.Tensor,
        seq_idx: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        inference_params: InferenceParams | None = None,
    ) -> torch.Tensor:
        """Run the layer.

        Args:
            u: (batch, seqlen, d_model).
            seq_idx: (batch, seqlen) int ids of sequences packed in one row; nothing crosses from one
                id to the next (the state, the angle sum, the trapezoid's term of the previous token);
                -1 marks a padding token (its scan output is 0 and it reads and writes no state).
            cu_seqlens: (num_seqs + 1,) cumulative lengths of sequences packed in a batch of one
                (seq_idx is derived from it when not given); with ``inference_params`` the cache
                receives one state per sequence. Its last entry may be below seqlen: the rest is
                padding (seq_idx -1), and an empty sequence gets zero states (the rule of
                :mod:`mamba_ssm._families.packing`, as in ``Mamba2``).
            inference_params: :class:`mamba_ssm.utils.generation.InferenceParams`: at
                ``seqlen_offset == 0`` the prompt fills this layer's cache; afterwards one token is one
                :meth:`step` and several continue from the cached states.

        Returns:
            (batch, seqlen, d_model) in u's dtype. A padding token's row is out_proj of the scan's
            zero row, as in ``Mamba2``: 0 (out_proj has no bias), and the gradient of its u is 0.

        Raises:
            ValueError: u's shape, cu_seqlens breaking the rule (the message shows the values), with
                batch > 1 or after the prompt, or no layer_idx with inference_params.
        """
        check_sequence_input("Mamba3.forward", u, self.d_model)
        batch, seqlen, _ = u.shape
        if cu_seqlens is not None:
            if batch != 1:
                raise ValueError(
                    f"Mamba3.forward: cu_seqlens packs sequences into a batch of one, got batch {batch}"
                )
            cu_seqlens = check_cu_seqlens("Mamba3.forward", cu_seqlens, seqlen)
        cache: _Cache | None = None
        if inference_params is not None:
            rows = cu_seqlens.numel() - 1 if cu_seqlens is not None else batch
            cache = self._get_states_from_cache(inference_params, rows)
            if inference_params.seqlen_offset > 0:
                if cu_seqlens is not None:
                    raise ValueError(
                        "Mamba3.forward: cu_seqlens is for the prompt (seqlen_offset == 0); decode the "
                        "packed sequences as a batch afterwards"
                    )
                if seqlen == 1:
                    return self.step(u, *cache)[0]
                return self._scan(u, cache=cache, continue_from_cache=True)
        return self._scan(u, seq_idx=seq_idx, cu_seqlens=cu_seqlens, cache=cache)

    def _scan(
        self,
        u: torch.Tensor,
        seq_idx: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        cache: _Cache | None = None,
        continue_from_cache: bool = False,
    ) -> torch.Tensor:
        """The chunked path; fills ``cache`` (angle, ssm, k, v) with the final states when given, and
        starts from it with ``continue_from_cache``."""
        _batch, _seqlen, _ = u.shape
        z, x, B, C, ADT, DT, trap, angles = self._project(u)
        ADT, DT, trap = ADT.transpose(1, 2), DT.transpose(1, 2), trap.transpose(1, 2)
        init: _Cache | None = None
        if continue_from_cache:
            if cache is None:
                raise ValueError("Mamba3._scan: continue_from_cache=True needs the cache to continue from")
            angle, ssm, k, v = cache
            init = (angle, ssm, k if self.is_mimo else k[:, 0], v)
        gate_in_op = self._gate_in_op
        if self.is_mimo:
            res = mamba3_mimo(
                C,
                B,
                x,
                ADT,
                DT,
                trap,
                self.C_bias,
                self.B_bias,
                self.mimo_x,
                self.mimo_z,
                self.mimo_o if gate_in_op else None,
                angles,
                self.D,
                z if gate_in_op else None,
                self.chunk_size,
                self.rotary_dim_divisor,
                x.dtype,
                return_state=cache is not None,
                cu_seqlens=cu_seqlens,
                fuse_pregate_headwise_rms_norm=self.fuse_pregate_headwise_norm,
                outproj_norm_weight=self.norm.weight if self.fuse_pregate_headwise_norm else None,
                outproj_norm_eps=self.norm.eps if self.fuse_pregate_headwise_norm else 1e-5,
                Input_States=init,
                seq_idx=seq_idx,
            )
        else:
            res = mamba3_siso_combined(
                C[:, :, 0],
                B[:, :, 0],
                x,
                ADT,
                DT,
                trap,
                self.C_bias[:, 0],
                self.B_bias[:, 0],
                angles,
                D=self.D,
                Z=z if gate_in_op else None,
                Input_States=init,
                chunk_size=self.chunk_size,
                return_final_states=cache is not None,
                cu_seqlens=cu_seqlens,
                seq_idx=seq_idx,
            )
        if cache is not None:
            y, angle, ssm, k, v = res
            for dst, src in zip(cache, (angle, ssm, k if self.is_mimo else k.unsqueeze(1), v)):
                dst.copy_(src)
        else:
            y = res
        y = y.flatten(-2) if gate_in_op else self._norm_after(y, z)
        out: torch.Tensor = self.out_proj(y.to(x.dtype))
        return out

    def step(
        self,
        u: torch.Tensor,
        angle_state: torch.Tensor,
        ssm_state: torch.Tensor,
        k_state: torch.Tensor,
        v_state: torch.Tensor,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One token: u (batch, 1, d_model) or (batch, d_model) -> (out (u's shape), angle_state,
        ssm_state, k_state, v_state), the states (see :meth:`allocate_inference_cache`) updated in
        place. ``kwargs`` are ignored (upstream's signature).

        Raises:
            ValueError: u is not one token per row.
        """
        if not (u.dim() == 2 or (u.dim() == 3 and u.shape[1] == 1)) or u.shape[-1] != self.d_model:
            raise ValueError(
                f"Mamba3.step decodes one token at a time: u must have shape (batch, 1, {self.d_model}) or "
                f"(batch, {self.d_model}), got {tuple(u.shape)}"
            )
        z, x, B, C, ADT, DT, trap, angles = self._project(u.reshape(u.shape[0], self.d_model))
        gate_in_op = self._gate_in_op
        mimo = self.is_mimo
        y, new = mamba3_step(
            C,
            B,
            x,
            ADT,
            DT,
            trap,
            self.C_bias,
            self.B_bias,
            angles,
            (angle_state, ssm_state, k_state, v_state),
            D=self.D,
            Z=z if gate_in_op else None,
            MIMO_V=self.mimo_x if mimo else None,
            MIMO_Z=self.mimo_z if mimo else None,
            MIMO_Out=self.mimo_o if mimo and gate_in_op else None,
            rotary_pairing="halves" if mimo else "adjacent",
            outproj_norm_weight=self.norm.weight if self.fuse_pregate_headwise_norm else None,
            outproj_norm_eps=self.norm.eps if self.fuse_pregate_headwise_norm else 1e-5,
        )
        y = y.flatten(-2) if gate_in_op else self._norm_after(y, z)
        out = self.out_proj(y.to(x.dtype)).reshape(u.shape)
        for dst, src in zip((angle_state, ssm_state, k_state, v_state), new):
            dst.copy_(src)
        return out, angle_state, ssm_state, k_state, v_state

    def allocate_inference_cache(
        self,
        batch_size: int,
        max_seqlen: int,
        device: Device = None,
        dtype: torch.dtype | None = None,
        **kwargs: Any,
    ) -> _Cache:
        """Zeroed (angle (batch, nheads, num_rope_angles), ssm (batch, nheads, headdim, d_state), k
        (batch, mimo_rank, nheads, d_state), v (batch, nheads, headdim)): angle and ssm in float32
        (float64 for a float64 layer), k and v in ``dtype`` (default: in_proj's weight dtype)."""
        device = self.in_proj.weight.device if device is None else device
        dtype = self.in_proj.weight.dtype if dtype is None else dtype
        state_dtype = _compute_dtype(dtype)
        H = self.nheads
        return (
            torch.zeros(batch_size, H, self.num_rope_angles, device=device, dtype=state_dtype),
            torch.zeros(batch_size, H, self.headdim, self.d_state, device=device, dtype=state_dtype),
            torch.zeros(batch_size, self.mimo_rank, H, self.d_state, device=device, dtype=dtype),
            torch.zeros(batch_size, H, self.headdim, device=device, dtype=dtype),
        )

    def _get_states_from_cache(
        self, inference_params: InferenceParams, batch_size: int, initialize_states: bool = False
    ) -> _Cache:
        """This layer's (angle, ssm, k, v) in ``inference_params.key_value_memory_dict``, allocated on
        first use (zeroed again with ``initialize_states``).

        Raises:
            ValueError: layer_idx is None.
        """
        if self.layer_idx is None:
            raise ValueError(
                "Mamba3: decoding with inference_params needs layer_idx (the key of this layer's cache); "
                "construct Mamba3(..., layer_idx=0)"
            )
        cache = inference_params.key_value_memory_dict
        if self.layer_idx not in cache:
            cache[self.layer_idx] = self.allocate_inference_cache(batch_size, inference_params.max_seqlen)
        states: _Cache = cache[self.layer_idx]
        if initialize_states:
            for s in states:
                s.zero_()
        return states
