"""Inputs, runners and checks shared by the Mamba-3 op tests on the PyTorch path (tests/mamba3) and on
the Triton kernels under Triton's interpreter (tests/ops/triton/test_triton_mamba3.py): random inputs in the
ops' layout, a call of the public op of a case (mamba3_siso_combined or mamba3_mimo; the step token by
token through mamba3_step / mamba3_siso_step) and the comparison with the float64 oracle
(mamba3_reference.py) of the output, the final states and the gradient of every input; packed sequences
with padding against the oracle run on each sequence alone."""

from __future__ import annotations

import math

import mamba3_reference as ref
import torch
import torch.nn.functional as F

from mamba_ssm.ops.tilelang.mamba3.mamba3_mimo import mamba3_mimo
from mamba_ssm.ops.triton.mamba3.mamba3_siso_combined import mamba3_siso_combined
from mamba_ssm.ops.triton.mamba3.mamba3_siso_step import mamba3_siso_step
from mamba_ssm.ops.triton.mamba3.mamba3_step import mamba3_step

#: Largest error allowed, relative to the reference's largest magnitude (at least 1), per input dtype.
TOL = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 6e-2}

# name: (mimo rank or None for SISO, ngroups, nheads, d_state, num_angles, fused head-wise norm)
CASES = {
    "siso-rope0.5": (None, 1, 2, 8, 2, False),  # d_state 8, rope_fraction 0.5: 2 angles
    "siso-rope1.0-groups": (None, 2, 4, 8, 4, False),
    "mimo-rope0.5-groups": (2, 2, 4, 8, 2, False),
    "mimo-rope1.0-norm": (3, 1, 2, 8, 4, True),
    "mimo4-rope1.0-norm": (4, 1, 2, 8, 4, True),
}
#: Larger cases for the compiled kernels on a GPU (tests/ops/triton/test_triton_mamba3_gpu.py).
GPU_CASES = {
    "gpu-siso-rope0.5": (None, 1, 4, 64, 16, False),
    "gpu-mimo4-rope1.0-norm": (4, 2, 4, 64, 32, True),
}
HEADDIM = 4


def spec(case):
    """(mimo rank or None, ngroups, nheads, d_state, num_angles, fused norm) of a case name."""
    return CASES[case] if case in CASES else GPU_CASES[case]


def seq_idx_from_edges(batch, seqlen, edges):
    """seq_idx (batch, seqlen) int32 that starts a new sequence at each token index in ``edges``."""
    seq = torch.zeros(batch, seqlen, dtype=torch.int32)
    for edge in edges:
        seq[:, edge:] += 1
    return seq


