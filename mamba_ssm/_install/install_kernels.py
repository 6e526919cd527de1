"""``python -m mamba_ssm install-kernels``: add the prebuilt kernels after torch is installed.

When ``pip install mamba-ssm`` runs in a fresh environment, pip builds our sdist before it installs
torch, so the resolver cannot know which kernels fit and the pure-Python package is installed with the
kernels deferred. This command runs the same resolution in the environment it is started from (torch
is there now), downloads and verifies the chosen wheel, and installs it with pip (``pip install
--no-deps --force-reinstall --no-cache-dir WHEEL``; ``uv pip install --python`` where the environment
has no pip). It also fixes a wheel that pip's cache served for another torch.

Exit status: 0 installed (or, with --dry-run, resolved); 1 no fitting wheel; 2 error.

Air-gapped machines: ``python -m mamba_ssm install-kernels --print-env > env.json`` there,
``python -m build_matrix mirror --for env.json --to DIR`` on a connected machine, copy DIR over, then
``MAMBA_WHEEL_INDEX=DIR python -m mamba_ssm install-kernels`` (or ``pip install mamba-ssm``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from typing import List, Optional

from .decision import dist_info_identity, read_decision, record_belongs_to_install, write_decision
from .environment import DetectionError, detect
from .fixes import recorded_index
from .resolve import resolve

__all__ = ["main"]


def _installed_version() -> str:
    try:
        from importlib.metadata import version

        from packaging.version import Version

        return Version(version("mamba-ssm")).public
    except Exception:
        from .._version import __version__

        return __version__


def _recorded_index(prefix: Optional[str]) -> Optional[str]:
    """The wheel index the recorded decision of this install used, when it was not the release index
    and MAMBA_WHEEL_INDEX does not name one now (None: the resolver's default applies)."""
    if os.environ.get("MAMBA_WHEEL_INDEX"):
        return None
    try:
        rec = read_decision(prefix)
        if not rec or not record_belongs_to_install(rec)[0]:
            return None
    except Exception:  # an unreadable record gives no index
        return None
    return recorded_index(rec)


def _pip_command(wheel: str) -> List[str]:
    args = ["install", "--no-deps", "--force-reinstall", "--no-cache-dir", wheel]
    probe = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
    if probe.returncode == 0:
        return [sys.executable, "-m", "pip"] + args
    uv = shutil.which("uv")
    if uv:
        return [
            uv,
            "pip",
            "install",
            "--python",
            sys.executable,
            "--no-deps",
            "--reinstall",
            "--no-cache",
            wheel,
        ]
    raise RuntimeError(f"neither pip nor uv is available to install {wheel}; install it with your installer")


def main(argv: Optional[List[str]] = None, prog: str = "python -m mamba_ssm install-kernels") -> int:
    """Entry point (``python -m mamba_ssm install-kernels [--index URL] [--dry-run] [--json]``)."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--index",
        help="wheel index URL or path (default: MAMBA_WHEEL_INDEX, else the index this install "
        "used when it was not the release index, else the release index)",
    )
    parser.add_argument("--version", help="the mamba-ssm version to match (default: the installed one)")
    parser.add_argument("--dry-run", action="store_true", help="resolve and download, but do not install")
    parser.add_argument("--json", action="store_true", help="print the resolution as JSON")
    parser.add_argument(
        "--print-env",
        action="store_true",
        help="print this environment as JSON (for `python -m build_matrix mirror --for ENV.json` "
        "on a connected machine) and exit",
    )
    args = parser.parse_args(argv)
    version = args.version or _installed_version()
    try:
        env = detect(python=sys.executable)
        env.target_source = "install-kernels: this interpreter"
    except DetectionError as exc:
        print(f"install-kernels: {exc}", file=sys.stderr)
        return 2
    if args.print_env:
        print(env.to_json())
        return 0
    log = (lambda t: print(f"[install-kernels] {t}", file=sys.stderr)) if not args.json else None
    index = args.index or _recorded_index(env.prefix)
    if index and log:
        log(
            f"wheel index {index}: the one this install used (recorded decision); --index or MAMBA_WHEEL_INDEX "
            f"choose another"
        )
    res = resolve(version, index=index, env=env, log=log)
    code = 0
    final = "install-kernels"
    if res.status == "prebuilt" and not args.dry_run:
        try:
            cmd = _pip_command(res.wheel_path)
            print(f"[install-kernels] {' '.join(cmd)}", file=sys.stderr)
            proc = subprocess.run(cmd)
            if proc.returncode != 0:
                res.message += f" Installing it failed (exit {proc.returncode})."
                code, final = 2, "error"
        except RuntimeError as exc:
            res.message += f" {exc}"
            code, final = 2, "error"
    elif res.status == "prebuilt":
        final = "dry-run"
    elif res.status == "no-candidate":
        code = 1
    else:
        code = 2
    if final != "dry-run":
        rec = res.record()
        rec["final_mode"] = final if res.status == "prebuilt" else res.status
        ident = dist_info_identity()  # the install as pip left it: doctor checks the record against it
        if ident:
            rec["install"] = ident
        try:
            write_decision(rec, env.prefix)
        except OSError as exc:
            print(f"[install-kernels] could not record the decision: {exc}", file=sys.stderr)
    if args.json:
        print(
            json.dumps(
                {
                    "status": res.status,
                    "wheel": res.wheel_path,
                    "message": res.message,
                    "decision": res.decision.to_dict() if res.decision else None,
                },
                indent=1,
            )
        )
    else:
        print(res.message)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
