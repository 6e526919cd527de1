"""``python -m mamba_ssm doctor``: what is installed, what runs where, and why.

Reports the package version; torch's version, CUDA/HIP version and C++ ABI; the Python interpreter
tag and platform tags (``packaging.tags``); the GPUs with compute capability and the driver version;
the compiled module ``mamba_ssm._C`` (found, path, build info, loaded or not and the exact reason);
the decision the install-time resolver recorded; and the backend each op uses on each device (CPU
and every visible GPU).

Unlike ``import mamba_ssm``, doctor initialises CUDA (to list GPUs and check their coverage).

Exit status: 0 when the compiled backend is active for every device present (and, on each GPU, the
Triton kernels of the ops that have them: SSD, selective_state_update, the norms); 1 when some device
runs on the PyTorch fallback for a fixable reason (the fix is printed; e.g. a GPU without a usable
triton >= 3.0); 2 when broken (torch cannot be imported, a bad ``MAMBA_SSM_BACKEND``, a forced backend
that cannot run).

``--json`` prints one JSON object with these stable top-level keys: ``schema``, ``package``, ``python``,
``torch``, ``gpus``, ``driver``, ``compiled_module``, ``install_decision``, ``backend``, ``devices``,
``problems``, ``status``, ``exit_code`` (and ``checks`` with ``--check``: selective_scan forward and
backward run on every device through the chosen backend, compared with a float64 reference).

Parts: :mod:`.report` (the typed report and ``collect``), :mod:`.text` (the text form), :mod:`.check`
(``--check``).
"""

from __future__ import annotations

import argparse
import json
import sys

from .report import EXIT_BROKEN, EXIT_FALLBACK, EXIT_OK, SCHEMA, Report, collect
from .text import render_record, render_text

__all__ = [
    "EXIT_BROKEN",
    "EXIT_FALLBACK",
    "EXIT_OK",
    "SCHEMA",
    "Report",
    "collect",
    "main",
    "render_record",
    "render_text",
]


def main(argv: list[str] | None = None, prog: str = "python -m mamba_ssm doctor") -> int:
    """``doctor [--json] [--check]``; returns the exit status (0 ok, 1 fallback with a fix, 2 broken).
    ``prog``: the command shown in ``--help`` (the program name the user invoked)."""
    parser = argparse.ArgumentParser(prog=prog, description="Report what mamba-ssm runs on, and why.")
    parser.add_argument("--json", action="store_true", help="print one JSON object (stable keys)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="also run selective_scan forward+backward on every device and compare with a "
        "float64 reference (a failure exits 2)",
    )
    args = parser.parse_args(argv)
    try:
        report = collect(check=args.check)
    except Exception as exc:  # noqa: BLE001 - doctor itself must not crash without a report
        error = f"{type(exc).__name__}: {exc}"
        if args.json:
            failed = {
                "schema": SCHEMA,
                "status": "broken",
                "exit_code": EXIT_BROKEN,
                "problems": [
                    {
                        "severity": "broken",
                        "reason": f"doctor failed: {error}",
                        "fix": None,
                        "devices": [],
                        "ops": [],
                    }
                ],
            }
            print(json.dumps(failed, indent=2, sort_keys=True))
        else:
            print(f"mamba-ssm doctor failed: {error}", file=sys.stderr)
        return EXIT_BROKEN
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True))
    else:
        sys.stdout.write(render_text(report))
    return report.exit_code
