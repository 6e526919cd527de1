"""The shared compatibility rules load by path through setup.py's ``load_private``, without torch or mamba_ssm.

Run as ``cd / && python -I tests/build/progs/compat_by_path.py REPO`` (isolated: the repository is not on
sys.path); checks one torch-mismatch incompatibility and one arch-list parse, then prints
``loaded [...]``: the torch / mamba_ssm modules imported (none expected).
"""

import importlib.util
import os
import sys

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
