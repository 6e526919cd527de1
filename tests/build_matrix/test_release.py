"""build_matrix release's steps without GitHub: the URLs, one release's index (links to the Release
assets), the Pages site carrying every release, the pin check against a served manifest; and the
resolver taking a released sdist's recorded index. Fabricated wheels (tests/install/helpers.py);
hashes checked with hashlib; a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "install"))
from helpers import build_info, make_wheel, serving

from build_matrix import release
from mamba_ssm._install import index
from mamba_ssm._install.manifest import WheelEntry

LABEL = "cu13torch2.14cxx11abiTRUE"


def test_urls_default_to_the_pages_of_the_repository():
    u = release.release_urls("State-Spaces/mamba", ref="refs/tags/v2.4.0", version="2.4.0")
    assert u == {
        "version": "2.4.0",
        "tag": "v2.4.0",
        "index_url": "https://state-spaces.github.io/mamba/v2.4.0/",
        "wheels_url": "https://github.com/State-Spaces/mamba/releases/download/v2.4.0/",
    }
    # the <owner>.github.io repository is served at the host's root
    assert release.pages_url("Org/org.github.io") == "https://org.github.io/"
    # one setting moves the index (e.g. a custom domain)
    u = release.release_urls("a/b", index_base="https://wheels.example.org/mamba", version="2.4.0")
    assert u["index_url"] == "https://wheels.example.org/mamba/v2.4.0/"


def test_tag_must_be_the_package_version():
    with pytest.raises(release.ReleaseError, match="the tag 'v2.5.0' is not v \\+ the package version"):
        release.release_urls("a/b", ref="refs/tags/v2.5.0", version="2.4.0")
    assert release.release_urls("a/b", ref="refs/heads/main", version="2.4.0")["tag"] == "v2.4.0"


def _release(tmp_path, version):
    wheels = tmp_path / f"wheels-{version}"
    w = Path(
        make_wheel(
            str(wheels), LABEL, build_info(version=version), version=version, platform="manylinux_2_28_x86_64"
        )
    )  # repaired: the index refuses linux_*
    url = f"https://github.com/o/r/releases/download/v{version}/"
    tarball = release.write_release_index(version, [w], url, tmp_path / f"idx-{version}")
    return w, url, tarball


def test_index_links_to_the_release_assets_and_records_the_manifest_hash(tmp_path):
    w, url, tarball = _release(tmp_path, "2.4.0")
    with tarfile.open(tarball) as tf:
        files = {m.name: tf.extractfile(m).read() for m in tf.getmembers() if m.isfile()}
    page = files[f"{LABEL}/mamba-ssm/index.html"].decode()
    sha = hashlib.sha256(w.read_bytes()).hexdigest()
    assert (
        f'href="{url}mamba_ssm-2.4.0%2Bcu13torch2.14cxx11abitrue-cp39-abi3-manylinux_2_28_x86_64.whl#sha256={sha}"'
        in page
    )
    assert not [n for n in files if n.endswith(".whl")]  # wheels stay Release assets, never on Pages
    rec = json.loads(files["release.json"])
    assert rec == {
        "version": "2.4.0",
        "wheels_url": url,
        "manifest_sha256": hashlib.sha256(files["manifest.json"]).hexdigest(),
    }
    with pytest.raises(
        release.ReleaseError, match=r"is version 2\.4\.0\+cu13torch2\.14cxx11abitrue, the release is 2\.5\.0"
    ):
        release.write_release_index("2.5.0", [w], url, tmp_path / "other")


def test_site_carries_every_release(tmp_path):
    indexes = tmp_path / "indexes"
    for v in ("2.4.0", "2.4.1", "2.10.0"):
        _w, _url, tarball = _release(tmp_path, v)
        (indexes / f"v{v}").mkdir(parents=True)
        (indexes / f"v{v}" / release.INDEX_ASSET).write_bytes(tarball.read_bytes())
    versions = release.assemble_site(indexes, tmp_path / "site")
    assert versions == ["2.10.0", "2.4.1", "2.4.0"]
    for v in versions:
        assert (tmp_path / "site" / f"v{v}" / "manifest.json").is_file()
        assert (tmp_path / "site" / f"v{v}" / LABEL / "mamba-ssm" / "index.html").is_file()
    top = (tmp_path / "site" / "index.html").read_text()
    assert top.index("v2.10.0/") < top.index("v2.4.1/") < top.index("v2.4.0/")


def test_unsafe_index_asset_is_refused(tmp_path):
    bad = tmp_path / "i" / release.INDEX_ASSET
    bad.parent.mkdir()
    with tarfile.open(bad, "w:gz") as tf:
        info = tarfile.TarInfo("../escape.html")
        info.size = 1
        tf.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(release.ReleaseError, match="unsafe member '../escape.html'"):
        release.assemble_site(tmp_path / "i", tmp_path / "site")


def _fake_sdist(path, record, pins):
    with tarfile.open(path, "w:gz") as tf:
        for rel, data in ((release.SDIST_RELEASE_FILE, record), (release.SDIST_PINS_FILE, pins)):
            blob = json.dumps(data).encode()
            info = tarfile.TarInfo(f"mamba_ssm-2.4.0/{rel}")
            info.size = len(blob)
            tf.addfile(info, io.BytesIO(blob))
    return path


@pytest.fixture
def served(tmp_path):
    root = tmp_path / "site"
    root.mkdir()
    with serving(str(root)) as srv:
        yield root, srv.url


def test_verify_pin_against_the_served_manifest(tmp_path, served):
    root, base = served
    w, url, tarball = _release(tmp_path, "2.4.0")
    release.assemble_site(tarball.parent, root)
    index_url = f"{base}v2.4.0/"
    manifest = (root / "v2.4.0" / "manifest.json").read_bytes()
    sha_w = hashlib.sha256(w.read_bytes()).hexdigest()
    record = {
        "index_url": index_url,
        "wheels_url": url,
        "manifest_sha256": hashlib.sha256(manifest).hexdigest(),
    }
    pins = {"wheels": {w.name: {"sha256": sha_w, "size": w.stat().st_size}}}
    sdist = _fake_sdist(tmp_path / "ok.tar.gz", record, pins)
    assert "matches ok.tar.gz: 1 wheels" in release.verify_pin(sdist, index_url)
    # a manifest changed after the sdist was built
    (root / "v2.4.0" / "manifest.json").write_bytes(manifest + b"\n")
    with pytest.raises(release.ReleaseError, match="the deployed manifest is not the pinned one"):
        release.verify_pin(sdist, index_url)
    (root / "v2.4.0" / "manifest.json").write_bytes(manifest)
    # the sdist pins another wheel hash
    bad = _fake_sdist(tmp_path / "bad.tar.gz", record, {"wheels": {w.name: {"sha256": "0" * 64, "size": 1}}})
    with pytest.raises(release.ReleaseError, match="differ from the sdist's pins"):
        release.verify_pin(bad, index_url)
    with pytest.raises(release.ReleaseError, match="records the index"):
        release.verify_pin(sdist, f"{base}v9/")


def test_resolver_uses_the_recorded_release_index(tmp_path, monkeypatch):
    rec = tmp_path / "release_index.json"
    rec.write_text(
        json.dumps(
            {
                "index_url": "https://o.github.io/r/v2.4.0/",
                "version": "2.4.0",
                "wheels_url": "https://github.com/o/r/releases/download/v2.4.0/",
                "manifest_sha256": "0" * 64,
            }
        )
    )
    monkeypatch.setattr(index, "RELEASE_INDEX_FILE", str(rec))
    assert index.default_index("2.4.0", {}) == "https://o.github.io/r/v2.4.0/"
    assert index.default_index("2.4.0", {"MAMBA_WHEEL_INDEX": "http://mirror/x"}) == "http://mirror/x/"
    # another version than the record's (an sdist built from a later checkout): the default pattern
    assert index.default_index("2.5.0", {}) == index.RELEASE_INDEX_URL.format(version="2.5.0")
    entry = WheelEntry(
        filename=f"mamba_ssm-2.4.0+{LABEL.lower()}-cp310-abi3-linux_x86_64.whl",
        sha256="0" * 64,
        size=1,
        variant=LABEL,
        version=f"2.4.0+{LABEL.lower()}",
    )
    assert (
        index.wheel_url("https://o.github.io/r/v2.4.0/", entry)
        == "https://github.com/o/r/releases/download/v2.4.0/mamba_ssm-2.4.0%2Bcu13torch2.14cxx11abitrue-cp310-abi3-linux_x86_64.whl"
    )
    assert (
        index.wheel_url("http://mirror/x/", entry)
        == f"http://mirror/x/{LABEL}/mamba-ssm/{entry.filename.replace('+', '%2B')}"
    )
    rec.write_text("{not json")
    with pytest.raises(ValueError, match="not a release index record"):
        index.release_index()
