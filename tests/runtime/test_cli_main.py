"""The ``mamba-ssm`` / ``python -m mamba_ssm`` command line: --version, and help texts that name the
program the user invoked."""

import os
import subprocess
import sys

import pytest

from mamba_ssm import __main__ as cli
from mamba_ssm._version import __version__

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_version_as_module():
    p = subprocess.run(
        [sys.executable, "-m", "mamba_ssm", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"mamba-ssm {__version__}"


@pytest.mark.parametrize(
    "argv0, prog",
    [("/venv/bin/mamba-ssm", "mamba-ssm"), ("/site/mamba_ssm/__main__.py", "python -m mamba_ssm")],
)
def test_help_texts_name_the_invoked_program(monkeypatch, capsys, argv0, prog):
    monkeypatch.setattr(sys, "argv", [argv0])
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"mamba-ssm {__version__}\n"
    assert cli.main(["--help"]) == 0
    top = capsys.readouterr().out
    assert top.startswith(f"usage: {prog} [--version] {{doctor,install-kernels}}")
    assert "doctor [--json] [--check]" in top and "--check" in top.split("install-kernels ...")[0]
    for sub in ("doctor", "install-kernels"):
        with pytest.raises(SystemExit) as exc:
            cli.main([sub, "--help"])
        assert exc.value.code == 0
        assert capsys.readouterr().out.startswith(f"usage: {prog} {sub} ")
    assert cli.main(["bogus"]) == 2
    assert capsys.readouterr().err.startswith(f"{prog}: unknown command 'bogus'")


@pytest.mark.parametrize(
    "args",
    [
        ["-m", "mamba_ssm", "--version"],
        ["-m", "mamba_ssm", "doctor", "--json"],
        ["-m", "build_matrix", "plan", "--format", "json"],
    ],
    ids=["version", "doctor-json", "build_matrix-plan-json"],
)
def test_stdout_closed_by_the_reader_exits_quietly(args):
    # `... | head -1` closes the pipe before the command has written everything; here its read end is
    # closed before the command writes at all, so every write meets EPIPE (Python ignores SIGPIPE).
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        p = subprocess.run(
            [sys.executable, *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            timeout=300,
        )
    finally:
        os.close(write_end)
    assert p.stderr == "", p.stderr  # no BrokenPipeError traceback, no "Exception ignored" at exit
    assert p.returncode == 1  # Python's convention for EPIPE, as mamba_ssm._cli_io documents
