"""Mamba-3's Triton kernels compiled for a CUDA/ROCm GPU (marked gpu; benchmarks/gpu_check.sh runs this
file with MAMBA_TRITON_GPU_TESTS=1), reached through the public ops and the dispatcher, against the
float64 sequential oracle of tests/mamba3 (mamba3_reference.py) at headdim 64 and d_state 64: SISO in
bfloat16 (chunk 64: three chunks, seq_idx, input states), MIMO rank 4 with the fused norm and groups in
bfloat16 (seq_idx, input states), packed sequences in float32 (cu_seqlens, final states: one call per
sequence), and the decode step SISO bfloat16 / MIMO float32 (headdim in two blocks).

Sized for gpu_check.sh's limit (75 s): compiling dominates, about 47 kernel configurations at their
first call (compile_check.py's 43 Mamba-3 configurations take about 1.3 s of CPU each for sm_90); the
oracle's share is about 3 s of CPU. Each dtype / constexpr combination added costs about 15 more."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "mamba3"))

import mamba3_cases as M3  # from tests/mamba3 (on the path above)

from mamba_ssm import _dispatch

pytestmark = pytest.mark.gpu

F32, BF16 = torch.float32, torch.bfloat16


@pytest.fixture
def on_triton(gpu_kernels, monkeypatch):
    """The compiled kernels as the dispatcher's automatic choice; counts the calls of the Mamba-3 entry
    points."""
    monkeypatch.delenv("MAMBA_SSM_BACKEND", raising=False)
    _dispatch._reset_for_tests()
    yield M3.count_kernel_calls(gpu_kernels.mamba3, monkeypatch)
    _dispatch._reset_for_tests()


@pytest.mark.parametrize(
    ("case", "dtype", "seqlen", "chunk", "edges"),
    [
        ("gpu-siso-rope0.5", BF16, 160, 64, (40, 100)),
        ("gpu-mimo4-rope1.0-norm", BF16, 100, 16, (33,)),
    ],
    ids=["siso-bf16-seq_idx", "mimo4-norm-bf16-seq_idx"],
)
def test_chunked_scan_on_the_gpu(on_triton, case, dtype, seqlen, chunk, edges):
    seq = M3.seq_idx_from_edges(2, seqlen, edges) if edges else None
    M3.check_against_reference(
        case, dtype, states_rows=2, seq_idx=seq, seqlen=seqlen, chunk_size=chunk, headdim=64, device="cuda"
    )
    assert on_triton["chunk_scan"] == 1


def test_packed_sequences_on_the_gpu(on_triton):
    cu = torch.tensor([0, 50, 50, 130, 160], dtype=torch.int32)
    M3.check_against_reference(
        "gpu-siso-rope0.5", F32, cu_seqlens=cu, batch=1, seqlen=160, chunk_size=64, headdim=64, device="cuda"
    )
    assert on_triton["chunk_scan"] == 1 + 3  # the op's call, then one per non-empty sequence (final states)


@pytest.mark.parametrize(
    ("case", "dtype"),
    [("gpu-siso-rope0.5", BF16), ("gpu-mimo4-rope1.0-norm", F32)],
    ids=["siso-bf16", "mimo4-norm-fp32"],
)
def test_step_on_the_gpu(on_triton, case, dtype):
    M3.check_steps(case, dtype, seqlen=3, headdim=64, device="cuda")
    assert on_triton["step"] == 3
