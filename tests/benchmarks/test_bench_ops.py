"""benchmarks/bench_ops.py: its timing core, its CLI, and that every entry's calls fit the ops.

No timing is asserted (speed goals live in docs/benchmarks.md, measured by the script). What is checked:
the interleaving order of ``measure``; ``--reps``/``--out``/``--only`` and the skip reasons; the exit on
``--device cuda`` without a device; that the CUDA-only entries' inputs and calls are well-formed (run on
the CPU through the PyTorch path at small shapes, so a signature slip shows up here and not on the
rented GPU); and that the conv1d entry compares like with like (ours vs F.conv1d + SiLU agree).
"""

import importlib.util
import json
import os
import sys

import pytest
import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def bench_ops(monkeypatch):
    path = os.path.join(REPO, "benchmarks", "bench_ops.py")
    spec = importlib.util.spec_from_file_location("bench_ops_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, mod)  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    threads = torch.get_num_threads()
    yield mod
    torch.set_num_threads(threads)  # main() sets one thread for the CPU rows


def test_measure_rotates_the_order_and_takes_medians(bench_ops):
    seen = []
    impls = [bench_ops.Impl(name, lambda name=name: seen.append(name)) for name in "abc"]
    times = bench_ops.measure(impls, repeats=3, cuda=False, calls=2)
    # warm-up a, b, c; then rounds a b c / b c a / c a b, each sample two calls
    expected = "aabbcc" + "aabbcc" + "bbccaa" + "ccaabb"
    assert "".join(seen) == expected
    assert len(times) == 3 and all(w >= 0 and c >= 0 for w, c in times)


def test_cli_reps_alias_only_and_out(bench_ops, tmp_path, capsys):
    why = bench_ops._skip_reason(bench_ops.ENTRIES[3], "cpu")
    if why:
        pytest.skip(f"the varlen_states row cannot run here: {why}")
    rc = bench_ops.main(["--device", "cpu", "--reps", "1", "--only", "varlen,ssd", "--out", str(tmp_path)])
    assert rc == 0
    md = (tmp_path / "bench_ops_cpu.md").read_text()
    data = json.loads((tmp_path / "bench_ops_cpu.json").read_text())
    assert [r["op"] for r in data["rows"]] == ["causal_conv1d_varlen_states"]
    assert data["rows"][0]["ratio_cpu"] > 0 and data["copy_gbps"] is None
    assert "| causal_conv1d_varlen_states |" in md
    assert data["skipped"] == [
        "ssd_chunk_scan fwd+bwd (mamba_chunk_scan_combined): runs on cuda only "
        "(the Triton kernels target CUDA/ROCm GPUs)"
    ]
    assert "* skipped ssd_chunk_scan" in md and "causal_conv1d fwd " not in md


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
def test_cuda_without_a_device_exits_2_saying_so(bench_ops, tmp_path, capsys):
    assert bench_ops.main(["--device", "cuda", "--out", str(tmp_path)]) == 2
    assert "no CUDA device visible to torch" in capsys.readouterr().err
    assert not (tmp_path / "bench_ops_cuda.md").exists()


def test_bad_repeats_is_refused(bench_ops, capsys):
    with pytest.raises(SystemExit):
        bench_ops.main(["--device", "cpu", "--repeats", "0"])
    assert "--repeats must be >= 1, got 0" in capsys.readouterr().err


def test_cuda_entries_calls_fit_the_ops(bench_ops, monkeypatch):
    """Every CUDA-only entry built on the CPU at small shapes, each variant run once on the PyTorch path
    (the Mamba-1 scan on whatever backs it here): the gradients of the fwd+bwd entries come out finite."""
    small = dict(
        SSD_B=1,
        SSD_L=96,
        SSD_H=2,
        SSD_P=8,
        SSD_N=16,
        SSD_CHUNK=32,
        SPLIT_B=1,
        SPLIT_L=96,
        SPLIT_H=2,
        SPLIT_P=8,
        SPLIT_N=16,
        UPD_B=2,
        UPD_H=2,
        UPD_P=4,
        UPD_N=8,
        NORM_ROWS=4,
        NORM_N=32,
        GATED_N=32,
        M3_B=1,
        M3_L=40,
        M3_H=2,
        M3_P=8,
        M3_N=16,
        M3_CHUNK=16,
    )
    for name, value in small.items():
        monkeypatch.setattr(bench_ops, name, value)
    ran = []
    for entry in bench_ops.ENTRIES:
        if "cpu" in entry.devices:
            continue
        case = entry.make("cpu")
        for impl in [case.ours] + case.baselines:
            with bench_ops._backend(
                "torch" if impl.backend == "auto" and impl.label == "triton" else impl.backend
            ):
                impl.fn()
        ran.append(entry.op)
    assert set(ran) == {
        "ssd_chunk_scan",
        "selective_state_update",
        "rms_norm",
        "layer_norm",
        "mamba3_siso",
        "mamba3_mimo",
        "mamba3_step",
    }


def test_conv1d_entry_compares_like_with_like(bench_ops, monkeypatch):
    monkeypatch.setattr(bench_ops, "CONV_B", 2)
    monkeypatch.setattr(bench_ops, "CONV_D", 8)
    monkeypatch.setattr(bench_ops, "CONV_L", 33)
    case = bench_ops.make_conv_fwd("cpu")
    with bench_ops._backend("auto"):
        ours = case.ours.fn()
    conv = case.baselines[0].fn()
    assert ours.shape == conv.shape == (2, 8, 33)
    torch.testing.assert_close(ours, conv, rtol=1e-5, atol=1e-5)
