"""Naming: VariantKey parses and formats local version labels and wheel file names round-trip.

Expected strings are public names (upstream's release assets, PyTorch's version strings) or written
out by hand from the label grammar in mamba_ssm/_compat/variant.py's docstring.
"""

from dataclasses import dataclass
from typing import Optional

import pytest
from packaging.version import Version

from build_matrix._compat_loader import load_compat

variant = load_compat("variant")
VariantKey = variant.VariantKey
VariantError = variant.VariantError


@dataclass
class FakeTorch:  # duck-typed stand-in for versions.TorchBuild (only the fields from_torch reads)
    version: str
    cuda: Optional[str] = None
    hip: Optional[str] = None
    cxx11_abi: Optional[bool] = None


UPSTREAM = [
    # names in the form of upstream's release assets (mamba-ssm 2.2.x GitHub releases)
    (
        "mamba_ssm-2.2.2+cu12torch2.6cxx11abiTRUE-cp311-cp311-linux_x86_64.whl",
        dict(
            torch="2.6",
            accelerator="cu12",
            cxx11abi=True,
            python_tag="cp311",
            abi_tag="cp311",
            platform_tag="linux_x86_64",
        ),
    ),
    (
        "mamba_ssm-2.2.4+cu11torch2.4cxx11abiFALSE-cp310-cp310-linux_x86_64.whl",
        dict(
            torch="2.4",
            accelerator="cu11",
            cxx11abi=False,
            python_tag="cp310",
            abi_tag="cp310",
            platform_tag="linux_x86_64",
        ),
    ),
]


@pytest.mark.parametrize("name,fields", UPSTREAM)
def test_reads_upstream_wheel_names(name, fields):
    key = VariantKey.from_wheel_filename(name)
    for k, v in fields.items():
        assert getattr(key, k) == v, k
    # upstream's label text is exactly our label grammar for CUDA
    assert "+" + key.local_label in name


def test_reads_upstream_hip_label():
    key = VariantKey.from_local_label("+hip62")
    assert key.accelerator == "rocm6.2"
    assert key.rocm == (6, 2)
    assert key.torch is None and key.cxx11abi is None and not key.complete
    assert key.local_label == "hip62"
    assert VariantKey.from_local_label(key.local_label) == key


@pytest.mark.parametrize(
    "fields,label",
    [
        (dict(torch="2.14", accelerator="cu13", cxx11abi=True), "cu13torch2.14cxx11abiTRUE"),
        (dict(torch="2.6", accelerator="cu12", cxx11abi=False), "cu12torch2.6cxx11abiFALSE"),
        (dict(torch="2.13", accelerator="cpu", cxx11abi=True), "cputorch2.13cxx11abiTRUE"),
        (dict(torch="2.9", accelerator="rocm6.4", cxx11abi=True), "rocm6.4torch2.9cxx11abiTRUE"),
        (
            dict(torch="2.3.0.dev20240304+cu118", accelerator="cu11", cxx11abi=False),
            "cu11torch2.3.0.dev20240304.local.cu118cxx11abiFALSE",
        ),
        # NGC: normalisation turns the numeric segment '01' into '1'
        (
            dict(torch="2.6.0a0+ecf3bae40a.nv25.01", accelerator="cu12", cxx11abi=True),
            "cu12torch2.6.0a0.local.ecf3bae40a.nv25.1cxx11abiTRUE",
        ),
    ],
)
def test_label_round_trip(fields, label):
    key = VariantKey(**fields)
    assert key.local_label == label
    assert VariantKey.from_local_label(label) == key
    # every label is a legal PEP 440 local label, and survives normalisation
    v = Version("2.4.0+" + label)
    assert v.local == label.lower()
    assert VariantKey.from_local_label(v.local) == key
    # and the file-name round trip with each tag set
    for tags in [
        dict(),
        dict(platform_tag="manylinux_2_28_x86_64"),
        dict(python_tag="cp311", abi_tag="cp311", platform_tag="linux_aarch64"),
    ]:
        k2 = key.with_tags(**tags)
        name = k2.wheel_filename("2.4.0")
        assert VariantKey.from_wheel_filename(name) == k2
        assert name.startswith("mamba_ssm-2.4.0+" + label.lower() + "-")


