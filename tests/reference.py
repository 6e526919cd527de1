"""Float64 references and test utilities for the runtime tests, written independently of ``mamba_ssm``.

The selective scan and the SSD are the shared oracles of ``tests/oracles.py``, handed back as numpy
arrays; the norm and the causal conv1d follow their formulas one position at a time in numpy float64.
"""

from __future__ import annotations

import itertools

import numpy as np
import oracles
import torch


def _np(t):
    if t is None:
        return None
    return t.detach().cpu().double().numpy()


def _softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0)


def _silu(x):
    return x / (1.0 + np.exp(-x))


def selective_scan(
    u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, initial_state=None
):
    """Mamba's S6 scan (:func:`oracles.selective_scan`) as numpy float64 arrays: (out (batch, dim, L),
    last state (batch, dim, N))."""
    with torch.no_grad():
        out, last = oracles.selective_scan(
            u, delta, A, B, C, D, z, delta_bias, delta_softplus, initial_state=initial_state
        )
    return out.cpu().numpy(), last.cpu().numpy()


def selective_scan_torch(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    """:func:`oracles.selective_scan` (float64 tensors, differentiable: the gradient oracle)."""
    return oracles.selective_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus)


def ssd(*args, **kwargs):
    """Mamba-2's SSD recurrence (:func:`oracles.ssd`) as numpy float64 arrays: (out (b, l, h, p), final
    state (b, h, p, n), the states after every step (b, l, h, p, n))."""
    with torch.no_grad():
        out, final, states = oracles.ssd(*args, **kwargs)
    return out.cpu().numpy(), final.cpu().numpy(), states.cpu().numpy()


def rms_norm(x, weight, eps):
    """x / sqrt(mean(x^2) + eps) * weight over the last dim, float64 (Zhang & Sennrich 2019)."""
    x, weight = _np(x), _np(weight)
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * weight


def causal_conv1d(x, weight, bias=None, silu=False, seq_idx=None):
    """out[b, d, t] = sum_k weight[d, k] * x[b, d, t - (w - 1) + k] (zeros before 0), float64.

    seq_idx (b, l): only inputs of t's own sequence count, and a padding token (seq_idx < 0) outputs 0."""
    x, weight, bias = _np(x), _np(weight), _np(bias)
    sid = _np(seq_idx)
    batch, dim, L = x.shape
    w = weight.shape[1]
    out = np.zeros((batch, dim, L))
    for t in range(L):
        for k in range(w):
            s = t - (w - 1) + k
            if s >= 0:
                same = 1.0 if sid is None else (sid[:, s] == sid[:, t])[:, None].astype(np.float64)
                out[:, :, t] += weight[:, k] * x[:, :, s] * same
    if bias is not None:
        out += bias[None, :, None]
    out = _silu(out) if silu else out
    if sid is not None:
        out = out * (sid >= 0)[:, None, :]
    return out


# ----------------------------------------------------------------------------------------------------
# Test utilities (no reference math below): covering design, tolerances, input factories
# ----------------------------------------------------------------------------------------------------


def pairwise(factors):
    """A greedy covering design: rows (dicts) such that every pair of levels of every two factors
    appears in at least one row. ``factors``: {name: [levels]}. Deterministic."""
    names = list(factors)
    uncovered = set()
    for (i, a), (j, b) in itertools.combinations(enumerate(names), 2):
        for x in range(len(factors[a])):
            for y in range(len(factors[b])):
                uncovered.add((i, x, j, y))
    candidates = list(itertools.product(*[range(len(factors[n])) for n in names]))
    rows = []
    while uncovered:
        best, best_gain = None, -1
        for cand in candidates:
            gain = sum(
                1
                for (i, j) in itertools.combinations(range(len(names)), 2)
                if (i, cand[i], j, cand[j]) in uncovered
            )
            if gain > best_gain:
                best, best_gain = cand, gain
        rows.append(best)
        for i, j in itertools.combinations(range(len(names)), 2):
            uncovered.discard((i, best[i], j, best[j]))
    return [{n: factors[n][k] for n, k in zip(names, row)} for row in rows]


