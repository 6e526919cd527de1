"""selective_scan_fn's dtype rule (upstream mamba-ssm's: delta and z in u's dtype; A, D, delta_bias
float32, or float64 when u is float64; B, C in u's dtype or float32), on every backend, and
mamba_inner_fn under autocast casting consistently before the scan."""

from __future__ import annotations

import pytest
import reference as ref  # (tests/reference.py)
import torch

import mamba_ssm
from mamba_ssm.ops import selective_scan_interface as ssi

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64


@pytest.fixture(params=["torch", "auto", "ref"])
def backend(request, monkeypatch):
    previous = mamba_ssm.set_backend(request.param)
    monkeypatch.setenv("MAMBA_SSM_NO_FALLBACK_WARNING", "1")
    yield request.param
    mamba_ssm.set_backend(previous)


def _inputs(u_dtype, **dtypes):
    """Inputs with B, C variable; every tensor in ``u_dtype`` except A, D, delta_bias (float32) and the
    overrides in ``dtypes``."""
    inp = ref.make_scan_inputs(2, 4, 3, 9, "variable", True, True, True, True, F32, seed=3)
    out = {}
    for k, v in inp.items():
        if isinstance(v, torch.Tensor):
            base = F32 if k in ("A", "D", "delta_bias") else u_dtype
            v = v.to(dtypes.get(k, base))
        out[k] = v
    return out


@pytest.mark.parametrize(
    "bad, received, expected",
    [
        # (name, dtype) -> words the message must contain
        ((F16, {"delta": F32}), "delta has dtype float32", "cast delta to u.dtype"),
        ((F32, {"delta": F16}), "delta has dtype float16", "cast delta to u.dtype"),
        ((BF16, {"z": F32}), "z has dtype float32", "cast z to u.dtype"),
        ((F32, {"A": BF16}), "A has dtype bfloat16", "A.float()"),
        ((F32, {"A": F64}), "A has dtype float64", "A.float()"),
        ((F16, {"A": F16}), "A has dtype float16", "expected float32"),
        ((F32, {"D": F16}), "D has dtype float16", "D.float()"),
        ((BF16, {"delta_bias": BF16}), "delta_bias has dtype bfloat16", "delta_bias.float()"),
        ((F16, {"B": BF16}), "B has dtype bfloat16", "cast B to u.dtype"),
        ((BF16, {"C": F16}), "C has dtype float16", "cast C to u.dtype"),
        ((F32, {"C": F64}), "C has dtype float64", "u's dtype (float32) or float32"),
    ],
)
def test_mixed_dtypes_raise_with_the_fix(backend, bad, received, expected):
    u_dtype, overrides = bad
    inp = _inputs(u_dtype, **overrides)
    with pytest.raises(TypeError) as err:
        ssi.selective_scan_fn(**inp)
    msg = str(err.value)
    assert received in msg
    name = received.split()[0]
    assert f"cast {name} to u.dtype" in msg or f"{name}.float()" in msg
    assert expected in msg


@pytest.mark.parametrize(
    "u_dtype, overrides",
    [
        (F32, {}),
        (BF16, {}),
        (F16, {}),
        (BF16, {"B": F32, "C": F32}),  # upstream: B/C may stay float32 with half-precision u
        (F16, {"C": F32}),
        (F64, {}),  # float64 weights with float64 u (PyTorch backends)
        (F64, {"A": F64, "D": F64, "delta_bias": F64, "B": F64, "C": F64}),
    ],
)
def test_allowed_dtype_mixes_run(backend, u_dtype, overrides):
    inp = _inputs(u_dtype, **overrides)
    out, last = ssi.selective_scan_fn(**inp, return_last_state=True)
    exp, exp_last = ref.selective_scan(**inp)
    assert out.dtype == u_dtype
    scale = float(abs(exp).max())
    ref.assert_close(out, exp, u_dtype if u_dtype != F64 else F32, f"out {u_dtype} {overrides}", scale=scale)


@pytest.mark.parametrize("xz_dtype", [F32, BF16])
def test_mamba_inner_fn_under_autocast_casts_consistently(xz_dtype):
    """Under autocast the projections produce bf16 delta/B/C; mamba_inner_fn casts them to the scan
    input's dtype (xz's, as upstream's custom_fwd path) so the scan's dtype rule holds."""
    torch.manual_seed(4)
    b, d, l, n, r, dm = 2, 6, 11, 4, 2, 5
    xz = torch.randn(b, 2 * d, l).to(xz_dtype)
    cw, cb = torch.randn(d, 1, 4) * 0.5, torch.randn(d)
    xp, dp = torch.randn(r + 2 * n, d) * 0.3, torch.randn(d, r)
    ow, ob = torch.randn(dm, d), torch.randn(dm)
    A, D, db = -torch.rand(d, n) - 0.1, torch.randn(d), torch.randn(d)
    exp = ssi.mamba_inner_ref(xz.float(), cw, cb, xp, dp, ow, ob, A, D=D, delta_bias=db)
    with torch.autocast("cpu", dtype=BF16):
        got = ssi.mamba_inner_fn(xz, cw, cb, xp, dp, ow, ob, A, D=D, delta_bias=db)
        got_ref = ssi.mamba_inner_ref(xz, cw, cb, xp, dp, ow, ob, A, D=D, delta_bias=db)
    assert got.dtype == BF16 and got_ref.dtype == BF16
    scale = float(exp.abs().max())
    for name, val in (("mamba_inner_fn", got), ("mamba_inner_ref", got_ref)):
        err = float((val.float() - exp).abs().max())
        assert err <= 0.05 * scale, f"{name} under autocast: max error {err} vs scale {scale}"
