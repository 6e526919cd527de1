"""Float64 sequential references of the causal conv1d ops and the checks shared by the CPU and GPU
tests of the compiled kernels.

The references loop over positions one at a time in float64, written from the definition
(out[t] = act(bias + sum_k w[k] * x[t - (W-1) + k]), the inputs before position 0 being the initial
states, positions of another sequence (seq_idx) contributing nothing, a padding position (negative
seq_idx) giving 0, the final states being the last inputs of the row's last sequence); their gradients
come from torch.autograd through those loops. Nothing here calls the code under test except ``run_*``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (4e-3, 4e-3), torch.bfloat16: (3e-2, 3e-2)}


def conv_ref64(x, weight, bias=None, seq_idx=None, initial_states=None, silu=False):
    """(out, final_states) in float64, one position at a time."""
    batch, dim, seqlen = x.shape
    width = weight.shape[1]
    x64, w64 = x.double(), weight.double()
    init = (
        initial_states.double()
        if initial_states is not None
        else torch.zeros(batch, dim, width - 1, dtype=torch.float64, device=x.device)
    )
    xs = torch.cat([init, x64], dim=-1)  # position s lives at index s + width - 1

    def seq(s):  # the sequence of position s (positions before 0: the first token's)
        return seq_idx[:, max(s, 0)]

    outs = []
    for t in range(seqlen):
        acc = (
            bias.double().expand(batch, dim)
            if bias is not None
            else torch.zeros(batch, dim, dtype=torch.float64, device=x.device)
        )
        for k in range(width):
            s = t - (width - 1) + k
            term = xs[:, :, s + width - 1] * w64[:, k]
            if seq_idx is not None:
                term = term * (seq(s) == seq(t)).double().unsqueeze(1)
            acc = acc + term
        y = acc * torch.sigmoid(acc) if silu else acc
        if seq_idx is not None:  # padding outputs 0
            y = y * (seq(t) >= 0).double().unsqueeze(1)
        outs.append(y)
    out = torch.stack(outs, dim=-1) if outs else x64[..., :0]
    finals = []
    for j in range(width - 1):
        s = seqlen - (width - 1) + j
        v = xs[:, :, s + width - 1]
        if seq_idx is not None and seqlen > 0:  # only the row's last sequence, none if it is padding
            last = seq(seqlen - 1)
            v = v * ((seq(s) == last) & (last >= 0)).double().unsqueeze(1)
        finals.append(v)
    final = torch.stack(finals, dim=-1)
    return out, final


def update_ref64(x, conv_state, weight, bias=None, silu=False, cache_seqlens=None, conv_state_indices=None):
    """(out, new conv_state) in float64 for causal_conv1d_update; conv_state is not modified.

    Without cache_seqlens the state is a shift register (oldest first); with it, a circular buffer in
    which the input at position q sits at index q % state_len."""
    squeeze = x.dim() == 2
    xs = x.unsqueeze(-1) if squeeze else x
    batch, dim, seqlen = xs.shape
    width = weight.shape[1]
    state = conv_state.double().clone()
    S = state.shape[-1]
    w64 = weight.double()
    out = torch.zeros(batch, dim, seqlen, dtype=torch.float64)
    for b in range(batch):
        row = b if conv_state_indices is None else int(conv_state_indices[b])
        if row < 0:
            continue  # padded slot: output 0, no state touched
        old = state[row].clone()  # (dim, S)
        c = 0 if cache_seqlens is None else int(cache_seqlens[b])

        def value(q):  # the input at position q (the call's inputs start at position c)
            if q >= c:
                return xs[b, :, q - c].double()
            if cache_seqlens is None:
                return old[:, S + (q - c)]  # shift register: the last entry is position c - 1
            return old[:, q % S]

        for t in range(seqlen):
            p = c + t
            acc = bias.double().clone() if bias is not None else torch.zeros(dim, dtype=torch.float64)
            for k in range(width):
                acc = acc + w64[:, k] * value(p - (width - 1) + k)
            out[b, :, t] = acc * torch.sigmoid(acc) if silu else acc
        if cache_seqlens is None:
            hist = torch.cat([old, xs[b].double()], dim=-1)
            state[row] = hist[:, hist.shape[-1] - S :]
        else:
            for t in range(seqlen):
                state[row, :, (c + t) % S] = xs[b, :, t].double()
    return (out.squeeze(-1) if squeeze else out), state


def varlen_states_ref(x, cu_seqlens, state_len):
    """(batch, dim, state_len): the last state_len rows of each packed sequence, zeros before its start."""
    batch = cu_seqlens.numel() - 1
    out = torch.zeros(batch, x.shape[1], state_len, dtype=x.dtype)
    for b in range(batch):
        begin, end = int(cu_seqlens[b]), int(cu_seqlens[b + 1])
        for j in range(state_len):
            row = end - state_len + j
            if row >= begin:
                out[b, :, j] = x[row]
    return out


def torch_conv_silu(x, weight, bias, silu):
    """The same conv through torch.nn.functional.conv1d(groups=dim) (+ SiLU): a second, separate
    implementation (no seq_idx / initial states)."""
    width = weight.shape[1]
    y = F.conv1d(
        F.pad(x.double(), (width - 1, 0)),
        weight.double().unsqueeze(1),
        None if bias is None else bias.double(),
        groups=x.shape[1],
    )
    return F.silu(y) if silu else y


def make_conv_inputs(
    batch,
    dim,
    seqlen,
    width,
    dtype,
    *,
    layout="contiguous",
    bias=True,
    seq=False,
    pad=False,
    init=False,
    device="cpu",
    seed=0,
):
    """x (in the layout asked for), weight, bias, seq_idx, initial_states. ``pad`` (with ``seq``): padding
    tokens (seq_idx -1) at the end of row 0, at the start of row 1 and between two sequences of row 2."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, dim, seqlen, generator=g)
    if layout == "channel_last":
        x = x.transpose(1, 2).contiguous().transpose(1, 2)
    elif layout == "strided":  # neither layout: every other position of a longer buffer
        x = torch.randn(batch, dim, 2 * seqlen, generator=g)[:, :, ::2]
    x = x.to(dtype).to(device)
    weight = (torch.randn(dim, width, generator=g) * 0.5).to(device)
    b = (torch.randn(dim, generator=g) * 0.3).to(device) if bias else None
    seq_idx = None
    if seq:  # 2-3 packed sequences per row, boundaries differing by row
        ids = torch.zeros(batch, seqlen, dtype=torch.int32)
        for r in range(batch):
            cuts = sorted({max(1, seqlen // 3 + r), max(1, (2 * seqlen) // 3)})
            for cut in cuts:
                ids[r, cut:] += 1
        if pad:
            quarter = max(1, seqlen // 4)
            ids[0, seqlen - quarter :] = -1
            if batch > 1:
                ids[1, :quarter] = -1
            if batch > 2:
                ids[2, seqlen // 3 : seqlen // 3 + quarter] = -1
        seq_idx = ids.to(device)
    initial = torch.randn(batch, dim, width - 1, generator=g).to(dtype).to(device) if init else None
    return x, weight, b, seq_idx, initial


def assert_close(actual, expected, dtype, what):
    rtol, atol = TOL.get(dtype, TOL[torch.float32])
    expected = expected.double().cpu()
    actual = actual.detach().double().cpu()
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    scale = max(expected.abs().max().item(), 1.0) if expected.numel() else 1.0
    err = (actual - expected).abs()
    bad = err > atol * scale + rtol * expected.abs()
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {bad.numel()} elements off, max error "
        f"{err.max().item():.3e} (scale {scale:.3g}, {dtype})"
    )


def run_conv_and_check(fn, x, weight, bias, seq_idx, initial, silu, dtype, grads=True):
    """fn(x, weight, bias, seq_idx, initial_states, silu) -> (out, final): values and every gradient
    (through out and final_states) against the float64 reference."""
    leaves = [
        None if t is None else t.detach().clone().requires_grad_(grads) for t in (x, weight, bias, initial)
    ]
    lx, lw, lb, li = leaves
    out, final = fn(lx, lw, lb, seq_idx, li, silu)
    assert out.dtype == x.dtype and out.shape == x.shape and final.dtype == x.dtype
    refs = [
        None if t is None else t.detach().cpu().double().requires_grad_(grads)
        for t in (x, weight, bias, initial)
    ]
    rx, rw, rb, ri = refs
    ref_out, ref_final = conv_ref64(rx, rw, rb, None if seq_idx is None else seq_idx.cpu(), ri, silu)
    assert_close(out, ref_out, dtype, "out")
    assert_close(final, ref_final, dtype, "final_states")
    if not grads:
        return out
    g = torch.Generator().manual_seed(1)
    dout = torch.randn(out.shape, generator=g, dtype=torch.float64)
    dfin = torch.randn(final.shape, generator=g, dtype=torch.float64)
    ((out.double() * dout.to(out.device)).sum() + (final.double() * dfin.to(out.device)).sum()).backward()
    ((ref_out * dout).sum() + (ref_final * dfin).sum()).backward()
    for name, leaf, ref in (
        ("dx", lx, rx),
        ("dweight", lw, rw),
        ("dbias", lb, rb),
        ("dinitial_states", li, ri),
    ):
        if leaf is None:
            continue
        assert leaf.grad is not None, f"{name} is None"
        assert_close(leaf.grad, ref.grad, dtype, name)
    return out
