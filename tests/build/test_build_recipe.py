"""The documented source-build recipes install everything the build's preflight requires (issue 36, item 1).

The finding: README's and docs/build.md's recipe installed ``setuptools>=77 wheel packaging>=22`` but not
ninja, so on a machine without ninja the build stopped at the preflight ("ninja is not installed ... Fix:
pip install ninja"). What the build requires is read from the build itself: pyproject.toml's
``build-system.requires``, the packages setup.py's requirements check tells a user to install, and the
package the ninja check names in its fix (with ninja hidden from it). Every ``pip install`` of build
requirements in each recipe must list each of them, with a specifier at least as strict.
"""

from __future__ import annotations

import os
import re
import shlex
import sys

import pytest
from _setup_loader import REPO, load_setup
from packaging.requirements import Requirement

from mamba_ssm._build.errors import PreflightError
from mamba_ssm._build.toolkit import check_ninja

S = load_setup()

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the dev venv is 3.11
    tomllib = pytest.importorskip("tomli")


def blocks(path: str, heading: str | None) -> list[str]:
    """The bash blocks of ``path`` (under ``heading`` up to the next heading of the same level, or all)."""
    with open(os.path.join(REPO, path)) as fh:
        text = fh.read()
    if heading is not None:
        level = heading.split(" ", 1)[0]
        text = text.split(heading + "\n", 1)[1]
        text = re.split(rf"^{level} ", text, flags=re.MULTILINE)[0]
    return re.findall(r"```bash\n(.*?)```", text, re.DOTALL)


def requirement_installs(block: str) -> list[list[Requirement]]:
    """The requirements of each ``pip install`` line of ``block`` that installs other packages than this
    one (``.``, a wheel, an sdist, ``mamba-ssm==...``)."""
    found = []
    for line in block.splitlines():
        if line.lstrip().startswith("#") or "pip install" not in line:
            continue
        words = shlex.split(line.split("#", 1)[0])
        args = words[words.index("install") + 1 :]
        if "." in args or any(a.endswith((".whl", ".tar.gz")) or a.startswith("mamba-ssm") for a in args):
            continue  # this package itself, not its build requirements
        found.append([Requirement(a) for a in args if not a.startswith("-")])
    return found


def preflight_requirements(monkeypatch) -> dict[str, Requirement]:
    """What the build asks for, in its own words."""
    wanted: dict[str, Requirement] = {}
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as fh:
        for text in tomllib.load(fh)["build-system"]["requires"]:
            wanted[Requirement(text).name] = Requirement(text)
    with pytest.raises(SystemExit) as stop:
        S.check_build_requirements("1.0")  # setuptools 1.0: the check prints its fix
    fix = re.search(r"Fix: python -m pip install (.*?), then", str(stop.value))
    assert fix, str(stop.value)
    for text in shlex.split(fix.group(1)):
        wanted[Requirement(text).name] = Requirement(text)
    monkeypatch.setitem(sys.modules, "ninja", None)  # `import ninja` fails, as on a fresh machine
    with pytest.raises(PreflightError) as err:
        check_ninja({"PATH": ""})
    fix = re.search(r"Fix: pip install (\S+)", str(err.value))
    assert fix, str(err.value)
    wanted[Requirement(fix.group(1)).name] = Requirement(fix.group(1))
    return wanted


@pytest.mark.parametrize(
    "path,heading",
    [
        ("README.md", "## Building from source"),
        ("README.md", "### Installing it today"),
        ("docs/build.md", None),
    ],
)
def test_recipe_installs_what_the_preflight_requires(path, heading, monkeypatch):
    wanted = preflight_requirements(monkeypatch)
    assert {"setuptools", "wheel", "packaging", "ninja"} <= set(wanted), wanted
    installs = [reqs for block in blocks(path, heading) for reqs in requirement_installs(block)]
    assert installs, f"{path} {heading}: no pip install of build requirements"
    for reqs in installs:
        listed = {r.name: r for r in reqs}
        for name, need in wanted.items():
            assert name in listed, f"{path} {heading}: {name} is missing from {[str(r) for r in reqs]}"
            # every version the recipe allows, the build accepts (probed at each bound the build names)
            probes = {s.version for s in need.specifier} | {s.version for s in listed[name].specifier}
            for v in probes:
                if listed[name].specifier.contains(v, prereleases=True):
                    assert need.specifier.contains(v, prereleases=True), (path, str(listed[name]), str(need))
