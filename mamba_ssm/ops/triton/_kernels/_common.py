"""Helpers shared by the Triton kernels' Python faces (no kernels here)."""

from __future__ import annotations

from typing import Optional

import torch
import triton

KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def unsupported_dtype(**tensors) -> Optional[str]:
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
