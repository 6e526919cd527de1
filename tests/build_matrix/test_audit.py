"""audit: small fabricated wheels (a tiny shared object compiled here, carrying real build info and,
for CUDA cells, real SASS from nvcc) that are right in every respect but one; the audit must pass the
good one and name exactly what is wrong in each bad one.  The runtime check is exercised by the slow
real-build test (test_build_slow.py)."""

import base64
import dataclasses
import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from build_matrix import audit, build
from build_matrix import matrix as mx
from mamba_ssm._compat import buildinfo, variant

sys.path.insert(0, str(Path(__file__).parent))
from _compiled import SRC, compile_so

LABEL = "cu13torch2.9cxx11abiTRUE"
CELL_ID = f"{LABEL}-x86_64"
CPU_CELL_ID = "cputorch2.9cxx11abiTRUE-x86_64"
STABLE_CELL_ID = "cu13torch2.10stable-x86_64"


def _info(**over):
    fields = dict(
        package_version=f"2.4.0.dev0+{LABEL.lower()}",
        torch_version="2.9.1+cu130",
        torch_cuda="13.0",
        nvcc_version="13.0",
        cxx11_abi=True,
        sass_archs=["sm_90"],
        ptx_archs=[],
        python_tag="cp310-abi3",
        platform="linux-x86_64",
        kernels=["cpu", "cuda"],
    )
    fields.update(over)
    return buildinfo.BuildInfo(**fields)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(
    out: Path,
    so: Path,
    version=f"2.4.0.dev0+{LABEL}",
    platform_tag=None,
    meta_version=None,
    extra=None,
    corrupt_record=False,
    python_tag="cp310",
) -> Path:
    """A wheel like setup.py + auditwheel produce; platform tag defaults to what auditwheel grants."""
    from packaging.version import Version

    v = str(Version(version))
    if platform_tag is None:  # ask auditwheel which manylinux tag the symbols allow
        probe = make_wheel(
            out / "probe",
            so,
            version,
            platform_tag="linux_x86_64",
            meta_version=meta_version,
            python_tag=python_tag,
        )
        show = json.loads(
            subprocess.run(
                [sys.executable, "-m", "auditwheel", "show", "--json", str(probe)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        platform_tag = show["sym_tag"]
        shutil.rmtree(out / "probe")
    dist = f"mamba_ssm-{v}.dist-info"
    files = {
        "mamba_ssm/__init__.py": b"__version__ = '2.4.0.dev0'\n",
        "mamba_ssm/_C.abi3.so": so.read_bytes(),
        f"{dist}/METADATA": f"Metadata-Version: 2.4\nName: mamba-ssm\nVersion: {meta_version or v}\n".encode(),
        f"{dist}/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\n"
            f"Tag: {python_tag}-abi3-{platform_tag}\n"
        ).encode(),
    }
    files.update(extra or {})
    record = "".join(f"{n},sha256={_b64(d)},{len(d)}\n" for n, d in files.items())
    if corrupt_record:
        record = record.replace(_b64(files["mamba_ssm/__init__.py"]), _b64(b"something else"))
    files[f"{dist}/RECORD"] = (record + f"{dist}/RECORD,,\n").encode()
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"mamba_ssm-{v}-{python_tag}-abi3-{platform_tag}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for n, d in files.items():
            zf.writestr(n, d)
    return path


@pytest.fixture(scope="module")
def plan():
    return mx.load_plan()


@pytest.fixture(scope="module")
def sm90_so(tmp_path_factory):
    return compile_so(tmp_path_factory.mktemp("sm90"), _info(), ["arch=compute_90,code=sm_90"])


def run_audit(wheel, cell, archs="90"):
    return audit.audit_wheel(wheel, cell, archs=archs, runtime=False)


def test_good_wheel_passes(tmp_path, plan, sm90_so):
    wheel = make_wheel(tmp_path, sm90_so)
    rep = run_audit(wheel, plan.cell(CELL_ID))
    assert rep.ok, rep.findings
    assert set(rep.passed) == {
        "file name",
        "metadata",
        "shared objects",
        "size",
        "device code",
        "build info",
        "auditwheel show",
        "abi3audit",
    }
    assert rep.facts["abi3audit"] == {"objects": 1, "baseline": "3.10", "computed": ["3.10"], "violations": 0}
    assert rep.facts["sass"] == ["sm_90"] and rep.facts["ptx"] == []


def test_other_archs_fail(tmp_path, plan):
    so = compile_so(tmp_path / "so", _info(sass_archs=["sm_80"]), ["arch=compute_80,code=sm_80"])
    rep = run_audit(make_wheel(tmp_path, so), plan.cell(CELL_ID))
    assert any(
        f.startswith("device code: SASS in mamba_ssm/_C.abi3.so is ['sm_80'], the plan says ['sm_90']")
        for f in rep.findings
    ), rep.findings
    assert any(f.startswith("build info: build info archs ['sm_80']") for f in rep.findings)


def test_build_info_that_lies_about_archs_fails(tmp_path, plan):
    # build info claims sm_90 but the fatbin holds sm_80: the device-code check reads the binary itself
    so = compile_so(tmp_path / "so", _info(), ["arch=compute_80,code=sm_80"])
    rep = run_audit(make_wheel(tmp_path, so), plan.cell(CELL_ID))
    assert [f for f in rep.findings if f.startswith("device code:")] and not [
        f for f in rep.findings if f.startswith("build info:")
    ], rep.findings


def test_bundled_libtorch_fails(tmp_path, plan, sm90_so):
    fake_lib = compile_so(tmp_path / "lib", _info())  # any ELF will do
    wheel = make_wheel(
        tmp_path, sm90_so, extra={"mamba_ssm.libs/libtorch_cpu-1a2b3c4d.so": fake_lib.read_bytes()}
    )
    rep = run_audit(wheel, plan.cell(CELL_ID))
    assert any(
        "mamba_ssm.libs/libtorch_cpu-1a2b3c4d.so is bundled: it matches libtorch*" in f for f in rep.findings
    ), rep.findings


def test_metadata_filename_mismatch_fails(tmp_path, plan, sm90_so):
    # upstream's failure mode: the file renamed with a label, METADATA without it
    wheel = make_wheel(tmp_path, sm90_so, meta_version="2.4.0.dev0")
    rep = run_audit(wheel, plan.cell(CELL_ID))
    assert any(
        "METADATA Version '2.4.0.dev0' != file name version '2.4.0.dev0+cu13torch2.9cxx11abitrue'" in f
        for f in rep.findings
    ), rep.findings


def test_record_mismatch_fails(tmp_path, plan, sm90_so):
    rep = run_audit(make_wheel(tmp_path, sm90_so, corrupt_record=True), plan.cell(CELL_ID))
    assert any("mamba_ssm/__init__.py: sha256 in RECORD" in f for f in rep.findings), rep.findings


def test_wrong_abi_and_torch_fail(tmp_path, plan):
    so = compile_so(
        tmp_path / "so", _info(cxx11_abi=False, torch_version="2.13.0+cu130"), ["arch=compute_90,code=sm_90"]
    )
    rep = run_audit(make_wheel(tmp_path, so), plan.cell(CELL_ID))
    text = "\n".join(rep.findings)
    assert "built against torch 2.13.0+cu130, the cell says 2.9.1+cu130" in text
    assert "cxx11_abi False != the cell's True" in text
    assert "the compatibility rule says" in text  # buildinfo.incompatibilities rejects what the cell serves


def test_unrepaired_and_wrong_variant_fail(tmp_path, plan, sm90_so):
    rep = run_audit(make_wheel(tmp_path, sm90_so, platform_tag="linux_x86_64"), plan.cell(CELL_ID))
    assert any("'linux_x86_64' is not a manylinux tag" in f for f in rep.findings), rep.findings
    other = make_wheel(tmp_path / "o", sm90_so, version="2.4.0.dev0+cu12torch2.14cxx11abiTRUE")
    rep = run_audit(other, plan.cell(CELL_ID))
    assert any(f.startswith("file name: variant cu12torch2.14cxx11abiTRUE") for f in rep.findings), (
        rep.findings
    )


def test_size_budget(tmp_path, plan, sm90_so):
    cell = dataclasses.replace(plan.cell(CELL_ID), size_budget_mib=0.001)
    rep = run_audit(make_wheel(tmp_path, sm90_so), cell)
    assert any(f.startswith("size: ") and "> budget 0.001 MiB" in f for f in rep.findings), rep.findings


def test_cpu_cell(tmp_path, plan):
    info = _info(
        package_version="2.4.0.dev0+cputorch2.9cxx11abitrue",
        torch_version="2.9.1+cpu",
        torch_cuda=None,
        nvcc_version=None,
        sass_archs=[],
        kernels=["cpu"],
    )
    so = compile_so(tmp_path / "so", info)
    good = make_wheel(tmp_path / "g", so, version="2.4.0.dev0+cputorch2.9cxx11abiTRUE")
    rep = run_audit(good, plan.cell(CPU_CELL_ID), archs=None)
    assert rep.ok, rep.findings
    assert rep.facts["sass"] == [] and rep.facts["device_code_by"] == "ELF .nv_fatbin"
    # a CPU wheel that carries GPU code is wrong
    gpu = compile_so(tmp_path / "gpu", info, ["arch=compute_90,code=sm_90"])
    rep = run_audit(
        make_wheel(tmp_path / "b", gpu, version="2.4.0.dev0+cputorch2.9cxx11abiTRUE"),
        plan.cell(CPU_CELL_ID),
        archs=None,
    )
    assert any("SASS in mamba_ssm/_C.abi3.so is ['sm_90'], the plan says none" in f for f in rep.findings)


def _stable_info(**over):
    fields = dict(
        package_version="2.4.0.dev0+cu13torch2.10stable",
        torch_version="2.14.1+cu130",
        torch_abi="stable",
        torch_abi_floor="2.10",
    )
    fields.update(over)
    return _info(**fields)


def test_stable_cell_good_wheel_passes(tmp_path, plan):
    so = compile_so(tmp_path / "so", _stable_info(), ["arch=compute_90,code=sm_90"])
    wheel = make_wheel(tmp_path, so, version="2.4.0.dev0+cu13torch2.10stable")
    rep = run_audit(wheel, plan.cell(STABLE_CELL_ID))
    assert rep.ok, rep.findings
    assert "stable ABI symbols" in rep.passed and "build info" in rep.passed
    assert rep.facts["stable_abi"] == {"floor": "2.10", "shim_imports": 0, "torch_cpp_imports": 0}


def test_classic_build_in_stable_cell_fails(tmp_path, plan):
    so = compile_so(
        tmp_path / "so",
        _stable_info(torch_abi="classic", torch_abi_floor=None),
        ["arch=compute_90,code=sm_90"],
    )
    rep = run_audit(
        make_wheel(tmp_path, so, version="2.4.0.dev0+cu13torch2.10stable"), plan.cell(STABLE_CELL_ID)
    )
    text = "\n".join(rep.findings)
    assert (
        "torch_abi classic (floor None) != the cell's stable (floor 2.10): build with MAMBA_TORCH_STABLE_ABI=2.10"
        in text
    )
    # a classic 2.14 build does not serve the 2.10-2.13 torches the stable cell promises
    assert "the cell serves torch 2.10.0+cu130 but the compatibility rule says" in text


IMPORTS = r"""
namespace c10 { void* deleter_of_some_kind(int); }
extern "C" int aoti_torch_get_dim(void*, long*);
extern "C" int torch_made_up_call_for_this_test(void*);
extern "C" long use(void* t) { long d = 0; aoti_torch_get_dim(t, &d); torch_made_up_call_for_this_test(t);
  return d + (long)c10::deleter_of_some_kind(1); }
"""


def test_stable_symbol_check_names_cpp_and_unknown_shim_imports(tmp_path):
    from build_matrix import stable_abi

    (tmp_path / "imports.cpp").write_text(IMPORTS)
    so = tmp_path / "_C.abi3.so"
    subprocess.run(["g++", "-shared", "-fPIC", "-o", str(so), str(tmp_path / "imports.cpp")], check=True)
    undefined = stable_abi.undefined_symbols(so)
    assert stable_abi.torch_cpp_imports(undefined) == ["_ZN3c1020deleter_of_some_kindEi"]
    assert stable_abi.shim_imports(undefined) == ["aoti_torch_get_dim", "torch_made_up_call_for_this_test"]
    problems = stable_abi.check(so, "2.10")
    assert len(problems) == 2, problems
    assert (
        "imports 1 C++ symbol(s) of libtorch" in problems[0]
        and "_ZN3c1020deleter_of_some_kindEi" in problems[0]
    )
    assert "torch 2.10.0 (the floor 2.10) does not export: torch_made_up_call_for_this_test" in problems[1]
    assert stable_abi.check(so, "2.99", recorded={})[-1].startswith(
        "no recorded C shim exports for torch 2.99"
    )


def test_recorded_floor_exports_are_torch_210s():
    """The data file holds torch 2.10.0's shim (read from PyPI's wheel): the 2.10 calls the binding makes
    are there, the 2.13 one (Stream::nativeHandle) is not, so a binding that reaches past the floor fails."""
    from build_matrix import stable_abi

    entry = stable_abi.load_recorded()["2.10"]
    assert entry["torch"] == "2.10.0" and "libtorch_cuda.so" in entry["source"]
    names = set(entry["symbols"])
    assert {
        "torch_call_dispatcher",
        "torch_library_impl",
        "aoti_torch_get_current_cuda_stream",
        "torch_get_mutable_data_ptr",
        "aoti_torch_library_def",
    } <= names
    assert "torch_stream_native_handle" not in names


def test_elf_parser_agrees_with_cuobjdump(tmp_path):
    so = compile_so(
        tmp_path,
        _info(),
        ["arch=compute_80,code=sm_80", "arch=compute_90,code=sm_90", "arch=compute_90,code=compute_90"],
    )
    assert audit.archs_by_elf(so) == (["sm_80", "sm_90"], ["compute_90"])
    cuobjdump = audit.find_cuobjdump()
    if cuobjdump is None:
        pytest.skip("no cuobjdump (CUDA toolkit or triton) to compare with")
    assert audit.archs_by_cuobjdump(so, cuobjdump) == audit.archs_by_elf(so)


def test_audit_cli_exit_status(tmp_path, sm90_so):
    bad = make_wheel(tmp_path, sm90_so, meta_version="2.4.0.dev0")
    out = subprocess.run(
        [sys.executable, "-m", "build_matrix", "audit", str(bad), "--archs", "90", "--no-runtime"],
        capture_output=True,
        text=True,
        cwd=mx.REPO_ROOT,
    )
    assert out.returncode == 1
    assert "FAIL metadata: METADATA Version '2.4.0.dev0'" in out.stdout
    assert f"against {CELL_ID}: FAILED" in out.stdout


def test_exclusions_cover_what_torch_provides():
    for lib in (
        "libtorch_cpu.so",
        "libc10.so",
        "libc10_cuda.so",
        "libcudart.so.13",
        "libcuda.so.1",
        "libamdhip64.so.6",
        "libgomp.so.1",
    ):
        assert any(__import__("fnmatch").fnmatch(lib, p) for p in build.EXCLUDE_PATTERNS), lib


def test_runtime_check_after_build_host(tmp_path):
    """`audit` run on its own after `build --host` takes the host cell's venv (no pip, no packages of its
    own: only a .pth naming the shared dev venv) as --torch-from; the runtime check must still install
    the wheel into a fresh venv, load _C and match the float64 reference (it failed with "No module
    named pip" because the fresh venv's .pth named the cell venv's empty site-packages)."""
    if not (build.SHARED_TORCH_VENV / "bin" / "python").exists():
        pytest.skip(f"no shared dev venv at {build.SHARED_TORCH_VENV}")
    repo = Path(__file__).resolve().parents[2]
    so = repo / "mamba_ssm" / "_C.abi3.so"
    if not so.exists():
        pytest.skip("mamba_ssm/_C.abi3.so not built in place (ci/test.sh builds it)")
    py = subprocess.run(
        [str(build.SHARED_TORCH_VENV / "bin" / "python"), "-c", "import sys; print(sys._base_executable)"],
        capture_output=True,
        text=True,
        check=True,
    )
    cell_venv = tmp_path / "cell" / "venv"
    build._make_venv(
        Path(py.stdout.strip()), cell_venv, build.SHARED_TORCH_VENV, build.Log(tmp_path / "log.txt", CELL_ID)
    )
    assert (
        subprocess.run(
            [str(cell_venv / "bin" / "python"), "-c", "import pip"], capture_output=True
        ).returncode
        == 0
    )  # pip only through the .pth, as build --host leaves it
    extra = {
        f"mamba_ssm/{p.relative_to(repo / 'mamba_ssm').as_posix()}": p.read_bytes()
        for p in sorted((repo / "mamba_ssm").rglob("*.py"))
        if "__pycache__" not in p.parts
    }
    extra["mamba_ssm/_C.abi3.so"] = so.read_bytes()
    wheel = make_wheel(tmp_path / "whl", so, platform_tag="linux_x86_64", extra=extra)
    rep = audit.AuditReport(wheel=str(wheel), cell=CELL_ID)
    audit._check_runtime(rep, wheel, None, cell_venv, lambda _t: None)
    assert rep.findings == [] and rep.passed == ["runtime"]
    res = rep.facts["runtime"]
    assert res["doctor_loaded"] is True and res["backend"] == "compiled" and res["max_rel_err"] < 1e-4
    assert res["conv_backend"] == "compiled" and res["conv_max_rel_err"] < 1e-4


PY_SRC = r"""
extern "C" int PyCode_Addr2Line(void*, int);                      // not in the stable ABI
extern "C" const char* PyUnicode_AsUTF8AndSize(void*, long*);     // stable ABI since 3.10
extern "C" long mamba_uses_python(void* c) { long n = 0; PyUnicode_AsUTF8AndSize(c, &n); return PyCode_Addr2Line(c, 1) + n; }
"""


def test_abi3audit_catches_what_the_tag_does_not_allow(tmp_path, monkeypatch):
    """A module calling a non-stable-ABI function, and a 3.10 stable-ABI one under a cp39 tag: the
    audit names both (abi3audit reads the local file only: the proxies point nowhere)."""
    (tmp_path / "mamba_ssm_build_info.h").write_text(buildinfo.render_header(_info(kernels=["cpu"])))
    (tmp_path / "c.cpp").write_text(SRC + PY_SRC)
    so = tmp_path / "_C.abi3.so"
    subprocess.run(
        ["g++", "-shared", "-fPIC", "-I", str(tmp_path), "-o", str(so), str(tmp_path / "c.cpp")],
        check=True,
        capture_output=True,
    )
    wheel = make_wheel(tmp_path / "w", so, platform_tag="linux_x86_64", python_tag="cp39")
    rep = audit.AuditReport(wheel=str(wheel), cell=CELL_ID)
    key = variant.VariantKey.from_wheel_filename(wheel.name)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.setenv(var, "http://127.0.0.1:9")
    audit._check_abi3audit(rep, wheel, key)
    text = "\n".join(rep.findings)
    assert "symbols outside the stable ABI: PyCode_Addr2Line" in text, text
    assert "newer than Python 3.9" in text and "PyUnicode_AsUTF8AndSize" in text, text
    assert rep.facts["abi3audit"]["violations"] == 1
