"""A simpler Mamba-2 block (upstream's ``mamba_ssm.modules.mamba2_simple.Mamba2Simple``): the layer of
arXiv:2405.21060 section 7.1 for training and full passes only (no decoding cache), with optional
learnable initial states, per-head D and the gated RMSNorm after the scan (``norm(y * silu(z))``).

Parameters (upstream's names): ``in_proj`` (d_model -> 2 * d_inner + 2 * ngroups * d_state + nheads,
split [z, xBC, dt]), ``conv1d`` over xBC, ``init_states`` (nheads, headdim, d_state) when
``learnable_init_states``, ``dt_bias``, ``A_log``, ``D`` (nheads,), ``norm`` (d_inner), ``out_proj``.
The recurrence is :class:`mamba_ssm.modules.mamba2.Mamba2`'s.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.types import Device

from mamba_ssm.modules._common import FactoryKwargs, check_sequence_input, inverse_softplus_dt, set_flag
from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn
from mamba_ssm.ops.triton.layernorm_gated import RMSNorm as RMSNormGated
from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined, mamba_split_conv1d_scan_combined

__all__ = ["Mamba2Simple"]

_ACTIVATIONS = ("silu", "swish")


class Mamba2Simple(nn.Module):
    """Mamba-2 mixer for full sequences: (batch, seqlen, d_model) -> (batch, seqlen, d_model).

    Args (upstream's names and defaults): d_model; d_state (64); d_conv (4); conv_init; expand (2);
        headdim (128); ngroups (1); A_init_range ((1, 16)); dt_min, dt_max, dt_init_floor; dt_limit;
        learnable_init_states (False): a learned state before the first token, shared by the batch;
        activation ("swish" = "silu", the conv's); bias, conv_bias; chunk_size (256);
        use_mem_eff_path (True): the fused :func:`mamba_split_conv1d_scan_combined`; layer_idx;
        device, dtype.

    The gated norm groups channels by ``d_inner / ngroups`` on both paths (the fused path's rule), so
    the two paths compute the same function.

    Raises:
        ValueError: d_inner not a multiple of headdim, ngroups not dividing nheads, an unknown activation.
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 64,
        d_conv: int = 4,
        conv_init: float | None = None,
        expand: int = 2,
        headdim: int = 128,
        ngroups: int = 1,
        A_init_range: tuple[float, float] = (1, 16),
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        dt_init_floor: float = 1e-4,
        dt_limit: tuple[float, float] = (0.0, float("inf")),
        learnable_init_states: bool = False,
        activation: str = "swish",
        bias: bool = False,
        conv_bias: bool = True,
        chunk_size: int = 256,
        use_mem_eff_path: bool = True,
        layer_idx: int | None = None,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        factory_kwargs: FactoryKwargs = {"device": device, "dtype": dtype}
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"Mamba2Simple: activation={activation!r}; expected 'swish' or 'silu'")
        self.d_model = d_model
        self.d_state = d_state
        self.d_conv = d_conv
        self.conv_init = conv_init
        self.expand = expand
        self.d_inner = self.expand * self.d_model
        self.headdim = headdim
        self.ngroups = ngroups
        if self.d_inner % headdim:
            raise ValueError(
                f"Mamba2Simple: d_inner = expand * d_model = {self.d_inner} must be a multiple of "
                f"headdim = {headdim}"
            )
        self.nheads = self.d_inner // headdim
        if self.nheads % ngroups:
            raise ValueError(f"Mamba2Simple: ngroups = {ngroups} must divide nheads = {self.nheads}")
        self.dt_limit = tuple(dt_limit)
        self.learnable_init_states = learnable_init_states
        self.activation = activation
        self.chunk_size = chunk_size
        self.use_mem_eff_path = use_mem_eff_path
        self.layer_idx = layer_idx

        d_in_proj = 2 * self.d_inner + 2 * self.ngroups * self.d_state + self.nheads
        self.in_proj = nn.Linear(self.d_model, d_in_proj, bias=bias, **factory_kwargs)
        conv_dim = self.d_inner + 2 * self.ngroups * self.d_state
        self.conv1d = nn.Conv1d(
            conv_dim,
            conv_dim,
            kernel_size=d_conv,
            groups=conv_dim,
            padding=d_conv - 1,
            bias=conv_bias,
            **factory_kwargs,
        )
        if conv_init is not None:
            nn.init.uniform_(self.conv1d.weight, -conv_init, conv_init)
        if learnable_init_states:
            self.init_states = nn.Parameter(
                torch.zeros(self.nheads, self.headdim, self.d_state, **factory_kwargs)
            )
            set_flag(self.init_states, "_no_weight_decay")
        self.act = nn.SiLU()
        self.dt_bias = nn.Parameter(
            inverse_softplus_dt(self.nheads, dt_min, dt_max, dt_init_floor, **factory_kwargs)
        )
        set_flag(self.dt_bias, "_no_weight_decay")
        A = torch.empty(self.nheads, dtype=torch.float32, device=device).uniform_(*A_init_range)
        self.A_log = nn.Parameter(torch.log(A).to(dtype=dtype))
        set_flag(self.A_log, "_no_weight_decay")
        self.D = nn.Parameter(torch.ones(self.nheads, device=device))
        set_flag(self.D, "_no_weight_decay")
        self.norm = RMSNormGated(
            self.d_inner,
            eps=1e-5,
            norm_before_gate=False,
            group_size=self.d_inner // self.ngroups,
            **factory_kwargs,
        )
        self.out_proj = nn.Linear(self.d_inner, self.d_model, bias=bias, **factory_kwargs)

    def forward(self, u: torch.Tensor, seq_idx: torch.Tensor | None = None) -> torch.Tensor:
        """u: (batch, seqlen, d_model) -> (batch, seqlen, d_model). seq_idx: (batch, seqlen) int32 ids
        of packed sequences (nothing crosses from one to the next; the learnable initial state, if
        any, feeds the first).

        Raises:
            ValueError: u is not (batch, seqlen, d_model).
        """
        check_sequence_input("Mamba2Simple.forward", u, self.d_model)
        batch, seqlen, _ = u.shape
        zxbcdt = self.in_proj(u)
        A = -torch.exp(self.A_log.float())
        initial_states = (
            self.init_states.unsqueeze(0).expand(batch, -1, -1, -1) if self.learnable_init_states else None
        )
        if self.use_mem_eff_path:
            fused: torch.Tensor = mamba_split_conv1d_scan_combined(
                zxbcdt,
                self.conv1d.weight.squeeze(1),
                self.conv1d.bias,
                self.dt_bias,
                A,
                self.D,
                chunk_size=self.chunk_size,
                seq_idx=seq_idx,
                activation=self.activation,
                rmsnorm_weight=self.norm.weight,
                rmsnorm_eps=self.norm.eps,
                outproj_weight=self.out_proj.weight,
                outproj_bias=self.out_proj.bias,
                headdim=self.headdim,
                ngroups=self.ngroups,
                norm_before_gate=False,
                initial_states=initial_states,
                dt_limit=self.dt_limit,
            )
            return fused
        z, xBC, dt = torch.split(
            zxbcdt, [self.d_inner, self.d_inner + 2 * self.ngroups * self.d_state, self.nheads], dim=-1
        )
        xBC = causal_conv1d_fn(
            xBC.transpose(1, 2),
            self.conv1d.weight.squeeze(1),
            self.conv1d.bias,
            seq_idx=seq_idx,
            activation=self.activation,
        ).transpose(1, 2)
        x, B, C = torch.split(
            xBC, [self.d_inner, self.ngroups * self.d_state, self.ngroups * self.d_state], dim=-1
        )
        y = mamba_chunk_scan_combined(
            x.reshape(batch, seqlen, self.nheads, self.headdim),
            dt,
            A,
            B.reshape(batch, seqlen, self.ngroups, self.d_state),
            C.reshape(batch, seqlen, self.ngroups, self.d_state),
            chunk_size=self.chunk_size,
            D=self.D,
            z=None,
            dt_bias=self.dt_bias,
            dt_softplus=True,
            initial_states=initial_states,
            seq_idx=seq_idx,
            dt_limit=self.dt_limit,
        )
        y = self.norm(y.reshape(batch, seqlen, self.d_inner), z)
        out: torch.Tensor = self.out_proj(y)
        return out
