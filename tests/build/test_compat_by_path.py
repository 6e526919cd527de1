"""The shared rules load from the source tree without torch or the mamba_ssm package: setup.py's
``load_private``, the one way the project does that."""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = r"""
import importlib.util, os, sys
repo = sys.argv[1]
spec = importlib.util.spec_from_file_location("setup_under_test", os.path.join(repo, "setup.py"))
setup = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = setup
spec.loader.exec_module(setup)
mods = {name: setup.load_private("_compat." + name) for name in ("versions", "archs", "buildinfo")}
b = mods["buildinfo"]
info = b.BuildInfo(package_version="2.4.0.dev0", torch_version="2.6.0+cu124", torch_cuda="12.4")
rt = mods["versions"].TorchBuild("2.6.0+cu118", cuda="11.8")
assert len(b.incompatibilities(info, rt)) == 1
assert mods["archs"].parse_arch_list("90+PTX").ptx == ("compute_90",)
bad = sorted(m for m in sys.modules if m == "torch" or m.startswith("mamba_ssm"))
print("loaded", bad)
"""


def test_compat_modules_load_by_path_without_torch_or_package():
    # -I: isolated mode, so the repository is not on sys.path and `import mamba_ssm` cannot happen.
    out = subprocess.run([sys.executable, "-I", "-c", SCRIPT, REPO], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "loaded []"
