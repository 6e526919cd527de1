"""Argument checks shared by the families: a tensor where one is required, a real float dtype.

Messages name the function, the argument, what was received and what was expected.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["FLOATS", "dtype_name", "require_float", "require_tensor", "shape_text"]

#: The real float dtypes the ops take.
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def shape_text(x: torch.Tensor) -> str:
    """``x``'s shape as messages show it: ``(2, 3, 5)``."""
    return str(tuple(x.shape))


def dtype_name(dtype: torch.dtype) -> str:
    """``float32`` for ``torch.float32``."""
    return str(dtype).replace("torch.", "")


def require_tensor(fn: str, name: str, x: Any, optional: bool = False, *, say_none: bool = True) -> None:
    """TypeError naming ``name`` unless ``x`` is a tensor (or None when ``optional``); the message says
    ``or None`` for an optional argument unless ``say_none`` is False."""
    if x is None and optional:
        return
    if not isinstance(x, torch.Tensor):
        or_none = " or None" if optional and say_none else ""
        raise TypeError(f"{fn}: {name} must be a torch.Tensor{or_none}, got {type(x).__name__}")


def require_float(fn: str, name: str, x: torch.Tensor | None, *, fix: str | None = None) -> None:
    """TypeError naming ``name`` unless ``x`` (None passes) has a real float dtype.

    Without ``fix`` a complex ``x`` gets its own message (only A, B and C of the scan may be complex);
    with it, every other dtype's message ends with ``(fix)``.
    """
    if x is None:
        return
    if fix is None and x.is_complex():
        raise TypeError(
            f"{fn}: {name} has complex dtype {x.dtype}; only A, B and C may be complex (with a complex "
            f"A): pass a real {name}"
        )
    if x.dtype not in FLOATS:
        hint = f" ({fix})" if fix else ""
        raise TypeError(
            f"{fn}: {name} has dtype {x.dtype}; expected float16, bfloat16, float32 or float64{hint}"
        )
