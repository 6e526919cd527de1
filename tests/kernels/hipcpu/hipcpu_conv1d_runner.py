"""Runs csrc's causal conv1d GPU entry points, built for the CPU by hipcpu_build.py, on the cases of a file
(TEST-ONLY; the conv counterpart of hipcpu_runner.py, whose guarded buffers it reuses).

    python hipcpu_conv1d_runner.py LIBRARY CASES.pt OUT.pt

A separate process for the reason hipcpu_runner.py gives (HIP-CPU's stream thread). Case kinds:
``conv`` (forward then backward: x in its memory layout, every output guarded; dweight / dbias are
accumulated by atomics, so they start at zero), ``update`` (conv_state updated in place inside a guarded
buffer in its memory layout) and ``varlen``. OUT.pt: {"warp_size": int, "results": [per case: {"error":
message or None, name: (flat buffer with guards, start element, element count, shape)}]}; a buffer of a
transposed layout comes back in memory order, with ``<name>_perm`` giving the permutation to (batch,
dim, seqlen).
"""

import ctypes
import sys

import torch
from hipcpu_runner import KIND, guarded, ptr


class Library:
    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        for name in ("mamba_hipcpu_conv_fwd", "mamba_hipcpu_conv_bwd", "mamba_hipcpu_conv_update"):
            fn = getattr(self.lib, name)
            fn.restype = ctypes.c_char_p
            fn.argtypes = [
                ctypes.c_int,
                ctypes.POINTER(ctypes.c_int64),
                ctypes.POINTER(ctypes.c_int32),
                ctypes.POINTER(ctypes.c_void_p),
            ]
        self.lib.mamba_hipcpu_conv_varlen.restype = ctypes.c_char_p
        self.lib.mamba_hipcpu_conv_varlen.argtypes = [
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_int64),
            ctypes.POINTER(ctypes.c_void_p),
        ]
        self.lib.mamba_hipcpu_warp_size.restype = ctypes.c_int

    def call(self, name, first, shape, flags, ptrs):
        fn = getattr(self.lib, name)
        args = [first, (ctypes.c_int64 * len(shape))(*shape)]
        if flags is not None:
            args.append((ctypes.c_int32 * len(flags))(*flags))
        args.append((ctypes.c_void_p * len(ptrs))(*[p.value for p in ptrs]))
        err = fn(*args)
        return None if err is None else err.decode()


def _physical(t, channel_last):
    """(memory-order tensor, strides of the (batch, dim, seqlen) view in elements)."""
    if channel_last:
        m = t.transpose(1, 2).contiguous()
        b, l, d = m.shape
        return m, (l * d, 1, d)
    m = t.contiguous()
    b, d, l = m.shape
    return m, (d * l, l, 1)


def run_conv(lib, case):
    t, cl, dtype = case["inputs"], case["channel_last"], case["dtype"]
    x = t["x"]
    batch, dim, seqlen = x.shape
    width = t["weight"].shape[1]
    res, bufs = {"error": None}, {}

    def place(v):
        return None if v is None else guarded(tuple(v.shape), v.dtype, 0, fill=v)[1]

    def output(name, shape, dt, zero=False):
        buf, view, start = guarded(shape, dt)
        if zero:
            view.zero_()
        bufs[name] = (buf, start, view.numel(), shape)
        return view

    xm, strides = _physical(x, cl)
    mem_shape = tuple(xm.shape)
    xg = place(xm)
    w, b = place(t["weight"].float().contiguous()), place(None if t["bias"] is None else t["bias"].float())
    sid = place(None if t["seq_idx"] is None else t["seq_idx"].to(torch.int32).contiguous())
    init = place(None if t["init"] is None else t["init"].float().contiguous())
    shape = (batch, dim, seqlen, width) + strides
    flags = (int(case["silu"]), int(cl))
    out = output("out", mem_shape, dtype)
    fin = output("final_states", (batch, dim, width - 1), dtype)
    fwd = [ptr(v) for v in (xg, out, w, b, sid, init, fin)]
    res["error"] = lib.call("mamba_hipcpu_conv_fwd", KIND[dtype], shape, flags, fwd)
    if res["error"] is None:
        dout = place(_physical(t["dout"].to(dtype), cl)[0])
        dfin = place(None if t["dfinal"] is None else t["dfinal"].float().contiguous())
        grads = [
            dout,
            dfin,
            output("dx", mem_shape, dtype),
            output("dweight", (dim, width), torch.float32, True),
            output("dbias", (dim,), torch.float32, True) if b is not None else None,
            output("dinitial_states", (batch, dim, width - 1), torch.float32) if init is not None else None,
            output("workspace", mem_shape, torch.float32),
        ]
        res["error"] = lib.call(
            "mamba_hipcpu_conv_bwd", KIND[dtype], shape, flags, fwd + [ptr(v) for v in grads]
        )
    res.update(bufs)
    res["perm"] = (0, 2, 1) if cl else (0, 1, 2)
    return res


