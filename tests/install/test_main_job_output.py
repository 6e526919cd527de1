"""What ci/main_job.sh shows: one full audit of the wheel, and the install output filtered down to
the resolver's lines and pip's result for mamba-ssm; and the plain-words label of pip's build Python."""

from __future__ import annotations

import os
import re
import shlex
import subprocess

from mamba_ssm._install.environment import find_target_python

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The shape of `pip install -v SDIST` output (pip 24-26), shortened.
PIP_LOG = """\
Processing ./mamba_ssm-2.4.0.dev0.tar.gz
  Running command pip subprocess to install build dependencies
  Collecting setuptools>=64
  Successfully installed packaging-26.4 setuptools-84.2.1 wheel-0.48.0
  [mamba-ssm resolver] target: Python 3.11.7 on manylinux_2_36_x86_64, torch 2.14.1+cu130
  [mamba-ssm resolver] Looked for +cu13torch2.14cxx11abiTRUE; chose mamba_ssm-2.4.0.dev0+cu13.whl.
  mamba-ssm: prebuilt build (prebuilt wheel found)
Successfully built mamba-ssm
Installing collected packages: setuptools, mamba-ssm
  Attempting uninstall: setuptools
    Found existing installation: setuptools 65.5.0
      Successfully uninstalled setuptools-65.5.0
ERROR: something pip reports
Successfully installed mamba-ssm-2.4.0.dev0 setuptools-84.2.1
"""


def _filter(text):
    out = subprocess.run(
        [os.path.join(REPO, "ci", "filter_install_log.sh")],
        input=text,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.splitlines()


def test_install_output_filter_keeps_resolver_lines_and_drops_build_env_noise():
    lines = _filter(PIP_LOG)
    assert lines == [
        "  [mamba-ssm resolver] target: Python 3.11.7 on manylinux_2_36_x86_64, torch 2.14.1+cu130",
        "  [mamba-ssm resolver] Looked for +cu13torch2.14cxx11abiTRUE; chose mamba_ssm-2.4.0.dev0+cu13.whl.",
        "  mamba-ssm: prebuilt build (prebuilt wheel found)",
        "Successfully built mamba-ssm",
        "ERROR: something pip reports",
        "Successfully installed mamba-ssm-2.4.0.dev0",
    ]
    assert _filter("nothing of interest\n") == []  # no match is not a failure


def _commands(script):
    """The script's command lines (comments and continuations joined)."""
    text = re.sub(r"\\\n\s*", " ", script)
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def test_main_job_audits_the_wheel_once_with_the_runtime_check():
    with open(os.path.join(REPO, "ci", "main_job.sh")) as fh:
        cmds = _commands(fh.read())
    builds = [c for c in cmds if "build_matrix build" in c]
    audits = [c for c in cmds if "build_matrix audit" in c]
    assert len(builds) == 1 and "--no-audit" in shlex.split(builds[0])  # no audit inside build --host
    assert len(audits) == 1 and "--no-runtime" not in audits[0]  # the one full audit
    assert any("filter_install_log.sh" in c for c in cmds)


def test_pip_build_python_is_described_in_plain_words():
    env = {"PYTHONPATH": "/tmp/pip-build-env-abc/site", "PATH": "/tmp/pip-build-env-abc/overlay/bin:/usr/bin"}
    _, how = find_target_python(env)
    assert how == "the Python that pip is building with, inspected without pip's temporary build packages"
    assert "(" not in how
