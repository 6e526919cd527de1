"""``python -m mamba_ssm install-kernels``: add the prebuilt kernels after torch is installed.

When ``pip install mamba-ssm`` runs in a fresh environment, pip builds our sdist before it installs
torch, so the resolver cannot know which kernels fit and the pure-Python package is installed with the
kernels deferred. This command runs the same resolution in the environment it is started from (torch
is there now), downloads and verifies the chosen wheel, and installs it with the environment's
installer: pip (``pip install --no-deps --force-reinstall --no-cache-dir WHEEL``), or where the
environment is uv's (no pip here, or mamba-ssm installed by uv) ``uv pip install --python <this
python> --no-deps --reinstall --no-cache WHEEL``, uv being the ``uv`` package's binary or the one on
PATH; without either, the exact uv command is printed. It also fixes a wheel that the installer's
cache served for another torch. A development version has no published index:
without ``--index`` / ``MAMBA_WHEEL_INDEX`` the command says so and prints the rebuild command (exit 1).

Exit status: 0 installed (or, with --dry-run, resolved); 1 no fitting wheel; 2 error.

Air-gapped machines: ``python -m mamba_ssm install-kernels --print-env > env.json`` there,
``python -m build_matrix mirror --for env.json --to DIR`` on a connected machine, copy DIR over, then
``MAMBA_WHEEL_INDEX=DIR python -m mamba_ssm install-kernels`` (or ``pip install mamba-ssm``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
from typing import Callable

from .._advice import (
    dev_version_fix,
    installed_version,
    installer,
    kernels_fetchable,
    pip_importable,
    recorded_index,
    source_build_command,
)
from .environment import DetectionError, detect
from .record import (
    InstallMode,
    RecordError,
    ResolutionStatus,
    dist_info_identity,
    ownership,
    read_record,
    write_record,
)
from .resolve import resolve

__all__ = ["main"]

EXIT_INSTALLED = 0
EXIT_NO_CANDIDATE = 1
EXIT_ERROR = 2

# --help is plain text (the module docstring is reST, for developers)
HELP_DESCRIPTION = """\
Add the prebuilt kernels that fit the torch now installed: resolve the wheel for
this environment, download and verify it, and install it with the environment's
installer. Also fixes a wheel that pip's cache served for another torch."""
HELP_EPILOG = """\
exit status: 0 installed (with --dry-run: resolved), 1 no fitting wheel, 2 error

on an air-gapped machine:
  there:                 {prog} --print-env > env.json
  on a connected one:    python -m build_matrix mirror --for env.json --to DIR
  there, DIR copied in:  MAMBA_WHEEL_INDEX=DIR {prog}"""


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    from packaging.version import Version

    try:
        return Version(version("mamba-ssm")).public
    except PackageNotFoundError:  # a source checkout
        from .._version import __version__

        return __version__


def _recorded_index(prefix: str | None) -> str | None:
    """The wheel index the record of this install used, when it was not the release index (None:
    the resolver's default applies)."""
    try:
        rec = read_record(prefix)
    except RecordError:  # an unreadable record gives no index
        return None
    if rec is None or not ownership(rec).current:
        return None
    return recorded_index(rec)


def _index_and_origin(flag: str | None, prefix: str | None) -> tuple[str | None, str | None]:
    """The index to pass to the resolver (None: MAMBA_WHEEL_INDEX, else the release index) and a
    line naming where the index came from (None for the release index)."""
    if flag:
        return flag, f"wheel index {flag}: from --index"
    env_index = os.environ.get("MAMBA_WHEEL_INDEX")
    if env_index:
        return None, f"wheel index {env_index}: from MAMBA_WHEEL_INDEX; --index chooses another"
    recorded = _recorded_index(prefix)
    if recorded:
        return recorded, (
            f"wheel index {recorded}: the one this install used (recorded decision); --index or "
            f"MAMBA_WHEEL_INDEX choose another"
        )
    return None, None


def find_uv() -> str | None:
    """The uv executable: the ``uv`` package's (``uv.find_uv_bin()``) when it is importable here, else
    the ``uv`` on PATH; None when neither."""
    try:
        import uv  # type: ignore[import-not-found,unused-ignore]  # the uv PyPI package, when installed

        return str(uv.find_uv_bin())
    except (ImportError, FileNotFoundError, AttributeError):
        return shutil.which("uv")


