"""Argument checks shared by the Mamba-3 ops, and their one dispatch call."""

from __future__ import annotations

from typing import Any, List, Literal, Sequence, Tuple, Union, overload

import torch
from torch import Tensor

from mamba_ssm import _dispatch
from mamba_ssm._families import packing as _packing
from mamba_ssm._families.mamba3.states import compute_dtype
from mamba_ssm._families.mamba3.torch_impl import Mamba3States

__all__ = ["Checker", "InputStates", "run_chunked", "run_step"]

#: The states a caller passes (angle, ssm, k, v): a 4-tuple (a :class:`Mamba3States` is one) or a list
#: of four tensors; shapes as each op documents.
InputStates = Union[Tuple[Tensor, Tensor, Tensor, Tensor], List[Tensor]]

#: A chunked scan's result: out, or (out, final states) with ``return_final_states``.
ChunkedResult = Union[Tensor, Tuple[Tensor, Mamba3States]]


class Checker:
    """Checks one op call's tensors, raising errors that name the op, the argument, the expected and
    the actual shape. Shapes are tuples of ints and names; a name takes the size it first meets."""

    def __init__(self, op: str) -> None:
        self.op = op
        self.sizes: dict[str, int] = {}

    @overload
    def tensor(
        self,
        name: str,
        t: object,
        dims: Sequence[int | str],
        optional: Literal[False] = False,
        floating: bool = True,
    ) -> Tensor: ...

    @overload
    def tensor(
        self, name: str, t: object, dims: Sequence[int | str], optional: bool = False, floating: bool = True
    ) -> Tensor | None: ...

    def tensor(
        self, name: str, t: object, dims: Sequence[int | str], optional: bool = False, floating: bool = True
    ) -> Tensor | None:
        """Check ``t`` against ``dims`` (e.g. ``("batch", "seqlen", "nheads", "headdim")``); returns t.

        Raises:
            TypeError: not a tensor (or None when not optional), or not a real float when ``floating``.
            ValueError: the shape does not match.
        """
        if t is None:
            if optional:
                return None
            raise TypeError(f"{self.op}: {name} is required, a tensor of shape ({', '.join(map(str, dims))})")
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{self.op}: {name} must be a torch.Tensor, got {type(t).__name__}")
        if floating and (t.is_complex() or not t.is_floating_point()):
            raise TypeError(f"{self.op}: {name} has dtype {t.dtype}; expected a real floating dtype")
        expected = []
        ok = t.dim() == len(dims)
        for i, d in enumerate(dims):
            size = d if isinstance(d, int) else self.sizes.get(d)
            if ok and size is None and isinstance(d, str):  # (an int d is its own size)
                self.sizes[d] = size = t.shape[i]
            ok = ok and t.shape[i] == size
            expected.append(f"{d}={size}" if isinstance(d, str) and size is not None else str(d))
        if not ok:
            raise ValueError(
                f"{self.op}: {name} must have shape ({', '.join(expected)}), got {tuple(t.shape)}"
            )
        return t

    def divides(self, small: str, large: str) -> None:
        """Raise ValueError unless size ``small`` divides size ``large`` (e.g. ngroups and nheads)."""
        s, g = self.sizes[small], self.sizes[large]
        if s < 1 or g % s:
            raise ValueError(f"{self.op}: {small}={s} must divide {large}={g}")

    def angles(self, d_state: int, pairing: str) -> None:
        """The angle count against d_state: 1 <= num_angles <= d_state // 2 (and d_state even for
        the halves pairing)."""
        a = self.sizes["num_angles"]
        if pairing == "halves" and d_state % 2:
            raise ValueError(f"{self.op}: d_state={d_state} must be even (entries i and i + d_state/2 pair)")
        if not 1 <= a <= d_state // 2:
            raise ValueError(
                f"{self.op}: Angles' last dim {a} must be between 1 and d_state // 2 = {d_state // 2} "
                f"(one angle per rotated pair of d_state entries)"
            )

    def chunk_size(self, chunk_size: object) -> None:
        """Raise ValueError unless ``chunk_size`` is a positive int (not a bool)."""
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
            raise ValueError(f"{self.op}: chunk_size must be a positive int, got {chunk_size!r}")

    def packing(
        self, cu_seqlens: Tensor | None, seq_idx: Tensor | None, device: torch.device
    ) -> tuple[int, Tensor | None, Tensor | None]:
        """Packed sequences after the rule of :mod:`mamba_ssm._families.packing` (one implementation:
        ``check_cu_seqlens`` / ``seq_idx_from_cu_seqlens``): cu_seqlens (num_seqs + 1,) packs a batch of
        one, its rows from cu_seqlens[-1] on being padding; seq_idx (batch, seqlen) int ids, negative
        for padding.

        Returns (S: the number of state rows, cu_seqlens as int64 on ``device`` or None, seq_idx on
        ``device``: the given one, else derived from cu_seqlens (padding rows
        :data:`~mamba_ssm._families.packing.PADDING`), else None).

        Raises:
            ValueError: seq_idx's shape; cu_seqlens not 1-D integer, not from 0, decreasing or past
                seqlen (the message shows the values), or with batch > 1.
        """
        b, l = self.sizes["batch"], self.sizes["seqlen"]
        if seq_idx is not None:
            self.tensor("seq_idx", seq_idx, ("batch", "seqlen"), floating=False)
            seq_idx = seq_idx.to(device)
        if cu_seqlens is None:
            return b, None, seq_idx
        cu = _packing.check_cu_seqlens(self.op, cu_seqlens, l)
        if b != 1:
            raise ValueError(
                f"{self.op}: cu_seqlens packs sequences into a batch of one, got batch {b}; pass a batch "
                f"of one row, or seq_idx (batch, seqlen) for several rows"
            )
        if seq_idx is None:
            seq_idx = _packing.seq_idx_from_cu_seqlens(cu, l, self.op).to(device)
        return cu.numel() - 1, cu.to(device), seq_idx

    def states(self, states: object, rows: int, mimo: bool) -> Mamba3States | None:
        """Input states (angle, ssm, k, v) as :class:`Mamba3States` (k with a rank dim), or None."""
        if states is None:
            return None
        if not isinstance(states, (tuple, list)) or len(states) != 4:
            raise ValueError(
                f"{self.op}: Input_States must be a tuple (angle_state, ssm_state, k_state, v_state), got "
                f"{type(states).__name__}"
                + (f" of length {len(states)}" if isinstance(states, (tuple, list)) else "")
            )
        self.sizes["num_states"] = rows
        angle, ssm, k, v = states
        self.tensor("Input_States[0] (angle)", angle, ("num_states", "nheads", "num_angles"))
        self.tensor("Input_States[1] (ssm)", ssm, ("num_states", "nheads", "headdim", "d_state"))
        if mimo:
            self.tensor("Input_States[2] (k)", k, ("num_states", "mimo_rank", "nheads", "d_state"))
        else:
            self.tensor("Input_States[2] (k)", k, ("num_states", "nheads", "d_state"))
            k = k.unsqueeze(1)
        self.tensor("Input_States[3] (v)", v, ("num_states", "nheads", "headdim"))
        return Mamba3States(angle, ssm, k, v)


