"""Build script of mamba-ssm: a prebuilt kernel wheel, a source build of ``mamba_ssm._C``, or the
pure-Python wheel.

What happens depends on the command and the environment:

* metadata (``egg_info``, ``dist_info``, ``sdist``, ``--version``): nothing is probed; no torch, nvcc
  or GPU is needed.
* a wheel (``bdist_wheel``, what ``pip install`` runs):
    - ``MAMBA_SKIP_CUDA_BUILD=TRUE``: the pure-Python wheel (no download, no compiler).
    - ``MAMBA_FORCE_BUILD=TRUE``: a source build (torch must be importable: use
      ``pip install --no-build-isolation``).
    - otherwise the resolver (``mamba_ssm/_install/setup_hook.py``) looks for a prebuilt wheel; one
      found is copied unchanged into the dist dir; else ``MAMBA_FALLBACK=auto|source|python|error``.
* ``build_ext`` / ``develop`` / editable installs: a source build (``auto`` fallback without the
  resolver for editable installs).

A source build compiles ``csrc/*.cpp`` (CPU kernel + binding) always and ``csrc/*.cu`` for CUDA/HIP
builds (every file there: new sources need no change here) into ``mamba_ssm/_C.abi3.so``, for the
Python limited API torch's ``Py_LIMITED_API`` names (3.9 where torch sets none; the wheel's abi3 tag
says which), after a preflight that names each problem and its fix. Environment variables are
documented in ``docs/build.md``.

This file is a thin shell: the logic lives in ``mamba_ssm/_build`` (settings, toolkit discovery,
preflight, the plan, the setuptools commands; torch-free and unit-tested by importing it directly).
Those modules, the shared rules (``mamba_ssm/_compat``) and the resolver hook
(``mamba_ssm/_install/setup_hook.py``, passed to the plan) are imported from this tree by
:func:`load_private`, the one way the project loads its own modules without running
``mamba_ssm/__init__.py`` (a build must not pick up an installed ``mamba_ssm``). This file defines only
what running ``setup()`` needs.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import Mapping

import setuptools
from setuptools import setup

ROOT = os.path.dirname(os.path.abspath(__file__))
PRIVATE_PACKAGE = "_mamba_ssm_setup_bypath"
#: The oldest setuptools that reads pyproject.toml's ``project.license`` as an SPDX string (PEP 639).
MIN_SETUPTOOLS = (77, 0)


def load_private(dotted: str) -> types.ModuleType:
    """``mamba_ssm.<dotted>`` of this tree, imported as ``_mamba_ssm_setup_bypath.<dotted>``: a private
    package whose ``__path__`` is this tree's ``mamba_ssm`` folder, so relative imports work and
    ``mamba_ssm/__init__.py`` never runs (an installed ``mamba_ssm`` is never picked up)."""
    if PRIVATE_PACKAGE not in sys.modules:
        pkg = types.ModuleType(PRIVATE_PACKAGE)
        pkg.__path__ = [os.path.join(ROOT, "mamba_ssm")]
        sys.modules[PRIVATE_PACKAGE] = pkg
    return importlib.import_module(f"{PRIVATE_PACKAGE}.{dotted}")


def missing_build_requirements(setuptools_version: str) -> list[str]:
    """pyproject.toml's build requirements this environment lacks. A ``--no-build-isolation`` build uses
    the environment's own: a fresh Python 3.9-3.11 venv has a setuptools older than 77, which rejects the
    SPDX ``license`` string ("must be valid exactly by one definition"), and no ``packaging``."""
    missing = []
    parts = tuple(int(x) for x in setuptools_version.split(".")[:2] if x.isdigit())
    if parts < MIN_SETUPTOOLS:
        missing.append(f"setuptools {setuptools_version} is older than 77")
    if importlib.util.find_spec("packaging") is None:
        missing.append("packaging is not installed")
    return missing


def requirements_command(environ: Mapping[str, str] | None = None) -> str:
    """The command that installs pyproject.toml's build requirements into this interpreter, in its
    installer's form (``mamba_ssm._advice.installer``: uv's ``uv pip install --python <this python>`` when
    uv runs this build or pip cannot be imported here, else ``python -m pip install``). ``_advice``
    imports only the standard library, so this works before ``packaging`` is there."""
    inst = load_private("_advice").installer(environ=os.environ if environ is None else environ)
    command: str = inst.install("'setuptools>=77' wheel 'packaging>=22'")
    return command


def check_build_requirements(setuptools_version: str) -> None:
    """Exit with the fix when :func:`missing_build_requirements` finds any (before anything imports
    ``packaging``)."""
    missing = missing_build_requirements(setuptools_version)
    if missing:
        sys.exit(
            f"\nmamba-ssm setup.py: {'; '.join(missing)}: this build needs pyproject.toml's build requirements "
            "(with --no-build-isolation the installer uses the environment's own). Fix: "
            f"{requirements_command()}, then build again.\n"
        )


def main(argv: list[str] | None = None) -> None:
    """Check the build requirements, classify the command line, plan the build (the resolver hook for a
    wheel, the preflight for a source build) and run ``setuptools.setup``; a ``PreflightError`` exits with
    its message and nothing is built."""
    check_build_requirements(setuptools.__version__)  # before anything imports packaging
    settings = load_private("_build.settings")
    plan = load_private("_build.plan")
    commands = load_private("_build.commands")
    errors = load_private("_build.errors")
    argv = sys.argv[1:] if argv is None else argv
    os.chdir(ROOT)  # sources and packages are given relative to the project root
    kind = settings.classify_commands(argv)
    try:
        version = settings.package_version(os.environ)
        the_plan = plan.plan_build(kind, hook=load_private("_install.setup_hook"))
    except errors.PreflightError as e:
        sys.exit(f"\nmamba-ssm setup.py: {e}\n")
    if the_plan.reason:
        print(f"mamba-ssm: {the_plan.mode} build ({the_plan.reason})")
    setup(**commands.setup_kwargs(the_plan, version))


if __name__ == "__main__":
    main()
