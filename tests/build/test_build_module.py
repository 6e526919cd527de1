"""mamba_ssm/_build, the package behind the thin setup.py: the typed settings read from the
environment, the source list, the install-id wheel rewrite, torch-free loading; and build_matrix's
modules import each other without a cycle.

Values are checked against what the environment says (the strings set here), against hashlib/zipfile
for the wheel's RECORD, and against the import graph read with ast.
"""

import ast
import base64
import hashlib
import os
import subprocess
import sys
import zipfile

import pytest
from _setup_loader import REPO

from mamba_ssm._build.commands import add_install_id, make_extension, setup_kwargs
from mamba_ssm._build.config import BuildTorch, limited_api_tag, list_sources, resolve_config
from mamba_ssm._build.errors import PreflightError
from mamba_ssm._build.plan import BuildMode, BuildPlan
from mamba_ssm._build.settings import BASE_VERSION, Settings, package_version
from mamba_ssm._compat.versions import TorchBuild


def test_settings_from_env_reads_every_knob():
    env = {
        "MAMBA_SKIP_CUDA_BUILD": "yes",
        "MAMBA_FORCE_BUILD": "On",
        "MAMBA_FALLBACK": " Source ",
        "MAMBA_LOCAL_VERSION": "+cu13torch2.14",
        "MAMBA_CUDA_ARCHS": " 80;90 ",
        "TORCH_CUDA_ARCH_LIST": "9.0",
        "HIP_BUILD": "0",
        "MAMBA_FORCE_CXX11_ABI": "1",
        "MAMBA_DEBUG_BUILD": "true",
        "MAMBA_KEEP_CUDA_BUILD": "no",
        "MAX_JOBS": " 3",
        "NVCC_THREADS": "2",
        "MAMBA_GIT_COMMIT": "abc",
    }
    s = Settings.from_env(env)
    assert (
        s.skip_cuda_build,
        s.force_build,
        s.hip_build,
        s.force_cxx11_abi,
        s.debug_build,
        s.keep_cuda_build,
    ) == (True, True, False, True, True, False)
    assert (s.fallback, s.local_version, s.cuda_archs, s.torch_cuda_arch_list) == (
        "source",
        "cu13torch2.14",
        "80;90",
        "9.0",
    )
    assert (s.max_jobs_or(7), s.nvcc_threads_or(7), s.git_commit) == (3, 2, "abc")
    empty = Settings.from_env({})
    assert empty == Settings() and empty.fallback == "auto" and empty.max_jobs_or(5) == 5


@pytest.mark.parametrize("raw", ["0", "-1", "four", "2.5"])
def test_malformed_counts_name_the_variable(raw):
    s = Settings.from_env({"MAX_JOBS": raw, "NVCC_THREADS": raw})
    with pytest.raises(PreflightError, match=f"MAX_JOBS={raw!r} is not a positive integer"):
        s.max_jobs_or(1)
    with pytest.raises(PreflightError, match=f"NVCC_THREADS={raw!r}"):
        s.nvcc_threads_or(1)


def test_fallback_choice():
    assert Settings.from_env({"MAMBA_FALLBACK": "ERROR"}).fallback_choice() == "error"
    with pytest.raises(PreflightError, match="'never' is not one of auto, source, python, error"):
        Settings.from_env({"MAMBA_FALLBACK": "never"}).fallback_choice()


def test_package_version_label():
    assert package_version({}) == BASE_VERSION
    # PEP 440 normalises a local label to lower case
    assert package_version({"MAMBA_LOCAL_VERSION": "cu13TORCH2.14"}) == BASE_VERSION + "+cu13torch2.14"
    with pytest.raises(PreflightError, match="MAMBA_LOCAL_VERSION='cu 13'"):
        package_version({"MAMBA_LOCAL_VERSION": "cu 13"})


def test_sources_are_globbed(tmp_path):
    """A new csrc file (e.g. the causal conv1d kernels) is compiled without any setup.py change."""
    csrc = tmp_path / "csrc"
    csrc.mkdir()
    for name in ("binding.cpp", "conv1d_fwd.cu", "conv1d_fwd_cpu.cpp", "scan.cuh", "notes.txt"):
        (csrc / name).write_text("")
    assert list_sources(str(tmp_path)) == ["csrc/binding.cpp", "csrc/conv1d_fwd_cpu.cpp"]
    assert list_sources(str(tmp_path), gpu=True) == [
        "csrc/binding.cpp",
        "csrc/conv1d_fwd.cu",
        "csrc/conv1d_fwd_cpu.cpp",
    ]