def count_kernel_calls(kernels, monkeypatch):
    """Counts the calls of the Triton Mamba-3 entry points ``kernels.chunk_scan`` / ``kernels.step``
    (the dispatcher's choice) in a dict that the returned wrappers update."""
    calls = {"chunk_scan": 0, "step": 0}
    for name in calls:
        real = getattr(kernels, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(kernels, name, counted)
    return calls


def close(got, want, dtype, what):
    got, want = got.detach().double().cpu(), want.detach().double().cpu()
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    scale = max(1.0, float(want.abs().max()))
    err = float((got - want).abs().max())
    assert err <= TOL[dtype] * scale, f"{what}: max abs error {err:.3g} > {TOL[dtype] * scale:.3g}"


def make_inputs(case, batch=2, seqlen=13, states=0, seed=0, headdim=HEADDIM):
    """float64 leaves in the ops' layout (Q, K with a rank dim even for SISO), and states for
    ``states`` rows when > 0."""
    rank, g, h, n, a, fused = spec(case)
    R = rank or 1
    gen = torch.Generator().manual_seed(seed)

    def rnd(*shape, scale=1.0):
        return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale

    dt = F.softplus(rnd(batch, h, seqlen) - 1)
    t = {
        "q": rnd(batch, seqlen, R, g, n, scale=0.5),
        "k": rnd(batch, seqlen, R, g, n, scale=0.5),
        "v": rnd(batch, seqlen, h, headdim),
        "adt": -torch.rand(batch, h, seqlen, generator=gen, dtype=torch.float64) * 2 * dt,
        "dt": dt,
        "trap": rnd(batch, h, seqlen),
        "q_bias": 1 + rnd(h, R, n, scale=0.3),
        "k_bias": 1 + rnd(h, R, n, scale=0.3),
        "angles": rnd(batch, seqlen, h, a, scale=2),
        "D": rnd(h),
        "z": rnd(batch, seqlen, h, headdim),
    }
    if rank:
        t.update(mimo_x=rnd(h, R, headdim), mimo_z=rnd(h, R, headdim), mimo_o=rnd(h, R, headdim))
    if fused:
        t["norm_weight"] = 1 + rnd(h * headdim, scale=0.3)
    if states:
        t["init"] = (
            rnd(states, h, a) % (2 * math.pi),
            rnd(states, h, headdim, n, scale=0.3),
            rnd(states, R, h, n),
            rnd(states, h, headdim),
        )
    return t


def leaves(t, dtype, device="cpu"):
    """Copies in ``dtype`` on ``device`` that require grad (the integer-free inputs)."""
    out = {}
    for key, value in t.items():
        if isinstance(value, tuple):
            out[key] = tuple(v.detach().to(device, dtype).requires_grad_(True) for v in value)
        else:
            out[key] = value.detach().to(device, dtype).requires_grad_(True)
    return out


def run_op(case, t, chunk_size=4, seq_idx=None, cu_seqlens=None, states=False):
    """The public op of ``case``: (out, states as (angle, ssm, k (S, R, h, n), v) or None)."""
    rank = spec(case)[0]
    init = t.get("init")
    if rank is None:
        res = mamba3_siso_combined(
            t["q"][:, :, 0],
            t["k"][:, :, 0],
            t["v"],
            t["adt"],
            t["dt"],
            t["trap"],
            t["q_bias"][:, 0],
            t["k_bias"][:, 0],
            t["angles"],
            D=t["D"],
            Z=t["z"],
            Input_States=None if init is None else (init[0], init[1], init[2][:, 0], init[3]),
            chunk_size=chunk_size,
            return_final_states=states,
            cu_seqlens=cu_seqlens,
            seq_idx=seq_idx,
        )
        if not states:
            return res, None
        out, angle, ssm, k, v = res
        return out, (angle, ssm, k.unsqueeze(1), v)
    fused = "norm_weight" in t
    res = mamba3_mimo(
        t["q"],
        t["k"],
        t["v"],
        t["adt"],
        t["dt"],
        t["trap"],
        t["q_bias"],
        t["k_bias"],
        t["mimo_x"],
        t["mimo_z"],
        t["mimo_o"],
        t["angles"],
        t["D"],
        t["z"],
        chunk_size,
        4 if t["angles"].shape[-1] == t["q"].shape[-1] // 4 else 2,
        t["v"].dtype,
        return_state=states,
        cu_seqlens=cu_seqlens,
        fuse_pregate_headwise_rms_norm=fused,
        outproj_norm_weight=t.get("norm_weight"),
        Input_States=init,
        seq_idx=seq_idx,
    )
    return (res[0], tuple(res[1:])) if states else (res, None)


def run_ref(case, t, seq_idx=None, cu_seqlens=None):
    rank = spec(case)[0]
    nw = t.get("norm_weight")
    out, states = ref.recurrence(
        t["q"],
        t["k"],
        t["v"],
        t["adt"],
        t["dt"],
        t["trap"],
        t["q_bias"],
        t["k_bias"],
        t["angles"],
        "halves" if rank else "adjacent",
        D=t["D"],
        z=t["z"],
        mimo_x=t.get("mimo_x"),
        mimo_z=t.get("mimo_z"),
        mimo_o=t.get("mimo_o"),
        norm_weight=None if nw is None else nw.reshape(t["v"].shape[2], t["v"].shape[3]),
        initial_states=t.get("init"),
        seq_idx=seq_idx,
        cu_seqlens=cu_seqlens,
    )
    return (out if rank else out[:, :, 0]), states


def _loss(out, states, weights):
    loss = (out.double() * weights[0]).sum()
    if states is not None:
        for s, w in zip(states, weights[1:]):
            loss = loss + (s.double() * w).sum()
    return loss


def _rounded_reference_leaves(base, dtype):
    """float64 leaves holding the values the op reads (``base`` rounded to ``dtype``)."""
    return {
        k: (
            tuple(x.detach().to(dtype).double().requires_grad_(True) for x in v)
            if isinstance(v, tuple)
            else v.detach().to(dtype).double().requires_grad_(True)
        )
        for k, v in base.items()
    }


def check_against_reference(
    case,
    dtype,
    states_rows=0,
    seq_idx=None,
    cu_seqlens=None,
    batch=2,
    seqlen=13,
    chunk_size=4,
    final_states=None,
    headdim=HEADDIM,
    device="cpu",
):
    """The op's output, final states (``final_states``; by default with input states or cu_seqlens)
    and the gradient of every input (through the output and the final states) on ``device`` against
    the oracle's (float64 on the CPU), within TOL[dtype]."""
    base = make_inputs(case, batch=batch, seqlen=seqlen, states=states_rows, headdim=headdim)
    got_in, ref_in = leaves(base, dtype, device), _rounded_reference_leaves(base, dtype)
    on_device = {"seq_idx": seq_idx, "cu_seqlens": cu_seqlens}
    on_device = {k: None if v is None else v.to(device) for k, v in on_device.items()}
    want_states = states_rows > 0 or cu_seqlens is not None if final_states is None else final_states
    out, states = run_op(case, got_in, chunk_size=chunk_size, states=want_states, **on_device)
    rout, rstates = run_ref(case, ref_in, seq_idx=seq_idx, cu_seqlens=cu_seqlens)
    assert out.dtype == dtype
    close(out, rout, dtype, f"{case} out")
    if want_states:
        for name, s, r in zip(("angle", "ssm", "k", "v"), states, rstates):
            close(s, r, dtype, f"{case} final {name} state")
    gen = torch.Generator().manual_seed(1)
    weights = [torch.randn(rout.shape, generator=gen, dtype=torch.float64)]
    if want_states:
        weights += [torch.randn(r.shape, generator=gen, dtype=torch.float64) for r in rstates]
        weights[1] = weights[1] * 0  # d/d(angle mod 2 pi) is 1 except at the wrap: not compared
    weights_dev = [w.to(device) for w in weights]
    _loss(out, states if want_states else None, weights_dev).backward()
    _loss(rout, rstates if want_states else None, weights).backward()
    for key in base:
        for i, (g_leaf, r_leaf) in enumerate(
            zip(*(v if isinstance(v, tuple) else (v,) for v in (got_in[key], ref_in[key])))
        ):
            assert g_leaf.grad is not None, f"{case}: no gradient for {key}"
            close(
                g_leaf.grad,
                r_leaf.grad,
                dtype,
                f"{case} d{key}{f'[{i}]' if isinstance(base[key], tuple) else ''}",
            )


def check_steps(case, dtype=torch.float64, seqlen=6, headdim=HEADDIM, device="cpu"):
    """mamba3_step token by token from input states == the recurrence (SISO also through
    mamba3_siso_step, upstream's path, on every other token), outputs and states, within TOL[dtype]."""
    base = make_inputs(case, seqlen=seqlen, states=2, headdim=headdim)
    t = {
        k: (tuple(x.to(device, dtype) for x in v) if isinstance(v, tuple) else v.to(device, dtype))
        for k, v in base.items()
    }
    rank = spec(case)[0]
    rout, rstates = run_ref(case, _rounded_reference_leaves(base, dtype))
    states = t["init"]
    outs = []
    for i in range(t["q"].shape[1]):
        kwargs = {"D": t["D"], "Z": t["z"][:, i]}
        if rank:
            kwargs.update(
                MIMO_V=t["mimo_x"], MIMO_Z=t["mimo_z"], MIMO_Out=t["mimo_o"], rotary_pairing="halves"
            )
            kwargs["outproj_norm_weight"] = t.get("norm_weight")
        args = (
            t["q"][:, i],
            t["k"][:, i],
            t["v"][:, i],
            t["adt"][..., i],
            t["dt"][..., i],
            t["trap"][..., i],
            t["q_bias"],
            t["k_bias"],
            t["angles"][:, i],
        )
        if rank is None and i % 2:  # upstream's SISO step signature on every other token
            siso = (args[0][:, 0], args[1][:, 0], *args[2:6], args[6][:, 0], args[7][:, 0], args[8])
            out, new = mamba3_siso_step(
                *siso,
                D=t["D"],
                Z=t["z"][:, i],
                Input_States=(states[0], states[1], states[2][:, 0], states[3]),
            )
            states = (new[0], new[1], new[2].unsqueeze(1), new[3])
        else:
            out, new = mamba3_step(*args, states, **kwargs)
            states = tuple(new)
        assert out.dtype == dtype
        outs.append(out)
    # the reference started from init for the first sequence of each row: same as the step's start
    close(torch.stack(outs, dim=1), rout, dtype, f"{case} steps")
    for name, s, r in zip(("angle", "ssm", "k", "v"), states, rstates):
        close(s, r, dtype, f"{case} step {name} state")


#: seq_idx (2, 13) with padding (-1) before, between and after sequences; row 0 ends in padding.
PADDED_SEQ_IDX = ((-1, -1, 0, 0, 0, 0, 1, 1, 1, 1, -1, -1, -1), (0, 0, 0, 0, 0, -1, -1, 1, 1, 1, 1, 1, 1))

#: The inputs with a token axis: (name, axis).
TOKEN_AXES = (("q", 1), ("k", 1), ("v", 1), ("angles", 1), ("z", 1), ("adt", 2), ("dt", 2), ("trap", 2))


def _sequence(t, lo, hi):
    """The inputs of tokens [lo, hi) (the token-wise ones sliced, the rest shared)."""
    one = {k: v for k, v in t.items() if k != "init"}
    for key, axis in TOKEN_AXES:
        one[key] = t[key].narrow(axis, lo, hi - lo)
    return one


def check_packed_against_alone(
    case, dtype, cu_seqlens, seqlen, with_states, final_states=True, chunk_size=4, device="cpu"
):
    """Sequences packed in a batch of one by ``cu_seqlens`` (its last entry may be below ``seqlen``: the
    rest is padding; an entry may repeat: an empty sequence) through the public op on ``device``,
    against the float64 oracle run on each sequence alone (from its own input state with
    ``with_states``, else zeros): each sequence's output rows, its final states and the gradient of
    every input (through the output, and the final states with ``final_states``) within TOL[dtype];
    the padding rows' output and the gradients of their token-wise inputs are exactly 0. Returns the
    op's (out, final states or None, {input name: gradient}) for further comparison."""
    bounds = [int(c) for c in cu_seqlens]
    nseq = len(bounds) - 1
    base = make_inputs(case, batch=1, seqlen=seqlen, states=nseq if with_states else 0)
    got_in, ref_in = leaves(base, dtype, device), _rounded_reference_leaves(base, dtype)
    out, states = run_op(
        case, got_in, chunk_size=chunk_size, cu_seqlens=cu_seqlens.to(device), states=final_states
    )
    assert out.dtype == dtype

    rank, _, h, n, a, _ = spec(case)
    R, p = rank or 1, base["v"].shape[-1]
    routs, rstates = [], []
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        init = tuple(s[i : i + 1] for s in ref_in["init"]) if with_states else None
        if hi == lo:  # nothing to scan: the sequence ends where it starts
            shapes = ((1, h, a), (1, h, p, n), (1, R, h, n), (1, h, p))
            rstates.append(init or tuple(torch.zeros(s, dtype=torch.float64) for s in shapes))
            continue
        one = _sequence(ref_in, lo, hi)
        if init is not None:
            one["init"] = init
        o, s = run_ref(case, one)
        routs.append(o)
        rstates.append(s)
    routs.append(torch.zeros(1, seqlen - bounds[-1], h, p, dtype=torch.float64))  # padding: 0
    rout = torch.cat(routs, dim=1)
    rstate = tuple(torch.cat([s[i] for s in rstates]) for i in range(4))
    close(out, rout, dtype, f"{case} packed out")
    assert bool((out[:, bounds[-1] :] == 0).all()), f"{case}: padding rows are not 0"
    for name, s, r in zip(("angle", "ssm", "k", "v"), states or (), rstate):
        close(s, r, dtype, f"{case} packed final {name} state")

    gen = torch.Generator().manual_seed(1)
    weights = [torch.randn(rout.shape, generator=gen, dtype=torch.float64)]
    weights += [torch.randn(r.shape, generator=gen, dtype=torch.float64) for r in rstate]
    weights[1] = weights[1] * 0  # d/d(angle mod 2 pi) is 1 except at the wrap: not compared
    for loss in (
        _loss(out, states, [w.to(device) for w in weights]),
        _loss(rout, rstate if final_states else None, weights),
    ):
        if loss.requires_grad:  # nothing to differentiate: only padding, no input states
            loss.backward()
    grads = {}
    for key in base:
        pairs = zip(*(v if isinstance(v, tuple) else (v,) for v in (got_in[key], ref_in[key])))
        for i, (g_leaf, r_leaf) in enumerate(pairs):
            name = f"d{key}[{i}]" if isinstance(base[key], tuple) else f"d{key}"
            # no gradient (an input nothing reads, e.g. with only padding) is a zero one
            got = g_leaf.grad if g_leaf.grad is not None else torch.zeros_like(g_leaf)
            want = r_leaf.grad if r_leaf.grad is not None else torch.zeros_like(r_leaf)
            close(got, want, dtype, f"{case} packed {name}")
            grads[name] = got
    for key, axis in TOKEN_AXES:
        pad = grads[f"d{key}"].narrow(axis, bounds[-1], seqlen - bounds[-1])
        assert bool((pad == 0).all()), f"{case}: d{key} is not 0 on the padding rows"
    return out, states, grads
