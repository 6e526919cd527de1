"""``python -m build_matrix``: plan, build, audit, emit, sdist-check (+ the resolver's index, resolve,
mirror from build_matrix/resolver_cli.py).

Exit status: 0 success; 1 a check failed (plan rejected cells, audit found problems, drift); 2 bad
usage or a cell this machine cannot build.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Optional, Union

from . import matrix as mx
from .layout import REPO_ROOT


def _add_matrix_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--matrix", type=Path, default=mx.MATRIX_PATH, help="matrix.toml (default: %(default)s)")
    p.add_argument(
        "--data", type=Path, default=mx.DATA_PATH, help="PyTorch's published builds (default: %(default)s)"
    )
    p.add_argument("--pyproject", type=Path, default=mx.PYPROJECT_PATH, help=argparse.SUPPRESS)


def _load(args: argparse.Namespace) -> mx.Plan:
    return mx.load_plan(args.matrix, args.data, args.pyproject)


# ------------------------------------------------------------------------------------------ plan
def format_table(plan: mx.Plan, cells: List[mx.Cell], filters: Optional[List[str]] = None) -> str:
    """A table of cells (each column as wide as its widest value) plus the rejected entries and the
    skipped/excluded entries the filters select, and the count."""
    header = ["id", "torch", "serves", "toolkit", "archs", "image"]
    rows = [
        [
            c.id + (" (exp.)" if c.experimental else ""),
            c.torch_spec.replace("torch==", ""),
            ",".join(c.serves),
            c.toolkit,
            ",".join(c.sass + c.ptx + c.gfx) or "-",
            c.image,
        ]
        for c in cells
    ]
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in [header] + rows]
    skipped, excluded = plan.filtered_notes(filters or [])
    for title, items in (("rejected", plan.rejected), ("skipped", skipped), ("excluded", excluded)):
        for r in items:
            lines.append(f"{title}: {r.what}: {r.reason}")
    for pw in plan.pypi:
        lines.append(
            f"PyPI wheel {pw.tags} (torch>={pw.torch_floor}, <= {pw.size_budget_mib:g} MiB): "
            + ", ".join(f"_kernels/{fam} <- {cell_id}" for fam, cell_id in pw.modules)
        )
    for e in plan.errors:
        lines.append(f"error: {e}")
    for w in plan.warnings:
        lines.append(f"warning: {w}")
    counts: Dict[str, int] = {}
    for c in cells:
        counts[f"{c.python_tag}-{c.abi_tag}"] = counts.get(f"{c.python_tag}-{c.abi_tag}", 0) + 1
    tags = ", ".join(
        f"{t} ({n})" for t, n in sorted(counts.items(), key=lambda kv: int(kv[0][3:].split("-")[0]))
    )
    stable = [c for c in cells if c.torch_abi == "stable"]
    if stable:
        floors = sorted({c.torch_abi_floor or "" for c in stable})
        lines.append(
            f"{len(stable)} stable-ABI cells serve every torch >= {', '.join(floors)} (one per accelerator family "
            f"and platform); {len(cells) - len(stable)} classic cells, one per torch series"
        )
    lines.append(
        f"{len(cells)} cells"
        + (f" (of {len(plan.cells)})" if len(cells) != len(plan.cells) else "")
        + f", {len(plan.rejected)} rejected, {len(skipped)} skipped, {len(excluded)} excluded; "
        f"wheels are {tags or '-'}, sdist/tests on Python {', '.join(plan.python_versions)}"
    )
    return "\n".join(lines)


def github_matrix(cells: List[mx.Cell]) -> Dict[str, List[Dict[str, Union[str, bool]]]]:
    """The ``strategy.matrix`` object for GitHub Actions: ``{"include": [{id, image, runner}, ...]}``."""
    return {
        "include": [
            {
                "id": c.id,
                "image": c.image,
                "runner": c.runner,
                "toolkit": c.toolkit,
                "experimental": c.experimental,
            }
            for c in cells
        ]
    }


def cmd_plan(args: argparse.Namespace) -> int:
    plan = _load(args)
    cells = plan.filtered(args.filter or [])
    skipped, excluded = plan.filtered_notes(args.filter or [])
    if args.format == "json":
        out = {
            "count": len(cells),
            "cells": [c.to_dict() for c in cells],
            "rejected": [r.__dict__ for r in plan.rejected],
            "skipped": [r.__dict__ for r in skipped],
            "excluded": [r.__dict__ for r in excluded],
            "errors": plan.errors,
            "warnings": plan.warnings,
            "python_versions": plan.python_versions,
            "pypi": [w.to_dict() for w in plan.pypi],
        }
        print(json.dumps(out, indent=2))
    elif args.format == "github":
        print(json.dumps(github_matrix(cells), separators=(",", ":")))
    else:
        print(format_table(plan, cells, args.filter or []))
    if not plan.ok:
        print(
            f"plan: {len(plan.errors)} matrix errors, {len(plan.rejected)} rejected builds (see above)",
            file=sys.stderr,
        )
        return 1
    return 0


# --------------------------------------------------------------------------------- other commands
def cmd_build(args: argparse.Namespace) -> int:
    from . import build

    return build.main(args)


def cmd_audit(args: argparse.Namespace) -> int:
    from . import audit

    return audit.main(args)


def cmd_emit(args: argparse.Namespace) -> int:
    from . import emit

    return emit.main(args)


def cmd_sdist_check(args: argparse.Namespace) -> int:
    from . import sdist_check

    return sdist_check.main(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m build_matrix", description=" ".join(__doc__.split("\n\n")[0].split())
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plan", help="expand, exclude and validate the matrix; print the cells and the count")
    _add_matrix_args(p)
    p.add_argument(
        "--format",
        choices=["table", "json", "github"],
        default="table",
        help="table: aligned columns for people (default); json: the cells with every field, "
        "plus rejected/skipped/excluded; github: the strategy.matrix object for Actions",
    )
    p.add_argument(
        "--filter",
        action="append",
        metavar="KEY=GLOB",
        help="keep cells whose field matches (series=2.14, family=cu13, platform=x86_64, "
        "kind=cpu, cxx11abi=true) or whose id matches a bare glob; repeatable (AND)",
    )
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("build", help="build one cell (or the host's) in its own venv, repair and audit it")
    _add_matrix_args(p)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--host", action="store_true", help="the cell of the torch in the shared dev venv")
    g.add_argument("--cell", metavar="ID", help="a cell id from `plan`")
    p.add_argument("--python", help="the Python minor to build with (default: matrix [python] build)")
    p.add_argument("--archs", help="reduce the CUDA archs, e.g. '90' or '80;90+PTX' (for time)")
    p.add_argument(
        "--torch-from",
        metavar="VENV",
        help="reuse torch from this venv (a .pth file) instead of installing it",
    )
    p.add_argument(
        "--toolkit",
        choices=["auto", "system", "pypi"],
        default="auto",
        help="CUDA toolkit: /usr/local/cuda-X.Y or $CUDA_HOME (system), nvcc + nvvm + crt + cccl "
        "+ runtime wheels from PyPI (pypi; CUDA >= 13 only), or system else pypi (auto)",
    )
    p.add_argument("--out", type=Path, default=None, help="where audited wheels go (default: dist/cells)")
    p.add_argument("--force", action="store_true", help="rebuild even when an audited wheel exists")
    p.add_argument("--no-audit", action="store_true", help="skip the audit after repair")
    p.add_argument("--plan-only", action="store_true", help="print what would run and why, build nothing")
    p.add_argument(
        "--version", help="build as this package version (a release dry run's; default: _version.py)"
    )
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("audit", help="check a wheel against its cell; every failure names what is wrong")
    _add_matrix_args(p)
    p.add_argument(
        "wheel", type=Path, help="the wheel file (.whl) to check, e.g. dist/cells/mamba_ssm-...whl"
    )
    p.add_argument("--cell", metavar="ID", help="the cell (default: from the wheel's local version label)")
    p.add_argument("--archs", help="the archs the wheel was built for when reduced (as for build)")
    p.add_argument(
        "--torch-from",
        metavar="VENV",
        help="venv whose torch the runtime check uses (default: the running interpreter's)",
    )
    p.add_argument("--no-runtime", action="store_true", help="skip the fresh-venv doctor/kernel check")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.set_defaults(func=cmd_audit)

    p = sub.add_parser(
        "emit", help="generate the release and builder-images workflows and docker/ from the matrix"
    )
    _add_matrix_args(p)
    p.add_argument("--out", type=Path, default=REPO_ROOT, help="repository root to write into")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 when the files drifted")
    p.add_argument(
        "--cibuildwheel",
        metavar="CELL",
        help="print this cell's cibuildwheel config file (TOML) instead; needs --owner",
    )
    p.add_argument("--owner", help="the GitHub repository owner whose ghcr.io holds the builder images")
    p.add_argument("--ccache-dir", help="a host folder mounted as the container's ccache (cibuildwheel)")
    p.set_defaults(func=cmd_emit)

    from . import pypi_wheel, release

    release.register(sub)
    pypi_wheel.register(sub)

    p = sub.add_parser("sdist-check", help="build the sdist, rebuild from it, check the compiled sources")
    p.add_argument("--out", type=Path, default=None, help="keep the work here (default: a temp dir)")
    p.add_argument("--no-build", action="store_true", help="check the contents only, do not build from it")
    p.set_defaults(func=cmd_sdist_check)

    try:
        from . import resolver_cli  # the resolver engineer's: index, resolve, mirror
    except ImportError as exc:
        if getattr(exc, "name", None) not in ("build_matrix.resolver_cli", None):
            raise
        msg = f"the resolver commands are not available: build_matrix/resolver_cli.py is missing ({exc})"
        for name in ("index", "resolve", "mirror"):
            p = sub.add_parser(name, help=f"(unavailable) {msg}", add_help=False)
            p.add_argument("rest", nargs=argparse.REMAINDER)
            p.set_defaults(func=lambda _a, m=msg: (print(m, file=sys.stderr), 2)[1])
    else:
        resolver_cli.register(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m build_matrix``: returns the exit status (see the module docstring; 1, quietly, when the
    reader closed stdout early, as in ``python -m build_matrix plan --format json | head -1``)."""
    from mamba_ssm._cli_io import quiet_on_broken_pipe

    return quiet_on_broken_pipe(_main, argv)


def _main(argv: Optional[List[str]]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except mx.MatrixError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