def _empty_scan(arguments: dict[str, Any]) -> ChunkedResult:
    """The chunked scan's results at seqlen 0, as the recurrence defines them: no output rows, and the
    final states are the input states (zeros without them): every backend returns these."""
    q, v, init = arguments["q"], arguments["v"], arguments["initial_states"]
    b, _, R, _, n = q.shape
    h, p = v.shape[2], v.shape[3]
    cd = compute_dtype(v)
    shape = (b, 0, h, p) if arguments.get("mimo_o") is not None else (b, 0, R, h, p)
    out: Tensor = v.new_zeros(shape)
    if not arguments["return_final_states"]:
        return out
    if init is not None:
        return out, Mamba3States(init.angle.to(cd), init.ssm.to(cd), init.k.to(cd), init.v.to(v.dtype))
    cu = arguments["cu_seqlens"]
    rows = b if cu is None else cu.numel() - 1
    a = arguments["angles"].shape[-1]
    zeros = v.new_zeros
    return out, Mamba3States(
        zeros(rows, h, a, dtype=cd),
        zeros(rows, h, p, n, dtype=cd),
        zeros(rows, R, h, n, dtype=cd),
        zeros(rows, h, p),
    )


def run_chunked(op: str, arguments: dict[str, Any]) -> ChunkedResult:
    """The chunked scan for ``op`` ("mamba3_siso" or "mamba3_mimo") on the backend the dispatcher picks
    (the Triton kernel where it takes the call, else the PyTorch implementation): out, or (out, the final
    :class:`Mamba3States`) with ``arguments["return_final_states"]``."""
    if arguments["v"].shape[1] == 0:
        return _empty_scan(arguments)
    result: ChunkedResult = _dispatch.call(op, **arguments)
    return result


def run_step(arguments: dict[str, Any]) -> tuple[Tensor, Mamba3States]:
    """One decode step (op "mamba3_step") on the backend the dispatcher picks: (out, new states)."""
    result: tuple[Tensor, Mamba3States] = _dispatch.call("mamba3_step", **arguments)
    return result
