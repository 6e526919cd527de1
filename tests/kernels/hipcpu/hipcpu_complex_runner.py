"""Runs csrc's complex-A GPU entry points, built for the CPU by hipcpu_build.py, on the cases of a file
(TEST-ONLY; the complex counterpart of hipcpu_runner.py, whose guarded buffers it uses).

    python hipcpu_complex_runner.py LIBRARY CASES.pt OUT.pt SCHEDULE [SCHEDULE...]

Every complex tensor goes to the kernels as interleaved (re, im) fp32 (csrc/scan_complex.h): A and
constant B/C (dim, d_state, 2); variable B/C real (batch, groups, d_state, 2 * seqlen) as given;
last_state, dlast_state, dA_part and constant dB/dC partials (..., d_state, 2). Outputs lie in guarded
buffers. OUT.pt: as hipcpu_runner.py's.
"""

import ctypes
import sys
import time

import torch
from hipcpu_runner import KIND, guarded, ptr


def _library(path):
    lib = ctypes.CDLL(path)
    for name in ("mamba_hipcpu_scan_complex_fwd", "mamba_hipcpu_scan_complex_bwd"):
        fn = getattr(lib, name)
        fn.restype = ctypes.c_char_p
        fn.argtypes = [
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_int64),
            ctypes.POINTER(ctypes.c_int32),
            ctypes.POINTER(ctypes.c_void_p),
        ]
    lib.mamba_hipcpu_set_schedule.argtypes = [ctypes.c_int]
    lib.mamba_hipcpu_warp_size.restype = ctypes.c_int
    return lib


def _call(lib, name, dtype, shape, flags, ptrs):
    err = getattr(lib, name)(
        KIND[dtype],
        (ctypes.c_int64 * 5)(*shape),
        (ctypes.c_int32 * 4)(*flags),
        (ctypes.c_void_p * len(ptrs))(*[p.value for p in ptrs]),
    )
    return None if err is None else err.decode()


def _pairs(x):
    """A complex tensor as contiguous (..., 2) fp32; a real one unchanged."""
    return torch.view_as_real(x.to(torch.complex64)).contiguous() if x is not None and x.is_complex() else x


def run_case(lib, case):
    # The kernel forms: a complex B/C is constant, a real one variable ((batch, d_state, 2L): one group).
    b_var, c_var = (not case["inputs"][k].is_complex() for k in ("B", "C"))
    t = {k: _pairs(v) for k, v in case["inputs"].items()}
    for k, var in (("B", b_var), ("C", c_var)):
        if var and t[k].dim() == 3:
            t[k] = t[k].unsqueeze(1)
    dtype, mis = case["dtype"], case["misalign"]
    batch, dim, seqlen = t["u"].shape
    dstate = t["A"].shape[1]
    groups = (t["B"] if b_var else t["C"]).shape[1] if (b_var or c_var) else 1
    var_t = t["B"] if b_var else t["C"]
    bc_fp32 = not (b_var or c_var) or var_t.dtype == torch.float32
    shape = (batch, dim, seqlen, dstate, groups)
    flags = (int(b_var), int(c_var), int(bc_fp32), int(case["softplus"]))

    def place(x, misalign):
        return None if x is None else guarded(tuple(x.shape), x.dtype, misalign, fill=x)[1]

    seq = {k: place(t.get(k), mis) for k in ("u", "delta", "z", "dout")}
    bc = {k: place(t[k], mis if var else 0) for k, var in (("B", b_var), ("C", c_var))}
    A, D, bias = place(t["A"], 0), place(t.get("D"), 0), place(t.get("delta_bias"), 0)
    dlast = place(t.get("dlast_state"), 0)
    out_bufs = {}

    def output(name, shape_, dtype_, misalign=0, zero=False):
        buf, view, start = guarded(shape_, dtype_, misalign)
        if zero:
            view.zero_()
        out_bufs[name] = (buf, start, view.numel(), shape_)
        return view

    fwd_ptrs = [ptr(x) for x in (seq["u"], seq["delta"], A, bc["B"], bc["C"], D, seq["z"], bias)]
    errors = {}
    result = {"errors": errors}
    f32 = torch.float32
    if case["forward"]:
        out = output("out", (batch, dim, seqlen), dtype, mis)
        last = output("last_state", (batch, dim, dstate, 2), f32)
        errors["forward"] = _call(
            lib, "mamba_hipcpu_scan_complex_fwd", dtype, shape, flags, fwd_ptrs + [ptr(out), ptr(last)]
        )
    if case["backward"]:
        n_chunks = (seqlen + 1023) // 1024
        grads = [
            seq["dout"],
            dlast,
            output("du", (batch, dim, seqlen), dtype, mis),
            output("ddelta", (batch, dim, seqlen), dtype, mis),
            output("dz", (batch, dim, seqlen), dtype, mis) if seq["z"] is not None else None,
            output("dA_part", (batch, dim, dstate, 2), f32),
            output("dD_part", (batch, dim), f32),
            output("ddelta_bias_part", (batch, dim), f32),
            output(
                "dB",
                (batch, groups, dstate, 2 * seqlen) if b_var else (batch, dim, dstate, 2),
                f32,
                zero=b_var,
            ),
            output(
                "dC",
                (batch, groups, dstate, 2 * seqlen) if c_var else (batch, dim, dstate, 2),
                f32,
                zero=c_var,
            ),
            output("workspace", (max(1, 2 * batch * dim * n_chunks * dstate),), f32),
        ]
        errors["backward"] = _call(
            lib,
            "mamba_hipcpu_scan_complex_bwd",
            dtype,
            shape,
            flags,
            fwd_ptrs + [ptr(None), ptr(None)] + [ptr(x) for x in grads],
        )
    result.update(out_bufs)
    return result


def main(argv):
    lib_path, cases_path, out_path, *schedules = argv
    from hipcpu_build import SCHEDULES

    lib = _library(lib_path)
    cases = torch.load(cases_path, weights_only=False)
    results, seconds = {}, {}
    for sched in schedules:
        lib.mamba_hipcpu_set_schedule(SCHEDULES[sched])
        start = time.perf_counter()
        results[sched] = [run_case(lib, c) for c in cases]
        seconds[sched] = time.perf_counter() - start
    torch.save({"warp_size": lib.mamba_hipcpu_warp_size(), "results": results, "seconds": seconds}, out_path)


if __name__ == "__main__":
    main(sys.argv[1:])
