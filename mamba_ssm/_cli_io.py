"""Command-line plumbing shared by ``python -m mamba_ssm`` and ``python -m build_matrix``."""

from __future__ import annotations

import os
import sys
from typing import Callable, TypeVar

_R = TypeVar("_R")

#: The exit status after stdout was closed by the reader (``... | head -1``): Python's own convention for
#: EPIPE (see the note on SIGPIPE in the ``signal`` module's documentation).
EXIT_BROKEN_PIPE = 1


def quiet_on_broken_pipe(main: Callable[..., _R], *args: object, **kwargs: object) -> _R | int:
    """Run ``main(*args, **kwargs)`` and flush stdout; when the reader has closed stdout (a
    :class:`BrokenPipeError`, e.g. ``mamba-ssm doctor --json | head -1``) return
    :data:`EXIT_BROKEN_PIPE` without a traceback instead.

    stdout is then pointed at ``os.devnull`` so that the interpreter's final flush at exit does not
    raise (and print "Exception ignored ...") again. ``SystemExit`` (``--help``, argparse errors) passes
    through unchanged unless its output met the closed pipe.

    Returns:
        ``main``'s return value, or :data:`EXIT_BROKEN_PIPE`.
    """
    try:
        try:
            return main(*args, **kwargs)
        finally:
            sys.stdout.flush()  # buffered output meets a closed pipe here, not at interpreter exit
    except BrokenPipeError:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):  # stdout is not a real file (replaced, closed)
            pass
        return EXIT_BROKEN_PIPE
