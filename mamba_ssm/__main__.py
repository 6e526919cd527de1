"""``python -m mamba_ssm`` and the ``mamba-ssm`` console script.

Subcommands:

* ``--version``: the installed version.
* ``doctor [--json] [--check]``: what is installed and which backend runs each op on each device
  (:mod:`mamba_ssm._doctor`); exit 0 compiled everywhere, 1 fallback (fix printed), 2 broken.
* ``install-kernels [...]``: resolve, fetch and install the prebuilt kernels matching the torch now
  present (:func:`mamba_ssm._install.install_kernels.main`; its own ``--help`` lists its options).
"""

from __future__ import annotations

import os
import sys

_USAGE = """usage: {prog} [--version] {{doctor,install-kernels}} ...

  --version             print the installed mamba-ssm version and exit
  doctor [--json] [--check]
                        report the installed package, torch, GPUs, the compiled module and the
                        backend each op uses per device (exit 0 ok, 1 fallback, 2 broken);
                        --check also runs selective_scan forward+backward on every device against
                        a float64 reference
  install-kernels ...   fetch and install the prebuilt kernels for the torch now installed
                        (`{prog} install-kernels --help` lists its options)
"""


def program_name(argv0: str | None = None) -> str:
    """The command the user typed: ``mamba-ssm`` for the console script, ``python -m mamba_ssm`` when
    run as a module (``sys.argv[0]`` is then this file's path)."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    base = os.path.basename(argv0 or "")
    if not base or base in ("__main__.py", "-c", "-m") or base.endswith(".py"):
        return "python -m mamba_ssm"
    return base


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit status (1, quietly, when the reader closed stdout early,
    as in ``mamba-ssm doctor --json | head -1``).

    Args:
        argv: the arguments after the program name (default ``sys.argv[1:]``).
    """
    from mamba_ssm._cli_io import quiet_on_broken_pipe

    return quiet_on_broken_pipe(_main, argv)  # its own status, or EXIT_BROKEN_PIPE


def _main(argv: list[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    prog = program_name()
    usage = _USAGE.format(prog=prog)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(usage)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command in ("--version", "-V", "version"):
        from mamba_ssm._version import __version__

        sys.stdout.write(f"mamba-ssm {__version__}\n")
        return 0
    if command == "doctor":
        from mamba_ssm import _doctor

        return _doctor.main(rest, prog=f"{prog} doctor")
    if command == "install-kernels":
        try:
            from mamba_ssm._install import install_kernels
        except ImportError as exc:
            from mamba_ssm._advice import reinstall_command

            sys.stderr.write(
                f"{prog} install-kernels: the install-time resolver is not part of this install ({exc}); "
                f"reinstall with `{reinstall_command()}`\n"
            )
            return 2
        result = install_kernels.main(rest, prog=f"{prog} install-kernels")
        return int(result or 0)
    sys.stderr.write(f"{prog}: unknown command {command!r}; choose doctor or install-kernels\n\n{usage}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
