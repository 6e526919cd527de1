"""shellcheck (Debian's, at its default settings) over every shell script of the repository: the CI
entry point .ci/run, ci/*.sh and benchmarks/*.sh (and any other tracked *.sh). The Dockerfiles' RUN
lines are shellchecked by hadolint (test_emit.py), the workflows' run: scripts by actionlint."""

import subprocess

from _linters import linter

from build_matrix import matrix as mx

ROOT = mx.REPO_ROOT


def _scripts():
    """.ci/run and every *.sh git tracks (or, outside a checkout, those under ci/ and benchmarks/)."""
    out = subprocess.run(["git", "ls-files", "*.sh"], capture_output=True, text=True, cwd=ROOT, check=False)
    if out.returncode == 0:
        found = out.stdout.split()
    else:
        found = [str(p.relative_to(ROOT)) for d in ("ci", "benchmarks") for p in (ROOT / d).glob("*.sh")]
    return [".ci/run", *sorted(found)]


def test_shell_scripts_are_shellcheck_clean():
    scripts = _scripts()
    assert {".ci/run", "ci/test.sh", "ci/env.sh", "ci/main_job.sh", "benchmarks/gpu_check.sh"} <= set(scripts)
    # -x: follow `source` (a `# shellcheck source=` directive names the file for a computed path)
    out = subprocess.run(
        [linter("shellcheck"), "-x", *scripts], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert out.returncode == 0 and out.stdout == "", out.stdout + out.stderr


def test_shellcheck_catches_a_bad_script(tmp_path):
    bad = tmp_path / "bad.sh"
    bad.write_text('#!/usr/bin/env bash\nWORK=$1\nrm -rf "$WORK/home"\ncd $WORK\nls *.whl | head -1\n')
    out = subprocess.run(
        [linter("shellcheck"), "-f", "gcc", str(bad)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 1
    for code in ("SC2115", "SC2086", "SC2164", "SC2012"):
        assert code in out.stdout, (code, out.stdout)
