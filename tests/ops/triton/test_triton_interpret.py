"""The Triton kernels (mamba_ssm._families.triton_kernels) on CPU tensors through Triton's interpreter,
forward and backward, against float64 references written from the formulas (references.py).

Shapes are tiny (the interpreter runs every program in Python): they still cross chunk edges, use
groups, seq_idx, initial states, padded slots and each input dtype. The same kernels compiled for a GPU
are tested in test_triton_gpu.py (marked gpu).
"""

import math
import zlib

import pytest
import references as R
import torch

TOL = {torch.float32: 2e-4, torch.float16: 2e-2, torch.bfloat16: 6e-2}


def _close(got, ref, dtype, what):
    got = got.detach().double()
    ref = ref.detach().double()
    scale = max(1.0, float(ref.abs().max()))
    err = float((got - ref).abs().max())
    assert err <= TOL[dtype] * scale, f"{what}: max abs error {err:.3g} > {TOL[dtype] * scale:.3g}"


def _leaf(t, dtype):
    return None if t is None else t.detach().clone().to(dtype).requires_grad_(True)


def _ref_leaf(t):
    return None if t is None else t.detach().clone().double().requires_grad_(True)


# ---------------------------------------------------------------------------------------------- SSD

SSD_CASES = {
    # name: (batch, seqlen, nheads, headdim, ngroups, dstate, chunk, options)
    "all_options_partial_chunk": (
        2,
        37,
        4,
        8,
        2,
        16,
        16,
        dict(D="hp", z=True, bias=True, softplus=True, init=True),
    ),
    "seq_idx_boundaries": (
        2,
        45,
        2,
        8,
        1,
        16,
        16,
        dict(seq=(16, 21, 40), init=True, bias=True, softplus=True),
    ),
    "exact_chunks_plain": (1, 32, 2, 16, 1, 16, 32, dict()),
    "per_head_D_dt_limit": (1, 40, 4, 8, 4, 8, 16, dict(D="h", softplus=True, limit=(0.05, 0.4), z=True)),
    "one_short_chunk_odd_sizes": (1, 20, 3, 5, 1, 12, 64, dict(D="hp", init=True, seq=(7,))),
    # Padding tokens (seq_idx -1): row 0 ends in padding that spans a chunk edge (zero final state), row 1
    # starts with padding (the initial state goes unread) and has a padded run between two sequences that
    # fills a whole chunk; z and D give padding outputs that must be forced to 0.
    "padding_tokens": (
        2,
        70,
        2,
        8,
        1,
        16,
        16,
        dict(
            seq=(20, 40),
            pad=((0, 45, 70), (1, 0, 5), (1, 24, 48)),
            init=True,
            D="hp",
            z=True,
            bias=True,
            softplus=True,
        ),
    ),
    # chunk 128 = two 64-row blocks per chunk: the kernels' loops across row and column blocks
    "chunk128_two_row_blocks": (
        1,
        150,
        2,
        4,
        1,
        16,
        128,
        dict(init=True, seq=(70, 128), z=True, bias=True, softplus=True),
    ),
}


def _ssd_inputs(b, l, h, p, g, n, opts, gen):
    x = torch.randn(b, l, h, p, generator=gen)
    dt = torch.rand(b, l, h, generator=gen) * 0.6 - (0.3 if opts.get("softplus") else -0.02)
    A = -(torch.rand(h, generator=gen) + 0.3)
    B = torch.randn(b, l, g, n, generator=gen)
    C = torch.randn(b, l, g, n, generator=gen)
    D = {"hp": torch.randn(h, p, generator=gen), "h": torch.randn(h, generator=gen)}.get(opts.get("D"))
    z = torch.randn(b, l, h, p, generator=gen) if opts.get("z") else None
    dt_bias = torch.randn(h, generator=gen) * 0.2 if opts.get("bias") else None
    h0 = torch.randn(b, h, p, n, generator=gen) if opts.get("init") else None
    seq = None
    if opts.get("seq"):
        seq = torch.zeros(b, l, dtype=torch.int32)
        for edge in opts["seq"]:
            seq[:, edge:] += 1
        for row, begin, end in opts.get("pad", ()):  # padding tokens: seq_idx -1
            seq[row, begin:end] = -1
    return [x, dt, A, B, C, D, z, dt_bias, h0], seq


