"""Each way ``mamba_ssm._C`` can be broken, in its own subprocess against the real torch here.

For every kind: ``import mamba_ssm`` works and leaves torch unimported and CUDA uninitialised, the
loader reports the kind with the exact reason and a fix, ``selective_scan_fn`` runs on the PyTorch
fallback and matches a float64 sequential reference, the fallback warning comes once, and doctor
exits 1 with the same reason. Incompatible builds are proven never dlopened (their constructor would
write a marker file).
"""

import importlib.util
import os

import pytest

_spec = importlib.util.spec_from_file_location(
    "mamba_ssm_test_loader_support", os.path.join(os.path.dirname(__file__), "test_loader_support.py")
)
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)


def _other_minor_version(version):
    from packaging.version import Version

    v = Version(version)
    minor = v.minor - 1 if v.minor > 0 else v.minor + 1
    local = f"+{v.local}" if v.local else ""
    return f"{v.major}.{minor}.0{local}"


def _make(kind, path):
    """Put a broken ``_C`` of ``kind`` at ``path``; return the substrings its reason must contain."""
    t = S.torch_facts()
    if kind == "missing":
        return ["not installed", "no _C*.so"]
    if kind == "garbage":
        S.write_garbage(path)
        return [str(path), "build-info record cannot be read", "not loaded"]
    if kind == "not_elf":
        S.write_block_not_elf(path, S.build_info())
        return [str(path), "invalid ELF header"]
    if kind == "undefined_symbol":
        S.compile_so(path, S.build_info(), undefined_symbol=True)
        return [str(path), f"undefined symbol: {S.UNDEFINED_SYMBOL}"]
    if kind == "torch_minor":
        other = _other_minor_version(t["version"])
        S.compile_so(path, S.build_info(torch_version=other))
        from packaging.version import Version

        v, o = Version(t["version"]), Version(other)
        return [str(path), f"{o.major}.{o.minor}", f"{v.major}.{v.minor}", "not loaded"]
    if kind == "cxx11_abi":
        S.compile_so(path, S.build_info(cxx11_abi=not t["cxx11_abi"]))
        return [
            f"_GLIBCXX_USE_CXX11_ABI={int(not t['cxx11_abi'])}",
            f"_GLIBCXX_USE_CXX11_ABI={int(t['cxx11_abi'])}",
            "not loaded",
        ]
    if kind == "cuda_major":
        # A CUDA build for a CUDA major that is not this torch's (or any CUDA for a CPU torch).
        other_cuda = "12.8" if (t["cuda"] or "").split(".")[0] != "12" else "13.0"
        tag = "cu" + other_cuda.replace(".", "")
        base = t["version"].split("+")[0]
        S.compile_so(
            path, S.build_info(torch_version=f"{base}+{tag}", torch_cuda=other_cuda, kernels=["cpu", "cuda"])
        )
        return [other_cuda, "not loaded"]
    raise AssertionError(kind)


REBUILD = "rebuild"  # the copy's rebuild command (S.rebuild_fix: pinned for a release, else from source)
KINDS = {
    # kind: (loader kind, what the fix must name)
    "missing": ("missing", "python -m mamba_ssm install-kernels"),
    "garbage": ("bad-build-info", REBUILD),
    "not_elf": ("load-error", REBUILD),
    "undefined_symbol": ("load-error", REBUILD),
    "torch_minor": ("incompatible", REBUILD),
    "cxx11_abi": ("incompatible", REBUILD),
    "cuda_major": ("incompatible", REBUILD),
}


@pytest.fixture(scope="module", params=sorted(KINDS))
def broken(request, tmp_path_factory):
    """Run the child once per kind; return (kind, expected reason parts, child output, tensors path,
    marker path, what the fix must name)."""
    kind = request.param
    tmp = tmp_path_factory.mktemp(f"broken_{kind}")
    root = S.make_package(tmp)
    so = root / "mamba_ssm" / "_C.abi3.so"
    expected = _make(kind, so)
    marker = tmp / "dlopen_marker"
    tensors = tmp / "tensors.pt"
    env = S.child_env(root, MAMBA_SSM_TEST_DLOPEN_MARKER=marker)
    proc = S.run_prog(root, "broken_module_child", args=[str(tensors)], env=env)
    assert proc.returncode == 0, f"child failed for {kind}:\n{proc.stdout}\n{proc.stderr}"
    fix = S.rebuild_fix(root) if KINDS[kind][1] == REBUILD else KINDS[kind][1]
    return kind, expected, S.last_json(proc.stdout), tensors, marker, fix


def test_import_is_light_and_loader_reports_reason(broken):
    kind, expected, out, _, marker, fix = broken
    assert out["torch_imported_by_import"] is False
    assert out["cuda_initialized_after_import"] is False
    load = out["load"]
    assert load["kind"] == KINDS[kind][0], load
    assert load["loaded"] is False
    assert load["found"] is (kind != "missing")
    for part in expected:
        assert part in load["reason"], (part, load["reason"])
    assert fix in load["fix"], load["fix"]
    if kind in ("torch_minor", "cxx11_abi", "cuda_major"):
        assert load["incompatibilities"], load
        assert load["build_info"] is not None
        assert not marker.exists(), "an incompatible library was dlopened"
    if kind == "undefined_symbol":
        assert load["build_info"]["torch_version"] == S.torch_facts()["version"]
    assert out["plan"]["backend"] == "torch"
    assert out["plan"]["reason"] == load["reason"]


def test_doctor_exit_1_with_reason_and_fix(broken):
    kind, expected, out, _, _, fix = broken
    assert out["doctor_code"] == 1
    doc = out["doctor"]
    assert doc["exit_code"] == 1 and doc["status"] == "fallback"
    assert doc["compiled_module"]["reason"] == out["load"]["reason"]
    assert doc["compiled_module"]["kind"] == KINDS[kind][0]
    reasons = [p["reason"] for p in doc["problems"]]
    assert out["load"]["reason"] in reasons, reasons
    problem = doc["problems"][reasons.index(out["load"]["reason"])]
    assert fix in problem["fix"]
    assert problem["devices"] == ["cpu"] + [g["device"] for g in doc["gpus"]["devices"]]
    cpu = [d for d in doc["devices"] if d["device"] == "cpu"][0]
    assert cpu["ops"]["selective_scan"]["backend"] == "torch"
    assert cpu["compiled_active"] is False


def test_ops_run_on_fallback(broken):
    import torch

    kind, _, out, tensors, _, fix = broken
    if "ops_unavailable" in out:
        pytest.skip(f"mamba_ssm.selective_scan_fn is not importable yet (ops part): {out['ops_unavailable']}")
    assert out["cuda_initialized_after_ops"] is False
    saved = torch.load(tensors)
    u, delta, A, B, C, D, z, delta_bias = saved["inputs"]
    ref = S.selective_scan_reference(u, delta, A, B, C, D, z, delta_bias, delta_softplus=True)
    for y in (saved["y1"], saved["y2"]):
        assert y.dtype == torch.float32
        torch.testing.assert_close(y.double(), ref, rtol=1e-4, atol=1e-5)
    # One fallback warning for two calls, carrying the loader's reason and fix.
    assert len(out["warnings"]) == 1, out["warnings"]
    w = out["warnings"][0]
    assert w["user_warning"] is True
    assert out["load"]["reason"] in w["message"]
    assert fix in w["message"]
    assert "MAMBA_SSM_NO_FALLBACK_WARNING" in w["message"]
