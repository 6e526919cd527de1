"""csrc's CUDA/HIP causal conv1d kernels (csrc/conv1d_gpu.cuh) executed on the CPU through HIP-CPU, against
the float64 sequential references of tests/kernels/conv1d_cases.py.

The same harness as the selective scan's (tests/kernels/test_hipcpu_kernels.py, hipcpu/hipcpu_build.py:
the csrc translation units compiled unchanged with g++ against HIP-CPU, one library per layout, wave64
and wave32); the conv entry points are driven by hipcpu/hipcpu_conv1d_runner.py in a subprocess. The conv
kernels use no barriers or shuffles, so one resume order is enough. Covered: forward and backward (dx,
dweight, dbias, dinitial_states, through out and final_states) for widths 2-4, a seqlen-contiguous and a
channel-last x, seq_idx (with padding tokens: seq_idx -1), initial states, runs shorter and longer than a thread's 16 positions, fp16/bf16;
the decode update (shift register and circular cache_seqlens, conv_state_indices with negative and
out-of-range slots, a channel-last state); varlen states of 2-, 4- and 8-byte elements. Every output
lies in a guarded buffer (no overrun, nothing left unwritten). Skips (fails under CI=true) where
HIP-CPU or TBB is missing, as the scan's test does.
"""

import functools
import os
import subprocess
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "hipcpu"))

import hipcpu_build  # noqa: E402
from conv1d_cases import assert_close, conv_ref64, make_conv_inputs, update_ref64, varlen_states_ref  # noqa: E402
from test_hipcpu_kernels import _build, _view, check_guards  # noqa: E402

RUNNER = os.path.join(HERE, "hipcpu", "hipcpu_conv1d_runner.py")
LAYOUTS = list(hipcpu_build.LAYOUTS)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _conv(
    name,
    width=4,
    layout="contiguous",
    dtype="fp32",
    batch=2,
    dim=5,
    seqlen=40,
    bias=True,
    silu=True,
    seq=False,
    pad=False,
    init=False,
    dfinal=True,
):
    return dict(
        kind="conv",
        name=name,
        width=width,
        layout=layout,
        dtype=dtype,
        batch=batch,
        dim=dim,
        seqlen=seqlen,
        bias=bias,
        silu=silu,
        seq=seq,
        pad=pad,
        init=init,
        dfinal=dfinal,
    )


def _update(
    name,
    width=4,
    dtype="fp32",
    seqlen=1,
    state_len=4,
    circular=False,
    indices=False,
    state_channel_last=False,
    silu=True,
):
    return dict(
        kind="update",
        name=name,
        width=width,
        dtype=dtype,
        seqlen=seqlen,
        state_len=state_len,
        circular=circular,
        indices=indices,
        state_channel_last=state_channel_last,
        silu=silu,
    )


def _cases():
    out = []
    for width in (2, 3, 4):
        for layout in ("contiguous", "channel_last"):
            out.append(_conv(f"w{width}_{layout}_all", width, layout, seq=True, init=True))
            out.append(
                _conv(f"w{width}_{layout}_padding", width, layout, batch=3, seq=True, pad=True, init=True)
            )
            out.append(_conv(f"w{width}_{layout}_plain", width, layout, bias=False, silu=False, dfinal=False))
    for L in (1, 2, 15, 16, 17, 33):  # around one thread's run of 16 positions
        out.append(_conv(f"seqlen{L}", seqlen=L, init=True, seq=L > 2))
    out.append(
        _conv(
            "channel_last_dim67_L50",
            layout="channel_last",
            dim=67,
            seqlen=50,
            batch=3,
            seq=True,
            pad=True,
            init=True,
        )
    )
    for dt in ("fp16", "bf16"):
        out.append(_conv(f"{dt}_contiguous", dtype=dt, init=True, seq=True, pad=True, batch=3))
        out.append(_conv(f"{dt}_channel_last", layout="channel_last", dtype=dt, init=True))
    for width in (2, 4):
        out.append(_update(f"update_shift_w{width}", width, seqlen=1, state_len=width))
        out.append(_update(f"update_shift_w{width}_L3", width, seqlen=3, state_len=width + 2))
        out.append(_update(f"update_circular_w{width}", width, seqlen=2, state_len=5, circular=True))
    out.append(_update("update_indices_padded", indices=True, seqlen=2, state_len=5))
    out.append(
        _update(
            "update_indices_circular_bf16", dtype="bf16", indices=True, circular=True, seqlen=3, state_len=6
        )
    )
    out.append(_update("update_state_channel_last_fp16", dtype="fp16", state_channel_last=True, seqlen=1))
    out.append(_update("update_circular_longer_than_state", circular=True, seqlen=7, state_len=4))
    for dt in (torch.float32, torch.bfloat16, torch.float64):
        out.append(dict(kind="varlen", name=f"varlen_{dt}".replace("torch.", ""), dtype=dt, state_len=4))
    return out


