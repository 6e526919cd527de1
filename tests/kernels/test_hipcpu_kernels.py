"""csrc's CUDA/HIP selective-scan kernels executed on the CPU through HIP-CPU, against the float64
sequential reference (tests/oracles.py).

HIP-CPU (ROCm's header-only HIP runtime for the CPU: a block's threads run as fibers) compiles the csrc
translation units unchanged with g++ (tests/kernels/hipcpu/hipcpu_build.py); the test-only shims it needs
are in tests/kernels/hipcpu/. Every GPU entry point (forward and backward, fp32/fp16/bf16) is built once
per layout, wave64 and wave32 (the NVIDIA / AMD RDNA block shape), and run on every case below under
three resume orders of a block's threads after a barrier (HIP-CPU's own, reversed, a per-barrier
permutation; a patched scratch copy of HIP-CPU's scheduler). Each case checks the forward output,
last_state and every gradient, and the guard bytes around every output (no overrun, nothing left
unwritten). test_mutation_* show that the test catches a deleted barrier and a lost chunk carry.

HIP-CPU is looked for at HIP_CPU_ROOT or ../shared/third_party/hip-cpu beside the repository; it needs
TBB (apt-get install -y libtbb-dev). Where either is missing the tests skip with the reason, except under
CI=true, where they fail (CI must run them). A failing build always fails.
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
from cases import assert_close, make_inputs  # noqa: E402
from hipcpu_runner import GUARD_BYTES, SENTINEL  # noqa: E402
from oracles import selective_scan as selective_scan_ref64  # noqa: E402

RUNNER = os.path.join(HERE, "hipcpu", "hipcpu_runner.py")
LAYOUTS = list(hipcpu_build.LAYOUTS)
SCHEDULES = list(hipcpu_build.SCHEDULES)
DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
CHUNK = 1024  # csrc/scan_gpu.h kGpuChunk: timesteps a block scans at once


def _case(
    name,
    dtype="fp32",
    batch=1,
    dim=2,
    seqlen=64,
    dstate=8,
    bc="grouped2",
    bc_fp32=False,
    D=True,
    z=True,
    bias=True,
    softplus=True,
    last_state=True,
    dlast=True,
    misalign=0,
    refused=None,
    a_scale=1.0,
):
    return dict(
        name=name,
        dtype=dtype,
        batch=batch,
        dim=dim,
        seqlen=seqlen,
        dstate=dstate,
        bc=bc,
        bc_fp32=bc_fp32,
        D=D,
        z=z,
        bias=bias,
        softplus=softplus,
        last_state=last_state,
        dlast=dlast,
        misalign=misalign,
        refused=refused,
        a_scale=a_scale,
    )


def _cases():
    out = []
    # Both sides of the 1024-step chunk edge, every dtype.
    for dt in DTYPES:
        for L in (CHUNK - 1, CHUNK + 1):
            out.append(_case(f"chunk_edge_L{L}_{dt}", dt, seqlen=L))
    # 16-byte vector path (aligned base, seqlen a multiple of 8) and the scalar path (one element off).
    for dt in DTYPES:
        out.append(_case(f"aligned_L{CHUNK}_{dt}", dt, seqlen=CHUNK, bc="variable"))
        out.append(_case(f"scalar_L{CHUNK}_{dt}", dt, seqlen=CHUNK, bc="variable", misalign=1))
        out.append(_case(f"aligned_L{2 * CHUNK}_{dt}", dt, seqlen=2 * CHUNK, dstate=4))
    out.append(_case("scalar_L3000_grouped2", seqlen=3000, dstate=4, misalign=1))
    # d_state below, at and above the 128-thread block, up to 256 (one chunk: the reference's cost grows
    # with seqlen^2 * d_state); 1 across chunks (the carry of a single state crosses the chunk through
    # one shared-memory slot).
    for N in (1, 127, 128, 129, 256):
        out.append(_case(f"dstate{N}", dim=1, seqlen=130, dstate=N, bc="variable"))
    out.append(_case("dstate1_L2100", seqlen=2100, dstate=1, bc="variable"))
    # Slow decay (A / 100): the state carried into a chunk reaches every step of it.
    out.append(_case("dstate1_L2100_slow_decay", seqlen=2100, dstate=1, bc="variable", a_scale=0.01))
    out.append(_case("dstate4_L1100_slow_decay", seqlen=1100, dstate=4, a_scale=0.01))
    out.append(_case("dstate257_refused", seqlen=16, dstate=257, refused="d_state > 256"))
    # Constant and variable B/C, one and more groups, mixed, and variable B/C stored fp32 under fp16.
    for bc in ("constant", "variable", "grouped2", "grouped4", "B_variable", "C_variable"):
        out.append(_case(f"bc_{bc}", seqlen=200, dim=4, bc=bc))
    out.append(_case("bc_grouped2_fp32_storage_fp16", "fp16", seqlen=200, bc_fp32=True))
    # Every optional input off, then each on alone; last_state and its gradient off.
    off = dict(D=False, z=False, bias=False, softplus=False)
    out.append(_case("options_none", seqlen=77, **off))
    for opt in ("D", "z", "bias", "softplus"):
        out.append(_case(f"option_{opt}_only", seqlen=77, **dict(off, **{opt: True})))
    out.append(_case("no_last_state", seqlen=77, last_state=False))
    out.append(_case("no_dlast_state", seqlen=77, dlast=False))
    out.append(_case("no_last_state_no_dlast_fp16", "fp16", seqlen=77, last_state=False, dlast=False))
    # Tiny and multi-batch.
    out.append(_case("seqlen1", seqlen=1, bc="variable"))
    out.append(_case("seqlen7_batch2", batch=2, seqlen=7))
    out.append(_case("batch3_dim3_L300_fp16", "fp16", batch=3, dim=3, seqlen=300, bc="variable"))
    return out


CASES = _cases()


@functools.cache
def inputs_of(name):
    """The case's tensors (deterministic: seeded by the case's position)."""
    c = next(x for x in CASES if x["name"] == name)
    dtype = DTYPES[c["dtype"]]
    seed = CASES.index(c)
    kind = {"B_variable": "variable", "C_variable": "variable"}.get(c["bc"], c["bc"])
    u, delta, A, B, C, D, z, bias = make_inputs(
        c["batch"], c["dim"], c["seqlen"], c["dstate"], kind, c["D"], c["z"], c["bias"], dtype, seed=seed
    )
    if c["bc"] in ("B_variable", "C_variable"):
        const = make_inputs(
            c["batch"],
            c["dim"],
            c["seqlen"],
            c["dstate"],
            "constant",
            False,
            False,
            False,
            dtype,
            seed=seed + 1000,
        )
        if c["bc"] == "B_variable":
            C = const[4]
        else:
            B = const[3]
    A = A * c["a_scale"]
    if c["bc_fp32"]:
        B, C = B.float(), C.float()
    g = torch.Generator().manual_seed(seed + 2000)
    dout = torch.randn(u.shape, generator=g).to(dtype)
    dlast = torch.randn(c["batch"], c["dim"], c["dstate"], generator=g) if c["dlast"] else None
    return dict(u=u, delta=delta, A=A, B=B, C=C, D=D, z=z, delta_bias=bias, dout=dout, dlast_state=dlast)


@functools.cache
def reference_of(name):
    """float64 forward (out, last_state) and gradients through autograd of the sequential reference."""
    c = next(x for x in CASES if x["name"] == name)
    t = inputs_of(name)
    names = ("u", "delta", "A", "B", "C", "D", "z", "delta_bias")
    leaves = {k: None if t[k] is None else t[k].double().requires_grad_(True) for k in names}
    out, last = selective_scan_ref64(*[leaves[k] for k in names], delta_softplus=c["softplus"])
    loss = (out * t["dout"].double()).sum()
    if t["dlast_state"] is not None:
        loss = loss + (last * t["dlast_state"].double()).sum()
    loss.backward()
    grads = {k: v.grad for k, v in leaves.items() if v is not None}
    return out.detach(), last.detach(), grads


def _unavailable(why):
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"the HIP-CPU emulation must run in CI: {why}")
    pytest.skip(why)


def _build(layout, **kw):
    try:
        return hipcpu_build.build(layout, **kw)
    except hipcpu_build.Unavailable as e:
        _unavailable(str(e))


def run_emulated(lib, cases, schedules, tmp_dir, parts=("forward", "backward"), runner=RUNNER, inputs=None):
    """Runs `cases` under `schedules` in a subprocess (`runner`: hipcpu_runner.py, or another runner of
    the same command line and OUT.pt, given its cases' `inputs` function); returns its result dict."""
    os.makedirs(tmp_dir, exist_ok=True)
    cases_path, out_path = os.path.join(tmp_dir, "cases.pt"), os.path.join(tmp_dir, "out.pt")
    payload = []
    for c in cases:
        t = (inputs or inputs_of)(c["name"])
        payload.append(
            dict(
                inputs={k: v for k, v in t.items() if v is not None},
                dtype=DTYPES[c["dtype"]],
                misalign=c["misalign"],
                softplus=c["softplus"],
                last_state=c["last_state"],
                forward="forward" in parts,
                backward="backward" in parts,
            )
        )
    torch.save(payload, cases_path)
    proc = subprocess.run(
        [sys.executable, runner, lib, cases_path, out_path] + list(schedules),
        capture_output=True,
        text=True,
        timeout=600,
    )
    how = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exit status {proc.returncode}"
    assert proc.returncode == 0, f"{os.path.basename(runner)} failed ({how}):\n{proc.stderr[-4000:]}"
    return torch.load(out_path, weights_only=False)


_RESULTS = {}


def emulation(store, cases, tmp_path_factory, label, **run_kw):
    """results(layout) -> the runner's results for every case and schedule, built and run once per
    layout and kept in `store` (run_kw: run_emulated's runner / inputs)."""

    def results(layout):
        if layout not in store:
            store[layout] = "the build or run failed in an earlier test of this layout (see it)"
            try:
                lib = _build(layout)
            except pytest.skip.Exception:
                del store[layout]
                raise
            res = run_emulated(lib, cases, SCHEDULES, str(tmp_path_factory.mktemp(label + layout)), **run_kw)
            assert res["warp_size"] == hipcpu_build.LAYOUTS[layout], "layout not applied"
            store[layout] = res
        if isinstance(store[layout], str):
            pytest.fail(store[layout])
        return store[layout]

    return results


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    """results(layout) -> the runner's results for every case and schedule (built and run once)."""
    return emulation(_RESULTS, CASES, tmp_path_factory, "")


def _view(entry):
    buf, start, numel, shape = entry
    return buf[start : start + numel].view(shape)


def check_guards(name, entry):
    """Nothing written before or after the output, and no element of it left at its fill bytes."""
    buf, start, numel, _ = entry
    raw = buf.view(torch.uint8)
    es = buf.element_size()
    before, after = raw[: start * es], raw[(start + numel) * es :]
    assert before.numel() >= GUARD_BYTES and after.numel() >= GUARD_BYTES
    assert bool((before == SENTINEL).all()), f"{name}: bytes before the output were overwritten"
    assert bool((after == SENTINEL).all()), f"{name}: bytes after the output were overwritten (overrun)"
    inner = raw[start * es : (start + numel) * es].view(numel, es)
    untouched = (inner == SENTINEL).all(dim=1)
    assert not bool(untouched.any()), (
        f"{name}: {int(untouched.sum())} of {numel} elements never written (first at flat index "
        f"{int(untouched.nonzero()[0])})"
    )


def check_case(case, result, parts=("forward", "backward")):
    """Asserts the runner's result of one case (its forward and/or backward) against the float64
    reference."""
    errors = result["errors"]
    assert sorted(errors) == sorted(parts), errors
    if case["refused"]:  # every entry point refuses, with the reason
        for part, err in errors.items():
            assert err is not None and case["refused"] in err, f"{part}: {err}"
        return
    for part, err in errors.items():
        assert err is None, f"{part} entry point failed: {err}"
    for name, entry in result.items():
        if name != "errors":
            check_guards(name, entry)
    dtype = DTYPES[case["dtype"]]
    t = inputs_of(case["name"])
    ref_out, ref_last, ref_grads = reference_of(case["name"])
    if "forward" in parts:
        assert_close(_view(result["out"]), ref_out, dtype, "out")
        if case["last_state"]:
            assert_close(_view(result["last_state"]), ref_last, dtype, "last_state")
        else:
            assert "last_state" not in result
    if "backward" not in parts:
        return
    assert_close(_view(result["du"]), ref_grads["u"], dtype, "du")
    assert_close(_view(result["ddelta"]), ref_grads["delta"], dtype, "ddelta")
    if t["z"] is not None:
        assert_close(_view(result["dz"]), ref_grads["z"], dtype, "dz")
    assert_close(_view(result["dA_part"]).sum(0), ref_grads["A"], dtype, "dA")
    for x in ("B", "C"):
        g = _view(result[f"d{x}"])
        g = g.view(t[x].shape) if t[x].dim() > 2 else g.sum(0)
        assert_close(g, ref_grads[x], dtype, f"d{x}")
    if t["D"] is not None:
        assert_close(_view(result["dD_part"]).sum(0), ref_grads["D"], dtype, "dD")
    if t["delta_bias"] is not None:
        assert_close(_view(result["ddelta_bias_part"]).sum(0), ref_grads["delta_bias"], dtype, "ddelta_bias")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_emulated(emulated, layout, schedule, case):
    res = emulated(layout)
    check_case(case, res["results"][schedule][CASES.index(case)])


# --- mutation runs: a kernel with a needed barrier deleted / a chunk carry lost must fail -----------

MUTATIONS = {
    # The barrier at the end of each forward chunk: thread 0 stores the chunk's final state of n in
    # shared memory after the last barrier the other threads pass for n; with d_state == 1 nothing else
    # orders that store before the next chunk reads it back.
    "fwd_chunk_barrier": (
        "scan_fwd.cuh",
        "scan_fwd_fp32.cu",
        """    store_items<T>(out, t0, L, y);
    // Thread 0 wrote carry_s[n] after the last barrier that other threads pass for state n in this
    // chunk; with d_state == 1 no other barrier follows before the next chunk reads it back.
    __syncthreads();
""",
        """    store_items<T>(out, t0, L, y);
""",
    ),
    # The reverse-scan carry of the backward pass: the adjoint state entering a chunk from the next.
    "bwd_chunk_carry": (
        "scan_bwd.cuh",
        "scan_bwd_fp32.cu",
        """      float s = block_scan<true>(ragg_a, ragg_b, carry, scan_buf[buf], total);
      buf ^= 1;
      if (threadIdx.x == 0) carry_s[n] = total;
""",
        """      float s = block_scan<true>(ragg_a, ragg_b, carry, scan_buf[buf], total);
      buf ^= 1;
""",
    ),
}


def mutant_library(tmp_path, header, tu, old, new, tag):
    """A wave64 library of translation unit `tu` alone, built from a copy of csrc whose `header` has
    `old` (present once) replaced by `new` (the harness's other entry points are weak)."""
    mutant = tmp_path / "csrc"
    mutant.mkdir()
    for f in os.listdir(hipcpu_build.CSRC):
        if f.endswith((".h", ".cuh", ".cu")):
            (mutant / f).write_text(open(os.path.join(hipcpu_build.CSRC, f)).read())
    text = (mutant / header).read_text()
    assert text.count(old) == 1, f"mutation {tag}: csrc/{header} no longer has the text to mutate"
    (mutant / header).write_text(text.replace(old, new))
    return _build("wave64", csrc=str(mutant), sources=[tu], tag=tag)


def _mutant_library(name, tmp_path):
    header, tu, old, new = MUTATIONS[name]
    return mutant_library(tmp_path, header, tu, old, new, f"mutant-{name}")


@pytest.mark.parametrize(
    "name,case_name,part,fails_under",
    [
        ("fwd_chunk_barrier", "dstate1_L2100_slow_decay", "forward", ("reversed", "shuffled")),
        ("bwd_chunk_carry", "dstate1_L2100_slow_decay", "backward", ("fixed", "reversed", "shuffled")),
    ],
)
def test_mutation_is_caught(tmp_path, name, case_name, part, fails_under):
    """The emulated test fails on a kernel with the mutation. The deleted barrier is invisible under
    HIP-CPU's own resume order (thread 0, the writer, always resumes first), which is why the test
    varies it; the lost carry fails under every order."""
    lib = _mutant_library(name, tmp_path)
    case = next(c for c in CASES if c["name"] == case_name)
    res = run_emulated(lib, [case], SCHEDULES, str(tmp_path / "run"), parts=(part,))["results"]
    for sched in SCHEDULES:
        assert res[sched][0]["errors"] == {part: None}, res[sched][0]["errors"]
        if sched in fails_under:
            with pytest.raises(AssertionError, match="elements off"):
                check_case(case, res[sched][0], parts=(part,))
        else:
            check_case(case, res[sched][0], parts=(part,))
