"""Mamba-3's Triton kernels (mamba_ssm._families.mamba3.triton_kernels) on CPU tensors through Triton's
interpreter, reached through the public ops (mamba3_siso_combined, mamba3_mimo, mamba3_step,
mamba3_siso_step) with the dispatcher told that Triton runs on the CPU, against the float64 sequential
oracle of tests/mamba3 (mamba3_reference.py): the output, the final states and the gradient of every
input (through both), SISO and MIMO (ranks 2 and 4, the fused head-wise norm), rope_fraction 0.5 and 1.0
with each variant's pairing, ngroups > 1, seqlens that cross SSD chunks and angle blocks without being a
multiple of either, input states, seq_idx, cu_seqlens (one masked call, and one call per sequence with
states), padding (rows after cu_seqlens[-1], seq_idx -1: output and gradients 0, the PyTorch path's
results too), the decode step; float32 within 1e-4 and bfloat16 within 6e-2 of the reference's largest
magnitude. Calls the kernels do not take run the PyTorch path with a warning that says why.

Shapes are tiny (the interpreter runs every program in Python); the same kernels are compiled for GPUs
by compile_check.py."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "mamba3"))

import mamba3_cases as M3  # from tests/mamba3 (on the path above)

from mamba_ssm import _dispatch
from mamba_ssm._backends import triton as _triton_backend

F32, BF16 = torch.float32, torch.bfloat16


@pytest.fixture
def triton_mamba3(interpreted, monkeypatch):
    """The dispatcher believes Triton runs on the CPU (the kernels are interpreted); counts the calls
    of the Mamba-3 kernels' entry points."""
    monkeypatch.delenv("MAMBA_SSM_BACKEND", raising=False)
    _dispatch._reset_for_tests()
    monkeypatch.setattr(_triton_backend, "triton_unavailable", lambda device: None)
    calls = M3.count_kernel_calls(interpreted.mamba3, monkeypatch)
    yield calls
    _dispatch._reset_for_tests()


# id: (case, dtype, options). chunk_size 4 gives SSD chunks of 16 sub-steps: 16 tokens (SISO), 8 (rank
# 2), 4 (rank 4); angle blocks are 32 tokens.
CHUNKED = {
    "siso-states-fp32": ("siso-rope0.5", F32, {"states_rows": 2, "seqlen": 37}),
    "siso-groups-seq_idx-fp32": (
        "siso-rope1.0-groups",
        F32,
        {"states_rows": 2, "seqlen": 37, "seq": (5, 16, 33)},
    ),
    "mimo2-groups-states-fp32": ("mimo-rope0.5-groups", F32, {"states_rows": 2, "seqlen": 21}),
    "mimo4-norm-seq_idx-fp32": ("mimo4-rope1.0-norm", F32, {"states_rows": 2, "seqlen": 13, "seq": (3, 8)}),
    "siso-states-bf16": ("siso-rope0.5", BF16, {"states_rows": 2, "seqlen": 37}),
    "mimo4-norm-states-bf16": ("mimo4-rope1.0-norm", BF16, {"states_rows": 2, "seqlen": 13}),
}


@pytest.mark.parametrize("name", list(CHUNKED))
def test_chunked_scan_matches_the_recurrence(triton_mamba3, name):
    case, dtype, opts = CHUNKED[name]
    opts = dict(opts)
    edges = opts.pop("seq", None)
    seq = None if edges is None else M3.seq_idx_from_edges(2, opts["seqlen"], edges)
    M3.check_against_reference(case, dtype, seq_idx=seq, **opts)
    assert triton_mamba3["chunk_scan"] == 1


@pytest.mark.parametrize(
    ("case", "states_rows", "final_states"),
    [("siso-rope0.5", 0, False), ("siso-rope0.5", 4, True), ("mimo-rope0.5-groups", 0, True)],
    ids=["siso-one-masked-call", "siso-input-states", "mimo2-final-states"],
)
def test_cu_seqlens(triton_mamba3, case, states_rows, final_states):
    """Packed sequences (one empty): without states one call masked by the sequence ids; with input or
    final states one call per non-empty sequence."""
    cu = torch.tensor([0, 4, 4, 20, 37], dtype=torch.int32)
    M3.check_against_reference(
        case, F32, states_rows=states_rows, cu_seqlens=cu, batch=1, seqlen=37, final_states=final_states
    )
    assert triton_mamba3["chunk_scan"] == (1 if not final_states else 1 + 3)


@pytest.mark.parametrize("case", ["siso-rope1.0-groups", "mimo4-rope1.0-norm"])
def test_seq_idx_padding_is_a_boundary_on_both_sides(triton_mamba3, case):
    """seq_idx -1 before, between and after sequences (one masked call): the oracle's outputs, final
    states (zero for the row that ends in padding) and gradients."""
    seq = torch.tensor(M3.PADDED_SEQ_IDX, dtype=torch.int32)
    M3.check_against_reference(case, F32, states_rows=2, seq_idx=seq, final_states=True)
    assert triton_mamba3["chunk_scan"] == 1


