"""Upstream users' scripts keep working after switching (issue 36, item 5).

The finding: upstream mamba-ssm's install brings einops (its 2.3.2.post1 on PyPI declares Requires-Dist
torch, tilelang, apache-tvm-ffi, quack-kernels, triton, ninja, einops, transformers, packaging,
setuptools), its users' scripts import it, and this package required only torch and packaging: ``import
einops`` failed in a venv where this package was installed. The wheel now requires einops, and the ``hf``
extra brings transformers and huggingface_hub (AutoTokenizer, Hub ids).

What runs: a real wheel (the pure-Python one: setup.py computes the same dependencies for every wheel
kind) and a real sdist built from this checkout, their METADATA / PKG-INFO read back; then that wheel
installed by pip into a fresh venv that shares this interpreter's torch but not its einops, and an
upstream-style script (einops, ``Mamba`` with upstream's arguments) run there.
"""

from __future__ import annotations

import email.parser
import glob
import os
import subprocess
import sys
import tarfile
import zipfile

import pytest
from packaging.requirements import Requirement
from venvs import fresh_venv

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.slow

UPSTREAM_STYLE_SCRIPT = """
import torch
from einops import rearrange
from mamba_ssm import Mamba

x = torch.randn(2, 12, 8)
y = Mamba(d_model=8, d_state=4, d_conv=4, expand=2)(x)
flat = rearrange(y, "b l d -> (b l) d")
assert flat.shape == (24, 8)
print("upstream-style script ok")
"""


def check_requirements(metadata: str, where: str) -> None:
    reqs = [Requirement(r) for r in email.parser.Parser().parsestr(metadata).get_all("Requires-Dist") or []]
    names = {r.name for r in reqs if r.marker is None}
    assert {"torch", "packaging", "einops"} <= names, (where, [str(r) for r in reqs])
    extra = {r.name for r in reqs if r.marker is not None and r.marker.evaluate({"extra": "hf"})}
    assert {"transformers", "huggingface_hub"} <= extra, (where, [str(r) for r in reqs])
    assert not {"transformers", "huggingface_hub", "triton"} & names, (where, [str(r) for r in reqs])


def test_wheel_and_sdist_require_einops_and_a_fresh_venv_runs_an_upstream_script(tmp_path):
    env = dict(os.environ, MAMBA_SKIP_CUDA_BUILD="TRUE", MAMBA_SSM_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("MAMBA_FORCE_BUILD", None)
    wheels = tmp_path / "wheels"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-w", str(wheels), REPO],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (wheel,) = glob.glob(str(wheels / "mamba_ssm-*.whl"))
    with zipfile.ZipFile(wheel) as zf:
        check_requirements(
            zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode(), wheel
        )

    sdists = tmp_path / "sdist"
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(sdists), REPO],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    (sdist,) = glob.glob(str(sdists / "mamba_ssm-*.tar.gz"))
    with tarfile.open(sdist) as tf:
        pkg_info = next(m for m in tf.getmembers() if m.name.count("/") == 1 and m.name.endswith("PKG-INFO"))
        check_requirements(tf.extractfile(pkg_info).read().decode(), sdist)  # type: ignore[union-attr]

    py, _ = fresh_venv(tmp_path / "venv", hide=("einops",))
    run_env = dict(env, PIP_DISABLE_PIP_VERSION_CHECK="1")
    run_env.pop("MAMBA_SKIP_CUDA_BUILD", None)
    gone = subprocess.run(
        [py, "-c", "import einops"], capture_output=True, text=True, env=run_env, timeout=300
    )
    assert gone.returncode != 0, "the fresh venv must not see the dev venv's einops"
    proc = subprocess.run(
        [py, "-m", "pip", "install", wheel], env=run_env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    proc = subprocess.run(
        [py, "-c", UPSTREAM_STYLE_SCRIPT],
        cwd=str(tmp_path),
        env=dict(run_env, MAMBA_SSM_NO_FALLBACK_WARNING="1"),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "upstream-style script ok" in proc.stdout
