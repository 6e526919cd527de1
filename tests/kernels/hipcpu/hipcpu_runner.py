"""Runs csrc's GPU entry points, built for the CPU by hipcpu_build.py, on the cases of a file (TEST-ONLY).

    python hipcpu_runner.py LIBRARY CASES.pt OUT.pt SCHEDULE [SCHEDULE...]

A separate process because HIP-CPU keeps a stream-processing thread polling for work for as long as the
process lives; the test process must not carry it. For every schedule (hipcpu_build.SCHEDULES) and case it
calls the forward and the backward entry points (harness.cpp) with every output in a guarded buffer:
GUARD_BYTES of SENTINEL on each side, and the output itself filled with SENTINEL first, so the test sees
both overruns and elements left unwritten. With ``misalign`` the inputs and outputs start one element
past a 16-byte boundary (the kernels' scalar load/store path); else they are 16-byte aligned.

OUT.pt: {"warp_size": int, "results": {schedule: [per case: {"errors": {"forward": message or None,
"backward": ...}, buffers}]}} where each buffer is (flat tensor with its guards, start element, element
count, shape).
"""

import ctypes
import sys
import time

import torch

GUARD_BYTES = 64
SENTINEL = 0x7F
KIND = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}


def guarded(shape, dtype, misalign=0, fill=None):
    """(flat buffer, view): the view has `shape`, starts GUARD_BYTES (+ misalign elements) into the
    buffer, which is SENTINEL bytes everywhere, or `fill` inside the view."""
    numel = 1
    for s in shape:
        numel *= s
    g = GUARD_BYTES // torch.empty(0, dtype=dtype).element_size()
    buf = torch.empty(numel + 2 * g + misalign, dtype=dtype)
    buf.view(torch.uint8).fill_(SENTINEL)
    start = g + misalign
    view = buf[start : start + numel].view(shape)
    if fill is not None:
        view.copy_(fill)
    return buf, view, start


def ptr(t):
    return ctypes.c_void_p(0 if t is None else t.data_ptr())


# harness.cpp's scan entry points: (kind, shape[5], flags[4], ptrs) -> error message or null.
SCAN_ENTRY_POINTS = (
    "mamba_hipcpu_scan_fwd",
    "mamba_hipcpu_scan_bwd",
    "mamba_hipcpu_scan_complex_fwd",
    "mamba_hipcpu_scan_complex_bwd",
)


class Outputs:
    """Guarded output buffers of one case: ``outputs(name, shape, dtype, misalign=0, zero=False)`` returns
    the view to hand to the kernel; ``outputs.bufs[name]`` = (buffer, start, numel, shape)."""

    def __init__(self):
        self.bufs = {}

    def __call__(self, name, shape, dtype, misalign=0, zero=False):
        buf, view, start = guarded(shape, dtype, misalign)
        if zero:
            view.zero_()
        self.bufs[name] = (buf, start, view.numel(), shape)
        return view


class Library:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        for name in SCAN_ENTRY_POINTS:
            fn = getattr(self.lib, name)
            fn.restype = ctypes.c_char_p
            fn.argtypes = [
                ctypes.c_int,
                ctypes.POINTER(ctypes.c_int64),
                ctypes.POINTER(ctypes.c_int32),
                ctypes.POINTER(ctypes.c_void_p),
            ]
        self.lib.mamba_hipcpu_set_schedule.argtypes = [ctypes.c_int]
        self.lib.mamba_hipcpu_warp_size.restype = ctypes.c_int

    def call(self, name, dtype, shape, flags, ptrs):
        fn = getattr(self.lib, name)
        err = fn(
            KIND[dtype],
            (ctypes.c_int64 * 5)(*shape),
            (ctypes.c_int32 * 4)(*flags),
            (ctypes.c_void_p * len(ptrs))(*[p.value for p in ptrs]),
        )
        return None if err is None else err.decode()


