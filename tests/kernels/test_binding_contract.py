"""What the loaded mamba_ssm._C registers, whichever binding built it (classic ATen or the LibTorch stable
ABI): every op with the schema mamba_ssm/ops/backends/compiled*.py calls, a CPU kernel for each, the
build info the file carries; torch.library.opcheck of the selective-scan ops; a Mamba block under
torch.compile(fullgraph=True) equal to the same block in float64 on the PyTorch path.

The schemas are written out here by hand: they are the contract between csrc/binding_registry.h and the
Python wrappers, and both bindings must keep it. tests/build/test_stable_abi_two_torches.py runs this file
against a stable _C built with another torch.
"""

import json
import os

import pytest
import torch

from mamba_ssm._compat.buildinfo import read_build_info

SCHEMAS = {
    "selective_scan_fwd": "mamba_ssm::selective_scan_fwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, "
    "Tensor? D, Tensor? z, Tensor? delta_bias, bool delta_softplus) -> (Tensor, Tensor)",
    "selective_scan_bwd": "mamba_ssm::selective_scan_bwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, "
    "Tensor? D, Tensor? z, Tensor? delta_bias, bool delta_softplus, Tensor dout, Tensor? dlast_state) -> "
    "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)",
    "selective_scan_complex_fwd": "mamba_ssm::selective_scan_complex_fwd(Tensor u, Tensor delta, Tensor A, "
    "Tensor B, Tensor C, Tensor? D, Tensor? z, Tensor? delta_bias, bool delta_softplus) -> (Tensor, Tensor)",
    "selective_scan_complex_bwd": "mamba_ssm::selective_scan_complex_bwd(Tensor u, Tensor delta, Tensor A, "
    "Tensor B, Tensor C, Tensor? D, Tensor? z, Tensor? delta_bias, bool delta_softplus, Tensor dout, "
    "Tensor? dlast_state) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)",
    "causal_conv1d_fwd": "mamba_ssm::causal_conv1d_fwd(Tensor x, Tensor weight, Tensor? bias, Tensor? seq_idx, "
    "Tensor? initial_states, bool silu) -> (Tensor, Tensor)",
    "causal_conv1d_bwd": "mamba_ssm::causal_conv1d_bwd(Tensor x, Tensor weight, Tensor? bias, Tensor? seq_idx, "
    "Tensor? initial_states, Tensor dout, Tensor? dfinal_states, bool silu) -> (Tensor, Tensor, Tensor, Tensor)",
    "causal_conv1d_update": "mamba_ssm::causal_conv1d_update(Tensor x, Tensor(a!) conv_state, Tensor weight, "
    "Tensor? bias, bool silu, Tensor? cache_seqlens, Tensor? conv_state_indices) -> Tensor",
    "causal_conv1d_varlen_states": "mamba_ssm::causal_conv1d_varlen_states(Tensor x, Tensor cu_seqlens, "
    "int state_len) -> Tensor",
    "build_info": "mamba_ssm::build_info() -> str",
    "cpu_isa": "mamba_ssm::cpu_isa() -> str",
}
TENSOR_OPS = [name for name in SCHEMAS if name not in ("build_info", "cpu_isa")]


def test_every_op_registered_with_its_schema(compiled):
    for name, schema in SCHEMAS.items():
        op = getattr(torch.ops.mamba_ssm, name).default
        assert str(op._schema) == schema
    for name in TENSOR_OPS:
        assert torch._C._dispatch_has_kernel_for_dispatch_key(f"mamba_ssm::{name}", "CPU"), name


def test_build_info_op_is_the_files_record(compiled):
    from mamba_ssm import _loader

    result = _loader.load()
    from_op = json.loads(torch.ops.mamba_ssm.build_info())
    assert from_op == json.loads(read_build_info(result.path).to_json())
    assert torch.ops.mamba_ssm.cpu_isa() in ("avx512", "avx2", "generic")
    print(f"\n_C: {result.build_info.describe_abi()}; torch {torch.__version__}")


