"""Two builds of one cell at once are serialised by a lock on the cell directory (issue 36, item 8).

The finding: two ``python -m build_matrix build --host`` runs (a release dry run beside another build)
shared ``~/.cache/mamba-ssm-dev/cells/<cell>`` without a lock, and one failed with "pip wheel left 2
wheels". Here real processes contend: two holders of :func:`build.cell_lock` must not overlap and the
second must say that it waits (naming the first's pid); and a real ``build --host`` started while the test
holds its cell's lock must wait, saying so, before touching the cell directory.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from build_matrix import build
from build_matrix import matrix as mx

HOLDER = """
import sys, time
from pathlib import Path
from build_matrix.build import cell_lock
work, record, hold = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
with cell_lock(work, "test-cell", note_every=0.5):
    with open(record, "a") as fh:
        fh.write(f"start {time.time()!r}\\n")
    time.sleep(hold)
    with open(record, "a") as fh:
        fh.write(f"end {time.time()!r}\\n")
"""


def holder(work: Path, record: Path, hold: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(work), str(record), str(hold)],
        cwd=mx.REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def interval(record: Path) -> tuple[float, float]:
    values = dict(line.split() for line in record.read_text().splitlines())
    return float(values["start"]), float(values["end"])


def test_two_processes_take_turns_and_the_second_says_it_waits(tmp_path):
    work = tmp_path / "cells" / "some-cell-py311"
    first = holder(work, tmp_path / "first.txt", 2.5)
    deadline = time.monotonic() + 60
    while not (tmp_path / "first.txt").exists():  # the first holds the lock
        assert time.monotonic() < deadline and first.poll() is None, first.communicate()[0]
        time.sleep(0.05)
    second = holder(work, tmp_path / "second.txt", 0.1)
    out_first, _ = first.communicate(timeout=120)
    out_second, _ = second.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, out_first + out_second
    start1, end1 = interval(tmp_path / "first.txt")
    start2, _ = interval(tmp_path / "second.txt")
    assert start2 >= end1 > start1, (start1, end1, start2)
    assert "waiting" not in out_first, out_first
    assert f"[test-cell] waiting for another build of this cell (pid {first.pid}:" in out_second, out_second
    assert "still waiting for the other build" in out_second, out_second  # a line every 0.5 s
    assert "the other build is done" in out_second, out_second
    assert not (work.parent / f"{work.name}.lock.owner").exists()


@pytest.mark.slow
def test_build_host_waits_for_the_cell_lock_before_touching_the_cell(tmp_path):
    """A real ``build --host`` (cells under a scratch MAMBA_DEV_HOME, torch from the shared venv) while this
    test holds that cell's lock: it must print the waiting line and leave the cell directory alone."""
    if not (build.SHARED_TORCH_VENV / "bin" / "python").exists():
        pytest.skip("needs the shared torch venv")
    plan = mx.load_plan()
    cell_id = build.host_cell_id(plan)
    home = tmp_path / "dev-home"
    work = home / "cells" / f"{cell_id}-py311"
    env = dict(os.environ, MAMBA_DEV_HOME=str(home), MAMBA_DEV_TORCH_VENV=str(build.SHARED_TORCH_VENV))
    with build.cell_lock(work, "test"):
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "build_matrix",
                "build",
                "--host",
                "--archs",
                "90",
                "--out",
                str(tmp_path / "o"),
            ],
            cwd=mx.REPO_ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its pip and compilers are stopped with it
        )
        seen = ""
        try:
            deadline = time.monotonic() + 120
            assert proc.stdout is not None
            while "waiting for another build" not in seen and time.monotonic() < deadline:
                ready, _, _ = select.select([proc.stdout], [], [], 1.0)
                if ready:
                    line = proc.stdout.readline()
                    if not line:
                        break
                    seen += line
            if "refused" in seen:
                pytest.skip(f"this machine cannot build the host cell: {seen[-500:]}")
            assert "waiting for another build of this cell" in seen, seen[-3000:]
            assert f"pid {os.getpid()}:" in seen, seen[-3000:]
            assert not (work / "src").exists() and not (work / "build.log").exists()
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
