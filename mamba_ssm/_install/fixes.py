"""The commands our messages tell users to paste (loader warnings, doctor, the resolver, setup.py).

Every one of them is safe to paste (issue 11):

* it pins this install's version, ``mamba-ssm==<installed public version>``: an unpinned name fetches
  whatever the user's index has (PyPI's upstream release, another project's build);
* it can never change torch: a pip command that reinstalls carries ``--no-deps`` (``--force-reinstall``
  alone reinstalls every dependency, torch and its CUDA wheels included), or the fix is
  ``python -m mamba_ssm install-kernels``, which installs our wheel with ``--no-deps``;
* it uses the wheel index the install used when that was not the release index
  (``MAMBA_WHEEL_INDEX=<index>`` / ``--index <index>``), taken from the recorded decision.

``python -m pip`` rather than ``pip``: the ``pip`` first on PATH may belong to another environment.
Standard library only; loadable by path from setup.py (no torch, no ``mamba_ssm/__init__``).
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any, Mapping, Optional

__all__ = [
    "RELEASE_INDEX_URL",
    "MIRROR_HINT",
    "mirror_hint",
    "installed_version",
    "requirement",
    "recorded_index",
    "install_kernels_command",
    "reinstall_command",
    "source_build_command",
    "no_isolation_command",
    "gpu_unservable",
]

#: The project's release wheel index (a static PEP 503 tree per release, written by
#: ``python -m build_matrix index``); ``{version}`` is the sdist's public version.
RELEASE_INDEX_URL = "https://mamba-ssm.github.io/wheels/v{version}/"

_DIST_INFO = re.compile(r"^mamba_ssm-([^-]+)\.dist-info$")


def _public(version: str) -> str:
    return version.split("+", 1)[0]


def installed_version(package_dir: Optional[str] = None) -> str:
    """The public version of this install (``2.4.0.dev0``): from the ``mamba_ssm-<v>.dist-info``
    next to the package (what pip installed), else ``mamba_ssm/_version.py`` (a source checkout)."""
    package_dir = package_dir or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    site = os.path.dirname(package_dir)
    try:
        found = sorted(m.group(1) for m in map(_DIST_INFO.match, os.listdir(site)) if m)
    except OSError:
        found = []
    if len(found) == 1:
        return _public(found[0])
    ns: dict = {}
    with open(os.path.join(package_dir, "_version.py")) as fh:
        exec(compile(fh.read(), "_version.py", "exec"), ns)
    return _public(str(ns["__version__"]))


def requirement(version: Optional[str] = None) -> str:
    """``mamba-ssm==<version>`` (default: this install's public version)."""
    return f"mamba-ssm=={_public(version or installed_version())}"


def recorded_index(decision: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The wheel index a recorded decision used, when it was not the release index of its version
    (``None`` otherwise: the default needs no flag)."""
    if not decision:
        return None
    index = decision.get("index")
    if not isinstance(index, str) or not index:
        return None
    version = _public(str(decision.get("package_version") or ""))
    default = None
    if version:
        from .resolve import default_index  # noqa: PLC0415 (resolve imports this module)

        try:  # the release index of that version: a released sdist's recorded one, else RELEASE_INDEX_URL
            default = default_index(version, environ={})
        except ValueError:
            default = RELEASE_INDEX_URL.format(version=version)
    return None if index.rstrip("/") == (default or "").rstrip("/") else index


#: How to make a local wheel mirror for an offline machine. ``build_matrix`` ships in the sdist and the
#: repository, not in the installed wheel, so the hint says where to run it.
MIRROR_HINT = (
    "`python -m mamba_ssm install-kernels --print-env > ENV.json` here, then on a connected machine, in an "
    "unpacked sdist or a checkout of this version (`python -m pip download --no-deps --no-binary :all: "
    "mamba-ssm==VERSION`): `python -m build_matrix mirror --for ENV.json --to DIR`; copy DIR here"
)


def mirror_hint(version: Optional[str] = None) -> str:
    """:data:`MIRROR_HINT` with this install's version (or ``version``) filled in."""
    try:
        v = _public(version or installed_version())
    except Exception:  # noqa: BLE001 (a hint must never fail: keep the placeholder)
        v = "VERSION"
    return MIRROR_HINT.replace("VERSION", v)


def install_kernels_command(index: Optional[str] = None) -> str:
    """``python -m mamba_ssm install-kernels`` (with ``--index <index>`` when given)."""
    cmd = "python -m mamba_ssm install-kernels"
    return f"{cmd} --index {shlex.quote(index)}" if index else cmd


def _with_index(cmd: str, index: Optional[str]) -> str:
    return f"MAMBA_WHEEL_INDEX={shlex.quote(index)} {cmd}" if index else cmd


def reinstall_command(version: Optional[str] = None, index: Optional[str] = None) -> str:
    """Rebuild this version from its sdist (the resolver runs again for the torch now installed),
    bypassing pip's wheel cache, never touching any other package."""
    return _with_index(
        f"python -m pip install --no-cache-dir --force-reinstall --no-deps {requirement(version)}", index
    )


def source_build_command(version: Optional[str] = None, env_prefix: str = "") -> str:
    """A source build of this version against the torch installed (``env_prefix``: more variables,
    e.g. ``"TORCH_CUDA_ARCH_LIST=8.0 "``)."""
    return (
        f"{env_prefix}MAMBA_FORCE_BUILD=TRUE python -m pip install --no-build-isolation --no-cache-dir "
        f"--force-reinstall --no-deps {requirement(version)}"
    )


def no_isolation_command(version: Optional[str] = None) -> str:
    """Install this version built against the torch already installed (no build isolation)."""
    return f"python -m pip install --no-build-isolation --no-deps {requirement(version)}"


#: The last minor release of each older CUDA major (its nvcc's arch table, ``_compat.archs``).
_LAST_MINOR = {12: 9, 11: 8}


def gpu_unservable(capability: Optional[str], torch_cuda: Optional[str]) -> Optional[str]:
    """Why no mamba-ssm kernels for a torch built with CUDA ``torch_cuda`` (``"13.0"``) can run on a GPU of
    compute capability ``capability`` (``"6.0"``), prebuilt or built from source, and the real fix; None
    when they can (or either value is unknown).

    A GPU runs SASS of its own major not newer than it, or PTX not newer than it, so a GPU older than
    the oldest architecture the toolkit of that CUDA can target (CUDA 13: sm_75; 12: sm_50; 11: sm_35,
    NVIDIA's release notes, ``mamba_ssm._compat.archs``) runs none of it: its GPU ops use the PyTorch
    fallback. The fix is a torch built for the newest older CUDA whose toolkit still targets it, and
    our wheel for that torch.
    """
    from .._compat import archs

    try:
        cap = archs.parse_capability(capability)
        cuda = tuple(int(x) for x in str(torch_cuda).split(".")[:2])
        oldest = archs.parse_arch(archs.nvcc_supported_archs(cuda)[0])
    except (TypeError, ValueError, IndexError):
        return None
    if cap >= oldest.capability:
        return None
    sm = f"sm_{cap[0]}{cap[1]}"
    older = [
        m
        for m in sorted(_LAST_MINOR, reverse=True)
        if m < cuda[0]
        and cap >= archs.parse_arch(archs.nvcc_supported_archs((m, _LAST_MINOR[m]))[0]).capability
    ]
    text = (
        f"the GPU ({sm}) is older than every architecture CUDA {cuda[0]}.{cuda[1]} can build for (oldest "
        f"{oldest.sass}), so no mamba-ssm kernels for this torch can run on it, prebuilt or built from source: "
        f"its GPU ops run on the PyTorch fallback (slower)"
    )
    if older:
        text += (
            f". The real fix: a torch built for CUDA {older[0]} whose arch list still has {sm} "
            f"(torch.cuda.get_arch_list()), then `{install_kernels_command()}` takes the mamba-ssm "
            f"cu{older[0]} wheel for it"
        )
    else:
        text += ". No CUDA toolkit that torch 2.x supports targets it any more"
    return text
