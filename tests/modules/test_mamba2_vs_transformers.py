"""Mamba2 against a separate implementation: transformers' ``Mamba2Mixer`` (a test-only dependency) on
the same weights, output and parameter gradients.

transformers binds mamba_ssm's ops when it can import them, which would compare our code with itself;
so its side runs in a subprocess where importing ``mamba_ssm`` (and ``causal_conv1d``) fails and the
hub kernels are off, and the test asserts that every op it bound is its own PyTorch function.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from mamba_ssm.modules.mamba2 import Mamba2

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="transformers (a test dependency, ci/requirements-dev.txt) is not installed",
)

D_MODEL, D_STATE, HEADDIM = 32, 8, 8
CASES = [
    dict(ngroups=1, chunk_size=16, seqlen=37, bias=False, dt_limit=(0.0, float("inf"))),
    dict(ngroups=2, chunk_size=64, seqlen=70, bias=True, dt_limit=(0.01, 0.2)),
]

TRANSFORMERS_SIDE = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "progs", "transformers_mamba2_side.py"
)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    path = tmp_path_factory.mktemp("hf") / "mixer.pt"
    env = dict(
        os.environ,
        USE_HUB_KERNELS="0",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_VERBOSITY="error",
        OMP_NUM_THREADS="1",
    )
    env.pop("PYTHONPATH", None)
    cases = json.dumps([{**c, "dt_limit": list(c["dt_limit"])} for c in CASES])
    proc = subprocess.run(
        [
            sys.executable,
            TRANSFORMERS_SIDE,
            cases,
            str(path),
            json.dumps({"d_model": D_MODEL, "d_state": D_STATE, "headdim": HEADDIM}),
        ],
        env=env,
        cwd=str(path.parent),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    return info, torch.load(path, weights_only=True)


def test_transformers_took_its_own_pytorch_path(reference):
    info, _ = reference
    assert info["mamba_ssm_loaded"] is False
    assert "mamba_ssm" in info["attempts"], info  # it did try to bind ours, and was refused
    assert {"mamba2_chunk_scan", "mamba2_selective_state_update", "causal_conv1d_fn"} <= set(info["own"])
    assert all(module == info["module"] for module in info["own"].values()), info["own"]


@pytest.mark.parametrize(
    "case", range(len(CASES)), ids=[f"ngroups{c['ngroups']}-chunk{c['chunk_size']}" for c in CASES]
)
@pytest.mark.parametrize("mem_eff", [True, False])
def test_mamba2_matches_transformers_mamba2_mixer(reference, case, mem_eff):
    _, results = reference
    c, r = CASES[case], results[case]
    m = Mamba2(
        D_MODEL,
        d_state=D_STATE,
        headdim=HEADDIM,
        ngroups=c["ngroups"],
        chunk_size=c["chunk_size"],
        bias=c["bias"],
        dt_limit=c["dt_limit"],
        use_mem_eff_path=mem_eff,
    )
    m.load_state_dict(r["state_dict"], strict=True)  # the same parameter names and shapes
    out = m(r["u"])
    scale = float(r["out"].abs().max())
    assert float((out.detach() - r["out"]).abs().max()) <= 1e-5 * scale
    (out * r["g"]).sum().backward()
    for name, p in m.named_parameters():
        want = r["grads"][name]
        err = float((p.grad - want).abs().max())
        assert err <= 1e-4 * float(want.abs().max()) + 1e-6, f"d{name}: max |err| {err:.3g}"