def _uv_args(wheel: str) -> list[str]:
    """``uv pip install`` of ``wheel`` into this interpreter, as pip's: no dependencies (torch is never
    touched), reinstalled, no cache."""
    return ["pip", "install", "--python", sys.executable, "--no-deps", "--reinstall", "--no-cache", wheel]


def _install_command(wheel: str) -> list[str]:
    """The command that installs ``wheel`` into this interpreter with its installer
    (:func:`mamba_ssm._advice.installer`): pip (``-m pip``) where the environment is pip's and pip imports
    here; else uv (:func:`find_uv`), else pip when it imports. RuntimeError, with the exact uv
    command to run, when neither can run."""
    uv_first = installer().kind == "uv"
    has_pip = pip_importable()
    if has_pip and not uv_first:
        return [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--force-reinstall",
            "--no-cache-dir",
            wheel,
        ]
    uv = find_uv()
    if uv:
        return [uv, *_uv_args(wheel)]
    if has_pip:
        return [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--force-reinstall",
            "--no-cache-dir",
            wheel,
        ]
    raise RuntimeError(
        "this environment has no pip, and uv is neither importable here nor on PATH, so the verified wheel "
        f"was not installed; install it with uv: `{shlex.join(['uv', *_uv_args(wheel)])}`"
    )


def _log(text: str) -> None:
    print(f"[install-kernels] {text}", file=sys.stderr)


def main(argv: list[str] | None = None, prog: str = "python -m mamba_ssm install-kernels") -> int:
    """Entry point (``python -m mamba_ssm install-kernels [--index URL] [--dry-run] [--json]``)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description=HELP_DESCRIPTION,
        epilog=HELP_EPILOG.format(prog=prog),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
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
        help="print this environment as JSON (for python -m build_matrix mirror --for ENV.json "
        "on a connected machine) and exit",
    )
    args = parser.parse_args(argv)
    version = args.version or _installed_version()
    try:
        env = detect(python=sys.executable)
    except DetectionError as exc:
        print(f"install-kernels: {exc}", file=sys.stderr)
        return EXIT_ERROR
    env.target_source = "install-kernels: this interpreter"
    if args.print_env:
        print(env.to_json())
        return EXIT_INSTALLED
    log: Callable[[str], None] | None = None if args.json else _log
    index, origin = _index_and_origin(args.index, env.prefix)
    if origin and log:
        log(origin)
    if index is None and not kernels_fetchable(None, version):
        # a development version and the release index, which never has it: say so, without the network
        source = None if version == installed_version() else source_build_command(version)
        print(f"install-kernels: {dev_version_fix(version, source)}", file=sys.stderr)
        return EXIT_NO_CANDIDATE
    res = resolve(version, index=index, env=env, log=log)
    code = EXIT_INSTALLED
    message = res.message
    final: InstallMode | None = InstallMode.INSTALL_KERNELS
    if res.status is ResolutionStatus.PREBUILT and res.wheel_path and not args.dry_run:
        try:
            cmd = _install_command(res.wheel_path)
            _log(" ".join(cmd))
            proc = subprocess.run(cmd, check=False)
            if proc.returncode != 0:
                message += f" Installing it failed (exit {proc.returncode})."
                code, final = EXIT_ERROR, InstallMode.ERROR
        except RuntimeError as exc:
            message += f" {exc}"
            code, final = EXIT_ERROR, InstallMode.ERROR
    elif res.status is ResolutionStatus.PREBUILT:
        final = None  # a dry run records nothing
    elif res.status is ResolutionStatus.NO_CANDIDATE:
        code, final = EXIT_NO_CANDIDATE, InstallMode.NO_CANDIDATE
    else:
        code = EXIT_ERROR
        final = InstallMode.DEFERRED if res.status is ResolutionStatus.DEFERRED else InstallMode.ERROR
    if final is not None:
        # the install as pip left it: doctor checks the record against it
        rec = dataclasses.replace(
            res.record(), final_mode=final, message=message, install=dist_info_identity()
        )
        try:
            write_record(rec, env.prefix)
        except OSError as exc:
            _log(f"could not record the decision: {exc}")
    if args.json:
        print(
            json.dumps(
                {
                    "status": str(res.status),
                    "wheel": res.wheel_path,
                    "message": message,
                    "decision": res.selection.summary().to_dict() if res.selection else None,
                },
                indent=1,
            )
        )
    else:
        print(message)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
