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
    p = subprocess.run([sys.executable, "-m", "mamba_ssm", "--version"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"mamba-ssm {__version__}"


@pytest.mark.parametrize("argv0, prog", [("/venv/bin/mamba-ssm", "mamba-ssm"),
                                         ("/site/mamba_ssm/__main__.py", "python -m mamba_ssm")])
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
