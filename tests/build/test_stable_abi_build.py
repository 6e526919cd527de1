"""MAMBA_TORCH_STABLE_ABI: which binding a source build compiles (classic ATen or the LibTorch stable ABI),
the flags that make the stable one honest, the build info it records and the wheel's torch requirement.

Values are checked against the rules as the issue states them (unset: stable with floor 2.10 for torch >=
2.10, else classic; 0/FALSE: classic; X.Y: that floor), against torch's own header for the target-version
encoding, and against packaging's specifier logic for the requirement.
"""

import os
import re

import pytest
from _setup_loader import REPO, fake_toolkit
from packaging.requirements import Requirement

from mamba_ssm._build import config
from mamba_ssm._build.commands import setup_kwargs
from mamba_ssm._build.config import BuildTorch, resolve_config
from mamba_ssm._build.errors import PreflightError
from mamba_ssm._build.plan import BuildMode, BuildPlan
from mamba_ssm._compat import buildinfo
from mamba_ssm._compat.versions import TorchBuild


def cuda_torch(version="2.14.1+cu130", cuda="13.0", home=None):
    return BuildTorch(
        build=TorchBuild(version, cuda=cuda, cxx11_abi=True), arch_list=["sm_90"], cuda_home=home
    )


def cpu_torch(version="2.13.0+cpu"):
    return BuildTorch(build=TorchBuild(version, cxx11_abi=True))


@pytest.fixture
def toolkit(tmp_path):
    return fake_toolkit(str(tmp_path / "cuda"), release=(13, 0), gcc_limit=99)


@pytest.mark.parametrize(
    "raw,torch,want",
    [
        ("", "2.14.1+cu130", ("stable", "2.10")),
        ("", "2.10.0+cu128", ("stable", "2.10")),
        ("", "2.9.1+cu130", ("classic", None)),
        ("", "2.15.0.dev20260101+cu130", ("stable", "2.10")),  # a nightly has the stable ABI too
        ("0", "2.14.1+cu130", ("classic", None)),
        ("FALSE", "2.14.1+cu130", ("classic", None)),
        ("false", "2.12.0+cu130", ("classic", None)),
        ("2.12", "2.14.1+cu130", ("stable", "2.12")),
        ("2.14", "2.14.1+cu130", ("stable", "2.14")),
        ("TRUE", "2.11.0+cu128", ("stable", "2.10")),
    ],
)
def test_resolve_torch_abi(raw, torch, want):
    abi, floor, why = config.resolve_torch_abi(raw, TorchBuild(torch), "cuda")
    assert (abi, floor) == want and why


@pytest.mark.parametrize(
    "raw,torch,match",
    [
        ("2.15", "2.14.1+cu130", "floor of torch 2.15, newer than the torch building it"),
        ("2.9", "2.14.1+cu130", "MAMBA_TORCH_STABLE_ABI='2.9' is not a stable-ABI floor"),
        ("stable", "2.14.1+cu130", "MAMBA_TORCH_STABLE_ABI='stable' is not a stable-ABI floor"),
        ("2.10.1", "2.14.1+cu130", "MAMBA_TORCH_STABLE_ABI='2.10.1' is not"),
        ("TRUE", "2.9.1+cu130", "floor of torch 2.10, newer than the torch building it"),
    ],
)
def test_bad_values_fail_naming_the_value(raw, torch, match):
    with pytest.raises(PreflightError, match=re.escape(match)):
        config.resolve_torch_abi(raw, TorchBuild(torch), "cuda")


def test_rocm_builds_stay_classic():
    rocm = TorchBuild("2.13.0+rocm7.2", hip="7.2.1-abc")
    assert config.resolve_torch_abi("", rocm, "hip")[:2] == ("classic", None)
    assert config.resolve_torch_abi("", rocm, None)[:2] == ("stable", "2.10")  # a CPU-only build of it
    with pytest.raises(PreflightError, match="MAMBA_TORCH_STABLE_ABI='2.10' asks for the stable-ABI binding"):
        config.resolve_torch_abi("2.10", rocm, "hip")


def test_target_version_matches_torch_header():
    """TORCH_TARGET_VERSION's encoding is torch's: TORCH_VERSION_2_10_0 in torch/csrc/stable/version.h."""
    torch = pytest.importorskip("torch")
    header = os.path.join(os.path.dirname(torch.__file__), "include", "torch", "csrc", "stable", "version.h")
    if not os.path.isfile(header):
        pytest.skip(f"{header} is not in this torch (older than 2.10)")
    with open(header) as fh:
        text = fh.read()
    for major, minor in ((2, 10), (2, 13)):
        m = re.search(
            rf"#define TORCH_VERSION_{major}_{minor}_0 \(\(\(0ULL \+ (\d+)\) << (\d+)\) \| \(\(0ULL \+ (\d+)\) << (\d+)\)\)",
            text,
        )
        assert m, f"TORCH_VERSION_{major}_{minor}_0 not found in {header}"
        value = (int(m.group(1)) << int(m.group(2))) | (int(m.group(3)) << int(m.group(4)))
        assert int(config.stable_abi_hex(f"{major}.{minor}"), 16) == value
    assert config.stable_abi_hex("2.10") == "0x020a000000000000"  # the value the issue gives


