"""Run under some torch with an installed PyPI wheel on sys.path: which kernel module loaded, whether it
registered CUDA kernels, and the compiled CPU ops against float64 references (JSON on stdout).

    python pypi_wheel_child.py TESTS_DIR

TESTS_DIR holds oracles.py (the float64 sequential selective scan written from the Mamba paper).
"""

from __future__ import annotations

import json
import sys

sys.path.insert(0, sys.argv[1])

import torch
from oracles import selective_scan

import mamba_ssm
from mamba_ssm import _loader

OPS = ("selective_scan_fwd", "causal_conv1d_fwd")


def conv_reference(x, weight, bias):
    """Causal depthwise conv1d in float64, one output at a time: y[b, c, t] = bias[c] + sum_k w[c, k] *
    x[b, c, t - (width - 1) + k], zero before t = 0; then SiLU."""
    batch, dim, seqlen = x.shape
    width = weight.shape[1]
    x64, w64 = x.double(), weight.double()
    y = torch.zeros(batch, dim, seqlen, dtype=torch.float64)
    for t in range(seqlen):
        acc = bias.double().clone().expand(batch, dim).clone()
        for k in range(width):
            src = t - (width - 1) + k
            if src >= 0:
                acc = acc + w64[:, k] * x64[:, :, src]
        y[:, :, t] = acc
    return y * torch.sigmoid(y)


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
        out["conv_max_err"] = float((yc.double() - conv_reference(x, weight, bias)).abs().max())
    print(json.dumps(out))


if __name__ == "__main__":
    main()
