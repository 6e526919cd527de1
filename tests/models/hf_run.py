"""Running transformers' side of the model tests and the generate benchmark (hf_reference.py) in a fresh
interpreter, where mamba_ssm is blocked unless asked for. The conversion between transformers' and
mamba-ssm's checkpoints is the package's own (``mamba_ssm.models.transformers_format``).
"""

from __future__ import annotations

import json
import os

import torch

REFERENCE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_reference.py")


def run_reference(tasks, workdir, timeout=600, with_mamba_ssm=False):
    """Run hf_reference.py on ``tasks`` in a fresh interpreter (mamba_ssm blocked there, or, with
    ``with_mamba_ssm``, importable from this checkout); returns the loaded outputs, one per task. Raises
    RuntimeError with the process's output when it fails."""
    import subprocess
    import sys

    job = os.path.join(workdir, "reference_job.json")
    with open(job, "w", encoding="utf-8") as f:
        json.dump({"tasks": tasks}, f)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        TRANSFORMERS_VERBOSITY="error",
    )
    if with_mamba_ssm:
        env.update(
            MAMBA_HF_REFERENCE_WITH_MAMBA_SSM="1",
            MAMBA_SSM_NO_FALLBACK_WARNING="1",
            PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        )
    proc = subprocess.run(
        [sys.executable, REFERENCE_SCRIPT, job],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"the transformers reference run failed ({proc.returncode}):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        )
    return [torch.load(t["out"], map_location="cpu", weights_only=False) for t in tasks]