CASES = _cases()


@functools.cache
def inputs_of(name):
    c = next(x for x in CASES if x["name"] == name)
    seed = CASES.index(c)
    g = torch.Generator().manual_seed(seed)
    if c["kind"] == "conv":
        dtype = DTYPES[c["dtype"]]
        x, w, b, sid, init = make_conv_inputs(
            c["batch"],
            c["dim"],
            c["seqlen"],
            c["width"],
            dtype,
            bias=c["bias"],
            seq=c["seq"],
            pad=c["pad"],
            init=c["init"],
            seed=seed,
        )
        dout = torch.randn(x.shape, generator=g).to(dtype)
        dfinal = torch.randn(c["batch"], c["dim"], c["width"] - 1, generator=g) if c["dfinal"] else None
        return dict(x=x, weight=w, bias=b, seq_idx=sid, init=init, dout=dout, dfinal=dfinal)
    if c["kind"] == "update":
        dtype = DTYPES[c["dtype"]]
        batch, dim = 4, 6
        n_states = 7 if c["indices"] else batch
        x = torch.randn(batch, dim, c["seqlen"], generator=g).to(dtype)
        state = torch.randn(n_states, dim, c["state_len"], generator=g).to(dtype)
        w = torch.randn(dim, c["width"], generator=g) * 0.5
        b = torch.randn(dim, generator=g) * 0.3
        cache = torch.tensor([0, 3, 11, 6], dtype=torch.int32) if c["circular"] else None
        idx = torch.tensor([5, -1, 0, 9], dtype=torch.int32) if c["indices"] else None  # 9: out of range
        return dict(x=x, state=state, weight=w, bias=b, cache=cache, idx=idx)
    x = torch.randn(20, 9, generator=g).to(c["dtype"])
    return dict(x=x, cu=torch.tensor([0, 5, 6, 6, 20], dtype=torch.int32))


def run_emulated(lib, cases, tmp_dir):
    os.makedirs(tmp_dir, exist_ok=True)
    cases_path, out_path = os.path.join(tmp_dir, "cases.pt"), os.path.join(tmp_dir, "out.pt")
    payload = []
    for c in cases:
        entry = dict(kind=c["kind"], inputs=inputs_of(c["name"]))
        if c["kind"] == "conv":
            entry.update(dtype=DTYPES[c["dtype"]], channel_last=c["layout"] == "channel_last", silu=c["silu"])
        elif c["kind"] == "update":
            entry.update(dtype=DTYPES[c["dtype"]], state_channel_last=c["state_channel_last"], silu=c["silu"])
        else:
            entry.update(state_len=c["state_len"])
        payload.append(entry)
    torch.save(payload, cases_path)
    proc = subprocess.run(
        [sys.executable, RUNNER, lib, cases_path, out_path],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=os.path.join(HERE, "hipcpu"),
    )
    how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
    assert proc.returncode == 0, f"hipcpu_conv1d_runner.py failed ({how}):\n{proc.stderr[-4000:]}"
    return torch.load(out_path, weights_only=False)


_RESULTS = {}


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    def results(layout):
        if layout not in _RESULTS:
            _RESULTS[layout] = "the build or run failed in an earlier test of this layout (see it)"
            try:
                lib = _build(layout)
            except pytest.skip.Exception:
                del _RESULTS[layout]
                raise
            res = run_emulated(lib, CASES, str(tmp_path_factory.mktemp(f"conv-{layout}")))
            assert res["warp_size"] == hipcpu_build.LAYOUTS[layout], "layout not applied"
            _RESULTS[layout] = res
        if isinstance(_RESULTS[layout], str):
            pytest.fail(_RESULTS[layout])
        return _RESULTS[layout]

    return results