def run_case(lib, case):
    """Forward and/or backward (case["forward"], case["backward"]; the backward needs nothing from the
    forward) of one case; returns {"errors": {part: message or None}, name: (buf, start, numel, shape)}."""
    t = case["inputs"]
    dtype, mis = case["dtype"], case["misalign"]
    u = t["u"]
    batch, dim, seqlen = u.shape
    dstate = t["A"].shape[1]
    b_var, c_var = t["B"].dim() > 2, t["C"].dim() > 2
    var = t["B"] if b_var else t["C"]
    groups = var.shape[1] if var.dim() == 4 else 1
    bc_fp32 = not (b_var or c_var) or var.dtype == torch.float32
    shape = (batch, dim, seqlen, dstate, groups)
    flags = (int(b_var), int(c_var), int(bc_fp32), int(case["softplus"]))

    def place(x, misalign):  # an input at the case's alignment
        return None if x is None else guarded(tuple(x.shape), x.dtype, misalign, fill=x)[1]

    seq = {k: place(t.get(k), mis) for k in ("u", "delta", "z", "dout")}
    bc = {k: place(t[k], mis if t[k].dim() > 2 else 0) for k in ("B", "C")}
    A, D, bias = place(t["A"], 0), place(t.get("D"), 0), place(t.get("delta_bias"), 0)
    dlast = place(t.get("dlast_state"), 0)
    output = Outputs()
    fwd_ptrs = [ptr(x) for x in (seq["u"], seq["delta"], A, bc["B"], bc["C"], D, seq["z"], bias)]
    errors = {}
    result = {"errors": errors}
    if case["forward"]:
        out = output("out", (batch, dim, seqlen), dtype, mis)
        last = output("last_state", (batch, dim, dstate), torch.float32) if case["last_state"] else None
        errors["forward"] = lib.call(
            "mamba_hipcpu_scan_fwd", dtype, shape, flags, fwd_ptrs + [ptr(out), ptr(last)]
        )
    if not case["backward"]:
        result.update(output.bufs)
        return result
    f32 = torch.float32
    grads = [
        seq["dout"],
        dlast,
        output("du", (batch, dim, seqlen), dtype, mis),
        output("ddelta", (batch, dim, seqlen), dtype, mis),
        output("dz", (batch, dim, seqlen), dtype, mis) if seq["z"] is not None else None,
        output("dA_part", (batch, dim, dstate), f32),
        output("dD_part", (batch, dim), f32),
        output("ddelta_bias_part", (batch, dim), f32),
        output("dB", (batch, groups, dstate, seqlen) if b_var else (batch, dim, dstate), f32, zero=b_var),
        output("dC", (batch, groups, dstate, seqlen) if c_var else (batch, dim, dstate), f32, zero=c_var),
        output("workspace", (max(1, batch * dim * ((seqlen + 1023) // 1024) * dstate),), f32),
    ]
    bwd_ptrs = fwd_ptrs + [ptr(None), ptr(None)] + [ptr(x) for x in grads]
    errors["backward"] = lib.call("mamba_hipcpu_scan_bwd", dtype, shape, flags, bwd_ptrs)
    result.update(output.bufs)
    return result


def main(argv, run=run_case):
    """Runs ``run(lib, case)`` on every case under every schedule; writes OUT.pt."""
    lib_path, cases_path, out_path, *schedules = argv
    from hipcpu_build import SCHEDULES

    lib = Library(lib_path)
    cases = torch.load(cases_path, weights_only=False)
    results, seconds = {}, {}
    for sched in schedules:
        lib.lib.mamba_hipcpu_set_schedule(SCHEDULES[sched])
        start = time.perf_counter()
        results[sched] = [run(lib, c) for c in cases]
        seconds[sched] = time.perf_counter() - start
    torch.save(
        {"warp_size": lib.lib.mamba_hipcpu_warp_size(), "results": results, "seconds": seconds}, out_path
    )


if __name__ == "__main__":
    main(sys.argv[1:])
