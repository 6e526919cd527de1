"""The Triton kernels compiled for a CUDA/ROCm GPU (marked gpu; benchmarks/gpu_check.sh runs this file
with MAMBA_TRITON_GPU_TESTS=1): larger shapes than the interpreter tests, against the float64 references
(references.py) and, at Mamba-2 size, against our PyTorch SSD (a separate implementation)."""

import pytest
import references as R
import torch

pytestmark = pytest.mark.gpu

TOL = {torch.float32: 1e-3, torch.float16: 3e-2, torch.bfloat16: 8e-2}


def _err(got, ref):
    ref = ref.detach().double().cpu()
    return float((got.detach().double().cpu() - ref).abs().max()) / max(1.0, float(ref.abs().max()))


@pytest.mark.parametrize(
    "dtype,chunk", [(torch.float32, 64), (torch.float32, 256), (torch.bfloat16, 256), (torch.float16, 128)]
)
def test_ssd_gpu_vs_recurrence(gpu_kernels, dtype, chunk):
    g = torch.Generator().manual_seed(0)
    b, l, h, p, ng, n = 2, 300, 4, 32, 2, 32
    x, dt = torch.randn(b, l, h, p, generator=g), torch.rand(b, l, h, generator=g) - 0.5
    A, B, C = (
        -torch.rand(h, generator=g) - 0.2,
        torch.randn(b, l, ng, n, generator=g),
        torch.randn(b, l, ng, n, generator=g),
    )
    D, z, bias = (
        torch.randn(h, p, generator=g),
        torch.randn(b, l, h, p, generator=g),
        torch.rand(h, generator=g) * 0.1,
    )
    h0 = torch.randn(b, h, p, n, generator=g)
    seq = torch.zeros(b, l, dtype=torch.int32)
    seq[:, 100:] = 1
    seq[:, 256:] = 2
    seq[0, 280:] = -1  # padding tokens: a row ending in them, and a run between two sequences
    seq[1, 90:130] = -1
    ins = [x, dt, A, B, C, D, z, bias, h0]
    dev = [t.to("cuda", dtype if i != 2 else torch.float32).requires_grad_(True) for i, t in enumerate(ins)]
    ref = [t.double().requires_grad_(True) for t in ins]
    y, f = gpu_kernels.ssd.chunk_scan_combined(
        *dev[:5],
        chunk,
        D=dev[5],
        z=dev[6],
        dt_bias=dev[7],
        initial_states=dev[8],
        seq_idx=seq.cuda(),
        dt_softplus=True,
    )
    yr, fr = R.ssd_recurrence(
        *ref[:5], D=ref[5], z=ref[6], dt_bias=ref[7], initial_states=ref[8], seq_idx=seq, dt_softplus=True
    )
    assert _err(y, yr) < TOL[dtype] and _err(f, fr) < TOL[dtype]
    gy, gf = torch.randn(yr.shape, dtype=torch.float64), torch.randn(fr.shape, dtype=torch.float64)
    ((y.double() * gy.cuda()).sum() + (f.double() * gf.cuda()).sum()).backward()
    ((yr * gy).sum() + (fr * gf).sum()).backward()
    for name, a, r in zip(["x", "dt", "A", "B", "C", "D", "z", "dt_bias", "h0"], dev, ref):
        assert _err(a.grad, r.grad) < TOL[dtype], name


def test_ssd_gpu_varlen_states(gpu_kernels):
    g = torch.Generator().manual_seed(4)
    l, h, p, n = 600, 4, 32, 64
    cu = torch.tensor([0, 100, 256, 256, 257, 511, 580])  # an empty sequence; rows 580.. are padding
    x, dt = torch.randn(1, l, h, p, generator=g), torch.rand(1, l, h, generator=g) * 0.2
    A, B, C = (
        -torch.rand(h, generator=g) - 0.3,
        torch.randn(1, l, 1, n, generator=g),
        torch.randn(1, l, 1, n, generator=g),
    )
    y, final, varlen = gpu_kernels.ssd.chunk_scan_combined(
        *(t.cuda() for t in (x, dt, A, B, C)), 256, cu_seqlens=cu.cuda()
    )
    seq = torch.cat([torch.repeat_interleave(torch.arange(6), torch.diff(cu)), torch.full((l - 580,), -1)])[
        None
    ]
    ends = [None if e == s else e - 1 for s, e in zip(cu[:-1].tolist(), cu[1:].tolist())]
    yr, fr, vr = R.ssd_recurrence(x, dt, A, B, C, seq_idx=seq, states_at=ends)
    assert _err(y, yr) < 1e-3 and _err(final, fr) < 1e-3 and _err(varlen, vr) < 1e-3