def _run_ssd(K, case, dtype, backward=True):
    b, l, h, p, g, n, q, opts = SSD_CASES[case]
    # crc32, not hash(): str hashes change with each process's PYTHONHASHSEED, so the inputs would too.
    gen = torch.Generator().manual_seed(zlib.crc32(case.encode()))
    ins, seq = _ssd_inputs(b, l, h, p, g, n, opts, gen)
    names = ["x", "dt", "A", "B", "C", "D", "z", "dt_bias", "initial_states"]
    got_in = [_leaf(t, dtype if i not in (2,) else torch.float32) for i, t in enumerate(ins)]
    ref_in = [_ref_leaf(t) for t in ins]
    kw = dict(dt_softplus=bool(opts.get("softplus")), dt_limit=opts.get("limit", (0.0, math.inf)))
    y, final = K.ssd.chunk_scan_combined(
        *got_in[:5],
        q,
        D=got_in[5],
        z=got_in[6],
        dt_bias=got_in[7],
        initial_states=got_in[8],
        seq_idx=seq,
        **kw,
    )
    y_ref, f_ref = R.ssd_recurrence(
        *ref_in[:5], D=ref_in[5], z=ref_in[6], dt_bias=ref_in[7], initial_states=ref_in[8], seq_idx=seq, **kw
    )
    assert y.dtype == dtype and y.shape == (b, l, h, p) and final.dtype == torch.float32
    _close(y, y_ref, dtype, "y")
    _close(final, f_ref, dtype, "final_states")
    if not backward:
        return
    gen2 = torch.Generator().manual_seed(1)
    gy = torch.randn(y_ref.shape, generator=gen2, dtype=torch.float64)
    gf = torch.randn(f_ref.shape, generator=gen2, dtype=torch.float64)
    ((y.double() * gy).sum() + (final.double() * gf).sum()).backward()
    ((y_ref * gy).sum() + (f_ref * gf).sum()).backward()
    for name, a, r in zip(names, got_in, ref_in):
        if a is not None:
            assert a.grad is not None, f"no gradient for {name}"
            _close(a.grad, r.grad, dtype, f"d{name}")


