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
preflight, the plan, the setuptools commands; torch-free and unit-tested). That package and the
shared rules (``mamba_ssm/_compat``) are loaded by file path: ``import mamba_ssm`` would need torch.
The names below are re-exported so that tools and tests can reach them through this file.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from typing import List, Optional

from setuptools import setup

ROOT = os.path.dirname(os.path.abspath(__file__))
_BYPATH = "_mamba_ssm_setup_bypath"


def _bypath(dotted: str) -> types.ModuleType:
    """Import ``mamba_ssm.<dotted>`` from this checkout by file path, never running
    ``mamba_ssm/__init__.py`` (which needs torch). Sibling relative imports work."""
    if _BYPATH not in sys.modules:
        pkg = types.ModuleType(_BYPATH)
        pkg.__path__ = [os.path.join(ROOT, "mamba_ssm")]
        sys.modules[_BYPATH] = pkg
    return importlib.import_module(f"{_BYPATH}.{dotted}")


versions = _bypath("_compat.versions")
archs = _bypath("_compat.archs")
buildinfo = _bypath("_compat.buildinfo")
settings = _bypath("_build.settings")
toolkit = _bypath("_build.toolkit")
config = _bypath("_build.config")
plan = _bypath("_build.plan")
commands = _bypath("_build.commands")

from _mamba_ssm_setup_bypath._build.commands import (  # noqa: E402,F401
    add_install_id,
    make_build_ext,
    make_cmdclass,
    make_extension,
    setup_kwargs,
    write_if_changed,
)
from _mamba_ssm_setup_bypath._build.config import (  # noqa: E402,F401
    LIMITED_API_HEX,
    BuildConfig,
    TorchInfo,
    git_commit,
    limited_api_tag,
    list_sources,
    probe_torch,
    resolve_config,
)
from _mamba_ssm_setup_bypath._build.errors import PreflightError  # noqa: E402,F401
from _mamba_ssm_setup_bypath._build.plan import (  # noqa: E402,F401
    BOTH_FLAGS_WARNING,
    Plan,
    load_setup_hook,
    plan_build,
    record_decision,
)
from _mamba_ssm_setup_bypath._build.settings import (  # noqa: E402,F401
    BASE_VERSION,
    CSRC,
    EXT_NAME,
    FALLBACKS,
    INSTALL_ID_FILE,
    PACKAGE,
    TRUE_VALUES,
    Settings,
    classify_commands,
    default_max_jobs,
    env_flag,
    package_version,
)
from _mamba_ssm_setup_bypath._build.toolkit import (  # noqa: E402,F401
    check_host_compiler,
    check_ninja,
    check_nvcc_matches_torch,
    check_rocm_bf16_header,
    find_ninja,
    gcc_major,
    host_compiler,
    locate_cuda,
    locate_rocm,
    max_gcc_for_nvcc,
    nvcc_version_of,
    resolve_cuda_archs,
    resolve_gfx_archs,
    rocm_bf16_header_needs_patch,
)


def main(argv: Optional[List[str]] = None) -> None:
    """Classify the command line, plan the build (the preflight for a source build) and run
    ``setuptools.setup``; a ``PreflightError`` exits with its message and nothing is built."""
    argv = sys.argv[1:] if argv is None else argv
    os.chdir(ROOT)  # sources and packages are given relative to the project root
    kind = classify_commands(argv)
    try:
        version = package_version(os.environ)
        the_plan = plan_build(kind)
    except PreflightError as e:
        sys.exit(f"\nmamba-ssm setup.py: {e}\n")
    if the_plan.reason:
        print(f"mamba-ssm: {the_plan.mode} build ({the_plan.reason})")
    setup(**setup_kwargs(the_plan, version))


if __name__ == "__main__":
    main()
