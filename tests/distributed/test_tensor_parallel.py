"""Tensor parallelism on 2 gloo processes (CPU, loopback): Mamba2 with ``process_group`` (fused and
unfused paths, with and without sequence parallelism), the parallel linears, embeddings and autograd
collectives give the unsharded outputs and gradients. The ranks (tests/distributed/tp_worker.py) are
started here and killed if they run past the time limit."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
WORLD = 2
LIMIT_S = 240


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_gloo_ranks_match_the_unsharded_layers():
    pytest.importorskip("torch.distributed")
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("this torch build has no gloo backend")
    port = _free_port()
    env = dict(
        os.environ,
        PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
        OMP_NUM_THREADS="1",
        MAMBA_SSM_NO_FALLBACK_WARNING="1",
    )
    procs = [
        subprocess.Popen(
            [sys.executable, os.path.join(HERE, "tp_worker.py"), str(rank), str(WORLD), str(port)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in range(WORLD)
    ]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=LIMIT_S)
            results.append((p.returncode, out, err))
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        for p in procs:
            p.communicate()
        pytest.fail(f"the tensor-parallel ranks did not finish within {LIMIT_S} s (killed)")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for rank, (code, out, err) in enumerate(results):
        assert code == 0, f"rank {rank} failed (exit {code}):\n{out}\n{err[-6000:]}"
        assert f"rank {rank}: ok" in out


def test_get_dim_for_local_rank_splits_in_units():
    from mamba_ssm.distributed.distributed_utils import get_dim_for_local_rank

    # 10 units of 8 over 4 ranks: 3, 3, 2, 2 units.
    assert [get_dim_for_local_rank(80, 4, r, multiple_of=8) for r in range(4)] == [24, 24, 16, 16]
    assert [get_dim_for_local_rank(12, 2, r) for r in range(2)] == [6, 6]
    with pytest.raises(ValueError, match="multiple_of"):
        get_dim_for_local_rank(10, 2, 0, multiple_of=4)