def test_stable_config_flags_and_build_info(toolkit):
    env = {"PATH": os.environ.get("PATH", ""), "CUDA_HOME": toolkit}
    cfg = resolve_config(env, cuda_torch(home=toolkit))
    assert (cfg.torch_abi, cfg.torch_abi_floor) == ("stable", "2.10")
    assert ("MAMBA_SSM_STABLE_ABI", None) in cfg.define_macros
    assert ("TORCH_TARGET_VERSION", "0x020a000000000000") in cfg.define_macros
    assert "-fvisibility=hidden" in cfg.cxx_flags
    info = cfg.build_info(git_commit="abc")
    assert (info.torch_abi, info.torch_abi_floor) == ("stable", "2.10")
    back = buildinfo.BuildInfo.from_json(info.to_json())
    assert (back.torch_abi, back.torch_abi_floor, back.kernels) == ("stable", "2.10", ["cpu", "cuda"])
    # the binding sources of both kinds are compiled; the macro empties the other kind's files
    names = {os.path.basename(s) for s in cfg.sources}
    assert {"binding.cpp", "binding_cuda.cpp", "binding_stable.cpp", "binding_stable_cuda.cpp"} <= names


def test_classic_config_has_no_stable_flags(toolkit):
    env = {"PATH": os.environ.get("PATH", ""), "CUDA_HOME": toolkit, "MAMBA_TORCH_STABLE_ABI": "0"}
    cfg = resolve_config(env, cuda_torch(home=toolkit))
    assert (cfg.torch_abi, cfg.torch_abi_floor) == ("classic", None)
    assert not [m for m in cfg.define_macros if m[0] in ("MAMBA_SSM_STABLE_ABI", "TORCH_TARGET_VERSION")]
    info = cfg.build_info()
    assert (info.torch_abi, info.torch_abi_floor) == ("classic", None)


def test_preflight_names_bad_value_before_compiling(toolkit):
    env = {"PATH": os.environ.get("PATH", ""), "CUDA_HOME": toolkit, "MAMBA_TORCH_STABLE_ABI": "yesplease"}
    with pytest.raises(PreflightError, match="MAMBA_TORCH_STABLE_ABI='yesplease'"):
        resolve_config(env, cuda_torch(home=toolkit))


@pytest.mark.parametrize(
    "torch,raw,admits,refuses",
    [
        ("2.13.0+cpu", "", ["2.10.0", "2.14.1", "2.15.0", "3.0.0"], ["2.9.1"]),
        ("2.14.1+cpu", "2.12", ["2.12.0", "2.15.0"], ["2.11.0"]),
        ("2.14.1+cpu", "0", ["2.14.0", "2.14.1"], ["2.13.0", "2.15.0"]),
        ("2.9.1+cpu", "", ["2.9.0", "2.9.1"], ["2.8.0", "2.10.0"]),
    ],
)
def test_wheel_requires_the_torches_it_serves(torch, raw, admits, refuses):
    env = {"PATH": os.environ.get("PATH", ""), "MAMBA_TORCH_STABLE_ABI": raw}
    cfg = resolve_config(env, cpu_torch(torch))
    req = Requirement(config.torch_requirement(cfg))
    assert req.name == "torch"
    assert all(req.specifier.contains(v) for v in admits), (str(req), admits)
    assert not any(req.specifier.contains(v) for v in refuses), (str(req), refuses)


def test_exact_torch_build_requires_that_build():
    cfg = resolve_config(
        {"PATH": os.environ.get("PATH", ""), "MAMBA_TORCH_STABLE_ABI": "0"},
        cpu_torch("2.6.0a0+ecf3bae40a.nv25.01"),
    )
    req = Requirement(config.torch_requirement(cfg))
    assert req.specifier.contains("2.6.0a0", prereleases=True) and not req.specifier.contains("2.6.0")


def test_setup_kwargs_requirement():
    plan = BuildPlan(
        BuildMode.SOURCE, config=resolve_config({"PATH": os.environ.get("PATH", "")}, cpu_torch())
    )
    kw = setup_kwargs(plan, "2.4.0")
    # einops: upstream mamba-ssm's install brings it, and its README examples import it
    assert kw["install_requires"] == ["torch>=2.10", "packaging", "einops"]
    assert setup_kwargs(BuildPlan(BuildMode.PYTHON), "2.4.0")["install_requires"] == [
        "torch",
        "packaging",
        "einops",
    ]


def test_pyproject_declares_dependencies_dynamic():
    """setuptools ignores install_requires unless pyproject.toml marks dependencies dynamic."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as fh:
        project = tomllib.load(fh)["project"]
    assert "dependencies" in project["dynamic"] and "dependencies" not in project
