"""The index (PEP 503 roots + manifest + pins), the relabelled wheel, and the resolve / mirror
commands, on fabricated wheels (fast). Hashes are recomputed here with hashlib, independently."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile

import pytest
from packaging.version import Version

sys.path.insert(0, os.path.dirname(__file__))
from helpers import build_info, env_dict, make_wheel

from build_matrix.index import IndexError_, build_index, pin_sdist
from build_matrix.resolver_cli import main as cli
from mamba_ssm import _version
from mamba_ssm._install.manifest import load_pinned_hashes
from mamba_ssm._install.relabel import relabel_wheel

LABEL = "cu13torch2.14cxx11abiTRUE"
CPU = "cputorch2.13cxx11abiTRUE"


def sha(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


@pytest.fixture
def index(tmp_path):
    root = tmp_path / "idx"
    a = make_wheel(
        str(root),
        LABEL,
        build_info(sass=("sm_80", "sm_90"), ptx=("compute_90",)),
        platform="manylinux_2_28_x86_64",
    )
    b = make_wheel(
        str(tmp_path / "elsewhere"),
        CPU,
        build_info("2.13.0+cpu", None, sass=()),
        platform="manylinux_2_28_x86_64",
    )
    expected = {os.path.basename(a): sha(a), os.path.basename(b): sha(b)}
    manifest = build_index(str(root), add=[b], pin=str(tmp_path / "pins.json"))
    return root, manifest, expected, tmp_path


def test_index_layout_pages_manifest_and_pins(index):
    root, manifest, expected, tmp = index
    assert {w.filename: w.sha256 for w in manifest.wheels} == expected
    for w in manifest.wheels:
        folder = root / w.variant / "mamba-ssm"
        assert (folder / w.filename).is_file()
        page = (folder / "index.html").read_text()
        links = re.findall(r'href="([^"#]+)#sha256=([0-9a-f]{64})"', page)
        assert links == [(w.filename.replace("+", "%2B"), expected[w.filename])]
        assert 'href="mamba-ssm/"' in (root / w.variant / "index.html").read_text()
    assert sorted(os.listdir(root)) == sorted(
        [LABEL, CPU, "index.html", "manifest.json"]
    )  # the loose wheel was moved
    data = json.loads((root / "manifest.json").read_text())
    cu = next(w for w in data["wheels"] if w["variant"] == LABEL)
    assert cu["sass_archs"] == ["sm_80", "sm_90"] and cu["ptx_archs"] == ["compute_90"]
    assert cu["build_info"]["torch_version"] == "2.14.1+cu130"
    pins = load_pinned_hashes(str(tmp / "pins.json"))
    assert {k: v.sha256 for k, v in pins.items()} == expected


def test_pip_installs_from_a_variant_root_by_hand(index):
    root, manifest, expected, tmp = index
    cu = next(w for w in manifest.wheels if w.variant == LABEL)
    target = tmp / "target"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-cache-dir",
            "--target",
            str(target),
            "--index-url",
            (root / LABEL).as_uri() + "/",
            f"mamba-ssm=={cu.version}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (target / "mamba_ssm" / "_C.abi3.so").is_file()


def test_a_wheel_whose_metadata_disagrees_with_its_name_is_refused(tmp_path):
    path = make_wheel(str(tmp_path / "w"), LABEL, build_info())
    bad = path.replace("2.4.0.dev0+", "2.4.1+")
    os.rename(path, bad)
    with pytest.raises(IndexError_, match="METADATA version"):
        build_index(str(tmp_path / "w"))


def test_pin_sdist_adds_the_pins_inside_the_archive(index):
    root, manifest, expected, tmp = index
    sdist = tmp / "mamba_ssm-2.4.0.dev0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tf:
        for name, data in (
            ("mamba_ssm-2.4.0.dev0/setup.py", b"# setup\n"),
            ("mamba_ssm-2.4.0.dev0/PKG-INFO", b"x"),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    pin_sdist(str(sdist), manifest)
    with tarfile.open(sdist) as tf:
        names = tf.getnames()
        pins = json.loads(tf.extractfile("mamba_ssm-2.4.0.dev0/mamba_ssm/_install/pinned_hashes.json").read())
    assert "mamba_ssm-2.4.0.dev0/setup.py" in names
    assert {k: v["sha256"] for k, v in pins["wheels"].items()} == expected


def _b64(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def test_relabel_keeps_every_package_file_and_fixes_the_version(tmp_path):
    src = make_wheel(str(tmp_path), LABEL, build_info())
    with zipfile.ZipFile(src, "a") as zf:  # auditwheel writes directory entries, which RECORD does not list
        zf.writestr(zipfile.ZipInfo("mamba_ssm/"), b"")
    out = relabel_wheel(src, "2.4.0.dev0", str(tmp_path / "out"), sha256=sha(src))
    assert os.path.basename(out) == "mamba_ssm-2.4.0.dev0-cp39-abi3-linux_x86_64.whl"
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(out) as b:
        old_di = f"mamba_ssm-2.4.0.dev0+{LABEL.lower()}.dist-info"
        for name in a.namelist():
            if not name.startswith(old_di):
                assert a.read(name) == b.read(name)
        names = b.namelist()
        assert all(n.startswith(("mamba_ssm/", "mamba_ssm-2.4.0.dev0.dist-info/")) for n in names)
        meta = b.read("mamba_ssm-2.4.0.dev0.dist-info/METADATA").decode()
        assert "\nVersion: 2.4.0.dev0\n" in meta
        rows = list(csv.reader(io.StringIO(b.read("mamba_ssm-2.4.0.dev0.dist-info/RECORD").decode())))
        for path, digest, size in rows:
            if path.endswith("/RECORD"):
                assert digest == size == ""
                continue
            data = b.read(path)
            assert digest == _b64(data) and int(size) == len(data)
        assert sorted(r[0] for r in rows) == sorted(n for n in names if not n.endswith("/"))
        variant = json.loads(b.read("mamba_ssm-2.4.0.dev0.dist-info/mamba_ssm_variant.json"))
        assert variant["index_wheel"] == os.path.basename(src) and variant["sha256"] == sha(src)
    assert relabel_wheel(src, f"2.4.0.dev0+{LABEL}", str(tmp_path / "same")) == src


def test_relabel_keeps_each_members_compression(tmp_path):
    """Issue 11 item 7: the relabelled copy pip caches was stored uncompressed (3x the index wheel)."""
    src = make_wheel(str(tmp_path), LABEL, build_info(), padding=600_000)  # ZIP_DEFLATED members
    with zipfile.ZipFile(src, "a") as zf:
        zf.writestr(zipfile.ZipInfo("mamba_ssm/stored.bin"), b"s" * 1000, compress_type=zipfile.ZIP_STORED)
    out = relabel_wheel(src, "2.4.0.dev0", str(tmp_path / "out"), sha256=sha(src))
    with zipfile.ZipFile(src) as a, zipfile.ZipFile(out) as b:
        before = {
            i.filename: i.compress_type for i in a.infolist() if not i.filename.startswith("mamba_ssm-")
        }
        after = {i.filename: i.compress_type for i in b.infolist() if not i.filename.startswith("mamba_ssm-")}
        assert after == before and before["mamba_ssm/_C.abi3.so"] == zipfile.ZIP_DEFLATED
        assert after["mamba_ssm/stored.bin"] == zipfile.ZIP_STORED
        meta = [i for i in b.infolist() if i.filename.startswith("mamba_ssm-")]
        assert all(i.compress_type == zipfile.ZIP_DEFLATED for i in meta)
    # about the index wheel's size, not the 600 kB the stored copy took
    assert os.path.getsize(out) < 1.2 * os.path.getsize(src) + 2000 and os.path.getsize(out) < 100_000


def test_cli_resolve_for_declared_targets_and_mirror(index, capsys):
    root, manifest, expected, tmp = index
    env_file = tmp / "env.json"
    env_file.write_text(
        json.dumps(env_dict(gpus=[{"vendor": "nvidia", "capability": "9.0"}], driver="580.65.06"))
    )
    assert cli(["resolve", "--index", str(root), "--env-json", str(env_file), "--json", "--no-pins"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (
        out["status"] == "prebuilt"
        and out["wheel"] == f"mamba_ssm-2.4.0.dev0+{LABEL.lower()}-cp39-abi3-manylinux_2_28_x86_64.whl"
    )
    arm = tmp / "arm.json"
    arm.write_text(json.dumps(env_dict(platforms=("manylinux_2_28_aarch64",))))
    assert cli(["resolve", "--index", str(root), "--env-json", str(arm), "--no-pins", "--explain"]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and "aarch64" in captured.err  # diagnostics on stderr only
    notorch = tmp / "notorch.json"
    notorch.write_text(json.dumps(env_dict(torch=None)))
    assert cli(["resolve", "--index", str(root), "--env-json", str(notorch), "--no-pins"]) == 3
    capsys.readouterr()
    mirror = tmp / "mirror"
    assert (
        cli(["mirror", "--for", str(env_file), "--to", str(mirror), "--index", root.as_uri(), "--no-pins"])
        == 0
    )
    # the install command for the target: a pin of a release; no index has a development release
    # (PEP 440), so for one the target installs a copy of the checkout
    printed = capsys.readouterr().out.splitlines()[-1]
    version = Version(_version.__version__)
    if version.is_devrelease:
        assert f"mamba-ssm=={version}" not in printed, printed
        assert printed.endswith(
            f"test -f mamba_ssm/_version.py && MAMBA_WHEEL_INDEX=file://{mirror} python -m pip install "
            f"--no-build-isolation .  # in a source checkout of mamba-ssm {version}: no package index has "
            "a development version"
        ), printed
    else:
        assert printed.endswith(f"python -m pip install mamba-ssm=={version.public}"), printed
    data = json.loads((mirror / "manifest.json").read_text())
    assert [w["filename"] for w in data["wheels"]] == [out["wheel"]]
    assert sha(mirror / LABEL / "mamba-ssm" / out["wheel"]) == expected[out["wheel"]]
    capsys.readouterr()
    assert cli(["resolve", "--index", str(mirror), "--env-json", str(env_file), "--no-pins", "--fetch"]) == 0


def test_cli_resolve_stdout_carries_only_the_result(index, tmp_path, capsys):
    """WHEEL=$(python -m build_matrix resolve ...) must capture the wheel or nothing: messages and
    --explain's listing go to stderr, exit codes stay (0 chosen, 1 none fits, 2 index unreadable)."""
    root, manifest, expected, tmp = index
    env_file = tmp / "env.json"
    env_file.write_text(json.dumps(env_dict()))
    missing = tmp_path / "no-such-index"
    for extra in ([], ["--explain"]):
        assert (
            cli(["resolve", "--index", str(missing), "--env-json", str(env_file), "--no-pins"] + extra) == 2
        )
        captured = capsys.readouterr()
        assert captured.out == ""
        assert "Could not read the wheel index" in captured.err
    assert cli(["resolve", "--index", str(missing), "--env-json", str(env_file), "--no-pins", "--json"]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out)["status"] == "error"
    wheel = f"mamba_ssm-2.4.0.dev0+{LABEL.lower()}-cp39-abi3-manylinux_2_28_x86_64.whl"
    assert cli(["resolve", "--index", str(root), "--env-json", str(env_file), "--no-pins", "--explain"]) == 0
    captured = capsys.readouterr()
    assert captured.out == wheel + "\n"
    assert f"candidate: {wheel}" in captured.err


