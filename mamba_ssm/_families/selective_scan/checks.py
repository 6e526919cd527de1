"""The selective scan's argument checks: upstream mamba-ssm's dtype rule and the shapes of
:func:`mamba_ssm.ops.selective_scan_interface.selective_scan_fn`, in front of every backend."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from mamba_ssm._families.checks import dtype_name, require_float, require_tensor, shape_text

__all__ = ["check_dtype_rule", "validate_selective_scan"]


def check_dtype_rule(
    fn: str,
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor | None,
    C: Tensor | None,
    D: Tensor | None,
    z: Tensor | None,
    delta_bias: Tensor | None,
) -> None:
    """Upstream mamba-ssm's dtype rule for the selective scan (its kernel path checks the same):
    delta and z in u's dtype; the weights A, D, delta_bias float32 (float64 allowed when u is float64);
    B and C in u's dtype or float32. Raises TypeError naming the argument, its dtype and the fix.
    With a complex A, A, B and C are checked by ``selective_scan_complex.validate_complex``."""
    real: Tensor | None = None if A.is_complex() else A
    if real is None:
        B = C = None
    ud = dtype_name(u.dtype)
    for name, x in (("delta", delta), ("z", z)):
        if x is not None and x.dtype != u.dtype:
            raise TypeError(
                f"{fn}: {name} has dtype {dtype_name(x.dtype)} but u has {ud}; expected {name} "
                f"in u's dtype ({ud}): cast {name} to u.dtype ({name}.to(u.dtype))"
            )
    weights_ok = (torch.float32, torch.float64) if u.dtype == torch.float64 else (torch.float32,)
    allowed = " or ".join(dtype_name(d) for d in weights_ok)
    for name, x in (("A", real), ("D", D), ("delta_bias", delta_bias)):
        if x is not None and x.dtype not in weights_ok:
            raise TypeError(
                f"{fn}: {name} has dtype {dtype_name(x.dtype)}; expected {allowed} (the scan's "
                f"weights stay in full precision, u is {ud}): cast {name} with "
                f"{name}.float()"
            )
    bc_ok = (u.dtype, torch.float32)
    for name, x in (("B", B), ("C", C)):
        if x is not None and x.dtype not in bc_ok:
            raise TypeError(
                f"{fn}: {name} has dtype {dtype_name(x.dtype)} but u has {ud}; expected "
                f"{name} in u's dtype ({ud}) or float32: cast {name} to u.dtype "
                f"({name}.to(u.dtype))"
            )


def validate_selective_scan(
    u: Any,
    delta: Any,
    A: Any,
    B: Any,
    C: Any,
    D: Any = None,
    z: Any = None,
    delta_bias: Any = None,
    fn: str = "selective_scan_fn",
) -> None:
    """Check the selective scan's inputs; raise TypeError/ValueError naming the argument, what was
    received and what was expected. Shapes: see :func:`selective_scan_fn`."""
    for name, x, opt in (
        ("u", u, False),
        ("delta", delta, False),
        ("A", A, False),
        ("B", B, False),
        ("C", C, False),
        ("D", D, True),
        ("z", z, True),
        ("delta_bias", delta_bias, True),
    ):
        require_tensor(fn, name, x, opt)
    complex_a = A.is_complex()  # A, B and C then follow selective_scan_complex's rules
    for name, x in (
        ("A", A),
        ("u", u),
        ("delta", delta),
        ("B", B),
        ("C", C),
        ("D", D),
        ("z", z),
        ("delta_bias", delta_bias),
    ):
        if not (complex_a and name in ("A", "B", "C")):
            require_float(fn, name, x)
    check_dtype_rule(fn, u, delta, A, B, C, D, z, delta_bias)
    if u.dim() != 3:
        raise ValueError(f"{fn}: u must have rank 3 (batch, dim, seqlen), got shape {shape_text(u)}")
    batch, dim, seqlen = u.shape
    if tuple(delta.shape) != tuple(u.shape):
        raise ValueError(
            f"{fn}: delta must have u's shape (batch, dim, seqlen) = {shape_text(u)}, got {shape_text(delta)}"
        )
    if A.dim() != 2 or A.shape[0] != dim:
        raise ValueError(
            f"{fn}: A must have shape (dim, d_state) with dim = {dim} (from u {shape_text(u)}), got {shape_text(A)}"
        )
    d_state = A.shape[1]
    if d_state < 1:
        raise ValueError(f"{fn}: A has d_state 0 (shape {shape_text(A)}); expected d_state >= 1")
    if complex_a:
        from mamba_ssm._families.selective_scan.complex import validate_complex  # the complex-A family

        validate_complex(fn, u, A, B, C)
    for name, X in () if complex_a else (("B", B), ("C", C)):
        if X.dim() == 2:
            if tuple(X.shape) != (dim, d_state):
                raise ValueError(
                    f"{fn}: constant {name} must have shape (dim, d_state) = ({dim}, "
                    f"{d_state}), got {shape_text(X)}"
                )
        elif X.dim() == 3:
            if tuple(X.shape) != (batch, d_state, seqlen):
                raise ValueError(
                    f"{fn}: variable {name} must have shape (batch, d_state, seqlen) = "
                    f"({batch}, {d_state}, {seqlen}), got {shape_text(X)}"
                )
        elif X.dim() == 4:
            groups = X.shape[1]
            if (
                X.shape[0] != batch
                or X.shape[2] != d_state
                or X.shape[3] != seqlen
                or groups < 1
                or dim % groups
            ):
                raise ValueError(
                    f"{fn}: grouped {name} must have shape (batch, groups, d_state, seqlen) = ({batch}, "
                    f"groups, {d_state}, {seqlen}) with groups dividing dim = {dim}, got {shape_text(X)}"
                )
        else:
            raise ValueError(
                f"{fn}: {name} must have rank 2 (dim, d_state), 3 (batch, d_state, seqlen) or "
                f"4 (batch, groups, d_state, seqlen), got shape {shape_text(X)}"
            )
    if B.dim() >= 3 and C.dim() >= 3 and not complex_a:
        gb = B.shape[1] if B.dim() == 4 else 1
        gc = C.shape[1] if C.dim() == 4 else 1
        if gb != gc:
            raise ValueError(
                f"{fn}: variable B has {gb} group(s) (shape {shape_text(B)}) and variable C has "
                f"{gc} (shape {shape_text(C)}); expected the same number of groups"
            )
    for name, x in (("D", D), ("delta_bias", delta_bias)):
        if x is not None and tuple(x.shape) != (dim,):
            raise ValueError(f"{fn}: {name} must have shape (dim,) = ({dim},), got {shape_text(x)}")
    if z is not None and tuple(z.shape) != tuple(u.shape):
        raise ValueError(
            f"{fn}: z must have u's shape (batch, dim, seqlen) = {shape_text(u)}, got {shape_text(z)}"
        )
    for name, x in (
        ("delta", delta),
        ("A", A),
        ("B", B),
        ("C", C),
        ("D", D),
        ("z", z),
        ("delta_bias", delta_bias),
    ):
        if x is not None and x.device != u.device:
            raise ValueError(
                f"{fn}: {name} is on {x.device} but u is on {u.device}; expected every input "
                f"on one device (move {name} with .to({str(u.device)!r}))"
            )