@pytest.mark.parametrize(
    ("case", "with_states", "cu"),
    [
        ("siso-rope0.5", False, [0, 4, 4, 15]),
        ("mimo-rope0.5-groups", True, [0, 4, 4, 15]),
        ("siso-rope0.5", False, [0, 0]),
    ],
    ids=["siso-one-masked-call", "mimo2-input-states", "siso-only-padding"],
)
def test_padded_cu_seqlens(triton_mamba3, monkeypatch, case, with_states, cu):
    """cu_seqlens that ends before the 21 tokens (the rest is padding) and holds an empty sequence: on
    the kernels each sequence == the oracle on it alone (outputs, final states with input states,
    gradients), the padding rows' outputs and gradients 0; the same on the PyTorch path, and the two
    paths agree within float32's tolerance."""
    args = (case, F32, torch.tensor(cu, dtype=torch.int32), 21, with_states, with_states)
    out, states, grads = M3.check_packed_against_alone(*args)
    calls = 1 if not with_states else 1 + 2  # masked, or one call per non-empty sequence
    assert triton_mamba3["chunk_scan"] == calls
    monkeypatch.setenv("MAMBA_SSM_BACKEND", "torch")
    _dispatch._reset_for_tests()
    tout, tstates, tgrads = M3.check_packed_against_alone(*args)
    assert triton_mamba3["chunk_scan"] == calls, "MAMBA_SSM_BACKEND=torch runs the PyTorch path"
    M3.close(out, tout, F32, f"{case} Triton vs PyTorch out")
    for name, s, t in zip(("angle", "ssm", "k", "v"), states or (), tstates or ()):
        M3.close(s, t, F32, f"{case} Triton vs PyTorch final {name} state")
    for name in grads:
        M3.close(grads[name], tgrads[name], F32, f"{case} Triton vs PyTorch {name}")


# id: (case, dtype, headdim, tokens); a headdim of 160 takes two blocks of 128 (state tiles of 2048
# entries at d_state 8 -> 16): the norm's two passes over them, the other heads' programs per block.
STEPS = {
    "siso-fp32": ("siso-rope0.5", F32, 4, 4),
    "siso-groups-fp32": ("siso-rope1.0-groups", F32, 4, 4),
    "mimo4-norm-fp32": ("mimo4-rope1.0-norm", F32, 4, 4),
    "siso-bf16": ("siso-rope0.5", BF16, 4, 4),
    "mimo4-norm-bf16": ("mimo4-rope1.0-norm", BF16, 4, 4),
    "siso-headdim160-fp32": ("siso-rope0.5", F32, 160, 2),
    "mimo4-norm-headdim160-fp32": ("mimo4-rope1.0-norm", F32, 160, 2),
}


@pytest.mark.parametrize("name", list(STEPS))
def test_step_matches_the_recurrence(triton_mamba3, name):
    case, dtype, headdim, tokens = STEPS[name]
    M3.check_steps(case, dtype, seqlen=tokens, headdim=headdim)
    assert triton_mamba3["step"] == tokens


def test_calls_the_kernels_do_not_take_run_the_pytorch_path_saying_why(triton_mamba3, interpreted):
    """float64 and a MIMO rank that is not a power of two: the PyTorch path (exact), one warning per op
    naming the reason; headdim / d_state above 256 are declined too."""
    t = M3.make_inputs("mimo-rope1.0-norm")  # rank 3
    with pytest.warns(_dispatch.MambaFallbackWarning, match="mamba3_mimo.*float64"):
        out, _ = M3.run_op("mimo-rope1.0-norm", t)
    rout, _ = M3.run_ref("mimo-rope1.0-norm", t)
    M3.close(out, rout, torch.float64, "float64 on the PyTorch path")
    _dispatch._reset_for_tests()
    with pytest.warns(_dispatch.MambaFallbackWarning, match="mimo_rank 3 is not a power of two"):
        out, _ = M3.run_op("mimo-rope1.0-norm", M3.leaves(t, F32))
    M3.close(out, rout, F32, "rank 3 on the PyTorch path")
    assert triton_mamba3 == {"chunk_scan": 0, "step": 0}
    meta = {"device": "meta"}
    big = {
        "q": torch.empty(1, 8, 1, 1, 512, **meta),
        "v": torch.empty(1, 8, 2, 64, **meta),
    }
    assert "d_state 512 exceeds" in interpreted.mamba3.unsupported("mamba3_siso", **big)
    big = {"q": torch.empty(1, 8, 1, 1, 64, **meta), "v": torch.empty(1, 8, 2, 320, **meta)}
    assert "headdim 320 exceeds" in interpreted.mamba3.unsupported("mamba3_siso", **big)


@pytest.mark.parametrize(("variant", "decode"), [("siso-outproj-norm", True), ("mimo-fused-norm", False)])
def test_mamba3_layer_on_the_triton_path(triton_mamba3, variant, decode):
    """The Mamba3 layer (float32) through the kernels: output and every parameter's gradient against
    the float64 oracle layer (mamba3_reference.layer), and (SISO) decoding after a prefill == the full
    forward (the cache filled from the kernels' final states, then the step kernel). SISO with the norm
    outside the op (no gate, per-rank output), MIMO rank 2 with the fused norm."""
    import mamba3_reference as ref
    from test_mamba3_module import D_MODEL, _cfg, _decode, _layer

    m64 = _layer(variant)
    m = _layer(variant, dtype=F32)
    m.load_state_dict(m64.state_dict())
    u = torch.randn(2, 11, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    params = {k: v.detach().clone().requires_grad_(True) for k, v in m64.state_dict().items()}
    out = m(u.float())
    want = ref.layer(params, _cfg(m64), u)
    M3.close(out, want, F32, f"{variant} out")
    w = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    (out.double() * w).sum().backward()
    (want * w).sum().backward()
    for name, p in m.named_parameters():
        M3.close(p.grad, params[name].grad, F32, f"{variant} d{name}")
    assert triton_mamba3 == {"chunk_scan": 1, "step": 0}
    if not decode:
        return
    with torch.no_grad():
        M3.close(_decode(m, u.float(), 5), out, F32, f"{variant} decode after a prefill of 5")
    assert triton_mamba3 == {"chunk_scan": 2, "step": 6}
