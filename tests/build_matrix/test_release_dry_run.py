"""Two dry-run releases in a row into one folder, served on 127.0.0.1 as PyPI + GitHub Pages + the
Release assets would be; then a user's ``pip install --no-binary mamba-ssm mamba-ssm==<first>`` and ``uv
pip install --no-binary mamba-ssm mamba-ssm==<second>`` each take the sdist, whose resolver installs the
prebuilt host wheel of its own release (slow: the PyPI wheel's cells built twice). The PyPI wheel each
release writes is checked by views independent of its writer: packaging's file-name parser, auditwheel,
pyelftools' DT_NEEDED, cuobjdump, pip's install of its RECORD, the sdist's own metadata.

Independent checks: the served manifest's sha256 against the one pinned into each sdist
(``release verify-pin``, the workflow's gate); the installed package files against the wheel's RECORD
rows, byte for byte; doctor loading ``_C``; ``MAMBA_FALLBACK=error`` and no compiler on PATH, so
nothing but the prebuilt wheel can satisfy the install.
"""

from __future__ import annotations

import functools
import glob
import http.server
import json
import os
import shutil
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "install"))
from test_e2e_install import (
    _torch_label_ok,
    decision,
    doctor,
    installed_record,
    path_without_nvcc,
    run,
    split_record,
    venv,
    wheel_record,
)

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
VERSIONS = ("2.4.0.dev0", "2.4.0.dev1")


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    if (
        sys.version_info[:2] != (3, 11)
        or not _torch_label_ok()
        or not Path("/usr/local/cuda-13.0/bin/nvcc").exists()
    ):
        pytest.skip("needs the dev venv (Python 3.11, torch 2.14 + CUDA 13) and nvcc 13.0 for the host build")
    work = tmp_path_factory.mktemp("release")
    out = work / "served"
    out.mkdir()
    # SimpleHTTPRequestHandler, not tests/install's FaultServer: pip needs a text/html Content-Type
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(out))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    results = {}
    # the CUDA 12 module's cell needs a CUDA 12 nvcc and a CUDA torch new enough to build it (of any major:
    # the dry run takes one from a venv here, as torch_venv_here finds it); ask build
    from build_matrix import matrix as mx
    from build_matrix.release import torch_venv_here

    venv = torch_venv_here(mx.load_plan().cell("cu12torch2.10stable-x86_64"))
    can_cu12 = (
        run(
            [sys.executable, "-m", "build_matrix", "build", "--cell", "cu12torch2.10stable-x86_64"]
            + ["--archs", "90", "--plan-only"]
            + (["--torch-from", str(venv)] if venv else []),
            cwd=str(REPO),
            check=False,
        ).returncode
        == 0
    )
    modules = "cpu,cu12,cu13" if can_cu12 else "cpu,cu13"
    try:
        for version in VERSIONS:  # two releases in a row: the second deploy must keep the first's root
            proc = run(
                [
                    sys.executable,
                    "-m",
                    "build_matrix",
                    "release",
                    "--dry-run",
                    "--out",
                    str(out),
                    "--base-url",
                    base,
                    "--version",
                    version,
                    "--modules",
                    modules,
                ],
                env=dict(os.environ, MAX_JOBS=os.environ.get("MAX_JOBS", "2")),
                cwd=str(REPO),
                timeout=3000,
            )
            results[version] = json.loads(proc.stdout[proc.stdout.index("{") :])
        # what pip/uv fetch to build an sdist in isolation, as PyPI would serve it
        deps = work / "build-deps"
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--only-binary",
                ":all:",
                "-d",
                str(deps),
                "setuptools>=70",
                "wheel",
                "packaging>=24",
            ],
            timeout=600,
        )
        yield work, out, base, results, deps
    finally:
        server.shutdown()


def user_env(work, name, **extra):
    """No compiler, no CUDA toolkit, no nvcc; no MAMBA_WHEEL_INDEX (the sdist's recorded index is used);
    MAMBA_FALLBACK=error (only the prebuilt wheel can satisfy the install); private caches."""
    env = dict(
        os.environ,
        PATH=path_without_nvcc(work),
        CUDA_HOME="/nonexistent",
        CC="false",
        CXX="false",
        MAMBA_FALLBACK="error",
        MAMBA_SSM_CACHE_DIR=str(work / f"cache-{name}"),
        MAMBA_SSM_DECISION_DIR=str(work / f"decisions-{name}"),
        PIP_NO_CACHE_DIR="1",
        PIP_CONFIG_FILE=os.devnull,
        UV_CACHE_DIR=str(work / f"uv-cache-{name}"),
        UV_NO_CONFIG="1",
    )
    for var in (
        "VIRTUAL_ENV",
        "PYTHONPATH",
        "MAMBA_WHEEL_INDEX",
        "PIP_INDEX_URL",
        "PIP_EXTRA_INDEX_URL",
        "PIP_FIND_LINKS",
        "UV_INDEX_URL",
        "UV_EXTRA_INDEX_URL",
        "UV_FIND_LINKS",
    ):
        env.pop(var, None)
    env.update(extra)
    return env


