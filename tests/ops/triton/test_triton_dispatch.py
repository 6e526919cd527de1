"""Which backend runs the Triton ops, and doctor's report of it (CPU only: a fake CUDA device report).

The public functions (mamba_chunk_scan_combined, selective_state_update, layer_norm_fn, the gated norm)
are sent to the Triton kernels by mamba_ssm._dispatch; here the dispatcher is told that Triton can run
on the CPU (``triton_unavailable`` patched) so that the hooks run the interpreted kernels end to end.
"""

import sys
import types

import pytest
import references as R
import torch

from mamba_ssm import _devices, _dispatch, _doctor, _loader
from mamba_ssm._backends import triton as backends
from mamba_ssm._doctor.report import GpuEntry, GpuReport


@pytest.fixture
def clean_dispatch(monkeypatch):
    monkeypatch.delenv("MAMBA_SSM_BACKEND", raising=False)
    _dispatch._reset_for_tests()
    yield monkeypatch
    _dispatch._reset_for_tests()


@pytest.fixture
def triton_on_cpu(interpreted, clean_dispatch):
    """The dispatcher believes Triton runs on the CPU (the kernels are interpreted); spies count calls."""
    clean_dispatch.setattr(backends, "triton_unavailable", lambda device: None)
    calls = {}

    def spy(module, name):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            calls[name] = calls.get(name, 0) + 1
            return real(*args, **kwargs)

        clean_dispatch.setattr(module, name, wrapper)

    spy(interpreted.ssd, "chunk_scan_combined")
    spy(interpreted.state_update, "selective_state_update")
    spy(interpreted.norms, "layer_norm")
    spy(interpreted.norms, "gated_norm")
    return calls


def test_public_ops_run_the_triton_kernels(triton_on_cpu):
    from mamba_ssm.ops.triton.layer_norm import rms_norm_fn
    from mamba_ssm.ops.triton.layernorm_gated import rmsnorm_fn
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    g = torch.Generator().manual_seed(0)
    x, dt = torch.randn(1, 20, 2, 4, generator=g), torch.rand(1, 20, 2, generator=g) * 0.3
    A, B, C = (
        -torch.rand(2, generator=g) - 0.2,
        torch.randn(1, 20, 1, 16, generator=g),
        torch.randn(1, 20, 1, 16, generator=g),
    )
    y, final = mamba_chunk_scan_combined(x, dt, A, B, C, 16, return_final_states=True)
    y_ref, f_ref = R.ssd_recurrence(x, dt, A, B, C)
    assert (
        float((y.double() - y_ref).abs().max()) < 1e-4 and float((final.double() - f_ref).abs().max()) < 1e-4
    )
    cu = torch.tensor([0, 7, 20])
    y, varlen = mamba_chunk_scan_combined(x, dt, A, B, C, 16, cu_seqlens=cu, return_varlen_states=True)
    seq = torch.repeat_interleave(torch.arange(2), torch.diff(cu))[None]
    y_ref, _, v_ref = R.ssd_recurrence(x, dt, A, B, C, seq_idx=seq, states_at=[6, 19])
    assert (
        float((y.double() - y_ref).abs().max()) < 1e-4 and float((varlen.double() - v_ref).abs().max()) < 1e-4
    )
    assert triton_on_cpu == {"chunk_scan_combined": 2}

    state = torch.randn(2, 2, 4, 16, generator=g)
    out = selective_state_update(
        state,
        x[:, 0].expand(2, 2, 4),
        dt[:, 0, :, None].expand(2, 2, 4),
        A[:, None, None].expand(2, 4, 16),
        B[:, 0].expand(2, 1, 16),
        C[:, 0].expand(2, 1, 16),
        state_batch_indices=torch.tensor([1, -1]),
    )
    assert torch.equal(out[1], torch.zeros(2, 4))
    # Mamba-1's shapes (batch, dim, dstate): the public function adds the head axis for the kernel.
    st1 = torch.randn(2, 4, 16, generator=g)
    x1, dt1 = torch.randn(2, 4, generator=g), torch.rand(2, 4, generator=g)
    A1, B1, C1 = (
        -torch.rand(4, 16, generator=g),
        torch.randn(2, 16, generator=g),
        torch.randn(2, 16, generator=g),
    )
    D1 = torch.randn(4, generator=g)
    out_ref, st_ref = R.state_update(
        st1[:, None],
        x1[:, None],
        dt1[:, None],
        A1[None],
        B1[:, None],
        C1[:, None],
        D1[None],
        None,
        None,
        False,
    )
    out1 = selective_state_update(st1, x1, dt1, A1, B1, C1, D=D1)
    assert out1.shape == (2, 4) and float((out1.double() - out_ref[:, 0]).abs().max()) < 1e-5
    assert float((st1.double() - st_ref[:, 0]).abs().max()) < 1e-5
    hidden = torch.randn(3, 32, generator=g)
    w = torch.randn(32, generator=g)
    y = rms_norm_fn(hidden, w, None, eps=1e-5)
    assert float((y.double() - R.norm(hidden, w, None, 1e-5, True)).abs().max()) < 1e-5
    z = torch.randn(3, 32, generator=g)
    y = rmsnorm_fn(hidden, w, None, z=z, eps=1e-5, group_size=16)
    assert float((y.double() - R.gated_norm(hidden, w, None, z, 1e-5, 16, True, True)).abs().max()) < 1e-5
    assert triton_on_cpu == {
        "chunk_scan_combined": 2,
        "selective_state_update": 2,
        "layer_norm": 1,
        "gated_norm": 1,
    }


