"""A long build step shows progress while its output goes to a log (issue 36, item 2): the cold build
printed nothing for minutes (build_matrix's cell build wrote everything to build.log; ci/test.sh's
in-place build to its own log). Real child processes print what torch's ``ninja -v`` prints (status, then
the compile command) with pauses; the terminal must get one line per unit and a "still running" line
during a pause, and the log every line."""

from __future__ import annotations

import subprocess
import sys
import time

from build_matrix import build, progress
from build_matrix import matrix as mx

NINJA_LIKE = """
import sys, time
lines = [
    "[1/3] c++ -MMD -MF /w/build/temp/csrc/binding.o.d -O3 -c /w/src/csrc/binding.cpp -o /w/build/temp/csrc/binding.o",
    "[2/3] /usr/local/cuda/bin/nvcc --generate-dependencies-with-compile -c /w/src/csrc/scan_fwd_fp32.cu -o x.o -O3",
    "some compiler warning",
    "[3/3] c++ -c /w/src/csrc/scan_cpu.cpp -o y.o",
]
for i, line in enumerate(lines):
    print(line, flush=True)
    time.sleep(float(sys.argv[1]) if i == 1 else 0.01)
"""


def test_log_run_shows_each_compiled_unit_and_keeps_every_line(tmp_path, capsys):
    log = build.Log(tmp_path / "build.log", "cell")
    log.run("compile (MAX_JOBS=1)", [sys.executable, "-c", NINJA_LIKE, "0.01"])
    shown = capsys.readouterr().out
    assert "[1/3] csrc/binding.cpp" in shown and "[2/3] csrc/scan_fwd_fp32.cu" in shown, shown
    assert "some compiler warning" not in shown and "-MMD" not in shown, shown
    text = (tmp_path / "build.log").read_text()
    assert "some compiler warning" in text and "-c /w/src/csrc/binding.cpp" in text


def test_a_quiet_step_says_it_is_still_running(tmp_path):
    said: list[tuple[float, str]] = []
    start = time.monotonic()
    with (
        subprocess.Popen(
            [sys.executable, "-c", NINJA_LIKE, "1.5"], stdout=subprocess.PIPE, text=True
        ) as proc,
        open(tmp_path / "log", "w") as sink,
    ):
        progress.relay(
            proc.stdout or [], sink, lambda t: said.append((time.monotonic() - start, t)), "the build", 0.4
        )
    texts = [t for _, t in said]
    assert texts[:2] == ["[1/3] csrc/binding.cpp", "[2/3] csrc/scan_fwd_fp32.cu"], texts
    quiet = [t for t in texts if t.startswith("still running: the build (")]
    assert 2 <= len(quiet) <= 4, texts  # 1.5 s quiet, a line after each 0.4 s
    assert "last output: [2/3] /usr/local/cuda/bin/nvcc" in quiet[0], quiet
    assert texts[-1] == "[3/3] csrc/scan_cpu.cpp", texts
    gaps = [b - a for (a, _), (b, _) in zip(said, said[1:])]
    assert max(gaps) < 1.0, said  # never quiet for longer than the pause allows


def test_the_pipe_filter_for_ci_test_sh(tmp_path):
    log = tmp_path / "inplace.log"
    ninja = subprocess.run(
        [sys.executable, "-c", NINJA_LIKE, "0.01"], capture_output=True, text=True, check=True
    ).stdout
    proc = subprocess.run(
        [sys.executable, "-m", "build_matrix.progress", str(log), "the in-place build"],
        input=ninja,
        cwd=mx.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert log.read_text() == ninja
    units = [line.split("] ", 1)[1] for line in proc.stdout.splitlines()]
    assert units[:2] == ["[1/3] csrc/binding.cpp", "[2/3] csrc/scan_fwd_fp32.cu"], proc.stdout
