"""Compile every Triton kernel for real GPU targets without a GPU (Triton's ahead-of-time path: its
bundled ptxas for NVIDIA, its LLVM backend for AMD), with the launch configurations the wrappers choose.

The wrappers (mamba_ssm._families.triton_kernels) are run on ``meta`` tensors at Mamba-2 sizes (SSD:
headdim 64, dstate 128, chunk 256, bf16 and fp32, forward and backward, seq_idx, cu_seqlens; the decode
step; the norms) and Mamba-3 sizes (24 heads x headdim 64, d_state 128: SISO chunk 64 in bf16 with
seq_idx and in fp32, MIMO rank 4 chunk 16 with the fused norm in bf16, forward and backward with input
and final states; the decode step SISO and MIMO) with the kernel launch intercepted: each launch's
argument types, constexprs, warp and stage counts are recorded, then compiled with
``triton.compile(ASTSource(...), target=GPUTarget(...))``.
This catches what the interpreter cannot (type and layout errors of the GPU compiler, shared memory
over the limit) and prints registers, stack frame (cuobjdump) and spill stores (ptxas -v) per kernel.

    python tests/ops/triton/compile_check.py [--targets cuda:90,cuda:80,hip:gfx942] [--only mamba3]

Exit status 0 when every kernel compiled for every target. Must run without TRITON_INTERPRET
(tests/ops/triton/test_triton_compile.py starts it in a subprocess).
"""

import argparse
import inspect
import os
import re
import subprocess
import sys
import tempfile

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from triton.runtime.jit import JITFunction

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, REPO)

_PTR = {
    torch.float32: "*fp32",
    torch.float16: "*fp16",
    torch.bfloat16: "*bf16",
    torch.int32: "*i32",
    torch.int64: "*i64",
    torch.bool: "*i1",
}


def capture_launches(work):
    """Run ``work()`` with every JITFunction launch recorded instead of run: [(fn, signature, constexprs,
    options {num_warps, num_stages})], one per distinct configuration."""
    seen = {}
    real_run = JITFunction.run

    def fake_run(self, *args, grid, warmup, **kwargs):
        num_warps = kwargs.pop("num_warps", 4)
        options = {"num_warps": num_warps}
        if "num_stages" in kwargs:
            options["num_stages"] = kwargs.pop("num_stages")
        bound = dict(zip(self.arg_names, args))
        bound.update(kwargs)
        sig, consts = {}, {}
        for p in self.params:
            v = bound[p.name]
            if p.is_constexpr:
                sig[p.name] = "constexpr"
                consts[p.name] = v
            elif isinstance(v, torch.Tensor):
                sig[p.name] = _PTR[v.dtype]
            elif isinstance(v, bool):
                sig[p.name] = "i1"
            elif isinstance(v, int):
                sig[p.name] = "i32" if -(2**31) <= v < 2**31 else "i64"
            elif isinstance(v, float):
                sig[p.name] = "fp32"
            else:
                raise TypeError(f"{self.__name__}: argument {p.name} of type {type(v).__name__}")
        key = (self.__name__, tuple(sorted(sig.items())), repr(sorted(consts.items())), repr(options))
        seen.setdefault(key, (self, sig, consts, options))

    JITFunction.run = fake_run
    try:
        work()
    finally:
        JITFunction.run = real_run
    return list(seen.values())


