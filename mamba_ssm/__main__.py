"""``python -m mamba_ssm`` and the ``mamba-ssm`` console script.

Subcommands:

* ``doctor [--json]``: what is installed and which backend runs each op on each device
  (:mod:`mamba_ssm._doctor`); exit 0 compiled everywhere, 1 fallback (fix printed), 2 broken.
* ``install-kernels [...]``: resolve, fetch and install the prebuilt kernels matching the torch now
  present (:func:`mamba_ssm._install.install_kernels.main`; its own ``--help`` lists its options).
"""
from __future__ import annotations

import sys
from typing import List, Optional

_USAGE = """usage: mamba-ssm {doctor,install-kernels} ...

  doctor [--json]       report the installed package, torch, GPUs, the compiled module and the
                        backend each op uses per device (exit 0 ok, 1 fallback, 2 broken)
  install-kernels ...   fetch and install the prebuilt kernels for the torch now installed
"""


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point; returns the process exit status.

    Args:
        argv: the arguments after the program name (default ``sys.argv[1:]``).
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(_USAGE)
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command == "doctor":
        from mamba_ssm import _doctor

        return _doctor.main(rest)
    if command == "install-kernels":
        try:
            from mamba_ssm._install import install_kernels
        except ImportError as exc:
            sys.stderr.write(
                f"mamba-ssm install-kernels: the install-time resolver is not part of this install ({exc}); "
                "reinstall with `pip install --no-cache-dir --force-reinstall mamba-ssm`\n"
            )
            return 2
        result = install_kernels.main(rest)
        return int(result or 0)
    sys.stderr.write(f"mamba-ssm: unknown command {command!r}; choose doctor or install-kernels\n\n{_USAGE}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
