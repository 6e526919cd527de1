"""Every ```python block of README.md runs, as written, on the CPU (each in a fresh interpreter)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _blocks():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        return re.findall(r"^```python\n(.*?)^```", f.read(), flags=re.DOTALL | re.MULTILINE)


def test_readme_has_the_model_examples():
    text = "\n".join(_blocks())
    for name in (
        "from mamba_ssm import Mamba\n",
        "from mamba_ssm import Mamba2",
        "MambaLMHeadModel.from_pretrained",
        ".generate(",
    ):
        assert name in text


@pytest.mark.parametrize("index", range(len(_blocks())))
def test_readme_example_runs(index, tmp_path):
    code = _blocks()[index]
    env = {
        **os.environ,
        "PYTHONPATH": REPO,
        "CUDA_VISIBLE_DEVICES": "",
        "OMP_NUM_THREADS": "1",
        "MAMBA_SSM_NO_FALLBACK_WARNING": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"README example {index} failed:\n{code}\n{proc.stdout}\n{proc.stderr}"
