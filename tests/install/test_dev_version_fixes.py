"""The rebuild command for a version no index has (a PEP 440 development release): in place for a
checkout, from the folder or sdist pip installed it from (PEP 610 ``direct_url.json``), and a guarded
``.`` build when neither is known; the pinned ``mamba-ssm==X`` for a release. The real pip runs of
these commands are in test_fix_commands.py."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess

import pytest

from mamba_ssm import _advice

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize(
    ("version", "on_an_index"),
    [
        ("2.4.0", True),
        ("2.4.0rc1", True),  # a tagged pre-release is published; `==` admits it
        ("2.4.0.post1", True),
        ("2.4.0+cu13torch2.14", True),  # the pin names the public version, 2.4.0
        ("2.4.0.dev0", False),
        ("2.4.0.dev0+cu13torch2.14", False),
        ("2.4.0rc1.dev3", False),
        ("not a version", False),
    ],
)
def test_which_versions_an_index_has(version, on_an_index):
    """PEP 440's development releases (``.devN``) are what a checkout carries between releases."""
    assert _advice.is_on_an_index(version) is on_an_index


def _docs_build_line(marker):
    """The docs/build.md command after the comment line containing ``marker``, without the variables
    naming this machine's toolkit and archs."""
    with open(os.path.join(REPO, "docs", "build.md")) as fh:
        lines = fh.read().split("```")[1].splitlines()
    line = next(lines[i + 1] for i, l in enumerate(lines) if l.startswith("#") and marker in l)
    words = shlex.split(line)
    while words[0].split("=", 1)[0] in ("CUDA_HOME", "MAMBA_CUDA_ARCHS"):
        words.pop(0)
    return words


def test_a_checkout_is_rebuilt_in_place():
    """This tree, imported where it lies: docs/build.md's in-place build, in the tree."""
    version = _advice.installed_version()
    if _advice.is_on_an_index(version):
        pytest.skip(f"this tree's version {version} is a release")
    expected = ["cd", REPO, "&&"] + _docs_build_line("in place")
    assert shlex.split(_advice.source_build_command()) == expected
    assert shlex.split(_advice.reinstall_command(index="https://wheels.example.invalid/")) == expected
    assert shlex.split(_advice.source_build_command(env_prefix="MAMBA_CUDA_ARCHS=80 ")) == (
        expected[:3] + ["MAMBA_CUDA_ARCHS=80"] + expected[3:]
    )


def _installed(tmp_path, version, direct_url):
    """A site folder as pip leaves it: the package and its dist-info with ``direct_url.json``."""
    site = tmp_path / "site"
    (site / "mamba_ssm").mkdir(parents=True)
    di = site / f"mamba_ssm-{version}.dist-info"
    di.mkdir()
    (di / "RECORD").write_text("")
    if direct_url is not None:
        (di / "direct_url.json").write_text(json.dumps(direct_url))
    return str(site / "mamba_ssm")


def test_an_install_from_an_sdist_file_is_rebuilt_from_it_while_it_exists(tmp_path, monkeypatch):
    sdist = tmp_path / "dist dir" / "mamba_ssm-2.4.0.dev0.tar.gz"
    sdist.parent.mkdir()
    sdist.write_bytes(b"")
    # PEP 610: what pip records for `pip install ./dist/mamba_ssm-2.4.0.dev0.tar.gz`
    url = {"url": sdist.as_uri(), "archive_info": {"hashes": {"sha256": "0" * 64}}}
    monkeypatch.setattr(_advice, "_PACKAGE_DIR", _installed(tmp_path, "2.4.0.dev0", url))
    words = shlex.split(_advice.reinstall_command())
    assert words[-1] == str(sdist) and "mamba-ssm==2.4.0.dev0" not in words
    assert words[:-1] == [
        "MAMBA_FORCE_BUILD=TRUE",
        "python",
        "-m",
        "pip",
        "install",
        "--no-build-isolation",
        "--no-cache-dir",
        "--force-reinstall",
        "--no-deps",
    ]
    sdist.unlink()
    assert _advice.rebuild_source().kind == "unknown"
    assert _advice.reinstall_command().startswith("test -f mamba_ssm/_version.py && MAMBA_FORCE_BUILD=TRUE ")