def _check_conv(c, r):
    dtype = DTYPES[c["dtype"]]
    t = inputs_of(c["name"])
    for name in ("out", "final_states", "dx", "dinitial_states", "workspace"):
        if name in r:
            check_guards(name, r[name])
    perm = r["perm"]
    leaves = {
        k: None if t[k] is None else t[k].double().requires_grad_(True)
        for k in ("x", "weight", "bias", "init")
    }
    out, final = conv_ref64(
        leaves["x"], leaves["weight"], leaves["bias"], t["seq_idx"], leaves["init"], c["silu"]
    )
    loss = (out * t["dout"].double()).sum()
    if t["dfinal"] is not None:
        loss = loss + (final * t["dfinal"].double()).sum()
    loss.backward()
    assert_close(_view(r["out"]).permute(*perm), out.detach(), dtype, "out")
    assert_close(_view(r["final_states"]), final.detach(), dtype, "final_states")
    assert_close(_view(r["dx"]).permute(*perm), leaves["x"].grad, dtype, "dx")
    assert_close(_view(r["dweight"]), leaves["weight"].grad, dtype, "dweight")
    if t["bias"] is not None:
        assert_close(_view(r["dbias"]), leaves["bias"].grad, dtype, "dbias")
    if t["init"] is not None:
        assert_close(_view(r["dinitial_states"]), leaves["init"].grad, dtype, "dinitial_states")


def _check_update(c, r):
    dtype = DTYPES[c["dtype"]]
    t = inputs_of(c["name"])
    check_guards("out", r["out"])
    idx = t["idx"]
    if idx is not None:  # the GPU kernel treats an index past the rows like a padded slot
        idx = torch.where(idx >= t["state"].shape[0], torch.full_like(idx, -1), idx)
    ref_out, ref_state = update_ref64(t["x"], t["state"], t["weight"], t["bias"], c["silu"], t["cache"], idx)
    assert_close(_view(r["out"]), ref_out, dtype, "out")
    state = _view(r["state"]).permute(*r["state_perm"])
    assert_close(state, ref_state, dtype, "conv_state")
    buf, start, numel, _ = r["state"]
    raw = buf.view(torch.uint8)
    es = buf.element_size()
    assert bool((raw[: start * es] == 0x7F).all()) and bool((raw[(start + numel) * es :] == 0x7F).all()), (
        "conv_state: bytes around the state were overwritten"
    )


def _check_varlen(c, r):
    t = inputs_of(c["name"])
    check_guards("states", r["states"])
    got = _view(r["states"]).transpose(1, 2)
    assert torch.equal(got, varlen_states_ref(t["x"], t["cu"], c["state_len"]))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_emulated_conv1d(emulated, layout, case):
    r = emulated(layout)["results"][CASES.index(case)]
    assert r["error"] is None, f"entry point failed: {r['error']}"
    {"conv": _check_conv, "update": _check_update, "varlen": _check_varlen}[case["kind"]](case, r)


def test_mutation_is_caught(tmp_path):
    """The test fails on a kernel whose dx drops the last tap (the term of dpre at s + W - 1 - k with
    k = W - 1): a lost boundary term of the backward's transposed convolution."""
    old = "    for (int k = 0; k < W; ++k) {\n      const int64_t t = pos + (W - 1) - k;"
    new = "    for (int k = 0; k < W - 1; ++k) {\n      const int64_t t = pos + (W - 1) - k;"
    mutant = tmp_path / "csrc"
    mutant.mkdir()
    for f in os.listdir(hipcpu_build.CSRC):
        if f.endswith((".h", ".cuh", ".cu")):
            (mutant / f).write_text(open(os.path.join(hipcpu_build.CSRC, f)).read())
    text = (mutant / "conv1d_gpu.cuh").read_text()
    assert text.count(old) == 1, "csrc/conv1d_gpu.cuh no longer has the text to mutate"
    (mutant / "conv1d_gpu.cuh").write_text(text.replace(old, new))
    lib = _build("wave64", csrc=str(mutant), sources=["conv1d_fp32.cu"], tag="mutant-conv-dx")
    case = next(c for c in CASES if c["name"] == "w4_contiguous_all")
    r = run_emulated(lib, [case], str(tmp_path / "run"))["results"][0]
    assert r["error"] is None, r["error"]
    with pytest.raises(AssertionError, match="dx: .* elements off"):
        _check_conv(case, r)
