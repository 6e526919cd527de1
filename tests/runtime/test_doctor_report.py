"""``python -m mamba_ssm doctor``: JSON fields against the real torch / packaging here, exit codes
0 / 1 / 2, the text report, the recorded install decision, install-kernels delegation and the console
script's target. Every run is a subprocess against a temporary copy of the package."""

import ctypes
import importlib.util
import json
import os
import platform
import re
import shutil
import subprocess
import sys

import pytest

_spec = importlib.util.spec_from_file_location(
    "mamba_ssm_test_loader_support", os.path.join(os.path.dirname(__file__), "test_loader_support.py")
)
S = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(S)

TOP_LEVEL_KEYS = {
    "schema",
    "package",
    "python",
    "torch",
    "gpus",
    "driver",
    "compiled_module",
    "install_decision",
    "backend",
    "devices",
    "problems",
    "status",
    "exit_code",
}


@pytest.fixture(scope="module")
def missing_root(tmp_path_factory):
    return S.make_package(tmp_path_factory.mktemp("doctor_missing"))


def doctor_json(root, env=None):
    proc = S.run_module(root, ["doctor", "--json"], env=env)
    try:
        report = json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(
            f"doctor --json printed no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        )
    return proc.returncode, report


def _package_version():
    with open(os.path.join(S.REPO_ROOT, "mamba_ssm", "_version.py")) as fh:
        return re.search(r'__version__\s*=\s*"([^"]+)"', fh.read()).group(1)


def test_json_against_real_environment(missing_root):
    import torch
    from packaging import tags

    rc, report = doctor_json(missing_root)
    assert rc == 1 and report["exit_code"] == 1 and report["status"] == "fallback"
    assert set(report) == TOP_LEVEL_KEYS
    assert report["package"]["version"] == _package_version()
    assert report["package"]["path"] == str(missing_root / "mamba_ssm")

    t = report["torch"]
    assert t["importable"] is True
    assert t["version"] == torch.__version__
    assert t["cuda"] == torch.version.cuda
    assert t["hip"] == torch.version.hip
    assert t["cxx11_abi"] is bool(torch._C._GLIBCXX_USE_CXX11_ABI)

    py = report["python"]
    assert py["version"] == platform.python_version()
    assert py["interpreter_tag"] == f"{tags.interpreter_name()}{tags.interpreter_version()}"
    assert py["most_specific_tag"] == str(next(iter(tags.sys_tags())))
    expected_platforms = []
    for tag in tags.platform_tags():
        if tag not in expected_platforms:
            expected_platforms.append(tag)
        if len(expected_platforms) == 5:
            break
    assert py["platform_tags"] == expected_platforms
    assert py["abi3_compatible"] is (sys.implementation.name == "cpython")

    gpus = report["gpus"]
    assert gpus["count"] == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    assert [d["device"] for d in report["devices"]] == ["cpu"] + [f"cuda:{i}" for i in range(gpus["count"])]

    drv = report["driver"]
    smi = shutil.which("nvidia-smi")
    if smi:
        first = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True
        ).stdout.split()
        if first:
            assert drv["nvidia_driver_version"] == first[0]
    else:
        try:
            ctypes.CDLL("libnvidia-ml.so.1")
        except OSError:  # no NVIDIA driver on this machine
            assert drv == {"nvidia_driver_version": None, "source": None, "cuda_driver_api_version": None}

    cm = report["compiled_module"]
    assert cm["found"] is False and cm["loaded"] is False and cm["kind"] == "missing"
    assert cm["reason"] and "install-kernels" in cm["fix"]
    assert report["backend"] == {"requested": "auto", "source": "default", "env": None, "error": None}
    cpu = report["devices"][0]
    assert cpu["ops"]["selective_scan"] == {
        "backend": "torch",
        "reason": cm["reason"],
        "fix": cm["fix"],
        "error": False,
    }
    assert report["install_decision"]["recorded"] is False