def run_update(lib, case):
    t, dtype = case["inputs"], case["dtype"]
    x = t["x"].to(dtype).contiguous()
    batch, dim, seqlen = x.shape
    width = t["weight"].shape[1]
    state = t["state"].to(dtype)
    cl = case["state_channel_last"]
    sm, (s_sb, s_sd, s_sl) = _physical(state, cl)
    n_states, state_len = state.shape[0], state.shape[2]
    sbuf, sview, sstart = guarded(tuple(sm.shape), dtype, 0, fill=sm)
    xg = guarded(tuple(x.shape), dtype, 0, fill=x)[1]
    obuf, oview, ostart = guarded(tuple(x.shape), dtype)
    w = guarded(tuple(t["weight"].shape), torch.float32, 0, fill=t["weight"].float())[1]
    b = None if t["bias"] is None else guarded((dim,), torch.float32, 0, fill=t["bias"].float())[1]
    cache = (
        None if t["cache"] is None else guarded((batch,), torch.int32, 0, fill=t["cache"].to(torch.int32))[1]
    )
    idx = None if t["idx"] is None else guarded((batch,), torch.int32, 0, fill=t["idx"].to(torch.int32))[1]
    shape = (batch, dim, seqlen, width, state_len, n_states, dim * seqlen, seqlen, 1, s_sb, s_sd, s_sl)
    err = lib.call(
        "mamba_hipcpu_conv_update",
        KIND[dtype],
        shape,
        (int(case["silu"]),),
        [ptr(v) for v in (xg, oview, sview, w, b, cache, idx)],
    )
    return {
        "error": err,
        "out": (obuf, ostart, oview.numel(), tuple(x.shape)),
        "state": (sbuf, sstart, sview.numel(), tuple(sm.shape)),
        "state_perm": (0, 2, 1) if cl else (0, 1, 2),
    }


def run_varlen(lib, case):
    t = case["inputs"]
    x, cu, state_len = t["x"], t["cu"].to(torch.int32), case["state_len"]
    batch, dim = cu.numel() - 1, x.shape[1]
    xg = guarded(tuple(x.shape), x.dtype, 0, fill=x)[1]
    cug = guarded(tuple(cu.shape), torch.int32, 0, fill=cu)[1]
    buf, view, start = guarded((batch, state_len, dim), x.dtype)
    err = lib.call(
        "mamba_hipcpu_conv_varlen",
        x.element_size(),
        (batch, dim, state_len, x.shape[0], dim, 1),
        None,
        [ptr(xg), ptr(view), ptr(cug)],
    )
    return {"error": err, "states": (buf, start, view.numel(), (batch, state_len, dim))}


def main(argv):
    lib_path, cases_path, out_path = argv
    lib = Library(lib_path)
    cases = torch.load(cases_path, weights_only=False)
    run = {"conv": run_conv, "update": run_update, "varlen": run_varlen}
    results = [run[c["kind"]](lib, c) for c in cases]
    torch.save({"warp_size": lib.lib.mamba_hipcpu_warp_size(), "results": results}, out_path)


if __name__ == "__main__":
    main(sys.argv[1:])
