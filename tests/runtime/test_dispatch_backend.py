"""Backend dispatch: MAMBA_SSM_BACKEND / set_backend semantics, forcing an unavailable backend,
warn-once and its silencing env var, per-device coverage, and the compiled path's import.

Each case runs in a subprocess against a temporary copy of the package (the repository's own ``_C`` is
never loaded), with the real torch here.
"""

import importlib.util
import json
import os
import re
import shutil

import pytest

_spec = importlib.util.spec_from_file_location(
    "mamba_ssm_test_loader_support", os.path.join(os.path.dirname(__file__), "test_loader_support.py")
)
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)


SETTINGS = {
    "silence_1": {"MAMBA_SSM_BACKEND": None, "MAMBA_SSM_NO_FALLBACK_WARNING": "1"},
    "silence_true": {"MAMBA_SSM_BACKEND": None, "MAMBA_SSM_NO_FALLBACK_WARNING": "true"},
    "silence_yes": {"MAMBA_SSM_BACKEND": None, "MAMBA_SSM_NO_FALLBACK_WARNING": "yes"},
    "silence_0": {"MAMBA_SSM_BACKEND": None, "MAMBA_SSM_NO_FALLBACK_WARNING": "0"},
    "force_compiled": {"MAMBA_SSM_BACKEND": "compiled", "MAMBA_SSM_NO_FALLBACK_WARNING": None},
    "force_cuda": {"MAMBA_SSM_BACKEND": "cuda"},
    "force_cuda_spaced": {"MAMBA_SSM_BACKEND": " CUDA "},
    "torch": {"MAMBA_SSM_BACKEND": "torch"},
    "TORCH": {"MAMBA_SSM_BACKEND": "TORCH"},
    "ref": {"MAMBA_SSM_BACKEND": "ref"},
    "auto": {"MAMBA_SSM_BACKEND": "auto"},
    "empty": {"MAMBA_SSM_BACKEND": ""},
    "bad": {"MAMBA_SSM_BACKEND": "cudnn"},
}


@pytest.fixture(scope="module")
def missing_root(tmp_path_factory):
    """A package copy without any _C (a pure-Python install)."""
    return S.make_package(tmp_path_factory.mktemp("dispatch_missing"))


