"""The Mamba block (Gu & Dao, arXiv:2312.00752, section 3.4 and Figure 3) with upstream's constructor
arguments and parameter names and shapes, so upstream checkpoints load with ``strict=True``:

    in_proj   Linear(d_model, 2 * d_inner)            weight (2*d_inner, d_model)
    conv1d    depthwise Conv1d(d_inner, d_conv)        weight (d_inner, 1, d_conv), bias (d_inner,)
    x_proj    Linear(d_inner, dt_rank + 2 * d_state)   no bias
    dt_proj   Linear(dt_rank, d_inner)                 bias = inverse softplus of the initial dt
    A_log     (d_inner, d_state)                       A = -exp(A_log), S4D-real init log(1..d_state)
    D         (d_inner,)
    out_proj  Linear(d_inner, d_model)

``forward(hidden_states, inference_params=None)`` runs the whole sequence (``mamba_inner_fn`` on the
fast path) or, with ``inference_params``, fills / continues the cached conv and SSM states: a prompt
(``seqlen_offset == 0``) stores them, a single token afterwards is one :meth:`step`, and a longer piece
afterwards continues from the cached states (prefill in pieces).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.types import Device

from mamba_ssm.modules._common import (
    FactoryKwargs,
    check_positive_sizes,
    check_sequence_input,
    inverse_softplus_dt,
    set_flag,
)
from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn, causal_conv1d_update
from mamba_ssm.ops.selective_scan_interface import mamba_inner_fn, selective_scan_fn
from mamba_ssm.ops.triton.selective_state_update import selective_state_update

if TYPE_CHECKING:
    from mamba_ssm.utils.generation import InferenceParams

__all__ = ["Mamba"]


class Mamba(nn.Module):
    """One Mamba mixer layer: (batch, seqlen, d_model) -> (batch, seqlen, d_model).

    Args:
        d_model: model width. d_state: SSM state size N (16). d_conv: conv width (4).
        expand: d_inner = expand * d_model (2). dt_rank: rank of the delta projection ("auto":
            ceil(d_model / 16)).
        dt_min, dt_max: range of the initial delta (log-uniform). dt_init: "random" or "constant"
            initialisation of dt_proj.weight; dt_scale scales its std (dt_rank ** -0.5 * dt_scale).
        dt_init_floor: smallest initial delta.
        conv_bias: conv1d has a bias. bias: in_proj and out_proj have biases.
        use_fast_path: use the fused :func:`mamba_inner_fn` when not decoding.
        layer_idx: key of this layer's states in ``inference_params.key_value_memory_dict``.
        device, dtype: of the parameters.

    Raises:
        ValueError: a non-positive size, d_inner < 1, a dt_rank string other than "auto", or an unknown
            dt_init.
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 16,
        d_conv: int = 4,
        expand: float = 2,
        dt_rank: int | str = "auto",
        dt_min: float = 0.001,
        dt_max: float = 0.1,
        dt_init: str = "random",
        dt_scale: float = 1.0,
        dt_init_floor: float = 1e-4,
        conv_bias: bool = True,
        bias: bool = False,
        use_fast_path: bool = True,
        layer_idx: int | None = None,
        device: Device = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        factory_kwargs: FactoryKwargs = {"device": device, "dtype": dtype}
        super().__init__()
        check_positive_sizes("Mamba", d_model=d_model, d_state=d_state, d_conv=d_conv)
        self.d_model = d_model
        self.d_state = d_state
        self.d_conv = d_conv
        self.expand = expand
        self.d_inner = int(self.expand * self.d_model)
        if self.d_inner < 1:
            raise ValueError(
                f"Mamba: d_inner = int(expand * d_model) = int({expand!r} * {d_model}) = {self.d_inner}; "
                f"it must be >= 1: use a larger expand (upstream's default is expand=2)"
            )
        if isinstance(dt_rank, str):
            if dt_rank != "auto":
                raise ValueError(
                    f"Mamba: dt_rank={dt_rank!r}; expected an int or 'auto' (ceil(d_model / 16))"
                )
            self.dt_rank = math.ceil(self.d_model / 16)
        else:
            self.dt_rank = dt_rank
        self.use_fast_path = use_fast_path
        self.layer_idx = layer_idx

        self.in_proj = nn.Linear(self.d_model, self.d_inner * 2, bias=bias, **factory_kwargs)
        self.conv1d = nn.Conv1d(
            self.d_inner,
            self.d_inner,
            kernel_size=d_conv,
            groups=self.d_inner,
            padding=d_conv - 1,
            bias=conv_bias,
            **factory_kwargs,
        )
        self.activation = "silu"
        self.act = nn.SiLU()
        self.x_proj = nn.Linear(self.d_inner, self.dt_rank + self.d_state * 2, bias=False, **factory_kwargs)
        self.dt_proj = nn.Linear(self.dt_rank, self.d_inner, bias=True, **factory_kwargs)

        # dt_proj.weight: constant or uniform with std dt_rank^-0.5 * dt_scale (paper, appendix).
        dt_init_std = self.dt_rank**-0.5 * dt_scale
        if dt_init == "constant":
            nn.init.constant_(self.dt_proj.weight, dt_init_std)
        elif dt_init == "random":
            nn.init.uniform_(self.dt_proj.weight, -dt_init_std, dt_init_std)
        else:
            raise ValueError(f"Mamba: dt_init={dt_init!r}; expected 'random' or 'constant'")
        # dt_proj.bias: softplus(bias) is log-uniform in [dt_min, dt_max], floored at dt_init_floor.
        inv_dt = inverse_softplus_dt(self.d_inner, dt_min, dt_max, dt_init_floor, **factory_kwargs)
        with torch.no_grad():
            self.dt_proj.bias.copy_(inv_dt)
        set_flag(self.dt_proj.bias, "_no_reinit")

        # S4D-real initialisation: A[d, n] = -(n + 1), stored as A_log = log(n + 1).
        A = torch.arange(1, self.d_state + 1, dtype=torch.float32, device=device).repeat(self.d_inner, 1)
        self.A_log = nn.Parameter(torch.log(A))
        set_flag(self.A_log, "_no_weight_decay")
        self.D = nn.Parameter(torch.ones(self.d_inner, device=device))
        set_flag(self.D, "_no_weight_decay")
        self.out_proj = nn.Linear(self.d_inner, self.d_model, bias=bias, **factory_kwargs)

    # ------------------------------------------------------------------------------------------------
    def _xz(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """in_proj, channels first: (batch, seqlen, d_model) -> (batch, 2 * d_inner, seqlen)."""
        xz = F.linear(hidden_states, self.in_proj.weight, self.in_proj.bias)
        return xz.transpose(1, 2)

    def forward(
        self, hidden_states: torch.Tensor, inference_params: InferenceParams | None = None
    ) -> torch.Tensor:
        """hidden_states: (batch, seqlen, d_model) -> (batch, seqlen, d_model).

        Raises:
            ValueError: hidden_states is not (batch, seqlen, d_model).
        """
        check_sequence_input("Mamba.forward", hidden_states, self.d_model)
        batch, seqlen, _ = hidden_states.shape
        conv_state = ssm_state = None
        if inference_params is not None:
            conv_state, ssm_state = self._get_states_from_cache(inference_params, batch)
            if inference_params.seqlen_offset > 0:
                if seqlen == 1:
                    out, _, _ = self.step(hidden_states, conv_state, ssm_state)
                    return out
                return self._continue(hidden_states, conv_state, ssm_state)
        A = -torch.exp(self.A_log.float())
        xz = self._xz(hidden_states)
        if self.use_fast_path and inference_params is None:
            fused: torch.Tensor = mamba_inner_fn(
                xz,
                self.conv1d.weight,
                self.conv1d.bias,
                self.x_proj.weight,
                self.dt_proj.weight,
                self.out_proj.weight,
                self.out_proj.bias,
                A,
                None,
                None,
                self.D.float(),
                delta_bias=self.dt_proj.bias.float(),
                delta_softplus=True,
            )
            return fused
        x, z = xz.chunk(2, dim=1)
        if conv_state is not None:
            # The last d_conv inputs of the conv (zeros before the start when the prompt is shorter).
            conv_state.copy_(F.pad(x, (max(self.d_conv - seqlen, 0), 0))[..., -self.d_conv :])
        x = causal_conv1d_fn(x, self.conv1d.weight.squeeze(1), self.conv1d.bias, activation=self.activation)
        y, last_state = self._ssm(x, z, A, return_last_state=ssm_state is not None)
        if ssm_state is not None and last_state is not None:  # (last_state is set when ssm_state is)
            ssm_state.copy_(last_state)
        result: torch.Tensor = self.out_proj(y.transpose(1, 2))
        return result

    def _project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (batch, d_inner, seqlen) -> delta (batch, d_inner, seqlen), B, C (batch, d_state, seqlen)."""
        batch, _, seqlen = x.shape
        x_dbl = self.x_proj(x.transpose(1, 2).reshape(batch * seqlen, self.d_inner))
        dt, B, C = torch.split(x_dbl, [self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = (self.dt_proj.weight @ dt.t()).reshape(self.d_inner, batch, seqlen).transpose(0, 1)
        B = B.reshape(batch, seqlen, self.d_state).transpose(1, 2).contiguous()
        C = C.reshape(batch, seqlen, self.d_state).transpose(1, 2).contiguous()
        return dt, B, C

    def _ssm(
        self, x: torch.Tensor, z: torch.Tensor, A: torch.Tensor, return_last_state: bool
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The selective scan of x, z (batch, d_inner, seqlen) -> (y (batch, d_inner, seqlen), the final
        state (batch, d_inner, d_state) with ``return_last_state``, else None)."""
        dt, B, C = self._project(x)
        out = selective_scan_fn(
            x,
            dt,
            A,
            B,
            C,
            self.D.float(),
            z=z,
            delta_bias=self.dt_proj.bias.float(),
            delta_softplus=True,
            return_last_state=return_last_state,
        )
        if isinstance(out, tuple):  # return_last_state
            y, last = out
            return y, last
        return out, None

    def _continue(
        self, hidden_states: torch.Tensor, conv_state: torch.Tensor, ssm_state: torch.Tensor
    ) -> torch.Tensor:
        """A piece of several tokens after earlier ones: conv and scan continue from the caches."""
        from mamba_ssm._families.selective_scan.torch_impl import selective_scan_with_state

        x, z = self._xz(hidden_states).chunk(2, dim=1)
        init = conv_state[..., 1:].to(x.dtype).clone()  # the last d_conv - 1 inputs (a copy)
        full = torch.cat([conv_state.to(x.dtype), x], dim=-1)
        conv_state.copy_(full[..., -self.d_conv :])
        x = causal_conv1d_fn(
            x,
            self.conv1d.weight.squeeze(1),
            self.conv1d.bias,
            initial_states=init,
            activation=self.activation,
        )
        dt, B, C = self._project(x)
        A = -torch.exp(self.A_log.float())
        y, last = selective_scan_with_state(
            x, dt, A, B, C, self.D.float(), z, self.dt_proj.bias.float(), True, initial_state=ssm_state
        )
        ssm_state.copy_(last)
        out: torch.Tensor = self.out_proj(y.transpose(1, 2))
        return out

    def step(
        self, hidden_states: torch.Tensor, conv_state: torch.Tensor, ssm_state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One token: hidden_states (batch, 1, d_model) -> (out (batch, 1, d_model), conv_state,
        ssm_state), the states (batch, d_inner, d_conv) and (batch, d_inner, d_state) updated in place."""
        if hidden_states.dim() != 3 or hidden_states.shape[1] != 1:
            raise ValueError(
                f"Mamba.step decodes one token at a time: hidden_states must have shape "
                f"(batch, 1, {self.d_model}), got {tuple(hidden_states.shape)}"
            )
        dtype = hidden_states.dtype
        xz = F.linear(hidden_states.squeeze(1), self.in_proj.weight, self.in_proj.bias)  # (batch, 2*d_inner)
        x, z = xz.chunk(2, dim=-1)
        x = causal_conv1d_update(
            x, conv_state, self.conv1d.weight.squeeze(1), self.conv1d.bias, self.activation
        )
        x_db = self.x_proj(x)
        dt, B, C = torch.split(x_db, [self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = F.linear(dt, self.dt_proj.weight)  # bias added (then softplus) inside the update
        A = -torch.exp(self.A_log.float())
        y = selective_state_update(
            ssm_state, x, dt, A, B, C, self.D, z=z, dt_bias=self.dt_proj.bias, dt_softplus=True
        )
        out = self.out_proj(y)
        return out.unsqueeze(1).to(dtype), conv_state, ssm_state

    def allocate_inference_cache(
        self, batch_size: int, max_seqlen: int, dtype: torch.dtype | None = None, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Zeroed (conv_state (batch, d_inner, d_conv), ssm_state (batch, d_inner, d_state)); conv_state
        in the conv weight's dtype (or ``dtype``), ssm_state in dt_proj's weight dtype (or ``dtype``)."""
        device = self.out_proj.weight.device
        conv_dtype = self.conv1d.weight.dtype if dtype is None else dtype
        conv_state = torch.zeros(batch_size, self.d_inner, self.d_conv, device=device, dtype=conv_dtype)
        ssm_dtype = self.dt_proj.weight.dtype if dtype is None else dtype
        ssm_state = torch.zeros(batch_size, self.d_inner, self.d_state, device=device, dtype=ssm_dtype)
        return conv_state, ssm_state

    def _get_states_from_cache(
        self, inference_params: InferenceParams, batch_size: int, initialize_states: bool = False
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """This layer's (conv_state, ssm_state) in ``inference_params.key_value_memory_dict``, allocated
        on first use (zeroed again with ``initialize_states``)."""
        if self.layer_idx is None:
            raise ValueError(
                "Mamba: decoding with inference_params needs layer_idx (the key of this layer's "
                "cache); construct Mamba(..., layer_idx=0)"
            )
        cache = inference_params.key_value_memory_dict
        if self.layer_idx not in cache:
            conv_state = torch.zeros(
                batch_size,
                self.d_inner,
                self.d_conv,
                device=self.conv1d.weight.device,
                dtype=self.conv1d.weight.dtype,
            )
            ssm_state = torch.zeros(
                batch_size,
                self.d_inner,
                self.d_state,
                device=self.dt_proj.weight.device,
                dtype=self.dt_proj.weight.dtype,
            )
            cache[self.layer_idx] = (conv_state, ssm_state)
        else:
            conv_state, ssm_state = cache[self.layer_idx]
            if initialize_states:
                conv_state.zero_()
                ssm_state.zero_()
        return conv_state, ssm_state