def test_wheel_filename_matches_setuptools_normal_form():
    key = VariantKey(torch="2.14", accelerator="cu13", cxx11abi=True, platform_tag="manylinux_2_28_x86_64")
    # setuptools 84 names a wheel with version '2.4.0.dev0+cu13torch2.14cxx11abiTRUE' like this
    assert key.wheel_filename("2.4.0.dev0") == (
        "mamba_ssm-2.4.0.dev0+cu13torch2.14cxx11abitrue-cp39-abi3-manylinux_2_28_x86_64.whl"
    )
    # a version that already carries the same label is accepted, another label is refused
    assert key.wheel_filename("2.4.0.dev0+cu13torch2.14cxx11abiTRUE") == key.wheel_filename("2.4.0.dev0")
    with pytest.raises(VariantError, match="already has the local label"):
        key.wheel_filename("2.4.0+cu12torch2.6cxx11abiTRUE")


@pytest.mark.parametrize(
    "torch,expected",
    [
        (FakeTorch("2.14.1+cu130", cuda="13.0", cxx11_abi=True), "cu13torch2.14cxx11abiTRUE"),
        (FakeTorch("2.6.0+cu124", cuda="12.4", cxx11_abi=False), "cu12torch2.6cxx11abiFALSE"),
        (FakeTorch("2.6.0+cu126", cuda="12.6", cxx11_abi=True), "cu12torch2.6cxx11abiTRUE"),
        (FakeTorch("2.5.1+cu124", cuda="12.4", cxx11_abi=False), "cu12torch2.5cxx11abiFALSE"),
        (FakeTorch("2.13.0+cpu", cxx11_abi=True), "cputorch2.13cxx11abiTRUE"),
        (
            FakeTorch("2.4.0+rocm6.1", hip="6.1.40091-a8dbc0c19", cxx11_abi=False),
            "rocm6.1torch2.4cxx11abiFALSE",
        ),
        (FakeTorch("2.5.0", hip="6.2.41133-dd7f95766", cxx11_abi=True), "rocm6.2torch2.5cxx11abiTRUE"),
        (
            FakeTorch("2.3.0.dev20240304+cu118", cuda="11.8", cxx11_abi=False),
            "cu11torch2.3.0.dev20240304.local.cu118cxx11abiFALSE",
        ),
        (
            FakeTorch("2.6.0a0+ecf3bae40a.nv25.01", cuda="12.8", cxx11_abi=True),
            "cu12torch2.6.0a0.local.ecf3bae40a.nv25.1cxx11abiTRUE",
        ),
    ],
)
def test_from_torch(torch, expected):
    assert VariantKey.from_torch(torch).local_label == expected


def test_from_torch_unknown_abi_is_an_error():
    with pytest.raises(VariantError, match="C\\+\\+ ABI is unknown"):
        VariantKey.from_torch(FakeTorch("2.14.1+cu130", cuda="13.0"))


@pytest.mark.parametrize(
    "bad,match",
    [
        ("cu13torch2.14", "not a wheel variant"),
        ("cu13torch2.14cxx11abiMAYBE", "not a wheel variant"),
        ("xpu1torch2.14cxx11abiTRUE", "not a wheel variant"),
        ("cu13torchnotaversioncxx11abiTRUE", "neither 'major.minor'"),
    ],
)
def test_bad_labels_name_the_value(bad, match):
    with pytest.raises(VariantError, match=match) as info:
        VariantKey.from_local_label(bad)
    assert bad in str(info.value)


