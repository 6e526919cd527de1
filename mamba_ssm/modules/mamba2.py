"""The Mamba-2 block (Dao & Gu, arXiv:2405.21060, section 7.1 and Figure 6) with upstream's constructor
arguments, defaults and parameter names and shapes, so upstream checkpoints load with ``strict=True``.

With ``d_inner = expand * d_model``, ``nheads = d_ssm / headdim`` (``d_ssm`` defaults to ``d_inner``)
and ``conv_dim = d_ssm + 2 * ngroups * d_state``:

    in_proj   Linear(d_model, 2 * d_inner + 2 * ngroups * d_state + nheads), output split as
              [z0, x0 (2 * d_mlp, only when d_ssm < d_inner), z (d_ssm), xBC (conv_dim), dt (nheads)]
    conv1d    depthwise Conv1d(conv_dim, d_conv) over x, B, C   weight (conv_dim, 1, d_conv)
    dt_bias   (nheads,)     inverse softplus of a log-uniform dt in [dt_min, dt_max]
    A_log     (nheads,)     A = -exp(A_log), one scalar per head, uniform in A_init_range
    D         (nheads,) or (d_ssm,) with D_has_hdim
    norm      gated RMSNorm over d_ssm in groups of d_ssm / ngroups (``rmsnorm=True``)
    out_proj  Linear(d_inner, d_model)

Per head (state h_t of shape (headdim, d_state), group g = head // (nheads / ngroups)):

    dt_t = clamp(softplus(dt_t + dt_bias), dt_limit)
    h_t  = exp(dt_t A) h_{t-1} + dt_t x_t B_t^T,    y_t = h_t C_t + D x_t
    out  = out_proj(norm(y, z))   (or y * silu(z) without the norm), with silu(z0) * x0 in front of y
                                   when d_ssm < d_inner (the gated-MLP part)

With ``process_group`` (tensor parallelism, :mod:`mamba_ssm.distributed`) each rank holds
``nheads / world_size`` heads and ``ngroups / world_size`` groups: in_proj is a ColumnParallelLinear
whose rows are this rank's [z, xBC, dt] and out_proj a RowParallelLinear that sums over ranks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.types import Device

from mamba_ssm._families.packing import seq_idx_from_cu_seqlens
from mamba_ssm.modules._common import (
    FactoryKwargs,
    check_positive_sizes,
    check_sequence_input,
    inverse_softplus_dt,
    set_flag,
)
from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn, causal_conv1d_update, causal_conv1d_varlen_states
from mamba_ssm.ops.triton.layernorm_gated import RMSNorm as RMSNormGated
from mamba_ssm.ops.triton.selective_state_update import selective_state_update
from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined, mamba_split_conv1d_scan_combined

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

    from mamba_ssm.utils.generation import InferenceParams

__all__ = ["Mamba2"]

_NO_LIMIT = (0.0, float("inf"))


def _headdim_fix(
    d_ssm: int, headdim: int, d_model: int, expand: float, d_inner: int, *, derived: bool, given: bool
) -> str:
    """The suggestions of Mamba2's "multiple of headdim" error: the nearest larger d_model whose
    d_ssm (= expand * d_model) splits into heads of ``headdim`` (when d_ssm is derived from d_model), the
    largest multiple of headdim up to d_inner (when d_ssm was given), and the largest headdim of at least
    8 that divides d_ssm (when d_ssm fits in d_inner); "" when none exists."""
    fixes = []
    if derived:
        for candidate in range(d_model + 1, d_model + 64 * headdim + 1):
            size = int(expand * candidate)
            if size > 0 and size % headdim == 0:
                fixes.append(f"d_model={candidate} (d_ssm {size} = {size // headdim} heads of {headdim})")
                break
    if given and d_inner >= headdim:
        fixes.append(f"d_ssm={min(d_ssm, d_inner) // headdim * headdim if d_ssm >= headdim else headdim}")
    if 0 < d_ssm <= d_inner:
        divisors = [p for p in range(min(headdim, d_ssm), 7, -1) if d_ssm % p == 0]
        if divisors:
            fixes.append(f"headdim={divisors[0]} ({d_ssm // divisors[0]} heads)")
    return ", e.g. " + " or ".join(fixes) if fixes else ""


class Mamba2(nn.Module):
    """One Mamba-2 mixer layer: (batch, seqlen, d_model) -> (batch, seqlen, d_model).

    Args (upstream's names and defaults):
        d_model: model width. d_state: SSM state size N (128). d_conv: conv width (4).
        conv_init: when given, conv1d.weight ~ U(-conv_init, conv_init).
        expand: d_inner = expand * d_model (2). headdim: channels per head P (64).
        d_ssm: channels that go through the SSM (default d_inner); the other d_inner - d_ssm form a
            gated MLP (silu(z0) * x0) concatenated in front of the SSM output.
        ngroups: groups of B/C shared by nheads / ngroups heads (1).
        A_init_range: range of the initial -A per head ((1, 16)).
        D_has_hdim: D per channel (d_ssm,) instead of per head (nheads,).
        rmsnorm: the gated RMSNorm before out_proj (True); otherwise y * silu(z).
        norm_before_gate: the norm's order (False: norm(y * silu(z))).
        dt_min, dt_max, dt_init_floor: initial dt log-uniform in [dt_min, dt_max], floored.
        dt_limit: clamp of the processed dt ((0, inf): none).
        bias: in_proj and out_proj biases. conv_bias: conv1d bias.
        chunk_size: SSD chunk length (256). use_mem_eff_path: the fused
            :func:`mamba_split_conv1d_scan_combined` for full passes without a cache.
        layer_idx: key of this layer's (conv_state, ssm_state) in
            ``inference_params.key_value_memory_dict``.
        process_group, sequence_parallel: tensor parallelism (heads split across ranks; see the module
            docstring). device, dtype: of the parameters.

    Raises:
        ValueError: d_ssm not a multiple of headdim, ngroups not dividing nheads, or sizes that do not
            split across the process group.
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 128,
        d_conv: int = 4,
        conv_init: float | None = None,
        expand: float = 2,
        headdim: int = 64,
        d_ssm: int | None = None,
        ngroups: int = 1,
        A_init_range: tuple[float, float] = (1, 16),
        D_has_hdim: bool = False,
        rmsnorm: bool = True,
        norm_before_gate: bool = False,
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        dt_init_floor: float = 1e-4,
        dt_limit: tuple[float, float] = (0.0, float("inf")),
        bias: bool = False,
        conv_bias: bool = True,
        chunk_size: int = 256,
        use_mem_eff_path: bool = True,
        layer_idx: int | None = None,
        process_group: ProcessGroup | None = None,
        sequence_parallel: bool = True,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        factory_kwargs: FactoryKwargs = {"device": device, "dtype": dtype}
        super().__init__()
        check_positive_sizes("Mamba2", d_model=d_model, d_state=d_state, d_conv=d_conv, headdim=headdim)
        self.d_model = d_model
        self.d_state = d_state
        self.d_conv = d_conv
        self.conv_init = conv_init
        self.expand = expand
        self.process_group = process_group
        self.sequence_parallel = sequence_parallel
        if process_group is None:
            self.world_size, self.local_rank = 1, 0
        else:
            self.world_size, self.local_rank = process_group.size(), process_group.rank()
        full_inner = int(self.expand * self.d_model)
        full_ssm = full_inner if d_ssm is None else d_ssm
        for what, value in (("expand * d_model", full_inner), ("d_ssm", full_ssm), ("ngroups", ngroups)):
            if value % self.world_size:
                raise ValueError(
                    f"Mamba2: {what} = {value} does not split across {self.world_size} ranks; "
                    f"pick a multiple of the process group's size"
                )
        self.d_inner = full_inner // self.world_size
        self.d_ssm = full_ssm // self.world_size
        self.headdim = headdim
        self.ngroups = ngroups // self.world_size
        per_rank = f" per rank of {self.world_size}" if self.world_size > 1 else ""
        if self.d_ssm <= 0 or self.d_ssm % headdim or self.d_ssm > self.d_inner:
            what = "d_ssm" if d_ssm is not None else "d_ssm (= expand * d_model)"
            raise ValueError(
                f"Mamba2: {what} = {self.d_ssm}{per_rank} must be a positive multiple of headdim = {headdim}"
                + (f" and at most d_inner = {self.d_inner}" if d_ssm is not None else "")
                + "; choose d_model, expand, headdim (and d_ssm) so that it is"
                + _headdim_fix(
                    self.d_ssm,
                    headdim,
                    d_model,
                    expand,
                    self.d_inner,
                    derived=d_ssm is None and self.world_size == 1,
                    given=d_ssm is not None,
                )
            )
        self.nheads = self.d_ssm // headdim
        if self.ngroups < 1 or self.nheads % self.ngroups:
            divisors = [g for g in range(1, self.nheads + 1) if self.nheads % g == 0]
            raise ValueError(
                f"Mamba2: ngroups = {self.ngroups}{per_rank} must divide nheads = {self.nheads} "
                f"(= d_ssm / headdim = {self.d_ssm} / {headdim}); choose ngroups among {divisors}"
            )
        self.D_has_hdim = D_has_hdim
        self.rmsnorm = rmsnorm
        self.norm_before_gate = norm_before_gate
        self.dt_limit = tuple(dt_limit)
        self.activation = "silu"
        self.chunk_size = chunk_size
        self.use_mem_eff_path = use_mem_eff_path
        self.layer_idx = layer_idx

        d_in_proj = 2 * self.d_inner + 2 * self.ngroups * self.d_state + self.nheads
        self.in_proj: nn.Linear
        if process_group is None:
            self.in_proj = nn.Linear(self.d_model, d_in_proj, bias=bias, **factory_kwargs)
        else:
            from mamba_ssm.distributed.tensor_parallel import ColumnParallelLinear

            self.in_proj = ColumnParallelLinear(
                self.d_model,
                d_in_proj * self.world_size,
                bias=bias,
                process_group=process_group,
                sequence_parallel=sequence_parallel,
                **factory_kwargs,
            )
        conv_dim = self.d_ssm + 2 * self.ngroups * self.d_state
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
        self.act = nn.SiLU()

        # dt: log-uniform in [dt_min, dt_max], floored; dt_bias is its inverse softplus.
        self.dt_bias = nn.Parameter(
            inverse_softplus_dt(self.nheads, dt_min, dt_max, dt_init_floor, **factory_kwargs)
        )
        set_flag(self.dt_bias, "_no_weight_decay")
        lo, hi = A_init_range
        if not 0 < lo <= hi:
            raise ValueError(
                f"Mamba2: A_init_range = {A_init_range!r} must satisfy 0 < low <= high (A = -exp(A_log))"
            )
        A = torch.empty(self.nheads, dtype=torch.float32, device=device).uniform_(lo, hi)
        self.A_log = nn.Parameter(torch.log(A).to(dtype=dtype))
        set_flag(self.A_log, "_no_weight_decay")
        self.D = nn.Parameter(torch.ones(self.d_ssm if D_has_hdim else self.nheads, device=device))
        set_flag(self.D, "_no_weight_decay")
        if rmsnorm:
            self.norm = RMSNormGated(
                self.d_ssm,
                eps=1e-5,
                norm_before_gate=norm_before_gate,
                group_size=self.d_ssm // self.ngroups,
                **factory_kwargs,
            )
        self.out_proj: nn.Linear
        if process_group is None:
            self.out_proj = nn.Linear(self.d_inner, self.d_model, bias=bias, **factory_kwargs)
        else:
            from mamba_ssm.distributed.tensor_parallel import RowParallelLinear

            self.out_proj = RowParallelLinear(
                self.d_inner * self.world_size,
                self.d_model,
                bias=bias,
                process_group=process_group,
                sequence_parallel=sequence_parallel,
                **factory_kwargs,
            )

    # ------------------------------------------------------------------------------------------------
    @property
    def _d_mlp(self) -> int:
        """Channels of the gated-MLP part (d_inner - d_ssm)."""
        return self.d_inner - self.d_ssm

    def _D(self) -> torch.Tensor:
        """D as the scan takes it: (nheads, headdim) with D_has_hdim, else (nheads,)."""
        return self.D.view(self.nheads, self.headdim) if self.D_has_hdim else self.D

    def _split(self, zxbcdt: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """[z0, x0, z, xBC, dt] along the last dim."""
        d = self._d_mlp
        return torch.split(
            zxbcdt, [d, d, self.d_ssm, self.d_ssm + 2 * self.ngroups * self.d_state, self.nheads], dim=-1
        )

    def _finish(self, y: torch.Tensor, z: torch.Tensor, z0: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        """Gated norm (or the z gate was applied in the scan), then the MLP part in front."""
        if self.rmsnorm:
            y = self.norm(y, z)
        if self._d_mlp > 0:
            y = torch.cat([F.silu(z0) * x0, y], dim=-1)
        return y

    def forward(
        self,
        u: torch.Tensor,
        seqlen: int | None = None,
        seq_idx: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        inference_params: InferenceParams | None = None,
    ) -> torch.Tensor:
        """Run the layer.

        Args:
            u: (batch, seqlen, d_model), or (batch * seqlen, d_model) when ``seqlen`` is given (with
                sequence parallelism: this rank's share of those rows).
            seqlen: the sequence length when u has its batch and sequence dims flattened.
            seq_idx: (batch, seqlen) int32 ids of sequences packed in one row; nothing crosses from
                one id to the next (conv and scan restart); -1 marks a padding token (its conv and
                scan outputs are 0 and it reads and writes no state).
            cu_seqlens: (num_seqs + 1,) cumulative lengths of sequences packed in a batch of one
                (seq_idx is derived from it when not given); with ``inference_params`` the caches
                receive one state per sequence. Its last entry may be below the number of tokens: the
                rest is padding (seq_idx -1: output 0, no state), and an empty sequence gets zero
                states (the rule of :mod:`mamba_ssm._families.packing`).
            inference_params: :class:`mamba_ssm.utils.generation.InferenceParams`: at
                ``seqlen_offset == 0`` the prompt fills this layer's cached states; afterwards one
                token is one :meth:`step` and several continue from the cached states.

        Returns:
            u's shape and dtype ((batch, seqlen, d_model) or (batch * seqlen, d_model)).

        Raises:
            ValueError: u's shape, or cu_seqlens with batch > 1 or after the prompt.
        """
        seqlen_og = seqlen
        if seqlen is None:
            check_sequence_input("Mamba2.forward", u, self.d_model)
            batch, seqlen, _ = u.shape
        else:
            if u.dim() != 2 or u.shape[-1] != self.d_model:
                raise ValueError(
                    f"Mamba2.forward: with seqlen given, u must have shape (batch * seqlen, "
                    f"d_model={self.d_model}), got {tuple(u.shape)}"
                )
            batch = u.shape[0] // seqlen
        if cu_seqlens is not None and batch != 1:
            raise ValueError(
                f"Mamba2.forward: cu_seqlens packs sequences into a batch of one, got batch {batch}"
            )
        conv_state = ssm_state = None
        if inference_params is not None:
            inference_batch = cu_seqlens.shape[0] - 1 if cu_seqlens is not None else batch
            conv_state, ssm_state = self._get_states_from_cache(inference_params, inference_batch)
            if inference_params.seqlen_offset > 0:
                if cu_seqlens is not None:
                    raise ValueError(
                        "Mamba2.forward: cu_seqlens is for the prompt (seqlen_offset == 0); "
                        "decode the packed sequences as a batch afterwards"
                    )
                if seqlen_og is not None:
                    u = u.view(batch, seqlen, self.d_model)
                if seqlen == 1:
                    out, _, _ = self.step(u, conv_state, ssm_state)
                else:
                    out = self._continue(u, conv_state, ssm_state)
                return out.reshape(-1, self.d_model) if seqlen_og is not None else out

        zxbcdt = self.in_proj(u)
        if seqlen_og is not None:
            zxbcdt = zxbcdt.view(-1, seqlen, zxbcdt.shape[-1])
        if cu_seqlens is not None and seq_idx is None:
            seq_idx = seq_idx_from_cu_seqlens(cu_seqlens, zxbcdt.shape[1], "Mamba2.forward").to(zxbcdt.device)
        A = -torch.exp(self.A_log.float())
        if self.use_mem_eff_path and inference_params is None:
            out = mamba_split_conv1d_scan_combined(
                zxbcdt,
                self.conv1d.weight.squeeze(1),
                self.conv1d.bias,
                self.dt_bias,
                A,
                self._D(),
                chunk_size=self.chunk_size,
                seq_idx=seq_idx,
                activation=self.activation,
                rmsnorm_weight=self.norm.weight if self.rmsnorm else None,
                rmsnorm_eps=self.norm.eps if self.rmsnorm else 1e-6,
                outproj_weight=self.out_proj.weight,
                outproj_bias=self.out_proj.bias,
                headdim=None if self.D_has_hdim else self.headdim,
                ngroups=self.ngroups,
                norm_before_gate=self.norm_before_gate,
                dt_limit=self.dt_limit,
            )
            if seqlen_og is not None:
                out = out.reshape(-1, out.shape[-1])
            if self.process_group is not None:
                from mamba_ssm.distributed.distributed_utils import all_reduce, reduce_scatter

                out = (reduce_scatter if self.sequence_parallel else all_reduce)(out, self.process_group)
            return out

        z0, x0, z, xBC, dt = self._split(zxbcdt)
        if conv_state is not None:
            if cu_seqlens is None:
                xt = xBC.transpose(1, 2)
                conv_state.copy_(F.pad(xt, (max(self.d_conv - xt.shape[-1], 0), 0))[..., -self.d_conv :])
            else:
                conv_state.copy_(
                    causal_conv1d_varlen_states(xBC.squeeze(0), cu_seqlens, state_len=conv_state.shape[-1])
                )
        xBC = causal_conv1d_fn(
            xBC.transpose(1, 2),
            self.conv1d.weight.squeeze(1),
            self.conv1d.bias,
            seq_idx=seq_idx,
            activation=self.activation,
        ).transpose(1, 2)
        y = self._scan(
            xBC,
            z,
            dt,
            A,
            seq_idx=seq_idx,
            cu_seqlens=cu_seqlens,
            ssm_state=ssm_state,
            varlen=cu_seqlens is not None and ssm_state is not None,
        )
        projected: torch.Tensor = self.out_proj(self._finish(y, z, z0, x0))
        return projected.reshape(-1, projected.shape[-1]) if seqlen_og is not None else projected

    def _scan(
        self,
        xBC: torch.Tensor,
        z: torch.Tensor,
        dt: torch.Tensor,
        A: torch.Tensor,
        seq_idx: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        ssm_state: torch.Tensor | None = None,
        varlen: bool = False,
        initial_states: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """SSD over the conv output; writes the final (or per-sequence) states into ``ssm_state``."""
        b, l, _ = xBC.shape
        x, B, C = torch.split(
            xBC, [self.d_ssm, self.ngroups * self.d_state, self.ngroups * self.d_state], dim=-1
        )
        res = mamba_chunk_scan_combined(
            x.reshape(b, l, self.nheads, self.headdim),
            dt,
            A,
            B.reshape(b, l, self.ngroups, self.d_state),
            C.reshape(b, l, self.ngroups, self.d_state),
            chunk_size=self.chunk_size,
            D=self._D(),
            z=None if self.rmsnorm else z.reshape(b, l, self.nheads, self.headdim),
            dt_bias=self.dt_bias,
            dt_softplus=True,
            seq_idx=seq_idx,
            cu_seqlens=cu_seqlens,
            initial_states=initial_states,
            return_final_states=ssm_state is not None and not varlen,
            return_varlen_states=varlen,
            dt_limit=self.dt_limit,
        )
        y: torch.Tensor
        if isinstance(res, torch.Tensor):  # (ssm_state is None)
            y = res
        else:  # (ssm_state given: the final or the varlen states)
            y, states = res[0], res[1]
            if ssm_state is not None:
                ssm_state.copy_(states)
        return y.reshape(b, l, self.d_ssm)

    def _continue(self, u: torch.Tensor, conv_state: torch.Tensor, ssm_state: torch.Tensor) -> torch.Tensor:
        """Several tokens after earlier ones: the conv and the scan continue from the cached states."""
        zxbcdt = self.in_proj(u)
        z0, x0, z, xBC, dt = self._split(zxbcdt)
        xt = xBC.transpose(1, 2)
        init = conv_state[..., 1:].to(xt.dtype).clone()  # the last d_conv - 1 inputs
        conv_state.copy_(torch.cat([conv_state.to(xt.dtype), xt], dim=-1)[..., -self.d_conv :])
        xBC = causal_conv1d_fn(
            xt,
            self.conv1d.weight.squeeze(1),
            self.conv1d.bias,
            initial_states=init,
            activation=self.activation,
        ).transpose(1, 2)
        A = -torch.exp(self.A_log.float())
        y = self._scan(xBC, z, dt, A, ssm_state=ssm_state, initial_states=ssm_state.clone())
        out: torch.Tensor = self.out_proj(self._finish(y, z, z0, x0))
        return out

    def step(
        self, hidden_states: torch.Tensor, conv_state: torch.Tensor, ssm_state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One token: hidden_states (batch, 1, d_model) -> (out (batch, 1, d_model), conv_state,
        ssm_state), the states (batch, conv_dim, d_conv) and (batch, nheads, headdim, d_state) updated in
        place.

        Raises:
            ValueError: hidden_states is not (batch, 1, d_model).
        """
        if hidden_states.dim() != 3 or hidden_states.shape[1] != 1 or hidden_states.shape[2] != self.d_model:
            raise ValueError(
                f"Mamba2.step decodes one token at a time: hidden_states must have shape "
                f"(batch, 1, {self.d_model}), got {tuple(hidden_states.shape)}"
            )
        dtype = hidden_states.dtype
        zxbcdt = self.in_proj(hidden_states.squeeze(1))
        z0, x0, z, xBC, dt = self._split(zxbcdt)
        xBC = causal_conv1d_update(
            xBC, conv_state, self.conv1d.weight.squeeze(1), self.conv1d.bias, self.activation
        )
        x, B, C = torch.split(
            xBC, [self.d_ssm, self.ngroups * self.d_state, self.ngroups * self.d_state], dim=-1
        )
        A = -torch.exp(self.A_log.float())
        b = x.shape[0]
        h, p, n = self.nheads, self.headdim, self.d_state
        dt_bias: torch.Tensor | None
        if self.dt_limit == _NO_LIMIT:
            dt_bias, softplus = self.dt_bias[:, None].expand(h, p), True
        else:  # the clamp comes after softplus, so process dt here
            dt = F.softplus(dt.float() + self.dt_bias.float()).clamp(*self.dt_limit)
            dt_bias, softplus = None, False
        y = selective_state_update(
            ssm_state,
            x.reshape(b, h, p),
            dt[:, :, None].expand(b, h, p),
            A[:, None, None].expand(h, p, n),
            B.reshape(b, self.ngroups, n),
            C.reshape(b, self.ngroups, n),
            D=self._D() if self.D_has_hdim else self.D[:, None].expand(h, p),
            z=None if self.rmsnorm else z.reshape(b, h, p),
            dt_bias=dt_bias,
            dt_softplus=softplus,
        )
        out = self.out_proj(self._finish(y.reshape(b, self.d_ssm), z, z0, x0))
        return out.unsqueeze(1).to(dtype), conv_state, ssm_state

    def allocate_inference_cache(
        self, batch_size: int, max_seqlen: int, dtype: torch.dtype | None = None, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Zeroed (conv_state (batch, conv_dim, d_conv), ssm_state (batch, nheads, headdim, d_state));
        conv_state in conv1d's weight dtype, ssm_state in in_proj's weight dtype (or both ``dtype``).
        conv_state is stored channels-last in memory (a transposed (batch, d_conv, conv_dim) buffer), as
        upstream's decode kernels expect."""
        device = self.out_proj.weight.device
        conv_dtype = self.conv1d.weight.dtype if dtype is None else dtype
        conv_state = torch.zeros(
            batch_size, self.d_conv, self.conv1d.weight.shape[0], device=device, dtype=conv_dtype
        ).transpose(1, 2)
        ssm_dtype = self.in_proj.weight.dtype if dtype is None else dtype
        ssm_state = torch.zeros(
            batch_size, self.nheads, self.headdim, self.d_state, device=device, dtype=ssm_dtype
        )
        return conv_state, ssm_state

    def _get_states_from_cache(
        self, inference_params: InferenceParams, batch_size: int, initialize_states: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This layer's (conv_state, ssm_state) in ``inference_params.key_value_memory_dict``, allocated
        on first use (zeroed again with ``initialize_states``).

        Raises:
            ValueError: layer_idx is None.
        """
        if self.layer_idx is None:
            raise ValueError(
                "Mamba2: decoding with inference_params needs layer_idx (the key of this layer's "
                "cache); construct Mamba2(..., layer_idx=0)"
            )
        cache = inference_params.key_value_memory_dict
        if self.layer_idx not in cache:
            cache[self.layer_idx] = self.allocate_inference_cache(batch_size, inference_params.max_seqlen)
        conv_state, ssm_state = cache[self.layer_idx]
        if initialize_states:
            conv_state.zero_()
            ssm_state.zero_()
        return conv_state, ssm_state