def test_text_report(missing_root):
    import torch

    proc = S.run_module(missing_root, ["doctor"])
    assert proc.returncode == 1, proc.stdout + proc.stderr
    out = proc.stdout
    assert f"mamba-ssm {_package_version()}" in out
    assert f"torch {torch.__version__}" in out
    assert "Compiled module mamba_ssm._C:" in out and "found: no" in out and "loaded: no" in out
    assert "Status: FALLBACK" in out and "(exit 1)" in out
    from mamba_ssm import _advice

    if _advice.is_on_an_index(_package_version()):
        assert "fix: run `python -m mamba_ssm install-kernels`" in out
    else:  # a development version: no index has it, so the rebuild leads
        assert f"fix: mamba-ssm {_package_version()} is a development version" in out
        assert "build the kernels from source with `" in out
    assert re.search(r"^\s+selective_scan\s+torch$", out, re.MULTILINE), out
    # the missing _C leaves every op with a kernel in it on PyTorch code here, the conv ops included
    (where,) = re.findall(
        r"^  - the compiled module mamba_ssm._C is not installed .*\[(.*)\]$", out, re.MULTILINE
    )
    assert where.split(", ") == [
        "selective_scan",
        "mamba_inner",
        "causal_conv1d",
        "causal_conv1d_update",
        "cpu",
    ]


def test_bad_backend_env_is_broken(missing_root):
    rc, report = doctor_json(missing_root, S.child_env(missing_root, MAMBA_SSM_BACKEND="fastest"))
    assert rc == 2 and report["status"] == "broken"
    assert "'fastest'" in report["backend"]["error"]
    assert any("'fastest'" in p["reason"] and p["severity"] == "broken" for p in report["problems"])


def test_forced_compiled_unavailable_is_broken(missing_root):
    rc, report = doctor_json(missing_root, S.child_env(missing_root, MAMBA_SSM_BACKEND="cuda"))
    assert rc == 2 and report["status"] == "broken"
    assert report["backend"]["requested"] == "compiled"
    op = report["devices"][0]["ops"]["selective_scan"]
    assert op["backend"] is None and op["error"] is True
    (p,) = [p for p in report["problems"] if p["severity"] == "broken"]
    assert report["compiled_module"]["reason"] in p["reason"]
    assert "unset MAMBA_SSM_BACKEND" in p["fix"]
    assert p["ops"] == ["selective_scan", "mamba_inner"] and p["devices"][0] == "cpu"


def test_broken_torch_exit_2(tmp_path):
    root = S.make_package(tmp_path)
    fake = tmp_path / "broken_torch"
    (fake / "torch").mkdir(parents=True)
    (fake / "torch" / "__init__.py").write_text(
        'raise ImportError("libtorch_cpu.so: cannot open shared object file (simulated broken torch)")\n'
    )
    env = S.child_env(root)
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(fake)])
    rc, report = doctor_json(root, env)
    assert rc == 2 and report["status"] == "broken"
    assert report["torch"]["importable"] is False
    assert "simulated broken torch" in report["torch"]["error"]
    assert any("torch cannot be imported" in p["reason"] for p in report["problems"])
    assert report["package"]["version"] == _package_version()


FAKE_COMPILED_PY = '''"""Test stand-in for the kernels part's Python face (the fabricated _C registers no ops)."""
'''


def _loadable_root(tmp_path, kernels):
    root = S.make_package(tmp_path)
    S.compile_so(root / "mamba_ssm" / "_C.abi3.so", S.build_info(kernels=kernels))
    (root / "mamba_ssm" / "_families" / "selective_scan").mkdir(parents=True, exist_ok=True)
    (root / "mamba_ssm" / "_families" / "selective_scan" / "compiled.py").write_text(FAKE_COMPILED_PY)
    return root


