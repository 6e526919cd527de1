"""The audit's runtime check, run by path (``python runtime_check.py``) by the interpreter of a fresh
venv that has the audited wheel installed and torch shared in through a ``.pth`` file.

It prints one JSON object on its last line: what ``python -m mamba_ssm doctor --json`` says of the
compiled module (``doctor_loaded``, ``doctor_reason``, ``doctor_path``), where ``mamba_ssm`` was
imported from (``package_path``), the backend the CPU selective scan runs on (``backend``, under the
``MAMBA_SSM_BACKEND=compiled`` the audit sets), the largest error of ``selective_scan_fn`` and of
``causal_conv1d_fn`` against the package's float64 references relative to ``1 + |reference|``
(``max_rel_err``, ``conv_max_rel_err``), the conv's implementation (``conv_backend``), and ``error``
when a call failed. The audit (``build_matrix/audit.py``) judges the object.

``python runtime_check.py --site-dirs``, run by the venv that provides torch, prints instead its site
directories in ``sys.path`` order (its own and those its ``.pth`` files add: the fresh venv's ``.pth``
names them all, as Python does not follow a ``.pth`` found in a directory a ``.pth`` added) and whether
pip imports there: ``{"dirs": [...], "pip": bool}``.

Only the standard library, torch and the installed ``mamba_ssm`` are imported; nothing of
``build_matrix``.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
    # Run by path: this file's folder is sys.path[0]; its sibling modules must not shadow anything the
    # installed package imports.
    del sys.path[0]

import json
import subprocess
from typing import Any

__all__ = ["main", "measure", "site_dirs"]

#: Sizes of the checked calls: every optional input present, a sequence longer than one chunk of
#: eight timesteps per thread on the GPU kernels' CPU twin.
BATCH, DIM, D_STATE, SEQLEN = 2, 3, 4, 37
CONV_WIDTH, CONV_SEQLEN = 4, 11


def _doctor(out: dict[str, Any]) -> bool:
    doc = subprocess.run(
        [sys.executable, "-m", "mamba_ssm", "doctor", "--json"], capture_output=True, text=True, check=False
    )
    try:
        report = json.loads(doc.stdout)
    except ValueError:
        out["error"] = "doctor --json printed no JSON: " + (doc.stdout + doc.stderr)[-800:]
        return False
    cm = report.get("compiled_module") or {}
    out["doctor_loaded"] = bool(cm.get("loaded"))
    out["doctor_reason"] = cm.get("reason")
    out["doctor_path"] = cm.get("path")
    return True


def _relative_error(got: Any, ref: Any) -> float:
    return float(((got.double() - ref).abs() / (1.0 + ref.abs())).max())


def measure() -> dict[str, Any]:
    """The check's JSON object (see the module docstring)."""
    out: dict[str, Any] = {}
    if not _doctor(out):
        return out
    import torch  # after doctor ran in its own process

    import mamba_ssm
    from mamba_ssm import _dispatch
    from mamba_ssm.ops import causal_conv1d as cc
    from mamba_ssm.ops.selective_scan_interface import selective_scan_fn, selective_scan_ref

    out["package_path"] = os.path.dirname(mamba_ssm.__file__)
    g = torch.Generator().manual_seed(1234)
    u = torch.randn(BATCH, DIM, SEQLEN, generator=g)
    delta = torch.rand(BATCH, DIM, SEQLEN, generator=g) * 0.8 - 0.4
    A = -torch.rand(DIM, D_STATE, generator=g) - 0.1
    B = torch.randn(BATCH, D_STATE, SEQLEN, generator=g)
    C = torch.randn(BATCH, D_STATE, SEQLEN, generator=g)
    D = torch.randn(DIM, generator=g)
    z = torch.randn(BATCH, DIM, SEQLEN, generator=g)
    bias = torch.randn(DIM, generator=g) * 0.2
    try:
        y = selective_scan_fn(u, delta, A, B, C, D=D, z=z, delta_bias=bias, delta_softplus=True)
    except Exception as exc:  # noqa: BLE001 - a failing kernel is what the audit reports
        out["error"] = (
            f"selective_scan_fn with MAMBA_SSM_BACKEND=compiled failed: {type(exc).__name__}: {exc}"
        )
        return out
    u64, delta64, A64, B64, C64, D64, z64, bias64 = (t.double() for t in (u, delta, A, B, C, D, z, bias))
    ref = selective_scan_ref(
        u64, delta64, A64, B64, C64, D=D64, z=z64, delta_bias=bias64, delta_softplus=True
    )
    out["max_rel_err"] = _relative_error(y, ref)
    x = torch.randn(BATCH, DIM, CONV_SEQLEN, generator=g)
    w = torch.randn(DIM, CONV_WIDTH, generator=g)
    b = torch.randn(DIM, generator=g)
    try:
        yc = cc.causal_conv1d_fn(x, w, b, activation="silu")
        out["conv_backend"] = cc.implementation("cpu")
    except Exception as exc:  # noqa: BLE001
        out["error"] = f"causal_conv1d_fn with MAMBA_SSM_BACKEND=compiled failed: {type(exc).__name__}: {exc}"
        return out
    out["conv_max_rel_err"] = _relative_error(
        yc, cc.causal_conv1d_ref(x.double(), w.double(), b.double(), activation="silu")
    )
    try:
        out["backend"] = str(_dispatch.backend_for("selective_scan", torch.device("cpu")))
    except Exception as exc:  # noqa: BLE001
        out["backend"] = f"unknown ({exc})"
    return out


def site_dirs() -> dict[str, Any]:
    """This interpreter's site directories in ``sys.path`` order, and whether pip imports here."""
    import importlib.util

    dirs = [
        p
        for p in sys.path
        if p and os.path.isdir(p) and os.path.basename(p) in ("site-packages", "dist-packages")
    ]
    return {"dirs": list(dict.fromkeys(dirs)), "pip": importlib.util.find_spec("pip") is not None}


def main(argv: list[str] | None = None) -> None:
    """Print :func:`measure`'s object (``--site-dirs``: :func:`site_dirs`') as the last line."""
    args = sys.argv[1:] if argv is None else argv
    print(json.dumps(site_dirs() if args == ["--site-dirs"] else measure()))


if __name__ == "__main__":
    main()
