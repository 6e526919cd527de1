"""Run under some torch with an installed PyPI wheel on sys.path: which kernel module loaded, whether it
registered CUDA kernels, and the compiled CPU ops against float64 references (JSON on stdout).

    python pypi_wheel_child.py TESTS_DIR

TESTS_DIR holds oracles.py (the float64 sequential selective scan written from the Mamba paper) and
reference.py (the float64 causal conv1d).
"""

from __future__ import annotations

import json
import sys

sys.path.insert(0, sys.argv[1])

import torch
from oracles import selective_scan
from reference import causal_conv1d as conv_reference

import mamba_ssm
from mamba_ssm import _loader

OPS = ("selective_scan_fwd", "causal_conv1d_fwd")


def main() -> None:
    result = _loader.load()
    out = {
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "mamba_ssm_file": mamba_ssm.__file__,
        "loaded": result.loaded,
        "reason": result.reason,
        "path": result.path,
        "folder": None if result.module is None else result.module.folder,
        "choice_reason": None if result.module is None else result.module.reason,
        # the CUDA runtime the module's kernels link (nvcc's; for a stable-ABI module it may differ from
        # the CUDA of the torch whose headers compiled it, build_torch_cuda)
        "build_cuda": None if result.build_info is None else result.build_info.cuda_runtime_version,
        "build_torch_cuda": None if result.build_info is None else result.build_info.torch_cuda,
    }
    if result.loaded:
        has = torch._C._dispatch_has_kernel_for_dispatch_key
        out["cpu_kernels"] = {op: has(f"mamba_ssm::{op}", "CPU") for op in OPS}
        out["cuda_kernels"] = {op: has(f"mamba_ssm::{op}", "CUDA") for op in OPS}
        from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn

        mamba_ssm.set_backend("compiled")
        g = torch.Generator().manual_seed(0)
        batch, dim, d_state, seqlen = 2, 8, 16, 64
        u = torch.randn(batch, dim, seqlen, generator=g)
        delta = torch.rand(batch, dim, seqlen, generator=g) * 0.5
        A = -torch.rand(dim, d_state, generator=g) - 0.5
        B = torch.randn(batch, d_state, seqlen, generator=g)
        C = torch.randn(batch, d_state, seqlen, generator=g)
        D = torch.randn(dim, generator=g)
        y, last = selective_scan_fn(u, delta, A, B, C, D, return_last_state=True)
        y_ref, last_ref = selective_scan(u, delta, A, B, C, D)
        out["scan_max_err"] = float((y.double() - y_ref).abs().max())
        out["scan_state_max_err"] = float((last.double() - last_ref).abs().max())
        x = torch.randn(batch, dim, seqlen, generator=g)
        weight = torch.randn(dim, 4, generator=g)
        bias = torch.randn(dim, generator=g)
        yc = causal_conv1d_fn(x, weight, bias, activation="silu")
        out["conv_max_err"] = float(
            abs(yc.double().numpy() - conv_reference(x, weight, bias, silu=True)).max()
        )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