def _scan_args(variable, with_options, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    b, d, n, seqlen = 2, 4, 3, 9
    u = torch.randn(b, d, seqlen, generator=g, dtype=dtype)
    delta = (torch.rand(b, d, seqlen, generator=g) * 0.5).to(dtype)
    A = -torch.rand(d, n, generator=g) - 0.2
    shape = (b, n, seqlen) if variable else (d, n)
    B = torch.randn(*shape, generator=g, dtype=dtype if variable else torch.float32)
    C = torch.randn(*shape, generator=g, dtype=dtype if variable else torch.float32)
    D = torch.randn(d, generator=g) if with_options else None
    z = torch.randn(b, d, seqlen, generator=g, dtype=dtype) if with_options else None
    bias = torch.randn(d, generator=g) * 0.1 if with_options else None
    return u, delta, A, B, C, D, z, bias


@pytest.mark.parametrize("variable", [True, False])
@pytest.mark.parametrize("with_options", [True, False])
def test_opcheck_selective_scan(compiled, variable, with_options):
    """torch.library.opcheck: schema, fake implementation, autograd registration, AOT dispatch."""
    u, delta, A, B, C, D, z, bias = _scan_args(variable, with_options)
    for t in (u, delta, A, B, C) + tuple(x for x in (D, z, bias) if x is not None):
        t.requires_grad_(True)
    torch.library.opcheck(
        torch.ops.mamba_ssm.selective_scan_fwd.default, (u, delta, A, B, C, D, z, bias, True)
    )
    dout = torch.randn_like(u)
    dlast = torch.randn(u.shape[0], u.shape[1], A.shape[1])
    args = tuple(x.detach() if x is not None else None for x in (u, delta, A, B, C, D, z, bias))
    torch.library.opcheck(torch.ops.mamba_ssm.selective_scan_bwd.default, args + (True, dout, dlast))


def test_mamba_block_under_torch_compile_fullgraph(compiled, monkeypatch):
    """A Mamba block (mamba_inner_fn: causal conv1d + selective scan kernels of _C) compiled with
    fullgraph=True gives the eager block's output and gradient, and both equal the block in float64,
    which runs the PyTorch path (the kernels take no float64)."""
    from mamba_ssm.modules.mamba_simple import Mamba

    monkeypatch.setenv("MAMBA_SSM_BACKEND", "compiled")
    torch.manual_seed(0)
    block = Mamba(d_model=16, d_state=8, d_conv=4, expand=2)
    x = torch.randn(2, 12, 16)
    ref_block = Mamba(d_model=16, d_state=8, d_conv=4, expand=2, dtype=torch.float64)
    ref_block.load_state_dict({k: v.double() for k, v in block.state_dict().items()})
    monkeypatch.setenv("MAMBA_SSM_BACKEND", "torch")
    ref = ref_block(x.double())
    monkeypatch.setenv("MAMBA_SSM_BACKEND", "compiled")
    torch._dynamo.reset()
    eager_x = x.clone().requires_grad_(True)
    eager = block(eager_x)
    compiled_block = torch.compile(block, fullgraph=True, backend="aot_eager")
    comp_x = x.clone().requires_grad_(True)
    out = compiled_block(comp_x)
    torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.double(), ref, rtol=1e-4, atol=1e-5)
    out.square().sum().backward()
    eager.square().sum().backward()
    torch.testing.assert_close(comp_x.grad, eager_x.grad, rtol=1e-4, atol=1e-5)
    torch._dynamo.reset()


def test_stable_build_imports_no_libtorch_cpp_symbol(compiled):
    """A stable-ABI _C imports only libtorch's C shim (the audit's check, on the module under test)."""
    from mamba_ssm import _loader

    result = _loader.load()
    if not result.build_info.is_stable_abi:
        pytest.skip(f"this _C is a classic build ({result.build_info.describe_abi()})")
    pytest.importorskip("elftools", reason="pyelftools (ci/requirements-dev.txt) reads the symbol table")
    stable_abi = pytest.importorskip("build_matrix.stable_abi")
    assert stable_abi.check(result.path, result.build_info.torch_abi_floor) == []
    assert os.path.basename(result.path) == "_C.abi3.so"


@pytest.mark.parametrize("variable", [True, False])
def test_opcheck_selective_scan_complex(compiled, variable):
    """torch.library.opcheck of the complex-A ops (A complex64; B/C complex64 (dim, d_state) or real
    (batch, d_state, 2 * seqlen) interleaved pairs)."""
    u, delta, A, B, C, D, z, bias = _scan_args(False, True)
    g = torch.Generator().manual_seed(1)
    A = torch.complex(A, torch.randn(A.shape, generator=g))
    if variable:
        B = torch.randn(u.shape[0], A.shape[1], 2 * u.shape[2], generator=g)
        C = torch.randn(u.shape[0], A.shape[1], 2 * u.shape[2], generator=g)
    else:
        B, C = (
            torch.complex(B, torch.randn(B.shape, generator=g)),
            torch.complex(C, torch.randn(C.shape, generator=g)),
        )
    for t in (u, delta, A, B, C, D, z, bias):
        t.requires_grad_(True)
    torch.library.opcheck(
        torch.ops.mamba_ssm.selective_scan_complex_fwd.default, (u, delta, A, B, C, D, z, bias, True)
    )
    dout = torch.randn_like(u)
    dlast = torch.randn(u.shape[0], u.shape[1], A.shape[1], dtype=torch.complex64)
    args = tuple(x.detach() for x in (u, delta, A, B, C, D, z, bias))
    torch.library.opcheck(torch.ops.mamba_ssm.selective_scan_complex_bwd.default, args + (True, dout, dlast))