@pytest.mark.parametrize("case", sorted(SSD_CASES))
def test_ssd_fwd_bwd_fp32(interpreted, case):
    _run_ssd(interpreted, case, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_ssd_fwd_bwd_half(interpreted, dtype):
    _run_ssd(interpreted, "all_options_partial_chunk", dtype)


def test_ssd_uneven_row_and_column_blocks(interpreted, monkeypatch):
    """The backward's row blocks (32) and column blocks (16) differ, as they do for headdim x dstate
    above 8192 on a GPU."""
    monkeypatch.setattr(
        interpreted.ssd, "_blocks", lambda q, p, n: dict(BLOCK_M=32, BLOCK_J=16, BLOCK_P=16, BLOCK_N=16)
    )
    _run_ssd(interpreted, "seq_idx_boundaries_64", torch.float32)


SSD_CASES["seq_idx_boundaries_64"] = (1, 80, 2, 8, 1, 16, 64, dict(seq=(30, 64), init=True, D="h"))


def test_ssd_varlen_states(interpreted):
    """cu_seqlens (batch 1): each sequence's last state; boundaries inside a chunk, at a chunk's first and
    last position; seq_idx built from cu_seqlens."""
    gen = torch.Generator().manual_seed(21)
    l, h, p, g, n = 50, 2, 4, 1, 16
    cu = torch.tensor([0, 10, 16, 32, 33, 50])
    x, dt = torch.randn(1, l, h, p, generator=gen), torch.rand(1, l, h, generator=gen) * 0.4
    A, B, C = (
        -torch.rand(h, generator=gen) - 0.3,
        torch.randn(1, l, g, n, generator=gen),
        torch.randn(1, l, g, n, generator=gen),
    )
    h0 = torch.randn(1, h, p, n, generator=gen)
    y, final, varlen = interpreted.ssd.chunk_scan_combined(
        x, dt, A, B, C, 16, initial_states=h0, cu_seqlens=cu
    )
    seq = torch.repeat_interleave(torch.arange(5), torch.diff(cu))[None]
    y_ref, f_ref, v_ref = R.ssd_recurrence(
        x, dt, A, B, C, initial_states=h0, seq_idx=seq, states_at=(cu[1:] - 1).tolist()
    )
    assert varlen.shape == (5, h, p, n) and not varlen.requires_grad
    _close(y, y_ref, torch.float32, "y")
    _close(final, f_ref, torch.float32, "final_states")
    _close(varlen, v_ref, torch.float32, "varlen_states")


def test_ssd_varlen_states_with_padding_and_empty_sequences(interpreted):
    """The padded-varlen rule: cu_seqlens ending before the last token (the rest is padding, seq_idx -1,
    output 0) and empty sequences (zero states), in the middle and at the end."""
    gen = torch.Generator().manual_seed(22)
    l, h, p, g, n = 44, 2, 4, 1, 16
    cu = torch.tensor([0, 10, 10, 27, 33, 33])  # rows 33..43 are padding
    x, dt = torch.randn(1, l, h, p, generator=gen), torch.rand(1, l, h, generator=gen) * 0.4
    A, B, C = (
        -torch.rand(h, generator=gen) - 0.3,
        torch.randn(1, l, g, n, generator=gen),
        torch.randn(1, l, g, n, generator=gen),
    )
    D = torch.randn(h, generator=gen)
    y, final, varlen = interpreted.ssd.chunk_scan_combined(x, dt, A, B, C, 16, D=D, cu_seqlens=cu)
    seq = torch.tensor([0] * 10 + [2] * 17 + [3] * 6 + [-1] * 11)[None]
    ends = [None if e == s else e - 1 for s, e in zip(cu[:-1].tolist(), cu[1:].tolist())]
    y_ref, f_ref, v_ref = R.ssd_recurrence(x, dt, A, B, C, D=D, seq_idx=seq, states_at=ends)
    assert not y[0, 33:].any() and not final.any()
    assert not varlen[1].any() and not varlen[4].any()
    _close(y, y_ref, torch.float32, "y")
    _close(varlen, v_ref, torch.float32, "varlen_states")


def test_ssd_non_contiguous_inputs(interpreted):
    gen = torch.Generator().manual_seed(3)
    b, l, h, p, g, n = 1, 24, 2, 8, 1, 16
    xbc = torch.randn(b, l, h * p + 2 * g * n + 5, generator=gen)  # x, B, C as views of one tensor
    x = xbc[..., : h * p].reshape(b, l, h, p)
    B = xbc[..., h * p : h * p + g * n].reshape(b, l, g, n)
    C = xbc[..., h * p + g * n : h * p + 2 * g * n].reshape(b, l, g, n)
    dt = torch.rand(b, h, l, generator=gen).transpose(1, 2) * 0.3 + 0.01
    A = (-torch.rand(2 * h, generator=gen) - 0.5)[::2]  # strided per-head parameters
    dt_bias = (torch.rand(2 * h, generator=gen) * 0.1)[1::2]
    assert not x.is_contiguous() and not dt.is_contiguous() and not A.is_contiguous()
    y, final = interpreted.ssd.chunk_scan_combined(x, dt, A, B, C, 16, dt_bias=dt_bias)
    y_ref, f_ref = R.ssd_recurrence(x, dt, A, B, C, dt_bias=dt_bias)
    _close(y, y_ref, torch.float32, "y")
    _close(final, f_ref, torch.float32, "final_states")


@pytest.mark.parametrize("chunk", [8, 24, 512, 100])
def test_ssd_chunk_size_not_supported(interpreted, chunk):
    x = torch.zeros(1, 4, 1, 4)
    with pytest.raises(ValueError, match=f"chunk_size={chunk} .*power of two from 16 to 256"):
        interpreted.ssd.chunk_scan_combined(
            x, torch.zeros(1, 4, 1), torch.zeros(1), torch.zeros(1, 4, 1, 4), torch.zeros(1, 4, 1, 4), chunk
        )


# ----------------------------------------------------------------------------- selective_state_update


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"]
)
@pytest.mark.parametrize("mode", ["mamba2_groups_pad", "one_head_one_group"])
def test_state_update(interpreted, dtype, mode):
    gen = torch.Generator().manual_seed(7)
    if mode == "mamba2_groups_pad":
        b, h, p, n, g, slots = 3, 4, 6, 16, 2, 5
        indices = torch.tensor([3, -1, 0])
    else:
        b, h, p, n, g, slots = 2, 1, 12, 8, 1, 2
        indices = None
    state = torch.randn(slots, h, p, n, generator=gen).to(dtype)
    x = torch.randn(b, h, p, generator=gen).to(dtype)
    dt = (torch.rand(b, h, p, generator=gen) - 0.3).to(dtype)
    A = -(torch.rand(h, p, n, generator=gen) + 0.1)
    B = torch.randn(b, g, n, generator=gen).to(dtype)
    C = torch.randn(b, g, n, generator=gen).to(dtype)
    D = torch.randn(h, p, generator=gen)
    z = torch.randn(b, h, p, generator=gen).to(dtype)
    dt_bias = torch.randn(h, p, generator=gen) * 0.1
    ref_out, ref_state = R.state_update(state, x, dt, A, B, C, D, z, dt_bias, True, indices)
    K = interpreted.state_update
    before = state.clone()
    out = K.selective_state_update(state, x, dt, A, B, C, D, z, dt_bias, True, indices)
    new_state = state
    assert out.dtype == dtype
    _close(out, ref_out, dtype, "out")
    _close(new_state, ref_state, dtype, "state (in place)")
    if indices is not None:
        assert torch.equal(out[1].float(), torch.zeros(h, p)), "a padded slot's output is 0"
        for row in range(slots):
            if row not in indices.tolist():
                assert torch.equal(new_state[row], before[row]), f"state row {row} was not used but changed"