def test_a_call_the_kernel_does_not_take_falls_back_or_raises_when_forced(triton_on_cpu, clean_dispatch):
    from mamba_ssm.ops.triton.layer_norm import layer_norm_fn

    x, w = torch.randn(2, 8, dtype=torch.float64), torch.ones(8, dtype=torch.float64)
    with pytest.warns(_dispatch.MambaFallbackWarning, match="layer_norm .*float64"):
        y = layer_norm_fn(x, w, None)
    assert float((y - R.norm(x, w, None, 1e-6, False)).abs().max()) < 1e-12
    assert triton_on_cpu == {}
    clean_dispatch.setenv("MAMBA_SSM_BACKEND", "triton")
    with pytest.raises(
        RuntimeError, match=r"triton backend was forced \(MAMBA_SSM_BACKEND=triton\).*float64"
    ):
        layer_norm_fn(x, w, None)
    clean_dispatch.setenv("MAMBA_SSM_BACKEND", "torch")
    layer_norm_fn(x.float(), w.float(), None)
    assert triton_on_cpu == {}, "MAMBA_SSM_BACKEND=torch keeps the PyTorch path"


def test_plan_cpu_and_cuda(clean_dispatch):
    pytest.importorskip("triton")
    for op in sorted(_dispatch.TRITON_OPS):
        p = _dispatch.plan(op, "cpu")
        assert p.backend == "torch" and p.fix is None and "CUDA/ROCm devices only" in p.reason
        assert _dispatch.plan(op, "cuda:0").backend == "triton"
    clean_dispatch.setenv("MAMBA_SSM_BACKEND", "triton")
    assert _dispatch.plan("ssd_chunk_scan", "cpu").backend == "torch"  # never an error on a CPU
    assert _dispatch.plan("causal_conv1d", "cuda:0").backend == "torch"
    clean_dispatch.setenv("MAMBA_SSM_BACKEND", "ref")
    assert _dispatch.plan("rms_norm", "cuda:0").backend == "torch"
    clean_dispatch.delenv("MAMBA_SSM_BACKEND")
    clean_dispatch.setattr(_devices, "device_arch", lambda device: "6.1")  # a Pascal GPU
    p = _dispatch.plan("ssd_chunk_scan", "cuda:0")
    assert p.backend == "torch" and "compute capability 6.1" in p.reason


def test_old_or_missing_triton_names_the_reason_and_a_pinned_fix(clean_dispatch):
    clean_dispatch.setitem(sys.modules, "triton", types.SimpleNamespace(__version__="2.3.1"))
    p = _dispatch.plan("ssd_chunk_scan", "cuda:0")
    assert p.backend == "torch" and "triton 2.3.1 is older than 3.0" in p.reason and p.fix
    _dispatch._reset_for_tests()
    clean_dispatch.setitem(sys.modules, "triton", None)  # import triton -> ImportError
    p = _dispatch.plan("selective_state_update", "cuda:0")
    assert p.backend == "torch" and "triton cannot be imported" in p.reason
    from importlib import metadata

    pins = [r.split(";")[0].strip() for r in (metadata.requires("torch") or []) if r.startswith("triton==")]
    if pins:
        assert f"pip install '{pins[0]}'" in p.fix
    clean_dispatch.setenv("MAMBA_SSM_BACKEND", "triton")
    with pytest.raises(RuntimeError, match="triton backend was forced.*triton cannot be imported"):
        _dispatch.backend_for("selective_state_update", "cuda:0")


FAKE_GPU = GpuReport(
    available=True,
    count=1,
    devices=(
        GpuEntry(
            index=0,
            device="cuda:0",
            name="Fake H200",
            compute_capability="9.0",
            arch="sm_90",
            total_memory_mib=1024,
        ),
    ),
)


