"""The GPU kernel checks without pytest (for a GPU machine that has torch but no pytest and no network).

Runs the cases of test_gpu_kernel.py through the same helpers (cases.py, tests/oracles.py) and prints one
line per case; exit status 1 when any case fails, 0 when all pass, 2 when no GPU kernel can run.

    python tests/kernels/gpu_runner.py
"""

import itertools
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE), os.path.dirname(os.path.dirname(HERE))]  # + tests/ (oracles)

import torch  # noqa: E402
from cases import BC_KINDS, make_inputs, run_and_check  # noqa: E402

DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def cases():
    for dtype, bc, seqlen, on in itertools.product(DTYPES, BC_KINDS, (1, 3, 129), (False, True)):
        yield (
            f"fwd_bwd[{dtype}-{bc}-L{seqlen}-{'all' if on else 'none'}]",
            lambda dtype=dtype, bc=bc, seqlen=seqlen, on=on: (
                make_inputs(2, 4, seqlen, 8, bc, on, on, on, dtype, device="cuda", seed=seqlen),
                on,
                dtype,
            ),
        )
    for dtype, bc in itertools.product(DTYPES, BC_KINDS):
        yield (
            f"chunk_boundary[{dtype}-{bc}]",
            lambda dtype=dtype, bc=bc: (
                make_inputs(2, 4, 1025, 8, bc, True, True, True, dtype, device="cuda", seed=1025),
                True,
                dtype,
            ),
        )
    for dtype in DTYPES:
        yield (
            f"seqlen_2049_bias_softplus[{dtype}]",
            lambda dtype=dtype: (
                make_inputs(2, 3, 2049, 16, "variable", True, True, True, dtype, device="cuda", seed=5),
                True,
                dtype,
            ),
        )
    yield (
        "dim_65536",
        lambda: (
            make_inputs(1, 65536, 9, 4, "variable", True, False, True, torch.float32, device="cuda", seed=6),
            True,
            torch.float32,
        ),
    )
    yield (
        "d_state_256",
        lambda: (
            make_inputs(1, 2, 40, 256, "grouped1", True, True, False, torch.float32, device="cuda", seed=7),
            False,
            torch.float32,
        ),
    )


def main():
    from mamba_ssm import _loader

    result = _loader.load()
    if not result.loaded or not torch.cuda.is_available():
        print(
            f"SKIP: no GPU kernel can run (loaded={result.loaded}: {result.reason}; "
            f"cuda available={torch.cuda.is_available()})"
        )
        return 2
    import mamba_ssm._families.selective_scan.compiled as backend

    failed = 0
    total = 0
    for name, build in cases():
        total += 1
        try:
            args, softplus, dtype = build()
            run_and_check(backend, args, softplus, dtype)
            print(f"PASS {name}", flush=True)
        except Exception:  # noqa: BLE001 - report every case
            failed += 1
            print(f"FAIL {name}\n{traceback.format_exc(limit=3)}", flush=True)
    print(f"{total - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