def test_exit_0_when_compiled_runs_everywhere_and_1_when_torch_is_chosen(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a fabricated _C carries no kernel for the GPUs present; exit 0 is checked without GPUs")
    root = _loadable_root(tmp_path, ["cpu"])
    rc, report = doctor_json(root)
    assert rc == 0 and report["status"] == "ok" and report["problems"] == []
    assert report["compiled_module"]["loaded"] is True
    assert report["compiled_module"]["build_info"]["torch_version"] == torch.__version__
    assert report["devices"][0]["compiled_active"] is True
    assert report["devices"][0]["ops"]["selective_scan"]["backend"] == "compiled"
    assert report["devices"][0]["ops"]["selective_state_update"]["backend"] == "torch"

    rc, report = doctor_json(root, S.child_env(root, MAMBA_SSM_BACKEND="torch"))
    assert rc == 1 and report["status"] == "fallback"
    (p,) = report["problems"]
    assert "MAMBA_SSM_BACKEND=torch" in p["reason"] and "unset MAMBA_SSM_BACKEND" in p["fix"]


def test_cpu_without_cpu_kernel_is_fallback(tmp_path):
    root = _loadable_root(tmp_path, ["cuda"])
    rc, report = doctor_json(root)
    assert rc == 1
    assert report["compiled_module"]["loaded"] is True
    assert "no CPU kernel" in report["devices"][0]["coverage"]


def _root_with_recorded_decision(tmp_path, kind):
    """A package copy (skipped while the resolver's mamba_ssm._install.record is absent), its child
    environment, and the path of the ``kind`` decision that progs/record_decision.py wrote and printed last."""
    root = S.make_package(tmp_path)
    if not (root / "mamba_ssm" / "_install" / "record.py").exists():
        pytest.skip("the resolver's mamba_ssm._install.record is not in the tree yet")
    env = S.child_env(root)
    proc = S.run_prog(root, "record_decision", args=[kind], env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return root, env, proc.stdout.strip().splitlines()[-1]


def test_deferred_install_decision_is_shown_and_hinted(tmp_path):
    root, env, recorded_at = _root_with_recorded_decision(tmp_path, "deferred")
    assert recorded_at.startswith(env["MAMBA_SSM_DECISION_DIR"])

    rc, report = doctor_json(root, env)
    assert rc == 1
    dec = report["install_decision"]
    assert dec["resolver_present"] is True and dec["recorded"] is True and dec["kernels_deferred"] is True
    assert dec["decision"]["final_mode"] == "deferred"
    assert dec["decision"]["message"] == "torch was being installed by the same command"
    assert (
        "deferred" in report["compiled_module"]["fix"]
        and "install-kernels" in report["compiled_module"]["fix"]
    )
    text = S.run_module(root, ["doctor"], env=env).stdout
    assert "Install decision (recorded by the resolver, " in text and "\n  final mode: deferred\n" in text

    proc = S.run_prog(root, "fallback_warnings", env=env)
    (message,) = S.last_json(proc.stdout)
    assert "deferred" in message and "python -m mamba_ssm install-kernels" in message


def test_recorded_decision_is_readable_lines(tmp_path):
    """doctor's text shows the decision as lines (mode, wheel, index, when, rejected with reasons), not
    JSON; --json keeps the record as it is."""
    root, env, path = _root_with_recorded_decision(tmp_path, "prebuilt")
    text = S.run_module(root, ["doctor"], env=env).stdout
    start = text.index("Install decision (recorded by the resolver, 2026-11-29T12:34:56Z):\n")
    section = text[start : text.index("Backend requested:")].splitlines()
    assert section[1:] == [
        "  final mode: prebuilt (resolver status: chosen)",
        "  wheel: mamba_ssm-2.4.0+cu13torch2.14cxx11abitrue-cp39-abi3-manylinux_2_34_x86_64.whl (sha256 "
        + "ab" * 32
        + ")",
        "    installed as: mamba_ssm-2.4.0-cp39-abi3-manylinux_2_34_x86_64.whl",
        "  index: https://example.invalid/whl",
        "  package version: 2.4.0",
        "  environment: torch 2.14.1+cu130, Python 3.11, linux_x86_64",
        "  looked for: cu13torch2.14cxx11abiTRUE",
        "  rejected candidates (2):",
        "    - mamba_ssm-2.4.0+cu12torch2.14cxx11abitrue-cp39-abi3-manylinux_2_34_x86_64.whl: "
        "built for CUDA 12, torch has CUDA 13.0",
        "    - mamba_ssm-2.4.0+cu13torch2.13cxx11abitrue-cp39-abi3-manylinux_2_34_x86_64.whl: "
        "built for torch 2.13, torch is 2.14.1+cu130",
        "  message: Chose the cu13 wheel.",
        f"  record: {path}",
    ]
    _, report = doctor_json(root, env)
    dec = report["install_decision"]["decision"]
    assert dec["decision"]["rejected"][1]["reason"] == "built for torch 2.13, torch is 2.14.1+cu130"
    assert dec["final_mode"] == "prebuilt" and dec["path"] == path and dec["sha256"] == "ab" * 32


def test_install_kernels_delegates_and_degrades(tmp_path):
    root = S.make_package(tmp_path)
    if not (root / "mamba_ssm" / "_install" / "install_kernels.py").exists():
        pytest.skip("the resolver's mamba_ssm._install.install_kernels is not in the tree yet")
    proc = S.run_module(root, ["install-kernels", "--help"])
    assert proc.returncode == 0, proc.stderr
    assert "usage: python -m mamba_ssm install-kernels" in proc.stdout
    (root / "mamba_ssm" / "_install" / "install_kernels.py").unlink()
    proc = S.run_module(root, ["install-kernels"])
    assert proc.returncode == 2
    assert "not part of this install" in proc.stderr and S.rebuild_fix(root) in proc.stderr, proc.stderr


def test_unknown_command_and_usage(missing_root):
    proc = S.run_module(missing_root, ["frobnicate"])
    assert proc.returncode == 2 and "'frobnicate'" in proc.stderr and "doctor" in proc.stderr
    proc = S.run_module(missing_root, ["--help"])
    assert proc.returncode == 0 and "doctor [--json]" in proc.stdout


def test_console_script_target(missing_root):
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = pytest.importorskip("tomli")
    with open(os.path.join(S.REPO_ROOT, "pyproject.toml"), "rb") as fh:
        scripts = tomllib.load(fh)["project"]["scripts"]
    target = scripts["mamba-ssm"]
    module, func = target.split(":")
    # What the generated `mamba-ssm` script does: import the target, sys.exit(func()).
    code = f"import sys; from {module} import {func} as f; sys.argv = ['mamba-ssm', 'doctor', '--json']; sys.exit(f())"
    proc = S.run_python(missing_root, code)
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["exit_code"] == 1


def test_real_build_if_present(tmp_path):
    """With the repository's own build of _C (made by ci/test.sh / the kernels part), copied: it loads."""
    import glob
    import shutil

    import torch

    built = sorted(glob.glob(os.path.join(S.REPO_ROOT, "mamba_ssm", "_C*.so")))
    if not built:
        pytest.skip(
            "no mamba_ssm/_C*.so built in the repository (pip install --no-build-isolation -e . makes one)"
        )
    root = S.make_package(tmp_path)
    shutil.copy2(built[0], root / "mamba_ssm" / os.path.basename(built[0]))
    rc, report = doctor_json_args(root, ["--check"])
    cm = report["compiled_module"]
    assert cm["loaded"] is True, cm
    assert all(c["ok"] for c in report["checks"]), report["checks"]
    assert cm["build_info"]["torch_version"] == torch.__version__
    if "cpu" in cm["build_info"]["kernels"] and not torch.cuda.is_available():
        assert rc == 0, report["problems"]
        assert report["devices"][0]["ops"]["selective_scan"]["backend"] == "compiled"
    if "cpu" not in cm["build_info"]["kernels"]:
        return
    # A CPU call through the dispatcher lands on the compiled kernel, warns nothing, matches the reference.
    tensors = tmp_path / "tensors.pt"
    proc = S.run_prog(root, "compiled_selective_scan", args=[str(tensors)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = S.last_json(proc.stdout)
    assert out == {"plan": "compiled", "warnings": []}
    saved = torch.load(tensors)
    ref = S.selective_scan_reference(*saved["inputs"], delta_softplus=True)
    torch.testing.assert_close(saved["y"].double(), ref, rtol=1e-4, atol=1e-5)


def test_check_runs_the_op_on_each_device(missing_root):
    rc, report = doctor_json_args(missing_root, ["--check"])
    assert rc == 1
    (c,) = report["checks"]
    assert c["device"] == "cpu" and c["backend"] == "torch" and c["ok"] is True and c["error"] is None
    assert c["max_abs_err"] <= c["tolerance"]


def test_check_catches_a_wrong_kernel(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("the fabricated _C has no kernel for the GPUs present")
    root = _loadable_root(tmp_path, ["cpu"])
    shutil.copy(
        os.path.join(S.STAND_INS, "compiled_zeros.py"),
        root / "mamba_ssm" / "_families" / "selective_scan" / "compiled.py",
    )
    rc, report = doctor_json_args(root, ["--check"])
    assert rc == 2 and report["status"] == "broken"
    (c,) = report["checks"]
    assert c["backend"] == "compiled" and c["ok"] is False and c["max_abs_err"] > c["tolerance"]
    (p,) = report["problems"]
    assert "failed the check against the float64 reference" in p["reason"]
    assert "MAMBA_SSM_BACKEND=torch" in p["fix"]


def doctor_json_args(root, args, env=None):
    proc = S.run_module(root, ["doctor", "--json"] + list(args), env=env)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError:
        raise AssertionError(f"doctor printed no JSON (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")


def test_gpus_listed_and_each_checked_against_the_build(tmp_path):
    t = S.torch_facts()
    if not t["cuda"]:
        pytest.skip("needs a CUDA torch (the fabricated build is a CUDA build matching it)")
    root = S.make_package(tmp_path)
    S.compile_so(
        root / "mamba_ssm" / "_C.abi3.so",
        S.build_info(kernels=["cpu", "cuda"], sass_archs=["sm_80", "sm_90"], ptx_archs=[]),
    )
    (root / "mamba_ssm" / "_families" / "selective_scan").mkdir(parents=True, exist_ok=True)
    (root / "mamba_ssm" / "_families" / "selective_scan" / "compiled.py").write_text(FAKE_COMPILED_PY)
    proc = S.run_prog(root, "doctor_fake_gpus")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    report = json.loads(runs[0]["out"])
    assert runs[0]["code"] == 1 and report["exit_code"] == 1
    gpus = report["gpus"]
    assert gpus["count"] == 2
    assert [
        (g["device"], g["name"], g["compute_capability"], g["arch"], g["total_memory_mib"])
        for g in gpus["devices"]
    ] == [
        ("cuda:0", "NVIDIA H200", "9.0", "sm_90", 141 * 1024),
        ("cuda:1", "Tesla T4", "7.5", "sm_75", 16 * 1024),
    ]
    by_device = {d["device"]: d for d in report["devices"]}
    assert list(by_device) == ["cpu", "cuda:0", "cuda:1"]
    assert by_device["cpu"]["compiled_active"] and by_device["cuda:0"]["compiled_active"]
    assert by_device["cuda:1"]["compiled_active"] is False
    assert by_device["cuda:1"]["ops"]["selective_scan"]["backend"] == "torch"
    assert "7.5" in by_device["cuda:1"]["coverage"]
    (p,) = report["problems"]
    # no kernel of the build runs on sm_75: the conv ops run PyTorch code there too, for the same reason
    assert p["devices"] == ["cuda:1"]
    assert p["ops"] == ["selective_scan", "mamba_inner", "causal_conv1d", "causal_conv1d_update"]
    assert [by_device["cuda:1"]["ops"][op]["backend"] for op in p["ops"]] == ["torch"] * 4
    from mamba_ssm import _advice

    assert "7.5" in p["reason"] and "MAMBA_CUDA_ARCHS=75 MAMBA_FORCE_BUILD=TRUE " in p["fix"]
    # install-kernels is offered only where an index has this version (a development version: none)
    assert ("install-kernels" in p["fix"]) is _advice.is_on_an_index(_package_version())
    text = runs[1]["out"]
    assert runs[1]["code"] == 1
    assert "cuda:0: NVIDIA H200, compute capability 9.0 (sm_90)" in text
    assert "cuda:1: Tesla T4, compute capability 7.5 (sm_75)" in text