def _doctor_with_fake_gpu(monkeypatch):
    real = _devices.device_coverage
    monkeypatch.setattr(_devices, "device_coverage", lambda d: None if str(d).startswith("cuda") else real(d))
    typed = _doctor.collect(gpus=FAKE_GPU)
    report = typed.to_dict()
    return report, {d["device"]: d for d in report["devices"]}, _doctor.render_text(typed)


def test_doctor_lists_a_gpu_backend_for_every_op_on_a_fake_cuda_device(clean_dispatch):
    pytest.importorskip("triton")
    if not _loader.load().loaded:
        pytest.skip(f"mamba_ssm._C is not loaded here ({_loader.load().reason})")
    report, devices, text = _doctor_with_fake_gpu(clean_dispatch)
    gpu_ops = devices["cuda:0"]["ops"]
    for op in _dispatch.TRITON_OPS:
        assert gpu_ops[op]["backend"] == "triton", (op, gpu_ops[op])
        assert devices["cpu"]["ops"][op]["backend"] == "torch"
    for op in _dispatch.COMPILED_OPS:
        assert gpu_ops[op]["backend"] == "compiled"
    assert devices["cuda:0"]["triton_active"] is True
    assert not any(set(p["ops"]) & _dispatch.TRITON_OPS for p in report["problems"])
    assert "Fake H200" in text and "ssd_chunk_scan" in text


def test_doctor_reports_a_gpu_without_triton_as_a_fixable_fallback(clean_dispatch):
    clean_dispatch.setitem(sys.modules, "triton", None)
    report, devices, text = _doctor_with_fake_gpu(clean_dispatch)
    assert devices["cuda:0"]["ops"]["ssd_chunk_scan"]["backend"] == "torch"
    assert devices["cuda:0"]["triton_active"] is False
    (p,) = [p for p in report["problems"] if "triton cannot be imported" in p["reason"]]
    assert p["severity"] == "fallback" and p["devices"] == ["cuda:0"]
    assert set(p["ops"]) == set(_dispatch.TRITON_OPS) and p["fix"]
    assert report["exit_code"] >= _doctor.EXIT_FALLBACK
    assert "triton cannot be imported" in text


def test_split_conv1d_scan_combined_runs_the_triton_ssd_and_gated_norm(triton_on_cpu, clean_dispatch):
    """Mamba-2's fused block path reaches the SSD and gated-norm kernels; its output matches the same
    function on the PyTorch path (MAMBA_SSM_BACKEND=torch), gradients included."""
    from mamba_ssm.ops.triton.ssd_combined import mamba_split_conv1d_scan_combined

    g = torch.Generator().manual_seed(5)
    b, l, nheads, headdim, ngroups, dstate, width, d_model = 1, 20, 2, 4, 1, 16, 4, 6
    dim = nheads * headdim
    conv_dim = dim + 2 * ngroups * dstate
    zxbcdt = torch.randn(b, l, 2 * dim + 2 * ngroups * dstate + nheads, generator=g)
    params = dict(
        conv1d_weight=torch.randn(conv_dim, 1, width, generator=g) * 0.3,
        conv1d_bias=torch.randn(conv_dim, generator=g) * 0.1,
        dt_bias=torch.rand(nheads, generator=g),
        A=-torch.rand(nheads, generator=g) - 0.5,
        D=torch.randn(nheads, generator=g),
        rmsnorm_weight=torch.randn(dim, generator=g),
        outproj_weight=torch.randn(d_model, dim, generator=g),
    )

    def run():
        inp = zxbcdt.clone().requires_grad_(True)
        y = mamba_split_conv1d_scan_combined(
            inp,
            params["conv1d_weight"],
            params["conv1d_bias"],
            params["dt_bias"],
            params["A"],
            params["D"],
            16,
            rmsnorm_weight=params["rmsnorm_weight"],
            outproj_weight=params["outproj_weight"],
            headdim=headdim,
            ngroups=ngroups,
            norm_before_gate=False,
        )
        y.square().sum().backward()
        return y.detach(), inp.grad

    y, grad = run()
    assert triton_on_cpu == {"chunk_scan_combined": 1, "gated_norm": 1}
    clean_dispatch.setenv("MAMBA_SSM_BACKEND", "torch")
    y_torch, grad_torch = run()
    assert triton_on_cpu == {"chunk_scan_combined": 1, "gated_norm": 1}
    assert float((y - y_torch).abs().max()) < 1e-4 * max(1.0, float(y_torch.abs().max()))
    assert float((grad - grad_torch).abs().max()) < 1e-4 * max(1.0, float(grad_torch.abs().max()))
