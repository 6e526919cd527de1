"""The Triton kernels (SSD, Mamba-3 SISO and MIMO) on Triton's interpreter: a NaN or inf in one token
mid-chunk never reaches the outputs of earlier tokens (no masked 0 * inf inside a chunk, an angle block
or a token block); they equal the float64 sequential oracle and are finite, and the bad token's own
output is non-finite where the oracle's is. The PyTorch paths: tests/ops/test_nonfinite_causal.py."""

import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "..", "mamba3"))

import mamba3_cases as M3  # noqa: E402  (tests/mamba3)
import oracles  # noqa: E402  (tests/)

from mamba_ssm import _dispatch  # noqa: E402
from mamba_ssm._backends import triton as _triton_backend  # noqa: E402

BAD_T, SEQLEN = 12, 24
BAD = {"nan": float("nan"), "inf": float("inf")}
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # numpy's, inside


def _assert_causal(out, ref, what):
    """(batch, seqlen, ...) outputs: before BAD_T finite and within float32 tolerance of the oracle."""
    out, ref = out.detach().double()[0], ref.detach().double()[0]
    bad_rows = (~torch.isfinite(out[:BAD_T])).reshape(BAD_T, -1).any(-1).nonzero().flatten().tolist()
    assert not bad_rows, f"{what}: outputs before t={BAD_T} are non-finite at t={bad_rows}"
    err = float((out[:BAD_T] - ref[:BAD_T]).abs().max())
    assert err <= 1e-4 * max(1.0, float(ref[:BAD_T].abs().max())), f"{what}: max error {err:.3g}"
    assert torch.equal(torch.isfinite(out[BAD_T]), torch.isfinite(ref[BAD_T])), f"{what}: at t={BAD_T}"


@pytest.mark.parametrize("bad", list(BAD))
@pytest.mark.parametrize("name", ["x", "dt", "B"])
def test_ssd_kernels_are_causal_for_a_non_finite_token(interpreted, name, bad):
    gen = torch.Generator().manual_seed(0)
    b, h, p, g, n = 1, 2, 16, 1, 16
    t = {
        "x": torch.randn(b, SEQLEN, h, p, generator=gen),
        "dt": torch.rand(b, SEQLEN, h, generator=gen) * 0.5,
        "A": -torch.rand(h, generator=gen) - 0.1,
        "B": torch.randn(b, SEQLEN, g, n, generator=gen),
        "C": torch.randn(b, SEQLEN, g, n, generator=gen),
    }
    t[name][:, BAD_T] = BAD[bad]
    # chunk 16: BAD_T is mid-chunk, in the block of rows it shares with the earlier tokens 0..15
    out = interpreted.ssd.chunk_scan_combined(t["x"], t["dt"], t["A"], t["B"], t["C"], 16)[0]
    _assert_causal(out, oracles.ssd(t["x"], t["dt"], t["A"], t["B"], t["C"])[0], f"SSD with {bad} in {name}")


@pytest.fixture
def triton_mamba3(interpreted, monkeypatch):
    """The dispatcher believes Triton runs on the CPU (its kernels are interpreted); counts their calls."""
    monkeypatch.delenv("MAMBA_SSM_BACKEND", raising=False)
    _dispatch._reset_for_tests()
    monkeypatch.setattr(_triton_backend, "triton_unavailable", lambda device: None)
    yield M3.count_kernel_calls(interpreted.mamba3, monkeypatch)
    _dispatch._reset_for_tests()


@pytest.mark.parametrize(
    "case, name",
    [
        ("siso-rope0.5", "dt"),  # the angle block's masked product, the next token's share
        ("siso-rope0.5", "trap"),  # the next token's share
        ("mimo-rope0.5-groups", "v"),  # the token block's in-token correction
        ("mimo-rope0.5-groups", "k"),
        ("mimo-rope0.5-groups", "angles"),
    ],
)
def test_mamba3_kernels_are_causal_for_a_non_finite_token(triton_mamba3, case, name):
    t = {k: v.float() for k, v in M3.make_inputs(case, batch=1, seqlen=SEQLEN).items()}
    if name in ("dt", "trap"):  # (batch, nheads, seqlen)
        t[name][:, :, BAD_T] = float("nan")
    else:
        t[name][:, BAD_T] = float("nan")
    out, _ = M3.run_op(case, t, chunk_size=8)
    assert triton_mamba3["chunk_scan"] == 1  # the kernels ran
    ref, _ = M3.run_ref(case, {k: v.double() for k, v in t.items()})
    _assert_causal(out, ref, f"{case} (Triton) with nan in {name}")