def test_ssd_gpu_mamba2_size_vs_pytorch_ssd(gpu_kernels):
    from mamba_ssm import _dispatch
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    g = torch.Generator(device="cuda").manual_seed(0)
    b, l, h, p, n = 2, 2048, 8, 64, 128
    x = torch.randn(b, l, h, p, device="cuda", generator=g)
    dt = torch.rand(b, l, h, device="cuda", generator=g) * 0.1
    A = -torch.rand(h, device="cuda", generator=g) - 0.5
    B, C = (torch.randn(b, l, 1, n, device="cuda", generator=g) for _ in range(2))
    y = gpu_kernels.ssd.chunk_scan_combined(
        *(t.bfloat16() if t.dim() > 1 else t for t in (x, dt, A, B, C)), 256
    )[0]
    previous = _dispatch.set_backend("torch")
    try:
        y_torch = mamba_chunk_scan_combined(x, dt, A, B, C, 256)
    finally:
        _dispatch.set_backend(previous)
    assert _err(y, y_torch) < 5e-2


@pytest.mark.parametrize(
    "indices", [[9, 0, -1, 3, 4, 5, -1, 7], [3, 0, 3, -1, 3, 0, -1, 3]], ids=["distinct", "repeated_rows"]
)
def test_state_update_gpu(gpu_kernels, indices):
    """Repeated rows run in batch order (the float64 reference's meaning), though the GPU runs the
    programs in parallel."""
    g = torch.Generator().manual_seed(1)
    b, h, p, n, ng = 8, 16, 64, 128, 4
    state = torch.randn(10, h, p, n, generator=g)
    x, dt, z = (
        torch.randn(b, h, p, generator=g),
        torch.rand(b, h, p, generator=g) - 0.5,
        torch.randn(b, h, p, generator=g),
    )
    A = -torch.rand(h, p, n, generator=g)
    B, C = torch.randn(b, ng, n, generator=g), torch.randn(b, ng, n, generator=g)
    D, bias = torch.randn(h, p, generator=g), torch.rand(h, p, generator=g) * 0.1
    idx = torch.tensor(indices)
    out_ref, state_ref = R.state_update(state, x, dt, A, B, C, D, z, bias, True, idx)
    st = state.cuda()
    out = gpu_kernels.state_update.selective_state_update(
        st, *(t.cuda() for t in (x, dt, A, B, C, D, z, bias)), True, idx.cuda()
    )
    assert _err(out, out_ref) < 1e-4 and _err(st, state_ref) < 1e-4
    assert torch.equal(out[2].cpu(), torch.zeros(h, p))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("is_rms", [False, True])
def test_norms_gpu(gpu_kernels, dtype, is_rms):
    g = torch.Generator().manual_seed(2)
    rows, n = 64, 2560
    x, res, w, bias = (
        torch.randn(rows, n, generator=g),
        torch.randn(rows, n, generator=g),
        torch.randn(n, generator=g),
        torch.randn(n, generator=g),
    )
    dev = [t.to("cuda", dtype).requires_grad_(True) for t in (x, res, w, bias)]
    ref = [t.to(dtype).double().requires_grad_(True) for t in (x, res, w, bias)]
    y, s = gpu_kernels.norms.layer_norm(
        dev[0], dev[2], dev[3], dev[1], 1e-5, prenorm=True, residual_in_fp32=True, is_rms_norm=is_rms
    )
    sr = ref[0] + ref[1]
    yr = R.norm(sr, ref[2], ref[3], 1e-5, is_rms)
    assert _err(y, yr) < TOL[dtype] and _err(s, sr) < 1e-6
    gy = torch.randn(rows, n, dtype=torch.float64)
    (y.double() * gy.cuda()).sum().backward()
    (yr * gy).sum().backward()
    for a, r in zip(dev, ref):
        assert _err(a.grad, r.grad) < TOL[dtype]
    z = torch.randn(rows, n, generator=g)
    yg = gpu_kernels.norms.gated_norm(
        dev[0].detach(), dev[2].detach(), None, z.to("cuda", dtype), 1e-5, n // 4, False, True
    )
    assert (
        _err(yg, R.gated_norm(ref[0].detach(), ref[2].detach(), None, z.to(dtype), 1e-5, n // 4, False, True))
        < TOL[dtype]
    )


def test_every_triton_op_dispatches_to_triton_on_this_gpu(gpu_kernels):
    from mamba_ssm import _dispatch

    for op in sorted(_dispatch.TRITON_OPS):
        p = _dispatch.plan(op, "cuda")
        assert p.backend == "triton", (op, p)
