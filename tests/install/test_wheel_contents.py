"""Issue 11, item 5: a wheel's contents must agree with its name, its manifest entry and the target.

* ``build_matrix index`` refuses a wheel whose WHEEL tags, METADATA or ``_C`` build info contradict its
  file name, and unrepaired ``linux_*`` wheels (unless ``allow_unrepaired``); it records
  Requires-Python in the manifest and on the PEP 503 page;
* selection rejects a wheel whose recorded Requires-Python excludes the target's Python, and never gives
  a musllinux target a ``linux_*`` wheel;
* the resolver checks the downloaded wheel again after its sha256 (a hostile or older index can list
  anything): a mislabelled wheel is never handed to the installer.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
from helpers import build_info, env_dict, make_wheel

from build_matrix.index import IndexError_, build_index
from mamba_ssm._install.environment import Environment
from mamba_ssm._install.manifest import Manifest
from mamba_ssm._install.resolve import resolve
from mamba_ssm._install.selection import select

V = "2.4.0.dev0"
LABEL = "cu13torch2.14cxx11abiTRUE"
X86 = "manylinux_2_28_x86_64"


def aarch64_inside(folder, **kw):
    """The finding: WHEEL tag and build info say aarch64, the file name says x86_64."""
    return make_wheel(
        str(folder),
        LABEL,
        dict(build_info(), platform="linux-aarch64"),
        platform=X86,
        wheel_tag="cp39-abi3-manylinux_2_28_aarch64",
        **kw,
    )


@pytest.mark.parametrize(
    "case,match",
    [
        (
            "wheel-tag",
            "WHEEL says Tag cp39-abi3-manylinux_2_28_aarch64, the file name cp39-abi3-manylinux_2_28_x86_64",
        ),
        ("build-arch", r"built for linux-aarch64 \(aarch64\), the file name says x86_64"),
        ("name", "METADATA Name 'other-project'"),
        ("build-version", "build info names version 2.5.0"),
        ("requires-python", "Requires-Python 'three' is not a version specifier"),
        ("unrepaired", "linux_x86_64 is an unrepaired wheel"),
    ],
)
def test_the_index_refuses_a_wheel_whose_contents_disagree_with_its_name(tmp_path, case, match):
    w = tmp_path / "w"
    if case == "wheel-tag":
        make_wheel(str(w), LABEL, build_info(), platform=X86, wheel_tag="cp39-abi3-manylinux_2_28_aarch64")
    elif case == "build-arch":
        make_wheel(str(w), LABEL, dict(build_info(), platform="linux-aarch64"), platform=X86)
    elif case == "name":
        make_wheel(str(w), LABEL, build_info(), platform=X86, meta_name="other-project")
    elif case == "build-version":
        make_wheel(str(w), LABEL, build_info(version="2.5.0"), platform=X86)
    elif case == "requires-python":
        make_wheel(str(w), LABEL, build_info(), platform=X86, requires_python="three")
    else:
        make_wheel(str(w), LABEL, build_info(), platform="linux_x86_64")
    with pytest.raises(IndexError_, match=match):
        build_index(str(w))
    assert not (w / "manifest.json").exists()


def test_an_unrepaired_wheel_is_accepted_only_when_asked(tmp_path):
    make_wheel(str(tmp_path / "w"), LABEL, build_info(), platform="linux_x86_64")
    manifest = build_index(str(tmp_path / "w"), allow_unrepaired=True)
    assert [w.filename.rsplit("-", 1)[1] for w in manifest.wheels] == ["linux_x86_64.whl"]


def test_the_index_records_requires_python(tmp_path):
    make_wheel(str(tmp_path / "w"), LABEL, build_info(), platform=X86, requires_python=">=3.12")
    build_index(str(tmp_path / "w"))
    data = json.loads((tmp_path / "w" / "manifest.json").read_text())
    assert [w["requires_python"] for w in data["wheels"]] == [">=3.12"]
    page = (tmp_path / "w" / LABEL / "mamba-ssm" / "index.html").read_text()
    assert 'data-requires-python="&gt;=3.12"' in page
    entry = Manifest.from_json((tmp_path / "w" / "manifest.json").read_text()).wheels[0]
    for python, ok in (((3, 11), False), ((3, 12), True), ((3, 13), True)):
        d = select(Environment.from_dict(env_dict(python=python)), Manifest(wheels=[entry]), V)
        if ok:
            assert d.status == "chosen", d.explain()
        else:
            assert d.status == "no-candidate"
            assert (
                "requires Python >=3.12 (METADATA Requires-Python), the target is 3.11.0" in d.rejected[0][1]
            )


def test_a_musllinux_target_never_takes_a_linux_wheel_but_a_glibc_one_may(tmp_path):
    make_wheel(str(tmp_path / "w"), LABEL, build_info(), platform="linux_x86_64")
    manifest = build_index(str(tmp_path / "w"), allow_unrepaired=True)
    musl = Environment.from_dict(env_dict(platforms=("musllinux_1_2_x86_64", "linux_x86_64")))
    assert any(t.endswith("-linux_x86_64") for t in musl.tags)  # packaging's tags would take it
    d = select(musl, manifest, V)
    assert d.status == "no-candidate" and "unrepaired linux_x86_64 wheel" in d.rejected[0][1]
    assert select(Environment.from_dict(env_dict()), manifest, V).status == "chosen"


def _hostile_index(tmp_path, make):
    """An index whose manifest lists a wheel made by ``make`` (as an older or hostile index could:
    ``build_index`` itself would refuse it), with its true sha256 and size."""
    good = tmp_path / "index"
    make_wheel(str(good), LABEL, build_info(), platform=X86)
    build_index(str(good))
    data = json.loads((good / "manifest.json").read_text())
    entry = data["wheels"][0]
    path = good / LABEL / "mamba-ssm" / entry["filename"]
    path.unlink()
    made = make(tmp_path / "bad")
    os.replace(made, path)
    raw = path.read_bytes()
    entry.update(sha256=hashlib.sha256(raw).hexdigest(), size=len(raw))
    (good / "manifest.json").write_text(json.dumps(data))
    return good


@pytest.mark.parametrize(
    "case,needle",
    [
        ("aarch64-inside", "WHEEL says Tag cp39-abi3-manylinux_2_28_aarch64"),
        ("requires-python", "requires Python >=3.12 (METADATA Requires-Python), the target is 3.11.0"),
    ],
)
def test_the_resolver_refuses_a_mislabelled_download(tmp_path, case, needle):
    if case == "aarch64-inside":
        root = _hostile_index(tmp_path, aarch64_inside)
    else:  # the manifest does not record requires_python (an index written before it did)
        root = _hostile_index(
            tmp_path,
            lambda f: make_wheel(str(f), LABEL, build_info(), platform=X86, requires_python=">=3.12"),
        )
    res = resolve(
        V,
        index=str(root),
        env=Environment.from_dict(env_dict()),
        environ={},
        pinned=None,
        cache=str(tmp_path / "cache"),
    )
    assert res.status == "error" and res.error_kind == "fetch-metadata" and res.wheel_path is None, (
        res.message
    )
    assert needle in res.message and "not handed to the installer" in res.message
    if case == "aarch64-inside":
        assert "built for aarch64, the target is x86_64" in res.message


def test_a_sound_download_passes_the_contents_check(tmp_path):
    root = tmp_path / "index"
    make_wheel(str(root), LABEL, build_info(), platform=X86, requires_python=">=3.9")
    build_index(str(root))
    res = resolve(
        V,
        index=str(root),
        env=Environment.from_dict(env_dict()),
        environ={},
        pinned=None,
        cache=str(tmp_path / "cache"),
    )
    assert res.status == "prebuilt" and "build info agree" in res.message, res.message
    # the check read the _C through a temporary file in the cache folder and removed it
    assert sorted(os.listdir(os.path.dirname(res.wheel_path))) == sorted(
        [os.path.basename(res.wheel_path), os.path.basename(res.wheel_path) + ".lock"]
    )