def workloads():
    from mamba_ssm._families.mamba3 import triton_kernels as mamba3
    from mamba_ssm._families.norms import triton_kernels as norms
    from mamba_ssm._families.selective_scan import state_update_triton as state_update
    from mamba_ssm._families.ssd import triton_kernels as ssd

    meta = dict(device="meta")

    def ssd_case(dtype, with_seq):
        b, l, h, p, g, n = 2, 1024, 8, 64, 1, 128
        x = torch.empty(b, l, h, p, dtype=dtype, **meta, requires_grad=True)
        dt = torch.empty(b, l, h, dtype=dtype, **meta, requires_grad=True)
        A = torch.empty(h, **meta, requires_grad=True)
        B = torch.empty(b, l, g, n, dtype=dtype, **meta, requires_grad=True)
        C = torch.empty(b, l, g, n, dtype=dtype, **meta, requires_grad=True)
        D = torch.empty(h, p, **meta, requires_grad=True)
        z = torch.empty(b, l, h, p, dtype=dtype, **meta, requires_grad=True)
        bias = torch.empty(h, **meta, requires_grad=True)
        h0 = torch.empty(b, h, p, n, **meta, requires_grad=True)
        seq = torch.zeros(b, l, dtype=torch.int32, **meta) if with_seq else None
        y, final = ssd.chunk_scan_combined(
            x,
            dt,
            A,
            B,
            C,
            256,
            D=D,
            z=z,
            dt_bias=bias,
            initial_states=h0,
            seq_idx=seq,
            dt_softplus=True,
            dt_limit=(0.0, 0.1),
        )
        torch.autograd.grad((y.float().sum() + final.sum()), [x, dt, A, B, C, D, z, bias, h0])

    def varlen_case():
        x = torch.empty(1, 512, 8, 64, dtype=torch.bfloat16, **meta)
        dt = torch.empty(1, 512, 8, dtype=torch.bfloat16, **meta)
        B = torch.empty(1, 512, 1, 128, dtype=torch.bfloat16, **meta)
        ssd.chunk_scan_combined(
            x,
            dt,
            torch.empty(8, **meta),
            B,
            B,
            256,
            cu_seqlens=torch.zeros(4, dtype=torch.int64, **meta),
            seq_idx=torch.zeros(1, 512, dtype=torch.int64, **meta),
        )

    def state_update_case():
        b, h, p, n = 16, 80, 64, 128
        st = torch.empty(b, h, p, n, dtype=torch.bfloat16, **meta)
        x = torch.empty(b, h, p, dtype=torch.bfloat16, **meta)
        A = torch.empty(h, p, n, **meta)
        Bm = torch.empty(b, 1, n, dtype=torch.bfloat16, **meta)
        state_update.selective_state_update(
            st,
            x,
            x,
            A,
            Bm,
            Bm,
            torch.empty(h, p, **meta),
            x,
            torch.empty(h, p, **meta),
            True,
            torch.zeros(b, dtype=torch.int64, **meta),
        )

    def norm_case(is_rms):
        x = torch.empty(64, 4096, dtype=torch.bfloat16, **meta, requires_grad=True)
        r = torch.empty(64, 4096, **meta, requires_grad=True)
        w = torch.empty(4096, dtype=torch.bfloat16, **meta, requires_grad=True)
        y, res = norms.layer_norm(
            x, w, None if is_rms else w, r, 1e-5, prenorm=True, residual_in_fp32=True, is_rms_norm=is_rms
        )
        torch.autograd.grad(y.float().sum() + res.sum(), [x, r, w])

    def gated_case(nbg):
        x = torch.empty(64, 5120, dtype=torch.bfloat16, **meta, requires_grad=True)
        w = torch.empty(5120, dtype=torch.bfloat16, **meta, requires_grad=True)
        y = norms.gated_norm(x, w, None, x, 1e-5, 640, nbg, True)
        torch.autograd.grad(y.float().sum(), [x, w])

    def mamba3_case(dtype, rank, backward, with_seq):
        """Mamba-3 at a 130M-like layer: 24 heads x headdim 64, d_state 128, 1 group, rope 0.5; SISO
        (chunk 64) or MIMO rank 4 (chunk 16, the fused head-wise norm), input states, z, D."""
        from mamba_ssm._families.mamba3.torch_impl import Mamba3States

        b, l, h, p, n, R = 2, 1024, 24, 64, 128, rank
        f32 = {**meta, "requires_grad": backward}
        t = {"dtype": dtype, **f32}
        mimo = rank > 1
        args = {
            "q": torch.empty(b, l, R, 1, n, **t),
            "k": torch.empty(b, l, R, 1, n, **t),
            "v": torch.empty(b, l, h, p, **t),
            "adt": torch.empty(b, h, l, **f32),
            "dt": torch.empty(b, h, l, **f32),
            "trap": torch.empty(b, h, l, **t),
            "q_bias": torch.empty(h, R, n, **f32),
            "k_bias": torch.empty(h, R, n, **f32),
            "angles": torch.empty(b, l, h, n // 4, **f32),
            "pairing": "halves" if mimo else "adjacent",
            "chunk_size": 16 if mimo else 64,
            "D": torch.empty(h, **f32),
            "z": torch.empty(b, l, h, p, **t),
            "mimo_x": torch.empty(h, R, p, **f32) if mimo else None,
            "mimo_z": torch.empty(h, R, p, **f32) if mimo else None,
            "mimo_o": torch.empty(h, R, p, **f32) if mimo else None,
            "norm_weight": torch.empty(h, p, **f32) if mimo else None,
            "initial_states": Mamba3States(
                torch.empty(b, h, n // 4, **f32),
                torch.empty(b, h, p, n, **f32),
                torch.empty(b, R, h, n, **f32),
                torch.empty(b, h, p, **t),
            ),
            "seq_idx": torch.zeros(b, l, dtype=torch.int32, **meta) if with_seq else None,
            "return_final_states": True,
        }
        out, st = mamba3.chunk_scan(**args)
        if backward:
            leaves = [v for v in args.values() if isinstance(v, torch.Tensor) and v.requires_grad]
            leaves += list(args["initial_states"])
            torch.autograd.grad(out.float().sum() + st.ssm.sum() + st.angle.sum() + st.k.sum(), leaves)

    def mamba3_step_case(rank):
        from mamba_ssm._families.mamba3.torch_impl import Mamba3States

        b, h, p, n, R, bf = 16, 48, 64, 128, rank, torch.bfloat16
        mimo = rank > 1
        mamba3.step(
            torch.empty(b, R, 1, n, dtype=bf, **meta),
            torch.empty(b, R, 1, n, dtype=bf, **meta),
            torch.empty(b, h, p, dtype=bf, **meta),
            torch.empty(b, h, **meta),
            torch.empty(b, h, **meta),
            torch.empty(b, h, dtype=bf, **meta),
            torch.empty(h, R, n, **meta),
            torch.empty(h, R, n, **meta),
            torch.empty(b, h, n // 4, **meta),
            Mamba3States(
                torch.empty(b, h, n // 4, **meta),
                torch.empty(b, h, p, n, **meta),
                torch.empty(b, R, h, n, **meta),
                torch.empty(b, h, p, dtype=bf, **meta),
            ),
            "halves" if mimo else "adjacent",
            D=torch.empty(h, **meta),
            z=torch.empty(b, h, p, dtype=bf, **meta),
            mimo_x=torch.empty(h, R, p, **meta) if mimo else None,
            mimo_z=torch.empty(h, R, p, **meta) if mimo else None,
            mimo_o=torch.empty(h, R, p, **meta) if mimo else None,
            norm_weight=torch.empty(h, p, **meta) if mimo else None,
        )

    return [
        ("mamba3 siso bf16 fwd+bwd + seq_idx", lambda: mamba3_case(torch.bfloat16, 1, True, True)),
        ("mamba3 siso fp32 fwd+bwd", lambda: mamba3_case(torch.float32, 1, True, False)),
        ("mamba3 mimo rank 4 bf16 fwd+bwd", lambda: mamba3_case(torch.bfloat16, 4, True, False)),
        ("mamba3 step siso bf16", lambda: mamba3_step_case(1)),
        ("mamba3 step mimo rank 4 bf16", lambda: mamba3_step_case(4)),
        ("ssd bf16 + seq_idx", lambda: ssd_case(torch.bfloat16, True)),
        ("ssd fp32", lambda: ssd_case(torch.float32, False)),
        ("ssd varlen states", varlen_case),
        ("selective_state_update", state_update_case),
        ("layer_norm", lambda: norm_case(False)),
        ("rms_norm", lambda: norm_case(True)),
        ("gated norm", lambda: gated_case(True)),
        ("gated norm (gate first)", lambda: gated_case(False)),
    ]


def _source(fn, sig, consts):
    """ASTSource for this triton: 3.0-3.2 take ``constants`` and a signature of the other parameters;
    later ones ``constexprs`` and "constexpr" entries in the signature."""
    if "constexprs" in inspect.signature(ASTSource.__init__).parameters:
        return ASTSource(fn=fn, signature=sig, constexprs=consts)
    return ASTSource(fn=fn, signature={k: v for k, v in sig.items() if v != "constexpr"}, constants=consts)


def resources(kernel) -> str:
    """Registers and stack frame per thread (cuobjdump of the cubin), and the bytes of register spill
    stores (ptxas -v on the same PTX: a stack frame can also hold a local array, e.g. libdevice's sinf /
    cosf reduction of huge arguments, which is not a spill)."""
    nvbin = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    cuobjdump = os.path.join(nvbin, "cuobjdump")
    if not os.path.exists(cuobjdump):
        return ""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as fh:
        fh.write(kernel.asm["cubin"])
        fh.flush()
        out = subprocess.run(
            [cuobjdump, "--dump-resource-usage", fh.name], capture_output=True, text=True, check=False
        ).stdout
    text = ""
    for line in out.splitlines():
        if "REG:" in line:
            fields = dict(item.split(":", 1) for item in line.strip().split() if ":" in item)
            text = f"registers {fields.get('REG')}, stack {fields.get('STACK')} B"
    ptx = kernel.asm.get("ptx")
    target = re.search(r"^\.target\s+(\S+)", ptx or "", re.MULTILINE)
    ptxas = os.path.join(nvbin, "ptxas")
    if text and target and os.path.exists(ptxas):
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "k.ptx")
            with open(src, "w") as fh:
                fh.write(ptx)
            info = subprocess.run(
                [
                    ptxas,
                    "-v",
                    f"--gpu-name={target.group(1).rstrip(',')}",
                    src,
                    "-o",
                    os.path.join(tmp, "k.o"),
                ],
                capture_output=True,
                text=True,
                check=False,
            )
        m = re.search(r"(\d+) bytes spill stores", info.stdout + info.stderr)
        if m:
            text += f", spill stores {m.group(1)} B"
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="cuda:90,cuda:80,hip:gfx942")
    ap.add_argument("--only", default="", help="only the workloads whose name contains this text")
    args = ap.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET", "") == "1":
        print("TRITON_INTERPRET=1 is set: unset it (the kernels must be compiled, not interpreted)")
        return 2
    launches = []
    for name, work in workloads():
        if args.only not in name:
            continue
        found = capture_launches(work)
        print(f"{name}: {len(found)} kernel launches")
        launches += [f for f in found if all(f[0] is not g[0] or f[1:] != g[1:] for g in launches)]
    failures = 0
    for target in args.targets.split(","):
        backend, arch = target.split(":")
        gpu = GPUTarget(backend, int(arch) if backend == "cuda" else arch, 32 if backend == "cuda" else 64)
        for fn, sig, consts, options in launches:
            shown = [f"warps {options['num_warps']}"]
            if "num_stages" in options:
                shown.append(f"stages {options['num_stages']}")
            shown += [f"{k}={v}" for k, v in consts.items() if k.startswith("BLOCK") or k in ("Q", "QT", "R")]
            label = f"{target} {fn.__name__} ({', '.join(shown)})"
            try:
                k = triton.compile(_source(fn, sig, consts), target=gpu, options=options)
            except Exception as exc:  # noqa: BLE001 - report every failure
                failures += 1
                print(f"FAIL {label}: {type(exc).__name__}: {str(exc)[:2000]}")
                continue
            extra = resources(k) if backend == "cuda" else ""
            print(f"ok   {label}: shared {k.metadata.shared} B{'; ' + extra if extra else ''}")
    print(
        f"triton {triton.__version__}: {len(launches)} kernel configurations x {len(args.targets.split(','))} "
        f"targets, {failures} failed"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
