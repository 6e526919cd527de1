"""Progress lines for a long build step whose whole output goes to a log file.

A build's output (pip, setuptools, ninja's compile commands) is kept in a log; the terminal gets one line
per compiled unit, from the status ninja prints for each (torch runs ``ninja -v``: ``[3/27] c++ ... -c
.../csrc/scan_cpu.cpp -o ...``), shortened to ``[3/27] csrc/scan_cpu.cpp``, and a "still running" line
whenever nothing was shown for a while, so that no step is silent for long (a link, pip resolving).

``python -m build_matrix.progress LOG [WHAT]`` does the same for a pipe (ci/test.sh's in-place build):
stdin is written to LOG, the progress lines to stdout.
"""

from __future__ import annotations

import queue
import re
import sys
import threading
import time
from typing import IO, Callable, Iterable, Optional

__all__ = ["QUIET_AFTER", "relay", "unit_line"]

#: Seconds without a progress line after which a "still running" line is shown.
QUIET_AFTER = 25.0

_NINJA_STATUS = re.compile(r"^\[(\d+)/(\d+)\]\s*(.*)$")
_SOURCE = re.compile(r"(?:^|\s)-c\s+['\"]?(\S+?\.(?:cpp|cc|cxx|c|cu|hip))['\"]?(?:\s|$)")


def _short(path: str) -> str:
    """A source path from its last ``csrc/`` on (``/tmp/x/src/csrc/a.cu`` -> ``csrc/a.cu``), else its name."""
    cut = path.rfind("csrc/")
    return path[cut:] if cut >= 0 else path.rsplit("/", 1)[-1]


def unit_line(line: str) -> Optional[str]:
    """``[n/N] <source>`` for ninja's status line of one compile (``[n/N] <command>``; the source is the
    command's ``-c`` argument, else the command's first word is shown), None for any other line."""
    m = _NINJA_STATUS.match(line.strip())
    if not m:
        return None
    n, total, command = m.groups()
    source = _SOURCE.search(command)
    words = command.split()
    what = _short(source.group(1)) if source else (words[0].rsplit("/", 1)[-1] if words else "")
    return f"[{n}/{total}] {what}".rstrip()


def _clip(text: str, width: int = 100) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def relay(
    stream: Iterable[str],
    sink: IO[str],
    say: Callable[[str], None],
    what: str,
    quiet_after: float = QUIET_AFTER,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Copy every line of ``stream`` to ``sink`` (the log) until the stream ends; ``say`` each compiled
    unit (:func:`unit_line`) and, after ``quiet_after`` seconds without a line said, ``still running:
    <what> (<seconds> s; last output: <line>)``."""
    lines: queue.Queue[Optional[str]] = queue.Queue()

    def read() -> None:
        try:
            for text in stream:
                lines.put(text)
        finally:
            lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    start = said = clock()
    last = ""
    while True:
        try:
            text = lines.get(timeout=max(0.05, quiet_after - (clock() - said)))
        except queue.Empty:
            say(f"still running: {what} ({clock() - start:.0f} s; last output: {_clip(last) or '-'})")
            said = clock()
            continue
        if text is None:
            break
        sink.write(text)
        sink.flush()
        if text.strip():
            last = text.strip()
        unit = unit_line(text)
        if unit:
            say(unit)
            said = clock()


def main(argv: Optional[list[str]] = None) -> int:
    """``python -m build_matrix.progress LOG [WHAT]``: stdin to LOG, progress lines to stdout."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        sys.stderr.write("usage: python -m build_matrix.progress LOG [WHAT] < output\n")
        return 2
    what = args[1] if len(args) > 1 else "the build"
    start = time.monotonic()

    def say(text: str) -> None:
        print(f"  [{time.monotonic() - start:6.1f}s] {text}", flush=True)

    with open(args[0], "w") as log:
        relay(sys.stdin, log, say, what)
    return 0


if __name__ == "__main__":
    sys.exit(main())
