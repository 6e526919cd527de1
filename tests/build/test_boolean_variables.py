"""The build's boolean variables accept exactly the spellings docs/build.md lists (issue 36, item 6).

The finding: docs/build.md said only ``1``/``TRUE`` select the stable ABI and "anything else fails", but the
code also took ``YES``/``ON``/``NO``/``OFF``, and a misspelt flag (``MAMBA_FORCE_BUILD=maybe``) was read as
false without a word. The spellings and the variables are read from docs/build.md's text (the reference),
then every documented spelling, in three cases, must be accepted with its meaning, and values outside the
list must stop setup.py within seconds, naming the variable, the value and every documented spelling.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from _setup_loader import REPO

from mamba_ssm._build import config
from mamba_ssm._build.errors import PreflightError
from mamba_ssm._build.plan import plan_build
from mamba_ssm._build.settings import Settings
from mamba_ssm._compat.versions import TorchBuild

#: Values no documentation lists: each must be refused.
UNDOCUMENTED = ("2", "-1", "T", "Y", "N", "enable", "maybe", "truee", "yes!", "01")


def documented() -> tuple[list[str], list[str], list[str]]:
    """(boolean variables, true spellings, false spellings) as docs/build.md's paragraph states them."""
    with open(os.path.join(REPO, "docs", "build.md")) as fh:
        text = " ".join(fh.read().split())
    para = re.search(
        r"Boolean variables \((.*?)\) take exactly these spellings, in any case: (.*?); empty", text
    )
    assert para, "docs/build.md has no 'Boolean variables (...) take exactly these spellings' paragraph"
    names = re.findall(r"`([A-Z0-9_]+)`", para.group(1))
    true_part, false_part = para.group(2).split(";")
    assert true_part.strip().startswith("true") and false_part.strip().startswith("false"), para.group(2)
    trues = re.findall(r"`([^`]+)`", true_part)
    falses = re.findall(r"`([^`]+)`", false_part)
    assert names and trues and falses, para.group(0)
    return names, trues, falses


def cases(spelling: str) -> list[str]:
    return sorted({spelling, spelling.lower(), spelling.capitalize(), f" {spelling.lower()} "})


def test_every_documented_spelling_is_accepted_with_its_meaning():
    names, trues, falses = documented()
    for name in names:
        for value, want in [(v, True) for v in trues] + [(v, False) for v in falses] + [("", False)]:
            for raw in cases(value) if value else [""]:
                s = Settings.from_env({name: raw})
                s.check_flags()  # a documented spelling is never refused
                attr = {
                    "MAMBA_FORCE_BUILD": "force_build",
                    "MAMBA_SKIP_CUDA_BUILD": "skip_cuda_build",
                    "MAMBA_FORCE_CXX11_ABI": "force_cxx11_abi",
                    "HIP_BUILD": "hip_build",
                    "MAMBA_DEBUG_BUILD": "debug_build",
                    "MAMBA_KEEP_CUDA_BUILD": "keep_cuda_build",
                }[name]
                assert getattr(s, attr) is want, (name, raw)


@pytest.mark.parametrize("raw", UNDOCUMENTED)
def test_an_undocumented_value_is_refused_naming_it_and_the_spellings(raw):
    names, trues, falses = documented()
    for name in names:
        with pytest.raises(PreflightError) as err:
            plan_build("source", {name: raw}, hook=None)
        message = str(err.value)
        assert f"{name}={raw!r}" in message, message
        for spelling in trues + falses:
            assert re.search(rf"\b{re.escape(spelling)}\b", message), (spelling, message)


def test_the_stable_abi_variable_takes_the_same_spellings():
    _, trues, falses = documented()
    torch = TorchBuild("2.14.1+cu130", cuda="13.0", cxx11_abi=True)
    for value in trues:
        for raw in cases(value):
            assert config.resolve_torch_abi(raw, torch, "cuda")[:2] == ("stable", "2.10"), raw
    for value in falses:
        for raw in cases(value):
            assert config.resolve_torch_abi(raw, torch, "cuda")[:2] == ("classic", None), raw
    for raw in UNDOCUMENTED:
        with pytest.raises(PreflightError) as err:
            config.resolve_torch_abi(raw, torch, "cuda")
        for spelling in trues + falses:
            assert re.search(rf"\b{re.escape(spelling)}\b", str(err.value)), (raw, str(err.value))


def test_setup_py_stops_in_seconds_on_a_misspelt_flag(tmp_path):
    """A real ``setup.py bdist_wheel`` with ``MAMBA_FORCE_BUILD=maybe``: it must stop before the resolver
    or any build, with the value named (before the fix it went on as if unset)."""
    env = dict(
        os.environ,
        MAMBA_FORCE_BUILD="maybe",
        MAMBA_FALLBACK="error",
        MAMBA_WHEEL_INDEX=str(tmp_path / "no-index"),
        MAMBA_SSM_CACHE_DIR=str(tmp_path / "cache"),
    )
    env.pop("MAMBA_SKIP_CUDA_BUILD", None)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "setup.py", "bdist_wheel", "-d", str(tmp_path / "dist")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    took = time.monotonic() - start
    assert proc.returncode != 0, proc.stdout[-2000:]
    assert "MAMBA_FORCE_BUILD='maybe' is not a boolean" in proc.stderr, proc.stderr[-2000:]
    assert took < 60, took
    assert not (tmp_path / "dist").exists()