def test_state_update_per_head_params_no_softplus(interpreted):
    """Mamba-2's decode call: A, dt, D, dt_bias given per head and expanded with stride 0."""
    gen = torch.Generator().manual_seed(9)
    b, h, p, n = 2, 3, 4, 16
    state = torch.randn(b, h, p, n, generator=gen)
    x = torch.randn(b, h, p, generator=gen)
    dt = (torch.rand(b, h, generator=gen) * 0.5)[:, :, None].expand(b, h, p)
    A = (-torch.rand(h, generator=gen) - 0.1)[:, None, None].expand(h, p, n)
    B = torch.randn(b, 1, n, generator=gen)
    C = torch.randn(b, 1, n, generator=gen)
    D = torch.randn(h, generator=gen)
    dt_bias = torch.rand(h, generator=gen) * 0.1
    ref_out, ref_state = R.state_update(
        state, x, dt, A, B, C, D[:, None].expand(h, p), None, dt_bias[:, None].expand(h, p), False
    )
    out = interpreted.state_update.selective_state_update(state, x, dt, A, B, C, D, None, dt_bias, False)
    _close(out, ref_out, torch.float32, "out")
    _close(state, ref_state, torch.float32, "state")


@pytest.fixture(params=["in_order", "reversed"])
def program_order(request, monkeypatch):
    """The interpreter runs programs one at a time in grid order; "reversed" runs the batch axis
    (program_id(1)) backwards, as a GPU may run programs in any order."""
    if request.param == "reversed":
        from triton.runtime import interpreter

        builder = getattr(interpreter, "interpreter_builder", None)
        real = getattr(builder, "set_grid_idx", None)
        if real is None or not hasattr(builder, "grid_dim"):
            pytest.skip("this triton's interpreter has no interpreter_builder.set_grid_idx to reorder")
        monkeypatch.setattr(builder, "set_grid_idx", lambda x, y, z: real(x, builder.grid_dim[1] - 1 - y, z))
    return request.param


@pytest.mark.parametrize(
    "indices",
    [[2, -1, 2, 0, 2, -1, 4], [1, 1, 1, 1, 1, 1, 1], [3, 0, 3, -1, 0, 3, 1]],
    ids=["three_on_row2_and_padding", "all_on_one_row", "two_groups"],
)
def test_state_update_repeated_rows_apply_in_batch_order(interpreted, program_order, indices):
    """Entries naming the same state row run one after another in batch order (the float64 reference
    does exactly that), whatever order the programs run in; padded entries give 0 and no other row
    changes."""
    gen = torch.Generator().manual_seed(11)
    b, h, p, n, g, slots = len(indices), 2, 5, 8, 1, 6
    idx = torch.tensor(indices, dtype=torch.int32)
    state = torch.randn(slots, h, p, n, generator=gen)
    x = torch.randn(b, h, p, generator=gen)
    dt = torch.rand(b, h, p, generator=gen)
    A = -(torch.rand(h, p, n, generator=gen) + 0.5)
    B = torch.randn(b, g, n, generator=gen)
    C = torch.randn(b, g, n, generator=gen)
    D = torch.randn(h, p, generator=gen)
    z = torch.randn(b, h, p, generator=gen)
    ref_out, ref_state = R.state_update(state, x, dt, A, B, C, D, z, None, True, idx)
    before = state.clone()
    out = interpreted.state_update.selective_state_update(state, x, dt, A, B, C, D, z, None, True, idx)
    _close(out, ref_out, torch.float32, "out")
    _close(state, ref_state, torch.float32, "state (in place)")
    for row in set(range(slots)) - set(indices):
        assert torch.equal(state[row], before[row]), f"row {row} is named by no entry but changed"
    for i, row in enumerate(indices):
        if row < 0:
            assert torch.equal(out[i], torch.zeros(h, p)), f"padded entry {i}"