@pytest.fixture(scope="module")
def matrix(missing_root):
    proc = S.run_prog(missing_root, "dispatch_probe", args=[json.dumps(SETTINGS)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return S.last_json(proc.stdout)


def probe(root, **env):
    proc = S.run_prog(root, "dispatch_probe", env=S.child_env(root, **env))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return S.last_json(proc.stdout)


def test_auto_falls_back_and_warns_once(missing_root):
    out = probe(missing_root)
    reason = out["load"]["reason"]
    assert out["get_backend"]["value"] == "auto"
    assert out["first"]["value"] == "torch"
    assert len(out["first"]["warnings"]) == 1
    w = out["first"]["warnings"][0]
    assert w["category"] == "MambaFallbackWarning" and w["user_warning"]
    assert reason in w["message"] and "python -m mamba_ssm install-kernels" in w["message"]
    assert "MAMBA_SSM_NO_FALLBACK_WARNING=1" in w["message"]
    # Once per process: the same reason is not repeated, not even for another op.
    assert out["second"] == {"value": "torch", "error": None, "warnings": []}
    assert out["other_op"] == {"value": "torch", "error": None, "warnings": []}
    # An op without a compiled kernel runs on torch without a warning.
    assert out["no_compiled_kernel_op"] == {"value": "torch", "error": None, "warnings": []}


@pytest.mark.parametrize("key", ["silence_1", "silence_true", "silence_yes"])
def test_silence_env_var(matrix, key):
    assert matrix[key]["first"] == {"value": "torch", "error": None, "warnings": []}


def test_silence_env_var_zero_does_not_silence(matrix):
    assert len(matrix["silence_0"]["first"]["warnings"]) == 1


@pytest.mark.parametrize("key", ["force_compiled", "force_cuda", "force_cuda_spaced"])
def test_forcing_unavailable_compiled_raises_with_reason(matrix, key):
    out = matrix[key]
    assert out["get_backend"]["value"] == "compiled"
    err = out["first"]["error"]
    assert err is not None and err["type"] == "RuntimeError"
    assert out["load"]["reason"] in err["message"]
    assert "python -m mamba_ssm install-kernels" in err["message"]
    assert "MAMBA_SSM_BACKEND" in err["message"]
    assert out["first"]["warnings"] == []
    # Forcing compiled does not break ops that have no compiled kernel at all.
    assert out["no_compiled_kernel_op"]["value"] == "torch"


@pytest.mark.parametrize(
    "key,expected",
    [("torch", "torch"), ("TORCH", "torch"), ("ref", "ref"), ("auto", "torch"), ("empty", "torch")],
)
def test_explicit_backends(matrix, key, expected):
    out = matrix[key]
    assert out["first"]["value"] == expected
    # An op with one implementation answers "torch" whatever is asked for.
    assert out["no_compiled_kernel_op"]["value"] == "torch"
    if key in ("torch", "TORCH", "ref"):
        # Chosen by the user: not a fallback, no warning.
        assert out["first"]["warnings"] == []
        assert out["get_backend"]["value"] == expected
    else:
        assert out["get_backend"]["value"] == "auto"
        assert len(out["first"]["warnings"]) == 1


def test_bad_env_value_names_value_and_choices(matrix):
    out = matrix["bad"]
    for key in ("get_backend", "first"):
        err = out[key]["error"]
        assert err["type"] == "ValueError"
        assert "'cudnn'" in err["message"] and "MAMBA_SSM_BACKEND" in err["message"]
        for choice in ("auto", "compiled", "cuda", "torch", "ref"):
            assert choice in err["message"]


def test_set_backend_overrides_env_and_validates(missing_root):
    proc = S.run_prog(missing_root, "set_backend", env=S.child_env(missing_root, MAMBA_SSM_BACKEND="torch"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = S.last_json(proc.stdout)
    assert out["same_function"] is True
    assert out["env"] == "torch"
    assert out["prev1"] is None
    assert out["after_ref"] == ["ref", "ref"]
    assert out["prev2"] == "ref"
    assert out["after_cuda"] == "compiled"
    assert "mamba_ssm.set_backend=compiled" in out["forced"] and "not installed" in out["forced"]
    assert "'fast'" in out["bad"] and "auto, compiled, cuda, triton, torch, ref" in out["bad"]
    assert out["still"] == "compiled"
    assert "'selective_scan_typo'" in out["bad_op"] and "selective_scan" in out["bad_op"]
    assert out["prev3"] == "compiled"
    assert out["restored"] == "torch"


def test_fallback_for_call(missing_root):
    proc = S.run_prog(missing_root, "fallback_for_call")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = S.last_json(proc.stdout)
    assert out["a"] == "torch" and out["b"] == "torch"
    assert len(out["warnings"]) == 1 and "d_state 512 exceeds the kernel's 256" in out["warnings"][0]
    assert "d_state 512 exceeds the kernel's 256" in out["forced"]
    assert "compiled" in out["forced"]


# --- a compatible, loadable _C (a real shared object made here) -----------------------------------


def _loadable_package(tmp_path, kernels, sass=("sm_90",), ptx=()):
    root = S.make_package(tmp_path)
    info = S.build_info(kernels=list(kernels), sass_archs=list(sass), ptx_archs=list(ptx))
    S.compile_so(root / "mamba_ssm" / "_C.abi3.so", info)
    return root


def test_loaded_module_and_device_coverage(tmp_path):
    t = S.torch_facts()
    if not t["cuda"]:
        pytest.skip("coverage of CUDA devices needs a CUDA torch (this torch is CPU-only)")
    root = _loadable_package(tmp_path, ["cpu", "cuda"], sass=["sm_80", "sm_90"], ptx=["compute_90"])
    marker = tmp_path / "marker"
    compiled_flag = tmp_path / "compiled_imported"
    (root / "mamba_ssm" / "_families" / "selective_scan").mkdir(parents=True, exist_ok=True)
    shutil.copy(
        os.path.join(S.STAND_INS, "compiled_records_import.py"),
        root / "mamba_ssm" / "_families" / "selective_scan" / "compiled.py",
    )
    env = S.child_env(
        root, MAMBA_SSM_TEST_DLOPEN_MARKER=marker, MAMBA_SSM_TEST_COMPILED_IMPORTED=compiled_flag
    )
    proc = S.run_prog(root, "device_coverage", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = S.last_json(proc.stdout)
    assert out["load"]["loaded"] is True and out["load"]["kind"] == "loaded", out["load"]
    assert marker.read_text() == "loaded"  # really dlopened
    assert out["cuda_initialized"] is False
    cov = out["coverage"]
    # NVIDIA's rules: SASS runs on the same major with an equal or newer minor; PTX JIT-compiles for
    # any newer capability.
    assert cov["cpu"] is None
    assert cov["cuda:0"] is None  # 8.0: sm_80 SASS
    assert cov["cuda:1"] is None  # 8.6: sm_80 SASS runs on 8.6
    assert cov["cuda:2"] is not None and "7.5" in cov["cuda:2"]  # older than every target
    assert cov["cuda:3"] is None  # 12.0: compute_90 PTX JIT-compiles
    assert out["plans"] == {
        "cpu": "compiled",
        "cuda:0": "compiled",
        "cuda:1": "compiled",
        "cuda:2": "torch",
        "cuda:3": "compiled",
    }
    assert sorted(out["calls"]) == [0, 1, 2, 3]  # once per device, cached afterwards
    assert compiled_flag.read_text() == "imported"


def test_loaded_module_without_cpu_kernel_falls_back_on_cpu(tmp_path):
    root = _loadable_package(tmp_path, ["cuda"])
    proc = S.run_prog(root, "dispatch_probe")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = S.last_json(proc.stdout)
    assert out["load"]["loaded"] is True
    assert out["first"]["value"] == "torch"
    (w,) = out["first"]["warnings"]
    assert "no CPU kernel" in w["message"]
    assert "compute capability" not in w["message"]
    # install-kernels only where an index has this version; a development version is rebuilt from source
    from packaging.version import Version

    with open(os.path.join(S.REPO_ROOT, "mamba_ssm", "_version.py")) as fh:
        dev = Version(re.search(r'__version__\s*=\s*"([^"]+)"', fh.read()).group(1)).is_devrelease
    assert ("python -m mamba_ssm install-kernels" in w["message"]) is not dev
    assert ("build from source, which builds the CPU kernel: `" in w["message"]) is dev
    forced = probe(root, MAMBA_SSM_BACKEND="compiled")
    assert forced["first"]["error"]["type"] == "RuntimeError"
    assert "no CPU kernel" in forced["first"]["error"]["message"]


def test_rocm_gfx_coverage(tmp_path):
    root = S.make_package(tmp_path)
    info = S.build_info(
        torch_version="2.14.1+rocm6.2",
        torch_cuda=None,
        torch_hip="6.2.41133-dd7f95766",
        nvcc_version=None,
        hipcc_version="6.2.41133",
        sass_archs=[],
        ptx_archs=[],
        gfx_archs=["gfx90a", "gfx942"],
        kernels=["cpu", "hip"],
    )
    S.compile_so(root / "mamba_ssm" / "_C.abi3.so", info)
    proc = S.run_prog(root, "rocm_coverage")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = S.last_json(proc.stdout)
    assert out["load"]["loaded"] is True, out["load"]
    cov = out["coverage"]
    assert cov["cpu"] is None
    assert cov["cuda:0"] is None  # gfx90a (feature suffixes ignored) is in the build
    assert "gfx1100" in cov["cuda:1"] and "gfx90a" in cov["cuda:1"] and "gfx942" in cov["cuda:1"]


def test_loaded_module_that_registers_no_ops_falls_back(tmp_path):
    """A _C that loads but registers no mamba_ssm ops (e.g. a partial build): the real Python face
    refuses to import, and dispatch falls back with that reason."""
    root = _loadable_package(tmp_path, ["cpu"])
    if not (root / "mamba_ssm" / "_families" / "selective_scan" / "compiled.py").exists():
        pytest.skip("mamba_ssm/_families/selective_scan/compiled.py (kernels part) is not in the tree yet")
    out = probe(root)
    assert out["load"]["loaded"] is True
    assert out["first"]["value"] == "torch"
    (w,) = out["first"]["warnings"]
    assert "mamba_ssm._families.selective_scan.compiled failed to import" in w["message"]
    assert "selective_scan_fwd" in w["message"]


def test_selective_scan_fn_honours_the_setting(missing_root, tmp_path):
    import torch

    saved = tmp_path / "args.pt"
    proc = S.run_prog(missing_root, "ops_under_settings", args=[str(saved)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = S.last_json(proc.stdout)
    if "unavailable" in out:
        pytest.skip(f"selective_scan_fn is not importable yet (ops part): {out['unavailable']}")
    assert out["compiled"]["y"] is None
    assert (
        out["reason"] in out["compiled"]["error"] and "MAMBA_SSM_BACKEND=compiled" in out["compiled"]["error"]
    )
    ref = S.selective_scan_reference(*torch.load(saved))
    for setting in ("ref", "torch"):
        assert out[setting]["error"] is None and out[setting]["warnings"] == []
        torch.testing.assert_close(
            torch.tensor(out[setting]["y"], dtype=torch.float64), ref, rtol=1e-4, atol=1e-5
        )


def test_dispatch_inside_torch_compile_fullgraph(missing_root):
    proc = S.run_prog(missing_root, "dispatch_in_compile")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = S.last_json(proc.stdout)
    assert out["loaded_before"] is False
    assert out["y"] == [1.0, 1.0, 1.0]
    assert len(out["warnings"]) == 1 and out["reason"] in out["warnings"][0]
    assert out["forced"] and out["reason"] in out["forced"] and "MAMBA_SSM_BACKEND=compiled" in out["forced"]


def test_warning_names_the_users_line(missing_root):
    script = S.prog("warning_user_line")
    with open(script) as fh:
        lines = fh.read().splitlines()
    expected = [[script, lines.index(line) + 1] for line in lines if "USER LINE" in line]
    assert len(expected) == 2
    proc = S.run_prog(missing_root, "warning_user_line")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert S.last_json(proc.stdout) == expected


def test_warning_through_a_module_call_names_the_users_line(missing_root):
    # ``block(x)`` runs through torch/nn/modules/module.py: the warning must skip torch's frames as well
    # as mamba_ssm's and name the script's line, not torch's.
    script = S.prog("warning_user_line_module")
    with open(script) as fh:
        line = fh.read().splitlines().index("    block(x)  # USER LINE") + 1
    proc = S.run_prog(missing_root, "warning_user_line_module")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    where = S.last_json(proc.stdout)
    assert where, proc.stdout + proc.stderr  # at least one fallback warning (missing_root has no _C)
    assert all(w == [script, line] for w in where), where