def test_cli_resolve_labels_a_declared_target_and_explain_lists_what_wheels_serve(index, capsys):
    """A file written by --print-env says how that run found its interpreter; resolving for it is a
    declared target. The no-fit advice says --explain lists the torches the wheels serve: it must."""
    root, manifest, expected, tmp = index
    assert cli(["resolve", "--print-env"]) == 0
    printed = json.loads(capsys.readouterr().out)
    env_file = tmp / "printed.json"
    env_file.write_text(
        json.dumps(
            dict(printed, torch={"version": "2.12.0+cu126", "cuda": "12.6", "hip": None, "cxx11_abi": True})
        )
    )
    assert cli(["resolve", "--index", str(root), "--env-json", str(env_file), "--no-pins", "--explain"]) == 1
    err = capsys.readouterr().err
    target = next(line for line in err.splitlines() if line.startswith("[resolve] target:"))
    assert f"(declared, from {env_file})" in target and "running interpreter" not in target
    assert "install-kernels --dry-run` lists them" in err  # the advice ...
    served = [line.split("serves:", 1)[1].strip() for line in err.splitlines() if "serves:" in line]
    assert served == sorted(
        [  # ... and what it promises: one line per wheel of the index
            "torch 2.13 (built with 2.13.0+cpu), CPU only, cxx11abi TRUE; cp39-abi3 manylinux_2_28_x86_64",
            "torch 2.14 (built with 2.14.1+cu130), CUDA 13.0, cxx11abi TRUE; cp39-abi3 manylinux_2_28_x86_64",
        ]
    )
    assert cli(["resolve", "--index", str(root), "--env-json", str(env_file), "--no-pins", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["environment"]["target_source"] == f"declared, from {env_file}"
    assert len(out["decision"]["served"]) == 2


def _install_kernels_log(args, tmp, **env):
    """stderr's ``[install-kernels] wheel index`` lines of a dry run in this tree, with the install
    record kept under ``tmp`` (no record unless the test writes one there)."""
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    base = {k: v for k, v in os.environ.items() if k != "MAMBA_WHEEL_INDEX"}
    base.update(MAMBA_SSM_DECISION_DIR=str(tmp / "decisions"), MAMBA_SSM_NO_NVML="1", **env)
    proc = subprocess.run(
        [sys.executable, "-m", "mamba_ssm", "install-kernels", "--dry-run", *args],
        env=base,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # no wheel for this torch: no-candidate
    return [l for l in proc.stderr.splitlines() if l.startswith("[install-kernels] wheel index")]


def test_install_kernels_names_where_its_index_came_from(tmp_path):
    """The index named by --index or MAMBA_WHEEL_INDEX is reported as coming from there, not from a
    recorded decision (this tree is no install, so no record of it applies)."""
    root = tmp_path / "idx"
    make_wheel(str(root), CPU, build_info("2.13.0+cpu", None, sass=()), platform="manylinux_2_28_x86_64")
    build_index(str(root))
    assert _install_kernels_log(["--index", str(root)], tmp_path) == [
        f"[install-kernels] wheel index {root}: from --index"
    ]
    assert _install_kernels_log([], tmp_path, MAMBA_WHEEL_INDEX=str(root)) == [
        f"[install-kernels] wheel index {root}: from MAMBA_WHEEL_INDEX; --index chooses another"
    ]
    # a recorded index is reported as the recorded one: test_fix_commands.py, in an installed venv