TOL = {
    torch.float32: (2e-4, 2e-4),
    torch.bfloat16: (2e-2, 3e-2),
    torch.float16: (5e-3, 5e-3),
    torch.float64: (1e-9, 1e-9),
}


def assert_close(actual, expected, dtype, what="", scale=1.0):
    """|actual - expected| <= atol * scale + rtol * |expected| elementwise, with the dtype's tolerances."""
    rtol, atol = TOL[dtype]
    a = actual.detach().cpu().double().numpy() if isinstance(actual, torch.Tensor) else np.asarray(actual)
    e = (
        expected.detach().cpu().double().numpy()
        if isinstance(expected, torch.Tensor)
        else np.asarray(expected)
    )
    assert a.shape == e.shape, f"{what}: shape {a.shape} != expected {e.shape}"
    assert np.all(np.isfinite(a)), f"{what}: non-finite values"
    err = np.abs(a - e)
    bound = atol * scale + rtol * np.abs(e)
    worst = np.argmax(err - bound) if err.size else 0
    assert np.all(err <= bound), (
        f"{what}: max |err| {err.max():.3g} (at {np.unravel_index(worst, err.shape)}: got "
        f"{a.flat[worst]:.6g}, expected {e.flat[worst]:.6g}); rtol {rtol}, atol {atol * scale}"
    )


def make_scan_inputs(
    batch, dim, d_state, seqlen, bc, has_D, has_z, has_bias, softplus, dtype, seed=0, device="cpu"
):
    """Random selective-scan inputs. ``bc``: 'constant', 'variable', 'grouped1', 'grouped2' or
    'mixed' (B variable, C constant). u, delta, B, C, z in ``dtype``; A, D, delta_bias float32."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g)
    u = r(batch, dim, seqlen).to(dtype)
    if softplus:
        delta = (0.5 * r(batch, dim, seqlen) - 1.0).to(dtype)
    else:
        delta = (0.2 * torch.rand(batch, dim, seqlen, generator=g) + 0.01).to(dtype)
    A = -(0.1 + 2.0 * torch.rand(dim, d_state, generator=g))

    def bc_tensor(kind):
        if kind == "constant":
            return r(dim, d_state).to(dtype)
        if kind == "variable":
            return r(batch, d_state, seqlen).to(dtype)
        groups = int(kind[-1])
        return r(batch, groups, d_state, seqlen).to(dtype)

    if bc == "mixed":
        B, C = bc_tensor("variable"), bc_tensor("constant")
    else:
        B, C = bc_tensor(bc), bc_tensor(bc)
    D = r(dim) if has_D else None
    z = r(batch, dim, seqlen).to(dtype) if has_z else None
    # Without softplus the step must stay positive (a negative step with A < 0 is an exploding state).
    delta_bias = (0.3 * r(dim) if softplus else 0.05 * r(dim).abs()) if has_bias else None
    out = dict(u=u, delta=delta, A=A, B=B, C=C, D=D, z=z, delta_bias=delta_bias, delta_softplus=softplus)
    return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in out.items()}


def full_and_in_pieces(m, x, bounds):
    """Without grad: the layer ``m`` on x (batch, seqlen, d_model) in one pass, and on x[:, s:e] for
    consecutive (s, e) of ``bounds`` through one InferenceParams (seqlen_offset advanced by each
    piece's length), concatenated over seqlen. Returns (full, pieces, the InferenceParams)."""
    from mamba_ssm.utils.generation import InferenceParams

    with torch.no_grad():
        full = m(x)
        ip = InferenceParams(max_seqlen=x.shape[1], max_batch_size=x.shape[0])
        outs = []
        for s, e in zip(bounds, bounds[1:]):
            outs.append(m(x[:, s:e], inference_params=ip))
            ip.seqlen_offset += e - s
    return full, torch.cat(outs, 1), ip