# ----------------------------------------------------------------------------------------------- norms


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16], ids=["fp32", "fp16", "bf16"]
)
@pytest.mark.parametrize("is_rms", [False, True], ids=["layernorm", "rmsnorm"])
def test_norm_residual_prenorm(interpreted, dtype, is_rms):
    gen = torch.Generator().manual_seed(11)
    rows, n = 7, 40
    x = torch.randn(rows, n, generator=gen)
    res = torch.randn(rows, n, generator=gen)
    w = torch.randn(n, generator=gen)
    bias = torch.randn(n, generator=gen)
    xa, ra, wa, ba = (_leaf(t, dtype) for t in (x, res, w, bias))
    xr, rr, wr, br = (_ref_leaf(t) for t in (x, res, w, bias))
    y, resid = interpreted.norms.layer_norm(
        xa, wa, ba, ra, 1e-5, prenorm=True, residual_in_fp32=True, is_rms_norm=is_rms
    )
    assert y.dtype == dtype and resid.dtype == torch.float32
    s = xr + rr
    y_ref = R.norm(s, wr, br, 1e-5, is_rms)
    _close(y, y_ref, dtype, "y")
    _close(resid, s, dtype, "x + residual")
    gen2 = torch.Generator().manual_seed(2)
    gy = torch.randn(rows, n, generator=gen2, dtype=torch.float64)
    gr = torch.randn(rows, n, generator=gen2, dtype=torch.float64)
    ((y.double() * gy).sum() + (resid.double() * gr).sum()).backward()
    ((y_ref * gy).sum() + (s * gr).sum()).backward()
    for name, a, r in (("x", xa, xr), ("residual", ra, rr), ("weight", wa, wr), ("bias", ba, br)):
        _close(a.grad, r.grad, dtype, f"d{name}")


def test_norm_no_residual_out_dtype_no_bias(interpreted):
    gen = torch.Generator().manual_seed(12)
    x = torch.randn(2, 3, 24, generator=gen, dtype=torch.float16).requires_grad_(True)
    w = torch.randn(48, generator=gen)[::2].detach().requires_grad_(True)  # a strided weight
    y = interpreted.norms.layer_norm(x, w, None, None, 1e-6, is_rms_norm=True, out_dtype=torch.float32)
    assert y.dtype == torch.float32 and y.shape == x.shape
    xr, wr = _ref_leaf(x), _ref_leaf(w)
    y_ref = R.norm(xr, wr, None, 1e-6, True)
    _close(y, y_ref, torch.float16, "y")
    g = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    (y.double() * g).sum().backward()
    (y_ref * g).sum().backward()
    _close(x.grad, xr.grad, torch.float16, "dx")
    _close(w.grad, wr.grad, torch.float16, "dweight")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("norm_before_gate", [True, False], ids=["norm_then_gate", "gate_then_norm"])
@pytest.mark.parametrize("is_rms", [True, False], ids=["rms", "layer"])
def test_gated_norm(interpreted, dtype, norm_before_gate, is_rms):
    gen = torch.Generator().manual_seed(13)
    rows, n, group = 5, 48, 16
    x, z = torch.randn(rows, n, generator=gen), torch.randn(rows, n, generator=gen)
    w, bias = torch.randn(n, generator=gen), (None if is_rms else torch.randn(n, generator=gen))
    xa, za, wa, ba = (_leaf(t, dtype) for t in (x, z, w, bias))
    xr, zr, wr, br = (_ref_leaf(t) for t in (x, z, w, bias))
    y = interpreted.norms.gated_norm(xa, wa, ba, za, 1e-5, group, norm_before_gate, is_rms)
    y_ref = R.gated_norm(xr, wr, br, zr, 1e-5, group, norm_before_gate, is_rms)
    assert y.dtype == dtype
    _close(y, y_ref, dtype, "y")
    g = torch.randn(rows, n, generator=gen, dtype=torch.float64)
    (y.double() * g).sum().backward()
    (y_ref * g).sum().backward()
    for name, a, r in (("x", xa, xr), ("z", za, zr), ("weight", wa, wr), ("bias", ba, br)):
        if a is not None:
            _close(a.grad, r.grad, dtype, f"d{name}")
