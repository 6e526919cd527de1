"""The command-line help is plain text (issue 36, item 6): ``install-kernels --help`` printed its module
docstring's reST (````python -m mamba_ssm install-kernels````). Each ``--help`` is run as a user runs it;
the commands the install-kernels help prints for an air-gapped machine are run too (the first one here,
whose output the second reads)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: reST inline markup: literals, roles, interpreted text, references
REST = re.compile(r"``|:[a-z]+:`|`[^`\n]+`_?")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mamba_ssm", *args], cwd=REPO, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize("command", [["install-kernels"], ["doctor"]])
def test_help_has_no_rest_markup(command):
    proc = run(*command, "--help")
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.startswith(f"usage: python -m mamba_ssm {command[0]}"), text
    assert not REST.search(text), REST.search(text)
    assert len(text.split("\n\n")[1].split()) >= 5, text  # a description, not an empty line


def test_install_kernels_help_states_exit_codes_and_runnable_commands(tmp_path):
    text = run("install-kernels", "--help").stdout
    assert re.search(r"exit status: 0 .*1 .*2 ", text), text
    commands = [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("  there:")]
    assert commands == ["python -m mamba_ssm install-kernels --print-env > env.json"], text
    argv = commands[0].split(">")[0].split()
    assert argv[:3] == ["python", "-m", "mamba_ssm"]
    proc = subprocess.run(
        [sys.executable, *argv[1:]],
        cwd=str(tmp_path),
        env=dict(os.environ, PYTHONPATH=REPO, MAMBA_SSM_CACHE_DIR=str(tmp_path / "cache")),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    env = json.loads(proc.stdout)
    assert env["python_version"].startswith(f"{sys.version_info[0]}.{sys.version_info[1]}"), env