def test_a_release_keeps_the_pinned_command_wherever_it_came_from(tmp_path, monkeypatch):
    url = {"url": (tmp_path / "mamba_ssm-2.4.0.tar.gz").as_uri(), "archive_info": {}}
    monkeypatch.setattr(_advice, "_PACKAGE_DIR", _installed(tmp_path, "2.4.0", url))
    assert _advice.reinstall_command() == (
        "python -m pip install --no-cache-dir --force-reinstall --no-deps --no-binary mamba-ssm mamba-ssm==2.4.0"
    )
    assert _advice.source_build_command().endswith(" --no-deps --no-binary mamba-ssm mamba-ssm==2.4.0")
    assert "pip download --no-deps --no-binary :all: mamba-ssm==2.4.0`" in _advice.mirror_hint()


def test_an_unknown_source_gets_a_command_that_builds_nothing_outside_a_mamba_ssm_tree(tmp_path, monkeypatch):
    monkeypatch.setattr(_advice, "_PACKAGE_DIR", _installed(tmp_path, "2.4.0.dev0", None))
    cmd = _advice.source_build_command()
    assert cmd.startswith("test -f mamba_ssm/_version.py && ") and "mamba-ssm==" not in cmd
    assert "pip download" not in _advice.mirror_hint() and "a checkout of mamba-ssm 2.4.0.dev0" in (
        _advice.mirror_hint()
    )
    elsewhere = tmp_path / "some other project"
    elsewhere.mkdir()
    (elsewhere / "pyproject.toml").write_text('[project]\nname = "other"\nversion = "1"\n')
    proc = subprocess.run(["bash", "-c", cmd], cwd=elsewhere, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == proc.stderr == ""  # pip never ran
    assert re.search(r"# in a source checkout of mamba-ssm 2\.4\.0\.dev0\b", cmd)


def _backticked(text):
    return re.findall(r"`([^`]+)`", text)


@pytest.mark.parametrize("version", ["2.4.0.dev0", "2.4.0"])
def test_each_fix_offers_each_command_once(tmp_path, monkeypatch, version):
    """A development version is reinstalled by building its source, so the fixes for a pure-Python
    install (MAMBA_SKIP_CUDA_BUILD) and for a ``_C`` built for another torch name that build once; a
    release offers the pinned reinstall and the source build, two commands."""
    from mamba_ssm._install.record import InstallRecord

    tree = tmp_path / "checkout"
    (tree / "mamba_ssm").mkdir(parents=True)
    for name in ("setup.py", "pyproject.toml"):
        (tree / name).write_text("")
    (tree / "mamba_ssm" / "_version.py").write_text(f'__version__ = "{version}"\n')
    if version == "2.4.0.dev0":  # a checkout holding the package: docs/build.md's in-place build
        monkeypatch.setattr(_advice, "_PACKAGE_DIR", str(tree / "mamba_ssm"))
        builds = [f"cd {tree} && " + shlex.join(_docs_build_line("in place"))]
    else:
        monkeypatch.setattr(_advice, "_PACKAGE_DIR", _installed(tmp_path, version, None))
        pinned = f"--no-cache-dir --force-reinstall --no-deps --no-binary mamba-ssm mamba-ssm=={version}"
        builds = [
            f"python -m pip install {pinned}",
            f"MAMBA_FORCE_BUILD=TRUE python -m pip install --no-build-isolation {pinned}",
        ]
    skip = InstallRecord.from_dict(
        {"package_version": version, "final_mode": "python", "requested": "MAMBA_SKIP_CUDA_BUILD=TRUE"}
    )
    kernels = "python -m mamba_ssm install-kernels"
    if version == "2.4.0.dev0":  # no index has it: the rebuild leads, install-kernels only with a local index
        fix = _advice.missing_kernels_fix(skip)
        assert _backticked(fix) == [*builds, kernels] and "MAMBA_WHEEL_INDEX at a local index" in fix
        assert _backticked(_advice.mismatch_fix(None)) == builds
        monkeypatch.setenv("MAMBA_WHEEL_INDEX", "/srv/dry-run-index")  # a local index may have it
    assert _backticked(_advice.missing_kernels_fix(skip)) == [kernels, *builds]
    assert _backticked(_advice.mismatch_fix(None)) == [kernels, *builds]


def _fake_cuda_layout(tmp_path, monkeypatch, wrapper):
    """A toolkit root (bin/nvcc, include/cuda_runtime.h, lib64/libcudart.so) under a folder with a space,
    and PATH's only nvcc: with ``wrapper`` a ``#!/bin/sh`` script in another prefix that execs the
    toolkit's nvcc (as /usr/local/bin/nvcc does on some machines), else the toolkit's own bin/.
    CUDA_HOME and CUDA_PATH are unset. Returns the toolkit root."""
    root = tmp_path / "cuda toolkits" / "cuda-13.0"
    for sub in ("bin", "include", "lib64"):
        (root / sub).mkdir(parents=True)
    shutil.copy("/bin/true", root / "bin" / "nvcc")  # an executable, not a script
    (root / "include" / "cuda_runtime.h").write_text("")
    (root / "lib64" / "libcudart.so").write_text("")
    bindir = root / "bin"
    if wrapper:
        bindir = tmp_path / "usr-local" / "bin"
        bindir.mkdir(parents=True)
        (bindir / "nvcc").write_text(f'#!/bin/sh\nexec "{root}/bin/nvcc" "$@"\n')
        (bindir / "nvcc").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    return str(root)


@pytest.mark.parametrize("version", ["2.4.0", "2.4.0.dev0"])
def test_a_source_build_names_the_toolkit_behind_an_nvcc_wrapper(tmp_path, monkeypatch, version):
    """torch would guess CUDA_HOME=dirname(dirname(wrapper)) (no toolkit): every printed source build
    sets CUDA_HOME to the wrapper's toolkit root, quoted for the shell; a pinned wheel reinstall does not."""
    root = _fake_cuda_layout(tmp_path, monkeypatch, wrapper=True)
    monkeypatch.setattr(_advice, "_PACKAGE_DIR", _installed(tmp_path, version, None))
    for cmd in (
        _advice.source_build_command(),
        _advice.source_build_command(env_prefix="MAMBA_CUDA_ARCHS=80 "),
        _advice.no_isolation_command() if version.endswith("dev0") else _advice.source_build_command(),
    ):
        words = shlex.split(cmd.removeprefix("test -f mamba_ssm/_version.py && "))
        assert words[0] == f"CUDA_HOME={root}", cmd
        assert words[1] in ("MAMBA_FORCE_BUILD=TRUE", "MAMBA_CUDA_ARCHS=80"), cmd
    if version == "2.4.0":
        assert "CUDA_HOME" not in _advice.reinstall_command()
        assert "CUDA_HOME" not in _advice.no_isolation_command()
    else:
        assert "CUDA_HOME" in _advice.reinstall_command()  # a dev version's reinstall is a source build


@pytest.mark.parametrize("layout", ["CUDA_HOME set", "CUDA_PATH set", "nvcc in its toolkit"])
def test_no_cuda_home_is_added_when_torch_guesses_right(tmp_path, monkeypatch, layout):
    root = _fake_cuda_layout(tmp_path, monkeypatch, wrapper=layout != "nvcc in its toolkit")
    if layout != "nvcc in its toolkit":
        monkeypatch.setenv(layout.split()[0], root)
    monkeypatch.setattr(_advice, "_PACKAGE_DIR", _installed(tmp_path, "2.4.0", None))
    assert _advice.source_build_command() == (
        "MAMBA_FORCE_BUILD=TRUE python -m pip install --no-build-isolation --no-cache-dir --force-reinstall "
        "--no-deps --no-binary mamba-ssm mamba-ssm==2.4.0"
    )
