"""ci/env.sh's first run says what it downloads and is never silent for long (issue 36, item 2).

The finding: "[env] creating ... (once; about 5.4 GiB)" (the venv is 5.9 GiB), then nothing for about 4.5
minutes (``pip install -q``). Here ci/env.sh runs for real with a stand-in Python whose venv's pip takes a
few seconds to "install torch" silently: the size announced must be the shared venv's measured size
(``du``), pip must run without ``-q`` for torch, a line must come at least every note interval while it
runs, and a second run (the venv exists) stays quiet.
"""

from __future__ import annotations

import os
import re
import stat
import subprocess
import time

import pytest
from venvs import SHARED_SITE

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

FAKE_PYTHON = """#!/bin/bash
# a stand-in interpreter: `-m venv DIR` makes a venv whose pip logs its arguments (and takes a while for torch)
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin"
  cat >"$3/bin/pip" <<'PIP'
#!/bin/bash
echo "$*" >>"$FAKE_PIP_LOG"
case "$*" in
  *torch==*) sleep "$FAKE_PIP_SECONDS"; touch "$(dirname "$0")/../torch-installed" ;;
  *requirements-dev.txt*) sleep "${FAKE_TOOLS_SECONDS:-0}" ;;
esac
PIP
  cat >"$3/bin/python" <<'PY'
#!/bin/bash
[ -e "$(dirname "$0")/../torch-installed" ]
PY
  : >"$3/bin/activate"
  chmod +x "$3/bin/pip" "$3/bin/python"
  exit 0
fi
exit 3
"""


def source_env(
    tmp_path, fake, tools_seconds: float = 0
) -> tuple[subprocess.CompletedProcess[str], list[float]]:
    env = dict(
        os.environ,
        MAMBA_DEV_HOME=str(tmp_path / "home"),
        MAMBA_DEV_PYTHON=str(fake),
        MAMBA_ENV_NOTE_EVERY="1",
        FAKE_PIP_LOG=str(tmp_path / "pip.log"),
        FAKE_PIP_SECONDS="3.6",
        FAKE_TOOLS_SECONDS=str(tools_seconds),
    )
    env.pop("CUDA_HOME", None)
    start = time.monotonic()
    proc = subprocess.Popen(
        ["bash", "-c", f"source {REPO}/ci/env.sh && echo sourced"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    times = []
    out = ""
    assert proc.stdout is not None
    for line in proc.stdout:
        times.append(time.monotonic() - start)
        out += line
    proc.wait(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, ""), times


def measured_venv_gib() -> float | None:
    # SHARED_SITE is <venv>/lib/pythonX.Y/site-packages
    venv = os.path.dirname(os.path.dirname(os.path.dirname(SHARED_SITE)))
    if not os.path.isfile(os.path.join(venv, "bin", "python")) or "torch" not in os.listdir(SHARED_SITE):
        return None
    du = subprocess.run(["du", "-sk", venv], capture_output=True, text=True, timeout=600)
    return int(du.stdout.split()[0]) / 2**20 if du.returncode == 0 else None


def test_first_run_announces_the_real_size_and_shows_progress(tmp_path):
    fake = tmp_path / "fakepython"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    proc, times = source_env(tmp_path, fake)
    assert proc.returncode == 0 and "sourced" in proc.stdout, proc.stdout
    announced = re.search(r"creating .* about ([\d.]+) GiB on disk", proc.stdout)
    assert announced, proc.stdout
    pip_calls = (tmp_path / "pip.log").read_text().splitlines()
    torch_call = [c for c in pip_calls if "torch==" in c]
    assert torch_call and "-q" not in torch_call[0].split(), pip_calls
    notes = [line for line in proc.stdout.splitlines() if line.startswith("[env] still installing torch")]
    assert len(notes) >= 2, proc.stdout  # 3.6 s of silent pip, a line every second
    assert max(b - a for a, b in zip(times, times[1:])) < 2.5, (times, proc.stdout)

    again, _ = source_env(tmp_path, fake)  # the venv exists now
    assert again.returncode == 0 and "creating" not in again.stdout and "still installing" not in again.stdout
    later = (tmp_path / "pip.log").read_text().splitlines()[len(pip_calls) :]
    assert later and all("-q" in c.split() for c in later), later

    gib = measured_venv_gib()
    if gib is None:
        pytest.skip("no shared torch venv here to measure the announced size against")
    assert abs(float(announced.group(1)) - gib) <= 0.4, (announced.group(0), gib)


def test_a_slow_dev_tools_install_is_not_silent(tmp_path):
    """The development tools' pip runs quietly (-q) at every run: while it takes long (a first run, or a
    new pin in ci/requirements-dev.txt), a line comes every note interval."""
    fake = tmp_path / "fakepython"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    first, _ = source_env(tmp_path, fake)
    assert first.returncode == 0, first.stdout
    proc, times = source_env(tmp_path, fake, tools_seconds=3.6)  # the venv exists: only the tools' pip runs
    assert proc.returncode == 0 and "sourced" in proc.stdout, proc.stdout
    notes = [
        line
        for line in proc.stdout.splitlines()
        if line.startswith("[env] still installing the development tools")
    ]
    assert len(notes) >= 2, proc.stdout
    assert max(b - a for a, b in zip(times, times[1:])) < 2.5, (times, proc.stdout)
