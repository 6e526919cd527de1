"""Issue 11, item 6: any failure probing torch under MAMBA_FALLBACK=auto|source falls back as documented.

A broken torch (here: a ``torch`` package without ``torch.utils``, one whose import raises, one whose
own dependency is missing) made setup.py raise ModuleNotFoundError. Now ``auto`` gives the pure-Python
package with the reason, and ``source`` a PreflightError (setup.py's one-paragraph exit) naming it.
Each case runs in a fresh interpreter with the fake torch first on sys.path.
"""
from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import zipfile

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FAKES = {
    # no torch.utils (the finding)
    "no-utils": {"__init__.py": "__version__ = '2.14.1+cu130'\n",
                 "version.py": "__version__ = '2.14.1+cu130'\ncuda = '13.0'\nhip = None\n"},
    # importing torch fails inside it (a shared library that is gone)
    "raises": {"__init__.py": "raise OSError('libtorch_cuda.so: cannot open shared object file')\n"},
    # one of torch's own imports is missing (ImportError for another module than torch)
    "dependency": {"__init__.py": "import sympy_that_is_not_installed\n"},
}

PROBE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import importlib.util
spec = importlib.util.spec_from_file_location("setup_under_test", sys.argv[2] + "/setup.py")
setup = importlib.util.module_from_spec(spec); spec.loader.exec_module(setup)
from _mamba_ssm_setup_bypath._build import plan as P
out = {}
p = P._fallback({"MAMBA_FALLBACK": "auto", "PATH": ""}, "no prebuilt wheel")
out["auto"] = [p.mode, p.reason]
try:
    P._fallback({"MAMBA_FALLBACK": "source", "PATH": ""}, "no prebuilt wheel")
    out["source"] = ["no error", ""]
except P.PreflightError as e:
    out["source"] = ["PreflightError", str(e)]
except Exception as e:
    out["source"] = [type(e).__name__, str(e)]
print(json.dumps(out))
"""


def fake_torch(root, kind):
    pkg = root / "torch"
    pkg.mkdir(parents=True)
    for name, text in FAKES[kind].items():
        (pkg / name).write_text(text)
    return str(root)


@pytest.mark.parametrize("kind,needle", [
    ("no-utils", "No module named 'torch.utils'"),
    ("raises", "OSError: libtorch_cuda.so: cannot open shared object file"),
    ("dependency", "No module named 'sympy_that_is_not_installed'"),
])
def test_a_broken_torch_falls_back_with_the_reason(tmp_path, kind, needle):
    path = fake_torch(tmp_path / "site", kind)
    proc = subprocess.run([sys.executable, "-c", PROBE, path, REPO], capture_output=True, text=True, timeout=120,
                          cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    mode, reason = out["auto"]
    assert mode == "python" and "the source build cannot run here" in reason and needle in reason, reason
    assert "is broken or incomplete" in reason and "reinstall the torch you use" in reason
    kind_s, text = out["source"]
    assert kind_s == "PreflightError" and needle in text, out["source"]


@pytest.mark.slow
def test_pip_wheel_with_a_broken_torch_builds_the_pure_python_package(tmp_path):
    """End to end through pip (no build isolation, so the broken torch is the one setup.py sees)."""
    path = fake_torch(tmp_path / "site", "no-utils")
    env = dict(os.environ, PYTHONPATH=path, MAMBA_FALLBACK="auto", MAMBA_WHEEL_INDEX=str(tmp_path / "no-index"),
               MAMBA_SSM_CACHE_DIR=str(tmp_path / "cache"), MAMBA_SSM_NO_NVML="1", PIP_NO_CACHE_DIR="1")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "-w",
                           str(tmp_path / "out"), REPO], env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    log = proc.stdout + proc.stderr
    assert "No module named 'torch.utils'" in log and "ModuleNotFoundError:" not in log.replace(
        "(ModuleNotFoundError:", "")
    wheels = glob.glob(str(tmp_path / "out" / "mamba_ssm-*.whl"))
    assert len(wheels) == 1
    with zipfile.ZipFile(wheels[0]) as zf:
        assert not any(n.startswith("mamba_ssm/_C") for n in zf.namelist())
