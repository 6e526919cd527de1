"""``import mamba_ssm`` never fails and never initialises CUDA (forked DataLoader workers), and its
public names resolve lazily to the objects of their modules. Subprocesses against a temporary copy of
the package (no ``_C``), with the real torch here and with a broken one."""

import importlib.util
import os

import pytest

_spec = importlib.util.spec_from_file_location(
    "mamba_ssm_test_loader_support", os.path.join(os.path.dirname(__file__), "test_loader_support.py")
)
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)

LIGHT = r"""
import json, sys
out = {}
import mamba_ssm
out["torch_after_import"] = "torch" in sys.modules
out["version"] = mamba_ssm.__version__
out["file"] = mamba_ssm.__file__
out["dir_has_lazy"] = all(n in dir(mamba_ssm) for n in ("selective_scan_fn", "mamba_inner_fn", "Mamba",
                                                      "set_backend", "get_backend"))
try:
    mamba_ssm.no_such_name
    out["missing_attr"] = None
except AttributeError as e:
    out["missing_attr"] = str(e)
# The backend setter works without touching torch.
mamba_ssm.set_backend("torch")
out["backend"] = mamba_ssm.get_backend()
out["torch_after_set_backend"] = "torch" in sys.modules
import torch
out["cuda_initialized_after_import"] = torch.cuda.is_initialized()
resolved = {}
for name, (module, attr) in {
    "selective_scan_fn": ("mamba_ssm.ops.selective_scan_interface", "selective_scan_fn"),
    "mamba_inner_fn": ("mamba_ssm.ops.selective_scan_interface", "mamba_inner_fn"),
    "Mamba": ("mamba_ssm.modules.mamba_simple", "Mamba"),
}.items():
    try:
        value = getattr(mamba_ssm, name)
    except ImportError as e:
        resolved[name] = f"unavailable: {type(e).__name__}: {e}"
        continue
    import importlib
    resolved[name] = value is getattr(importlib.import_module(module), attr)
out["resolved"] = resolved
optional = {}
for name, module in {"Mamba2": "mamba_ssm.modules.mamba2",
                     "MambaLMHeadModel": "mamba_ssm.models.mixer_seq_simple"}.items():
    import importlib.util
    try:
        exists = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        exists = False
    optional[name] = {"exists": exists, "hasattr": hasattr(mamba_ssm, name)}
out["optional"] = optional
out["cuda_initialized_after_attributes"] = torch.cuda.is_initialized()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def light(tmp_path_factory):
    root = S.make_package(tmp_path_factory.mktemp("import_light"))
    proc = S.run_python(root, LIGHT, check_package=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = S.last_json(proc.stdout)
    assert out["file"] == str(root / "mamba_ssm" / "__init__.py")
    return out


def test_import_does_not_import_torch_or_init_cuda(light):
    assert light["torch_after_import"] is False
    assert light["torch_after_set_backend"] is False
    assert light["cuda_initialized_after_import"] is False
    assert light["backend"] == "torch"
    assert light["dir_has_lazy"] is True
    assert "no_such_name" in light["missing_attr"]


def test_version_is_the_packages(light):
    import re

    with open(os.path.join(S.REPO_ROOT, "mamba_ssm", "_version.py")) as fh:
        expected = re.search(r'__version__\s*=\s*"([^"]+)"', fh.read()).group(1)
    assert light["version"] == expected


@pytest.mark.parametrize("name", ["selective_scan_fn", "mamba_inner_fn", "Mamba"])
def test_lazy_attributes_resolve(light, name):
    value = light["resolved"][name]
    if isinstance(value, str):
        pytest.skip(f"mamba_ssm.{name} is not importable yet (ops part): {value}")
    assert value is True
    assert light["cuda_initialized_after_attributes"] is False


BROKEN_TORCH = r"""
import json, sys
import mamba_ssm
out = {"version": mamba_ssm.__version__, "backend": mamba_ssm.get_backend()}
try:
    mamba_ssm.selective_scan_fn
    out["op"] = None
except ImportError as e:
    out["op"] = str(e)
from mamba_ssm import _loader
out["load"] = _loader.load().to_dict()
print(json.dumps(out))
"""


def test_import_works_with_broken_torch(tmp_path):
    root = S.make_package(tmp_path)
    fake = tmp_path / "broken_torch"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text('raise ImportError("simulated broken torch install")\n')
    # A _C with a valid build-info block: the loader gets as far as needing torch.
    S.write_block_not_elf(root / "mamba_ssm" / "_C.abi3.so", S.build_info())
    env = S.child_env(root)
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(fake)])
    proc = S.run_python(root, BROKEN_TORCH, env=env, check_package=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = S.last_json(proc.stdout)
    assert out["backend"] == "auto"
    assert out["op"], "mamba_ssm.selective_scan_fn resolved although torch is broken"
    if (root / "mamba_ssm" / "ops" / "selective_scan_interface.py").exists():
        assert "simulated broken torch install" in out["op"]
    assert out["load"]["kind"] == "torch-unavailable" and out["load"]["loaded"] is False
    assert "simulated broken torch install" in out["load"]["reason"]


FORK = r"""
import json, os, sys
import mamba_ssm, torch
mamba_ssm.get_backend()
from mamba_ssm import _dispatch
backend = _dispatch.backend_for("selective_scan", "cpu")   # loads (tries) _C, checks CPU coverage
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    os.write(w, json.dumps({"child_cuda_initialized": torch.cuda.is_initialized()}).encode())
    os._exit(0)
os.close(w)
data = json.loads(os.read(r, 4096).decode())
os.waitpid(pid, 0)
data["parent_cuda_initialized"] = torch.cuda.is_initialized()
data["backend"] = backend
print(json.dumps(data))
"""


def test_dispatch_on_cpu_keeps_cuda_uninitialised_across_fork(tmp_path):
    root = S.make_package(tmp_path)
    proc = S.run_python(root, FORK, env=S.child_env(root, MAMBA_SSM_NO_FALLBACK_WARNING=1))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = S.last_json(proc.stdout)
    assert out == {"child_cuda_initialized": False, "parent_cuda_initialized": False, "backend": "torch"}


def test_optional_names_are_attributes_only_where_their_module_exists(light):
    # hasattr/getattr(..., None) must not raise for a name whose module is not in this version.
    for name, facts in light["optional"].items():
        assert facts["hasattr"] is facts["exists"], (name, facts)
