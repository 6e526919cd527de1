"""Runs csrc's complex-A GPU entry points, built for the CPU by hipcpu_build.py, on the cases of a file
(TEST-ONLY; the complex counterpart of hipcpu_runner.py, whose guarded buffers it uses).

    python hipcpu_complex_runner.py LIBRARY CASES.pt OUT.pt SCHEDULE [SCHEDULE...]

Every complex tensor goes to the kernels as interleaved (re, im) fp32 (csrc/scan_complex.h): A and
constant B/C (dim, d_state, 2); variable B/C real (batch, groups, d_state, 2 * seqlen) as given;
last_state, dlast_state, dA_part and constant dB/dC partials (..., d_state, 2). Outputs lie in guarded
buffers. OUT.pt: as hipcpu_runner.py's (its ``main`` runs the cases).
"""

import sys

import torch
from hipcpu_runner import Outputs, guarded, main, ptr


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
    output = Outputs()

    fwd_ptrs = [ptr(x) for x in (seq["u"], seq["delta"], A, bc["B"], bc["C"], D, seq["z"], bias)]
    errors = {}
    result = {"errors": errors}
    f32 = torch.float32
    if case["forward"]:
        out = output("out", (batch, dim, seqlen), dtype, mis)
        last = output("last_state", (batch, dim, dstate, 2), f32)
        errors["forward"] = lib.call(
            "mamba_hipcpu_scan_complex_fwd", dtype, shape, flags, fwd_ptrs + [ptr(out), ptr(last)]
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
        errors["backward"] = lib.call(
            "mamba_hipcpu_scan_complex_bwd",
            dtype,
            shape,
            flags,
            fwd_ptrs + [ptr(None), ptr(None)] + [ptr(x) for x in grads],
        )
    result.update(output.bufs)
    return result


if __name__ == "__main__":
    main(sys.argv[1:], run=run_case)