def check_installed(py, site, env, work, release, version):
    """The release's wheel, unchanged, from the index the sdist recorded; doctor loads _C."""
    pkg_i, _ = split_record(installed_record(site))
    pkg_w, _ = split_record(wheel_record(release["wheel"]))
    assert pkg_i == pkg_w and any(r[0].endswith("_C.abi3.so") for r in pkg_i)
    (dist_info,) = glob.glob(os.path.join(site, "mamba_ssm-*.dist-info"))
    assert os.path.basename(dist_info) == f"mamba_ssm-{version}.dist-info"
    doc = doctor(py, env, str(work))
    assert doc["compiled_module"]["loaded"] is True, doc["compiled_module"]
    dec = decision(py, env, str(work))
    assert dec["final_mode"] == "prebuilt" and dec["index"] == release["index_url"], dec
    assert dec["wheel"] == os.path.basename(release["wheel"])


def test_each_release_pins_its_deployed_manifest(released):
    work, out, base, results, _deps = released
    # both releases' roots are on the site after the second deploy
    assert sorted(p.name for p in (out / "pages").iterdir() if p.is_dir()) == [f"v{v}" for v in VERSIONS]
    for version, res in results.items():
        proc = run(
            [
                sys.executable,
                "-m",
                "build_matrix",
                "release",
                "verify-pin",
                res["sdist"],
                "--index-url",
                res["index_url"],
            ],
            cwd=str(REPO),
        )
        assert f"{res['index_url']}manifest.json" in proc.stdout and "matches" in proc.stdout
    # and the gate fails when the deployed manifest is not the pinned one
    manifest = out / "pages" / f"v{VERSIONS[0]}" / "manifest.json"
    saved = manifest.read_bytes()
    try:
        manifest.write_bytes(saved.replace(b'"schema": 1', b'"schema":  1'))
        proc = run(
            [
                sys.executable,
                "-m",
                "build_matrix",
                "release",
                "verify-pin",
                results[VERSIONS[0]]["sdist"],
                "--index-url",
                results[VERSIONS[0]]["index_url"],
            ],
            cwd=str(REPO),
            check=False,
        )
        assert proc.returncode == 1 and "the deployed manifest is not the pinned one" in proc.stderr
    finally:
        manifest.write_bytes(saved)


def test_pip_installs_the_first_release_from_pypi_and_pages(released):
    work, out, base, results, deps = released
    version = VERSIONS[0]
    py, site = venv(work / "pip-venv")
    env = user_env(work, "pip")
    run(
        [
            py,
            "-m",
            "pip",
            "install",
            "--index-url",
            f"{base}pypi/simple/",
            "--find-links",
            str(deps),
            "--no-binary",
            "mamba-ssm",
            f"mamba-ssm=={version}",
        ],
        env=env,
        timeout=900,
    )
    check_installed(py, site, env, work, results[version], version)


def test_uv_installs_the_second_release_from_pypi_and_pages(released):
    work, out, base, results, deps = released
    uv = shutil.which("uv") or os.path.join(sys.prefix, "bin", "uv")
    if not os.path.exists(uv):
        pytest.skip("uv is not installed (ci/requirements-dev.txt lists it)")
    version = VERSIONS[1]
    py, site = venv(work / "uv-venv")
    env = user_env(work, "uv")
    # --no-deps: uv does not count torch reached through a .pth file as installed
    run(
        [
            uv,
            "pip",
            "install",
            "--python",
            py,
            "--no-deps",
            "--index-url",
            f"{base}pypi/simple/",
            "--find-links",
            str(deps),
            "--no-binary",
            "mamba-ssm",
            f"mamba-ssm=={version}",
        ],
        env=env,
        timeout=900,
    )
    check_installed(py, site, env, work, results[version], version)


def _needed(so):
    """DT_NEEDED of a shared object, read here with pyelftools (not the merge's reader)."""
    from elftools.elf.elffile import ELFFile

    with open(so, "rb") as fh:
        dyn = ELFFile(fh).get_section_by_name(".dynamic")
        return sorted(t.needed for t in dyn.iter_tags() if t.entry.d_tag == "DT_NEEDED")


def _sdist_file(sdist, rel):
    import tarfile

    with tarfile.open(sdist) as tf:
        (member,) = [m for m in tf.getmembers() if m.name.split("/", 1)[-1] == rel]
        return tf.extractfile(member).read()


