"""Issue 11, item 8: building the sdist prints no setuptools warning (no MANIFEST.in pattern that
matches nothing, no deprecated ``project.license`` table), and the main job ends with doctor --check."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_sdist_builds_without_setuptools_warnings(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(tmp_path), REPO],
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    warnings = [
        line
        for line in log.splitlines()
        if re.search(r"warning|deprecat", line, re.IGNORECASE)
        and not line.startswith(("copying ", "adding "))
    ]
    assert warnings == [], "\n".join(warnings)
    (sdist,) = [p for p in os.listdir(tmp_path) if p.endswith(".tar.gz")]
    with tarfile.open(tmp_path / sdist) as tf:
        names = tf.getnames()
        pkg_info = tf.extractfile(
            next(n for n in names if n.count("/") == 1 and n.endswith("/PKG-INFO"))
        ).read()
    assert b"\nLicense-Expression: Apache-2.0\n" in pkg_info
    # what a source build and the resolver need is still there
    for need in (
        "setup.py",
        "pyproject.toml",
        "csrc/",
        "mamba_ssm/_install/setup_hook.py",
        "mamba_ssm/_build/",
        "build_matrix/matrix.toml",
        "build_matrix/data/torch_builds.toml",
    ):
        assert any(n.split("/", 1)[-1].startswith(need) for n in names), need


def test_the_main_job_ends_with_doctor_check():
    with open(os.path.join(REPO, "ci", "main_job.sh")) as fh:
        commands = [
            line for line in fh.read().splitlines() if line.strip() and not line.lstrip().startswith("#")
        ]
    assert re.search(r"-m mamba_ssm doctor --check$", commands[-1]), commands[-1]
