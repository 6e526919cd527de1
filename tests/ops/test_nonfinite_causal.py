"""A NaN or inf in one token never reaches the outputs of earlier tokens, on the PyTorch paths (and the
compiled kernels where an op has them): every output before the bad token equals the float64 sequential
oracle and is finite, and the bad token's own output is non-finite where the oracle's is.

The bad token sits in the middle of a chunk (t = 20 with chunk_size 16), where a chunked scan that masks
its in-chunk products by multiplication turns 0 * NaN into NaN for t = 16..19. The Triton kernels get the
same checks under Triton's interpreter (tests/ops/triton/test_triton_nonfinite.py).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

import mamba_ssm
from mamba_ssm.ops.causal_conv1d import causal_conv1d_fn
from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(HERE, "..", "mamba3"))

import mamba3_cases as M3  # noqa: E402  (tests/mamba3, on the path above)
import oracles  # noqa: E402
import reference  # noqa: E402

BAD_T, SEQLEN, CHUNK = 20, 40, 16
BAD = {"nan": float("nan"), "inf": float("inf")}


@pytest.fixture(autouse=True)
def _restore_backend():
    prev = mamba_ssm.set_backend(None)
    yield
    mamba_ssm.set_backend(prev)


def _assert_causal(out, ref, time_dim, what):
    """out / ref: outputs with time on ``time_dim``; before BAD_T finite and equal (float32 tolerance),
    at BAD_T non-finite where the reference is."""
    out, ref = out.detach().double().movedim(time_dim, 0), ref.detach().double().movedim(time_dim, 0)
    before, ref_before = out[:BAD_T], ref[:BAD_T]
    assert torch.isfinite(ref_before).all(), f"{what}: the oracle itself is not finite before t={BAD_T}"
    bad_rows = (~torch.isfinite(before)).reshape(BAD_T, -1).any(-1).nonzero().flatten().tolist()
    assert not bad_rows, f"{what}: outputs before t={BAD_T} are non-finite at t={bad_rows}"
    err = float((before - ref_before).abs().max())
    assert err <= 1e-4 * max(1.0, float(ref_before.abs().max())), (
        f"{what}: max error {err:.3g} before t={BAD_T}"
    )
    assert torch.equal(torch.isfinite(out[BAD_T]), torch.isfinite(ref[BAD_T])), f"{what}: at t={BAD_T}"


# ---------------------------------------------------------------------------------------- Mamba-2 SSD


@pytest.mark.parametrize("bad", list(BAD))
@pytest.mark.parametrize("name", ["x", "dt", "B", "C"])
def test_ssd_torch_path_is_causal_for_a_non_finite_token(name, bad):
    gen = torch.Generator().manual_seed(0)
    b, l, h, p, g, n = 1, SEQLEN, 2, 4, 1, 8
    t = {
        "x": torch.randn(b, l, h, p, generator=gen),
        "dt": torch.rand(b, l, h, generator=gen) * 0.5,
        "A": -torch.rand(h, generator=gen) - 0.1,
        "B": torch.randn(b, l, g, n, generator=gen),
        "C": torch.randn(b, l, g, n, generator=gen),
        "D": torch.randn(h, generator=gen),
        "z": torch.randn(b, l, h, p, generator=gen),
    }
    t[name][:, BAD_T] = BAD[bad]
    out = mamba_chunk_scan_combined(t["x"], t["dt"], t["A"], t["B"], t["C"], CHUNK, D=t["D"], z=t["z"])
    ref = oracles.ssd(t["x"], t["dt"], t["A"], t["B"], t["C"], D=t["D"], z=t["z"])[0]
    _assert_causal(out, ref, 1, f"SSD with {bad} in {name}")


# ---------------------------------------------------------------------------------------- Mamba-3


@pytest.mark.parametrize("bad", list(BAD))
@pytest.mark.parametrize("name", ["k", "v", "adt", "dt", "trap", "angles"])
@pytest.mark.parametrize("case", ["siso-rope0.5", "mimo-rope0.5-groups"])
def test_mamba3_torch_path_is_causal_for_a_non_finite_token(case, name, bad):
    t = {k: v.float() for k, v in M3.make_inputs(case, batch=1, seqlen=SEQLEN).items()}
    if name in ("adt", "dt", "trap"):  # (batch, nheads, seqlen)
        t[name][:, :, BAD_T] = BAD[bad]
    else:
        t[name][:, BAD_T] = BAD[bad]
    out, _ = M3.run_op(case, t, chunk_size=CHUNK)
    ref, _ = M3.run_ref(case, {k: v.double() for k, v in t.items()})
    _assert_causal(out, ref, 1, f"{case} with {bad} in {name}")


# ------------------------------------------------- Mamba-1's scan and the conv (compiled and PyTorch)


@pytest.mark.parametrize("backend", ["compiled", "torch"])
@pytest.mark.parametrize("bad", list(BAD))
@pytest.mark.parametrize("name", ["u", "delta", "B", "C"])
def test_selective_scan_is_causal_for_a_non_finite_token(backend, name, bad):
    if backend == "compiled":
        from mamba_ssm import _loader

        if not _loader.load().loaded:
            pytest.skip("mamba_ssm._C is not loaded")
    mamba_ssm.set_backend(backend)
    gen = torch.Generator().manual_seed(1)
    b, d, n = 1, 4, 8
    t = {
        "u": torch.randn(b, d, SEQLEN, generator=gen),
        "delta": torch.rand(b, d, SEQLEN, generator=gen),
        "A": -torch.rand(d, n, generator=gen) - 0.1,
        "B": torch.randn(b, n, SEQLEN, generator=gen),
        "C": torch.randn(b, n, SEQLEN, generator=gen),
    }
    t[name][..., BAD_T] = BAD[bad]
    out = selective_scan_fn(t["u"], t["delta"], t["A"], t["B"], t["C"], delta_softplus=True)
    ref = oracles.selective_scan(t["u"], t["delta"], t["A"], t["B"], t["C"], delta_softplus=True)[0]
    _assert_causal(out, ref, 2, f"selective scan ({backend}) with {bad} in {name}")


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the oracle's silu(-inf)
@pytest.mark.parametrize("backend", ["compiled", "torch"])
@pytest.mark.parametrize("bad", list(BAD))
def test_causal_conv1d_is_causal_for_a_non_finite_token(backend, bad):
    if backend == "compiled":
        from mamba_ssm import _loader

        if not _loader.load().loaded:
            pytest.skip("mamba_ssm._C is not loaded")
    mamba_ssm.set_backend(backend)
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(1, 4, SEQLEN, generator=gen)
    w, bias = torch.randn(4, 4, generator=gen), torch.randn(4, generator=gen)
    x[:, :, BAD_T] = BAD[bad]
    out = causal_conv1d_fn(x, w, bias, activation="silu")
    ref = torch.from_numpy(reference.causal_conv1d(x, w, bias, silu=True))
    _assert_causal(out, ref, 2, f"causal_conv1d ({backend}) with {bad} in x")