@pytest.mark.parametrize(
    "bad,match",
    [
        ("mamba_ssm-2.4.0-cp39-abi3-linux_x86_64.whl", "no local version label"),
        ("causal_conv1d-1.5.0+cu12torch2.6cxx11abiTRUE-cp311-cp311-linux_x86_64.whl", "not of 'mamba_ssm'"),
        ("mamba_ssm-2.4.0+cu13torch2.14cxx11abiTRUE.tar.gz", "no .whl suffix"),
        ("mamba_ssm-2.4.0+cu13torch2.14cxx11abiTRUE-linux_x86_64.whl", "expected"),
    ],
)
def test_bad_wheel_names(bad, match):
    with pytest.raises(VariantError, match=match):
        VariantKey.from_wheel_filename(bad)


def test_bad_fields():
    with pytest.raises(VariantError, match="accelerator 'cuda13'"):
        VariantKey(torch="2.14", accelerator="cuda13", cxx11abi=True)
    with pytest.raises(VariantError, match="needs torch and cxx11abi"):
        VariantKey(torch=None, accelerator="cu13", cxx11abi=True)
    with pytest.raises(VariantError, match="platform_tag"):
        VariantKey(torch="2.14", accelerator="cu13", cxx11abi=True, platform_tag="linux x86")


def test_exactness_and_properties():
    rel = VariantKey(torch="2.14", accelerator="cu13", cxx11abi=True)
    assert not rel.exact_torch and rel.cuda_major == 13 and rel.rocm is None
    ngc = VariantKey(torch="2.6.0a0+ecf3bae40a.nv25.01", accelerator="cu12", cxx11abi=True)
    assert ngc.exact_torch and ngc.torch == "2.6.0a0+ecf3bae40a.nv25.1"


# ------------------------------------------------------------------------------------ stable ABI
@pytest.mark.parametrize(
    "label,accel,floor",
    [
        ("cu13torch2.10stable", "cu13", "2.10"),
        ("cu12torch2.10stable", "cu12", "2.10"),
        ("cputorch2.12stable", "cpu", "2.12"),
        ("ROCM7.2TORCH2.11STABLE", "rocm7.2", "2.11"),
    ],
)
def test_stable_label_round_trip(label, accel, floor):
    key = VariantKey.from_local_label(label)
    assert (key.accelerator, key.torch, key.cxx11abi, key.torch_abi, key.stable) == (
        accel,
        floor,
        None,
        "stable",
        True,
    )
    assert key.complete and not key.exact_torch
    assert key.local_label == label.lower()  # the label is lower case already: PEP 440 leaves it alone
    assert VariantKey.from_local_label(key.local_label) == key
    name = key.with_tags(python_tag="cp310", platform_tag="manylinux_2_28_x86_64").wheel_filename("2.4.0")
    assert name == f"mamba_ssm-2.4.0+{label.lower()}-cp310-abi3-manylinux_2_28_x86_64.whl"
    assert VariantKey.from_wheel_filename(name).local_label == key.local_label


def test_stable_and_classic_keys_differ():
    stable = VariantKey(torch="2.10", accelerator="cu13", cxx11abi=None, torch_abi="stable")
    classic = VariantKey(torch="2.10", accelerator="cu13", cxx11abi=True)
    assert stable != classic and stable.local_label == "cu13torch2.10stable"
    assert classic.local_label == "cu13torch2.10cxx11abiTRUE"


@pytest.mark.parametrize(
    "fields,match",
    [
        (dict(torch="2.10", accelerator="cu13", cxx11abi=True, torch_abi="stable"), "cxx11abi=None"),
        (dict(torch="2.10.1", accelerator="cu13", cxx11abi=None, torch_abi="stable"), "floor 'major.minor'"),
        (dict(torch="2.10", accelerator="cu13", cxx11abi=True, torch_abi="limited"), "torch_abi 'limited'"),
    ],
)
def test_bad_stable_keys(fields, match):
    with pytest.raises(VariantError, match=match):
        VariantKey(**fields)


def test_stable_label_with_patch_floor_is_refused():
    with pytest.raises(VariantError, match="'cu13torch2.10.1stable' is not a wheel variant"):
        VariantKey.from_local_label("cu13torch2.10.1stable")
