"""Helpers shared by the Triton kernels and their Python faces (no kernels here): the typed ``jit``
decorator and the names that annotate kernel parameters."""

from __future__ import annotations

from typing import Any, Callable, Optional

import torch
import triton
import triton.language as tl

# The annotations of a @jit function's parameters. Triton reads them: ``tl.constexpr`` makes a
# compile-time constant, and an annotation naming a Triton type (``int``, ``tl.int32``, ``float``, ...)
# fixes that parameter's type and drops its value specialisation (== 1, divisible by 16), so the
# parameters below must not carry such a type. Triton's compiler also resolves each annotation as a
# global of the kernel's module, accepting only Triton objects there (``typing.Any`` is refused, and
# Python < 3.11 fails Triton's dependency hashing on it). So at run time each name is ``tl.tensor``
# (Triton normalises it to "tensor": no type, no "const", the launch specialises as if unannotated);
# mypy sees ``Any``, as everything from the untyped ``triton`` package is. The kernel modules
# evaluate these annotations when defined (no ``from __future__ import annotations`` there: triton 3.0's
# interpreter compares the annotation object itself with ``tl.constexpr``).
#: A tensor argument of a kernel: a pointer to its first element (upper-case names, but for the sizes T,
#: M, N, G).
Pointer = tl.tensor
#: A runtime int / float argument of a kernel (size, stride, bound, eps), specialised by Triton as it
#: chooses (an int == 1 or divisible by 16 compiles its own variant).
Scalar = tl.tensor
#: A value computed inside a kernel (index, mask, tile, program id; 0-d or a block) that a device
#: function takes or returns; a device function returning several values is annotated ``Block`` too.
Block = tl.tensor

KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def jit(fn: Callable[..., object]) -> Any:
    """``triton.jit`` for a kernel or a device function, typed for mypy (triton ships no types). Triton
    compiles ``fn``'s own source and signature, as under ``@triton.jit``; the result is launched as
    ``kernel[grid](...)`` or called from another kernel."""
    return triton.jit(fn)


def unsupported_dtype(**tensors: Optional[torch.Tensor]) -> Optional[str]:
    """None when every given tensor (None entries skipped) has a dtype the kernels take, else why not."""
    for name, t in tensors.items():
        if t is not None and t.dtype not in KERNEL_DTYPES:
            return (
                f"{name} has dtype {t.dtype}; the Triton kernels take float32, float16 and bfloat16 "
                "(float64 runs on the PyTorch implementation)"
            )
    return None


def pow2(n: int, floor: int = 1) -> int:
    """The smallest power of two >= max(n, floor)."""
    return max(int(triton.next_power_of_2(max(int(n), 1))), floor)


def warps_for(block_elems: int) -> int:
    """A warp count for a row-wise program holding ``block_elems`` elements per array (1..16: about 8 per
    thread; tests/ops/triton/compile_check.py shows no register spills that way at rows of 4096)."""
    return int(min(16, max(1, block_elems // 256)))
