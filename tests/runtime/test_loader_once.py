"""The loader finds the right file, loads once per process under concurrent first calls, and never at
import. File-finding runs in-process on temporary folders (it loads nothing); loading runs in a
subprocess against a temporary copy of the package."""

import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    "mamba_ssm_test_loader_support", os.path.join(os.path.dirname(__file__), "test_loader_support.py")
)
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)


def _loader_module():
    from mamba_ssm import _loader  # finding the file loads nothing (import mamba_ssm is torch-free)

    return _loader


def test_find_prefers_abi3_then_this_interpreters_suffix(tmp_path):
    import importlib.machinery

    loader = _loader_module()
    assert loader.find_compiled_module(str(tmp_path)) is None
    (tmp_path / "_C_notes.txt").write_text("not a module")
    assert loader.find_compiled_module(str(tmp_path)) is None

    versioned = tmp_path / ("_C" + importlib.machinery.EXTENSION_SUFFIXES[0])
    versioned.write_bytes(b"x")
    other_python = tmp_path / "_C.cpython-39-x86_64-linux-gnu.so"
    if other_python.name != versioned.name:
        other_python.write_bytes(b"x")
    assert loader.find_compiled_module(str(tmp_path)) == str(versioned)

    abi3 = tmp_path / "_C.abi3.so"
    abi3.write_bytes(b"x")
    assert loader.find_compiled_module(str(tmp_path)) == str(abi3)

    # A folder named like the module is not a module.
    for f in (versioned, abi3):
        f.unlink()
    if other_python.exists():
        assert loader.find_compiled_module(str(tmp_path)) == str(other_python)
        other_python.unlink()
    (tmp_path / "_C.abi3.so").mkdir()
    assert loader.find_compiled_module(str(tmp_path)) is None


def test_concurrent_first_calls_load_once(tmp_path):
    root = S.make_package(tmp_path)
    S.compile_so(root / "mamba_ssm" / "_C.abi3.so", S.build_info())
    marker = tmp_path / "marker"
    proc = S.run_prog(root, "concurrent_load", env=S.child_env(root, MAMBA_SSM_TEST_DLOPEN_MARKER=marker))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = S.last_json(proc.stdout)
    assert out == {"calls": 1, "same": True, "n": 8, "loaded": True, "peek_same": True, "again_same": True}
    assert marker.read_text() == "loaded"


def test_import_does_not_load(tmp_path):
    root = S.make_package(tmp_path)
    S.compile_so(root / "mamba_ssm" / "_C.abi3.so", S.build_info())
    marker = tmp_path / "marker"
    code = "import mamba_ssm, mamba_ssm._dispatch, mamba_ssm._loader as L; print(L.peek() is None)"
    proc = S.run_python(root, code, env=S.child_env(root, MAMBA_SSM_TEST_DLOPEN_MARKER=marker))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "True"
    assert not marker.exists()