def test_add_install_id_keeps_record_valid(tmp_path):
    src = tmp_path / "mamba_ssm-1.0-cp39-abi3-linux_x86_64.whl"
    payload = b"print('hi')\n"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("mamba_ssm/__init__.py", payload)
        z.writestr("mamba_ssm-1.0.dist-info/METADATA", "Name: mamba-ssm\n")
        z.writestr(
            "mamba_ssm-1.0.dist-info/RECORD",
            "mamba_ssm/__init__.py,sha256=x,12\nmamba_ssm-1.0.dist-info/METADATA,sha256=y,16\n"
            "mamba_ssm-1.0.dist-info/RECORD,,\n",
        )
    dest = add_install_id(str(src), str(tmp_path / "out.whl"), "0123abcd")
    with zipfile.ZipFile(dest) as z:
        data = z.read("mamba_ssm-1.0.dist-info/mamba_ssm_install.json")
        record = z.read("mamba_ssm-1.0.dist-info/RECORD").decode().splitlines()
        assert z.read("mamba_ssm/__init__.py") == payload
    assert data == b'{"install_id": "0123abcd"}\n'
    want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert f"mamba_ssm-1.0.dist-info/mamba_ssm_install.json,sha256={want},{len(data)}" in record
    assert record[-1] == "mamba_ssm-1.0.dist-info/RECORD,,"  # RECORD's own line stays last


def test_build_package_loads_without_torch():
    """setup.py's logic loads in a bare interpreter: no torch, no mamba_ssm/__init__."""
    script = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('s', {os.path.join(REPO, 'setup.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['s'] = m; spec.loader.exec_module(m)\n"
        "for name in ('_build.settings', '_build.errors', '_build.commands', '_install.setup_hook'):\n"
        "    m.load_private(name)\n"
        "assert m.load_private('_build.plan').plan_build('metadata', {}, hook=None).mode == 'metadata'\n"
        "print(sorted(k for k in sys.modules if k.split('.')[0] in ('torch', 'mamba_ssm')))\n"
    )
    out = subprocess.run([sys.executable, "-I", "-c", script], capture_output=True, text=True, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_setup_py_is_thin():
    with open(os.path.join(REPO, "setup.py")) as f:
        assert len(f.read().splitlines()) <= 200


def _imports(path, package):
    """Modules of ``package`` that ``path`` imports anywhere (module level or inside functions)."""
    found = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(package + "."):
            found.add(node.module.split(".")[1])
    return found


@pytest.mark.parametrize("package", ["build_matrix", "mamba_ssm/_build"])
def test_no_import_cycle(package):
    folder = os.path.join(REPO, package)
    mods = {f[:-3] for f in os.listdir(folder) if f.endswith(".py")}
    graph = {m: _imports(os.path.join(folder, m + ".py"), package.replace("/", ".")) & mods for m in mods}
    assert package != "build_matrix" or "audit" in graph["build"]  # the one direction that is allowed

    def visit(m, stack):
        if m in stack:
            raise AssertionError(f"import cycle in {package}: {' -> '.join(stack[stack.index(m) :] + [m])}")
        for n in sorted(graph[m]):
            visit(n, stack + [m])

    for m in sorted(mods):
        visit(m, [])


@pytest.mark.parametrize(
    "hex_text,tag",
    [("0x030A0000", "cp310"), ("0x03090000", "cp39"), ("0x030D00F0", "cp313"), (str(0x030B0000), "cp311")],
)
def test_limited_api_tag(hex_text, tag):
    assert limited_api_tag(hex_text) == tag


@pytest.mark.parametrize("bad", ["3.10", "0x02070000", ""])
def test_limited_api_tag_rejects(bad):
    with pytest.raises(PreflightError, match=f"Py_LIMITED_API={bad!r}"):
        limited_api_tag(bad)


def test_wheel_tag_follows_torchs_limited_api(monkeypatch):
    """torch >= 2.7 names its Py_LIMITED_API (torch 2.14: 0x030A0000): the wheel is cp310-abi3 and
    setup.py defines no second value; older torch: setup.py's 0x03090000 and cp39."""
    env = {"PATH": os.environ.get("PATH", "")}
    new = BuildTorch(build=TorchBuild("2.14.1+cpu", cxx11_abi=True), limited_api="0x030A0000")
    old = BuildTorch(build=TorchBuild("2.6.0+cpu", cxx11_abi=False))
    cfg_new, cfg_old = resolve_config(env, new), resolve_config(env, old)
    assert (cfg_new.python_tag, cfg_new.build_info().python_tag) == ("cp310", "cp310-abi3")
    assert (cfg_old.python_tag, cfg_old.build_info().python_tag) == ("cp39", "cp39-abi3")
    pytest.importorskip("torch")
    macros_new = dict(make_extension(cfg_new).define_macros)
    macros_old = dict(make_extension(cfg_old).define_macros)
    assert "Py_LIMITED_API" not in macros_new and macros_old["Py_LIMITED_API"] == "0x03090000"
    kw = setup_kwargs(BuildPlan(BuildMode.SOURCE, config=cfg_new), "1.0")
    assert kw["options"] == {"bdist_wheel": {"py_limited_api": "cp310"}}