def test_pypi_wheel_of_each_release(released, tmp_path):
    """The per-platform PyPI wheel: public version, the manylinux tag auditwheel grants, torch>=2.10 and
    the sdist's other requirements, one module per family with its own build info (the project's reader)
    agreeing with the library itself (DT_NEEDED, cuobjdump), RECORD as pip installs it, the sdist's
    release_index.json, listed on the PyPI stand-in page with its sha256, and the one pip picks there."""
    import base64
    import hashlib
    import re
    import zipfile

    from packaging.metadata import Metadata
    from packaging.requirements import Requirement
    from packaging.utils import parse_wheel_filename

    from mamba_ssm._compat.buildinfo import read_build_info

    work, out, base, results, _deps = released
    from build_matrix.audit import find_cuobjdump

    cuobjdump = find_cuobjdump()  # a CUDA toolkit's or triton's copy
    if cuobjdump is None:
        pytest.skip("no cuobjdump here (a CUDA toolkit or triton has one)")
    for version, res in results.items():
        wheel = Path(res["pypi_wheel"])
        name, ver, build, tags = parse_wheel_filename(wheel.name)
        assert (str(name), str(ver), ver.local, build) == ("mamba-ssm", version, None, ())
        (tag,) = tags
        assert (tag.interpreter, tag.abi) == ("cp310", "abi3")
        show = json.loads(run([sys.executable, "-m", "auditwheel", "show", "--json", str(wheel)]).stdout)
        assert show["sym_tag"] == tag.platform and re.fullmatch(r"manylinux_2_\d+_x86_64", tag.platform)
        size = wheel.stat().st_size
        assert size < 100 * 2**20  # PyPI's default file limit
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            meta = Metadata.from_email(zf.read(f"mamba_ssm-{version}.dist-info/METADATA"))
            index_json = zf.read("mamba_ssm/_install/release_index.json")
        assert not [n for n in names if re.match(r"mamba_ssm/_C[^/]*\.so$", n)]
        assert not [n for n in names if n.startswith("mamba_ssm/_kernels/") and n.endswith(".py")]
        assert index_json == _sdist_file(res["sdist"], "mamba_ssm/_install/release_index.json")
        reqs = {Requirement(str(r)).name: str(r) for r in meta.requires_dist}
        assert reqs["torch"] == "torch>=2.10"
        sdist_meta = Metadata.from_email(_sdist_file(res["sdist"], "PKG-INFO"), validate=False)
        assert set(reqs) == {Requirement(str(r)).name for r in sdist_meta.requires_dist or []}

        # pip installs it; every installed file matches its RECORD row (hash and size)
        target = tmp_path / f"target-{version}"
        run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)])
        (record,) = target.glob("mamba_ssm-*.dist-info/RECORD")
        for path, digest, length in (row.rsplit(",", 2) for row in record.read_text().splitlines()):
            if not digest or path.startswith("../"):  # the console script: --target keeps it elsewhere
                continue
            data = (target / path).read_bytes()
            assert (
                digest
                == "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            )
            assert int(length) == len(data), path

        modules = sorted(p.parent.name for p in (target / "mamba_ssm" / "_kernels").glob("*/_C.abi3.so"))
        assert modules == sorted(res["pypi_modules"]) and {"cpu", "cu13"} <= set(modules)
        assert sorted(res["pypi_missing"]) == sorted({"cpu", "cu12", "cu13"} - set(modules))
        for fam in modules:
            so = target / "mamba_ssm" / "_kernels" / fam / "_C.abi3.so"
            info = read_build_info(so)
            assert (info.torch_abi, info.torch_abi_floor) == ("stable", "2.10")
            # the module is its cell's, unchanged: its build info names the cell's version label
            assert info.package_version == f"{version}+{fam}torch2.10stable"
            needed = _needed(so)
            cudart = [n for n in needed if n.startswith("libcudart")]
            listing = run([cuobjdump, "--list-elf", str(so)], check=False)
            if fam == "cpu":
                assert info.torch_cuda is None and info.kernels == ["cpu"] and cudart == []
                assert "libtorch_cuda.so" not in needed and listing.returncode != 0
            else:
                major = fam[2:]
                # the CUDA runtime it links is nvcc's (the torch whose headers compiled it may be
                # another major's: the stable C shim is all it uses of torch)
                assert info.nvcc_version.split(".")[0] == major == info.cuda_runtime_version.split(".")[0]
                assert cudart == [f"libcudart.so.{major}"]
                # the dry run's default archs (90): the build info and cuobjdump agree
                assert (
                    set(re.findall(r"\.(sm_\d+)\.cubin", listing.stdout)) == {"sm_90"} == set(info.sass_archs)
                )
            assert not [n for n in needed if n.startswith(("libtorch_python", "libpython"))]

        # on the stand-in page with its sha256, and the file pip takes there for this version
        page = (out / "pypi" / "simple" / "mamba-ssm" / "index.html").read_text()
        assert f'href="{wheel.name}#sha256={hashlib.sha256(wheel.read_bytes()).hexdigest()}"' in page
        report = tmp_path / f"report-{version}.json"
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--no-deps",
                "--ignore-installed",
                "--report",
            ]
            + [str(report), "--index-url", f"{base}pypi/simple/", f"mamba-ssm=={version}"],
            env=dict(os.environ, PIP_CONFIG_FILE=os.devnull, PIP_FIND_LINKS="", PIP_EXTRA_INDEX_URL=""),
        )
        (item,) = json.loads(report.read_text())["install"]
        assert item["download_info"]["url"].endswith("/" + wheel.name)
