"""Every fix the package tells a user: the commands to paste and the advice around them.

The loader, the dispatch, doctor, the resolver, ``install-kernels`` and setup.py all take their fix
text from here, so they say the same thing. Every command is safe to paste:

* it pins this install's version, ``mamba-ssm==<installed public version>``: an unpinned name fetches
  whatever the user's index has (PyPI's upstream release, another project's build). A development
  version (``2.4.0.dev0``) is on no index, so for it the command rebuilds the source it came from
  (:func:`rebuild_source`): the checkout holding the package, built in place (docs/build.md), or the
  folder or sdist pip installed it from, with README.md's source-install command;
* it can never change torch: a pip command that reinstalls carries ``--no-deps`` (``--force-reinstall``
  alone reinstalls every dependency, torch and its CUDA wheels included), or the fix is
  ``python -m mamba_ssm install-kernels``, which installs our wheel with ``--no-deps``;
* it uses the wheel index the install used when that was not the release index
  (``MAMBA_WHEEL_INDEX=<index>`` / ``--index <index>``), taken from the install record;
* it can work: a source build is never proposed for a GPU that no toolkit of the running torch's CUDA
  can target (:func:`mamba_ssm._compat.archs.gpu_unservable` names what can).

``python -m pip`` rather than ``pip``: the ``pip`` first on PATH may belong to another environment.
In an environment uv manages (no pip inside, or mamba-ssm installed by uv: :func:`installer`) every
command is the uv form, ``uv pip install --python <that interpreter> ...``, with the same pin and
``--no-deps``. Standard library only (the install record's types and the release index are imported
where needed).
"""

from __future__ import annotations

import importlib.machinery
import json
import os
import re
import shlex
import sys
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Mapping, NamedTuple

from ._compat import archs
from ._compat.cudahome import wrapper_toolkit_root

if TYPE_CHECKING:
    from ._install.record import InstallRecord

__all__ = [
    "IN_PLACE_BUILD",
    "MIRROR_HINT",
    "REPAIR_TORCH",
    "SOURCE_INSTALL",
    "Installer",
    "RebuildSource",
    "backend_choice_fix",
    "check_failed_fix",
    "coverage_fix",
    "deferred_fix",
    "dev_version_fix",
    "failed_attempt_fix",
    "in_a_checkout",
    "install_kernels_command",
    "install_notes",
    "installed_version",
    "installer",
    "is_on_an_index",
    "kernels_fetchable",
    "mirror_hint",
    "mismatch_fix",
    "missing_kernels_fix",
    "no_candidate_fix",
    "no_isolation_command",
    "pip_importable",
    "rebuild_source",
    "reinstall_command",
    "reinstall_fix",
    "requirement",
    "resolver_dev_version_fix",
    "resolver_index_fix",
    "resolver_no_candidate_fix",
    "shadowed_install_fix",
    "source_build_command",
    "triton_install_command",
    "unforce_fix",
    "wheel_kernels_fix",
]

_DIST_INFO = re.compile(r"^mamba_ssm-([^-]+)\.dist-info$")

#: What to do when torch itself does not import.
REPAIR_TORCH = (
    'repair torch until `python -c "import torch"` works (reinstall the torch build you use, same version '
    "and index), then run `python -m mamba_ssm doctor` again"
)

#: How to make a local wheel mirror for an offline machine. ``build_matrix`` ships in the sdist and the
#: repository, not in the installed wheel, so the hint says where to run it.
_MIRROR_HERE = (
    "`python -m mamba_ssm install-kernels --print-env > ENV.json` here, then on a connected machine, in "
)
_MIRROR_THERE = ": `python -m build_matrix mirror --for ENV.json --to DIR`; copy DIR here"
MIRROR_HINT = (
    _MIRROR_HERE + "an unpacked sdist or a checkout of this version (`python -m pip download --no-deps "
    "--no-binary :all: mamba-ssm==VERSION`)" + _MIRROR_THERE
)


#: The package folder whose install the fixes describe (this one).
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))

#: README.md's source install ("Building from source"), run in the source tree; the rebuild adds
#: ``--no-cache-dir --force-reinstall --no-deps`` (a fresh build, never another package).
SOURCE_INSTALL = "MAMBA_FORCE_BUILD=TRUE python -m pip install --no-build-isolation"
_SOURCE_VARIABLES = "MAMBA_FORCE_BUILD=TRUE"
_REBUILD_FLAGS = "--no-cache-dir --force-reinstall --no-deps"
#: A pinned rebuild or source build names the sdist: the same version's per-platform wheel (PyPI serves
#: it beside the sdist) carries the stable-ABI modules, not a build for this torch, and is what pip or
#: uv would take otherwise.
_SDIST_ONLY = "--no-binary mamba-ssm"
#: docs/build.md's in-place build, for a checkout imported where it lies (or an editable install).
IN_PLACE_BUILD = "python setup.py build_ext --inplace"
#: pip's flags in these commands, spelled as ``uv pip install`` takes them.
_UV_FLAGS = {"--no-cache-dir": "--no-cache", "--force-reinstall": "--reinstall"}


# ----------------------------------------------------------------------------- the installer
class Installer(NamedTuple):
    """The installer of the environment a fix is for: ``kind`` ``"pip"`` or ``"uv"``, and ``python``,
    the interpreter a uv command names with ``--python`` (uv installs into no environment by default
    outside an activated one)."""

    kind: str
    python: str

    def install(self, args: str) -> str:
        """``python -m pip install <args>``, or ``uv pip install --python <python> <args>`` with pip's
        flags in uv's spelling (``--no-cache``, ``--reinstall``); ``args`` is shell text (flags, quoted
        paths, pinned requirements), kept as given otherwise."""
        if self.kind != "uv":
            return f"python -m pip install {args}"
        words = [_UV_FLAGS.get(word, word) for word in args.split(" ")]
        return f"uv pip install --python {shlex.quote(self.python)} {' '.join(words)}"


def _dist_info_file(package_dir: str, name: str) -> str | None:
    """The path of ``name`` in the one ``mamba_ssm-*.dist-info`` next to the package at ``package_dir``,
    or None (a checkout, no such folder or several, an unreadable site folder)."""
    site = os.path.dirname(package_dir)
    try:
        names = [n for n in os.listdir(site) if _DIST_INFO.match(n)]
    except OSError:
        return None
    return os.path.join(site, names[0], name) if len(names) == 1 else None


def _recorded_installer(package_dir: str) -> str | None:
    """The ``INSTALLER`` file (PEP 376: ``pip``, ``uv``, ...) of the ``mamba_ssm-*.dist-info`` next to
    the package, lower-cased, or None (a checkout, or no such file)."""
    path = _dist_info_file(package_dir, "INSTALLER")
    if path is None:
        return None
    try:
        with open(path) as fh:
            return fh.read().strip().lower() or None
    except OSError:
        return None


def installer(
    package_dir: str | None = None, environ: Mapping[str, str] | None = None, python: str | None = None
) -> Installer:
    """The installer the fixes for this environment use, as tools tell it: uv when mamba-ssm's
    dist-info says uv installed it (``INSTALLER``); inside a build, the installer running it (pip sets
    ``PIP_BUILD_TRACKER``, uv sets ``UV``); else uv when this interpreter cannot import pip (a ``uv
    venv``), pip otherwise. ``python``: the interpreter a uv command targets (default this one; a
    build under uv runs in uv's own build venv, so its caller names the target's)."""
    environ = os.environ if environ is None else environ
    python = python or sys.executable
    if _recorded_installer(package_dir or _PACKAGE_DIR) == "uv":
        return Installer("uv", python)
    if environ.get("PIP_BUILD_TRACKER"):
        return Installer("pip", python)
    if environ.get("UV") or not pip_importable():
        return Installer("uv", python)
    return Installer("pip", python)


def pip_importable() -> bool:
    """Whether this interpreter can import pip, looked up on ``sys.path`` alone: the import system's
    meta-path hooks are not asked (setuptools' distutils hook takes a lookup of ``pip`` for pip
    running, and stops serving setuptools' distutils in this process)."""
    return importlib.machinery.PathFinder.find_spec("pip") is not None


def _source_install(inst: Installer, args: str) -> str:
    """README.md's source install of ``args`` (``MAMBA_FORCE_BUILD=TRUE``, no build isolation) with
    the rebuild flags, in ``inst``'s form."""
    return f"{_SOURCE_VARIABLES} {inst.install(f'--no-build-isolation {_REBUILD_FLAGS} {args}')}"


# ----------------------------------------------------------------------------- the commands
def _public(version: str) -> str:
    return version.split("+", 1)[0]


def is_on_an_index(version: str) -> bool:
    """Whether ``mamba-ssm==<version>`` can be installed from a package index: False for a development
    release (``2.4.0.dev0``, what a checkout carries between releases: no index has it) and for text
    that is not a PEP 440 version; True for a final, pre- or post-release (every ``v*`` tag publishes
    its sdist; ``==`` admits a pre-release). A local label is ignored: the pin names the public
    version."""
    from packaging.version import InvalidVersion, Version  # only when a command is printed

    try:
        return not Version(version).is_devrelease
    except InvalidVersion:
        return False


class RebuildSource(NamedTuple):
    """Where a development version is rebuilt from: ``kind`` ``in-place`` (the checkout holding the
    package), ``folder`` or ``sdist`` (what pip installed it from), or ``unknown``; ``path`` names it
    (None when unknown)."""

    kind: str
    path: str | None = None


def _is_source_tree(path: str) -> bool:
    return all(os.path.isfile(os.path.join(path, f)) for f in ("setup.py", "pyproject.toml"))


def _direct_url(package_dir: str) -> dict[str, object] | None:
    """PEP 610's ``direct_url.json`` of the ``mamba_ssm-*.dist-info`` next to the package (pip writes it
    for an install from a URL, a folder or a file), or None."""
    path = _dist_info_file(package_dir, "direct_url.json")
    if path is None:
        return None
    try:
        with open(path) as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def rebuild_source(package_dir: str | None = None) -> RebuildSource:
    """Where the install of the package at ``package_dir`` (default: this one) can be rebuilt from
    when its version is on no index: the source tree holding the package (a checkout on ``sys.path``,
    an editable install: built in place); else the local folder or sdist pip installed it from
    (``direct_url.json``, PEP 610), while it still exists; else ``unknown``."""
    package_dir = package_dir or _PACKAGE_DIR
    tree = os.path.dirname(os.path.abspath(package_dir))
    if _is_source_tree(tree):
        return RebuildSource("in-place", tree)
    data = _direct_url(package_dir) or {}
    url = str(data.get("url") or "")
    if url.startswith("file://"):
        path = urllib.request.url2pathname(urllib.parse.urlparse(url).path)
        if "dir_info" in data and _is_source_tree(path):
            return RebuildSource("folder", path)
        if "archive_info" in data and path.endswith((".tar.gz", ".zip")) and os.path.isfile(path):
            return RebuildSource("sdist", path)
    return RebuildSource("unknown")


def _torch_is_cuda() -> bool | None:
    """Whether the torch this process imported is a CUDA build (None: torch not imported here)."""
    torch = sys.modules.get("torch")
    version = getattr(torch, "version", None)
    if version is None:
        return None
    return bool(getattr(version, "cuda", None))


def _build_env(env_prefix: str, cuda_torch: bool | None = None) -> str:
    """``env_prefix`` preceded by ``CUDA_HOME=<root> `` when torch would guess the toolkit root wrongly
    (an ``nvcc`` wrapper script on PATH, CUDA_HOME/CUDA_PATH unset: :func:`wrapper_toolkit_root`) and
    the build is for a CUDA torch: a CPU or ROCm torch builds no CUDA code, so no toolkit is named.
    ``cuda_torch`` None: the torch imported here decides (not imported: named, as for a CUDA torch)."""
    if cuda_torch is None:
        cuda_torch = _torch_is_cuda()
    if cuda_torch is False:
        return env_prefix
    root = wrapper_toolkit_root(os.environ)
    return f"CUDA_HOME={shlex.quote(root)} {env_prefix}" if root else env_prefix


def _rebuild_command(
    version: str, env_prefix: str, src: RebuildSource, inst: Installer, cuda_torch: bool | None = None
) -> str:
    """A source build of ``version`` (on no index) from ``src``."""
    env_prefix = _build_env(env_prefix, cuda_torch)
    if src.kind == "in-place" and src.path:
        return f"cd {shlex.quote(src.path)} && {env_prefix}{IN_PLACE_BUILD}"
    if src.kind == "folder" and src.path:
        return f"cd {shlex.quote(src.path)} && {env_prefix}{_source_install(inst, '.')}"
    if src.kind == "sdist" and src.path:
        return f"{env_prefix}{_source_install(inst, shlex.quote(src.path))}"
    return in_a_checkout(f"{env_prefix}{_source_install(inst, '.')}", version)


def in_a_checkout(command: str, version: str) -> str:
    """``command``, which installs ``.``, run only in a mamba-ssm source tree (``test -f
    mamba_ssm/_version.py &&``: elsewhere it would install whatever project the shell is in), with a
    comment saying which tree (``version`` is on no index)."""
    return (
        f"test -f mamba_ssm/_version.py && {command}  "
        f"# in a source checkout of mamba-ssm {version}: no package index has a development version"
    )


def installed_version(package_dir: str | None = None) -> str:
    """The public version of this install (``2.4.0.dev0``): from the ``mamba_ssm-<v>.dist-info``
    next to the package (what pip installed), else ``mamba_ssm/_version.py`` (a source checkout)."""
    package_dir = package_dir or _PACKAGE_DIR
    site = os.path.dirname(package_dir)
    try:
        found = sorted(m.group(1) for m in map(_DIST_INFO.match, os.listdir(site)) if m)
    except OSError:
        found = []
    if len(found) == 1:
        return _public(found[0])
    with open(os.path.join(package_dir, "_version.py")) as fh:
        match = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", fh.read(), re.MULTILINE)
    if match is None:
        raise ValueError(f"{package_dir}/_version.py defines no __version__")
    return _public(match.group(1))


def requirement(version: str | None = None) -> str:
    """``mamba-ssm==<version>`` (default: this install's public version)."""
    return f"mamba-ssm=={_public(version or installed_version())}"


def mirror_hint(version: str | None = None) -> str:
    """:data:`MIRROR_HINT` with this install's version (or ``version``) filled in; for a version on no
    index, without the sdist download (only a checkout of it has the sources)."""
    try:
        v = _public(version or installed_version())
    except (OSError, ValueError):  # a hint must never fail: keep the placeholder
        v = "VERSION"
    if v != "VERSION" and not is_on_an_index(v):
        return f"{_MIRROR_HERE}a checkout of mamba-ssm {v} (no package index has its sdist){_MIRROR_THERE}"
    return MIRROR_HINT.replace("VERSION", v)


def install_kernels_command(index: str | None = None) -> str:
    """``python -m mamba_ssm install-kernels`` (with ``--index <index>`` when given)."""
    cmd = "python -m mamba_ssm install-kernels"
    return f"{cmd} --index {shlex.quote(index)}" if index else cmd


def _with_index(cmd: str, index: str | None) -> str:
    return f"MAMBA_WHEEL_INDEX={shlex.quote(index)} {cmd}" if index else cmd


def kernels_fetchable(index: str | None = None, version: str | None = None) -> bool:
    """Whether ``python -m mamba_ssm install-kernels`` can find a wheel index holding ``version``
    (default: this install's): a wheel index given (``index``, ``MAMBA_WHEEL_INDEX``), a version that
    is published (:func:`is_on_an_index`), or a release dry run's sdist carrying its index. A
    development version has no published index, so for it the fixes lead with the rebuild."""
    if index or os.environ.get("MAMBA_WHEEL_INDEX"):
        return True
    v = _public(version or installed_version())
    if is_on_an_index(v):
        return True
    try:
        from ._install.index import release_index  # only for a development version

        recorded = release_index()
    except (ImportError, ValueError):
        return False
    return recorded is not None and _public(recorded.version or "") == v


def dev_version_fix(version: str | None = None, source: str | None = None) -> str:
    """What to do for a development version that no wheel index has: the rebuild command (``source``,
    default :func:`source_build_command`), or a local index that has it."""
    v = _public(version or installed_version())
    source = source or source_build_command()
    return (
        f"mamba-ssm {v} is a development version, which no published wheel index has: build the kernels "
        f"from source with `{source}` (needs a C++ compiler, and nvcc for GPU kernels), or point "
        f"MAMBA_WHEEL_INDEX at a local index that has this version (a release dry run's) and run "
        f"`{install_kernels_command()}`"
    )


def reinstall_command(
    version: str | None = None, index: str | None = None, inst: Installer | None = None
) -> str:
    """Rebuild this version from its sdist (the resolver runs again for the torch now installed),
    bypassing the installer's wheel cache, never touching any other package. A version on no index
    (:func:`is_on_an_index`) is rebuilt from its source instead (:func:`source_build_command`).
    ``inst``: the installer whose form the command takes (default :func:`installer`)."""
    inst = inst or installer()
    v = _public(version or installed_version())
    if not is_on_an_index(v):
        return source_build_command(version, inst=inst)
    return _with_index(inst.install(f"{_REBUILD_FLAGS} {_SDIST_ONLY} {requirement(v)}"), index)


def source_build_command(
    version: str | None = None,
    env_prefix: str = "",
    inst: Installer | None = None,
    cuda_torch: bool | None = None,
) -> str:
    """A source build of this version against the torch installed (``env_prefix``: more variables,
    e.g. ``"MAMBA_CUDA_ARCHS=80 "``, after ``CUDA_HOME=<root>`` when an ``nvcc`` wrapper on PATH would
    mislead torch's guess and the torch is a CUDA one, ``cuda_torch``, default: the torch imported
    here): README.md's source install of the pinned sdist, or for a version on no index, of this
    install's source (:func:`rebuild_source`; ``version`` given: a version other than this install's,
    so no local source is assumed). ``inst``: the installer's form (default :func:`installer`)."""
    inst = inst or installer()
    v = _public(version or installed_version())
    if not is_on_an_index(v):
        src = rebuild_source() if version is None else RebuildSource("unknown")
        return _rebuild_command(v, env_prefix, src, inst, cuda_torch)
    return f"{_build_env(env_prefix, cuda_torch)}{_source_install(inst, f'{_SDIST_ONLY} {requirement(v)}')}"


def no_isolation_command(version: str | None = None, inst: Installer | None = None) -> str:
    """Install this version built against the torch already installed (no build isolation); for a
    version on no index, the source build of :func:`source_build_command`."""
    inst = inst or installer()
    v = _public(version or installed_version())
    if not is_on_an_index(v):
        return source_build_command(version, inst=inst)
    return inst.install(f"--no-build-isolation --no-deps {_SDIST_ONLY} {requirement(v)}")


def triton_install_command() -> str | None:
    """A safe command that installs the Triton this torch wheel was built with (its pinned requirement,
    so the installer leaves torch alone), or None when torch's metadata names no Triton requirement."""
    from importlib import metadata  # read only when a Triton fix is needed

    try:
        requires = metadata.requires("torch") or []
    except metadata.PackageNotFoundError:
        return None
    for req in requires:
        name = req.split(";")[0].strip()
        for dist in ("pytorch-triton-rocm", "pytorch-triton", "triton"):
            if name.startswith(dist + "==") and "extra ==" not in req:
                return f"{installer().install(shlex.quote(name))} (the Triton your torch was built with)"
    return None


# ----------------------------------------------------------------------------- the install record
def recorded_index(record: InstallRecord | None) -> str | None:
    """The wheel index a record's install used, when it was not the release index of its version
    (None otherwise: the default needs no flag)."""
    if record is None or not record.index:
        return None
    version = _public(record.package_version or "")
    default = ""
    if version:
        from ._install.index import RELEASE_INDEX_URL, default_index  # only with an index

        try:  # the release index of that version: a released sdist's recorded one, else RELEASE_INDEX_URL
            default = default_index(version, environ={})
        except ValueError:
            default = RELEASE_INDEX_URL.format(version=version)
    return None if record.index.rstrip("/") == default.rstrip("/") else record.index


def _unreachable_index(record: InstallRecord | None) -> str | None:
    """The recorded resolver error when it was the wheel index or the download that failed (no
    network, a DNS failure, a bad index): ``"index-dns"`` etc., else None."""
    if record is None or record.error_kind is None:
        return None
    from ._install.record import ResolutionStatus  # present whenever a record is

    if record.status is not ResolutionStatus.ERROR:
        return None
    return str(record.error_kind) if record.error_kind.index_unreachable else None


def _no_candidate(record: InstallRecord | None) -> bool:
    if record is None:
        return False
    from ._install.record import ResolutionStatus  # present whenever a record is

    return record.status is ResolutionStatus.NO_CANDIDATE


def _skip_requested(record: InstallRecord | None) -> bool:
    if record is None:
        return False
    from ._install.record import InstallMode  # present whenever a record is

    return record.final_mode is InstallMode.PYTHON and "MAMBA_SKIP_CUDA_BUILD" in (
        record.requested or record.message or ""
    )


def no_candidate_fix(record: InstallRecord) -> str:
    """When the record says no prebuilt wheel fitted: install-kernels fails the same way until torch
    changes, so a source build or another torch (for a development version on no index: the rebuild)."""
    index = recorded_index(record)
    if not kernels_fetchable(index):
        return dev_version_fix()
    where = record.environment or "this environment"
    return (
        f"at install time no prebuilt wheel on the index fitted {where}, so "
        f"`{install_kernels_command(index)}` fails the same way until torch "
        f"changes: build from source with `{source_build_command()}` (needs a C++ compiler, and nvcc for GPU "
        "kernels), or move to a torch a prebuilt wheel serves (`python -m mamba_ssm install-kernels --dry-run` "
        "then names the wheel it would take) and run install-kernels"
    )


def shadowed_install_fix(package_dir: str, installed: str) -> str:
    """What to do when the ``mamba_ssm`` imported (``package_dir``, e.g. a source checkout in the current
    directory) has no compiled module but hides an installed one that has (``installed``)."""
    root = os.path.dirname(os.path.abspath(package_dir))
    return (
        f"run Python outside {root} (the current directory or PYTHONPATH puts that copy first) to use the "
        f"installed mamba_ssm at {installed}, or build this copy in place: "
        f"`cd {shlex.quote(root)} && {IN_PLACE_BUILD}`"
    )


def missing_kernels_fix(record: InstallRecord | None) -> str:
    """What to do when no ``mamba_ssm._C`` is installed, following the cause the record names; for a
    development version no index has, the rebuild first (:func:`dev_version_fix`)."""
    index = recorded_index(record)
    kernels, source = install_kernels_command(index), source_build_command()
    fetchable = kernels_fetchable(index)
    if _skip_requested(record):
        reinstall = reinstall_command(index=index)
        asked = (
            "the pure-Python package was requested at install time (MAMBA_SKIP_CUDA_BUILD=TRUE), so no "
            "kernels were installed; "
        )
        if not fetchable:
            return asked + dev_version_fix(source=source)
        return f"{asked}to get them run `{kernels}`, or reinstall without " + (
            f"MAMBA_SKIP_CUDA_BUILD (`{reinstall}`), or build from source with `{source}`"
            if reinstall != source
            else f"MAMBA_SKIP_CUDA_BUILD, building from source: `{source}`"
        )
    if not fetchable:
        deferred = record is not None and record.kernels_deferred
        return (
            "the kernels were deferred at install time (torch was being installed by the same command); "
            if deferred
            else ""
        ) + dev_version_fix(source=source)
    unreachable = _unreachable_index(record)
    if unreachable and record is not None:
        return (
            f"at install time the wheel index could not be used ({unreachable}; index "
            f"{record.index or 'the default'}), so `{install_kernels_command()}` alone fails the "
            "same way: point MAMBA_WHEEL_INDEX at a reachable index or a local mirror (to make one: "
            f"{mirror_hint()}) or restore the network, then run "
            f"`{install_kernels_command()}`; or build from source with `{source}`"
        )
    if record is not None and _no_candidate(record):
        return no_candidate_fix(record)
    if record is not None and record.kernels_deferred:
        return (
            "the kernels were deferred at install time because torch was being installed by the same "
            f"command: run `{kernels}` now that torch is present (or build from source "
            f"with `{source}`)"
        )
    return (
        f"run `{kernels}` to fetch the prebuilt kernels matching this torch, or build them "
        f"from source with `{source}` (needs a C++ compiler, and nvcc for GPU kernels)"
    )


def mismatch_fix(record: InstallRecord | None) -> str:
    """What to do when the installed ``mamba_ssm._C`` was built for another torch (or fails to load)."""
    if record is not None and _no_candidate(record):
        return no_candidate_fix(record)
    index = recorded_index(record)
    reinstall, source = reinstall_command(index=index), source_build_command()
    if not kernels_fetchable(index):
        return (
            f"rebuild it from source for this torch: `{source}` (mamba-ssm {installed_version()} is a "
            "development version, which no published wheel index has)"
        )
    return (
        f"run `{install_kernels_command(index)}` to fetch the kernels built for this torch (it replaces "
        f"only mamba-ssm's own files), or "
        + (
            f"rebuild without the installer's wheel cache, which can hand back a wheel built for another "
            f"torch: `{reinstall}`, or build from source with `{source}`"
            if reinstall != source
            else f"rebuild from source: `{source}`"
        )
    )


def wheel_kernels_fix(index: str | None = None) -> str:
    """What to do when none of the per-platform wheel's kernel modules (``mamba_ssm/_kernels/``) serves
    the running torch or its GPUs: a torch older than their stable-ABI floor (2.10), a ROCm torch, a CUDA
    major without a module. ``install-kernels`` fetches the wheel built for this torch (a classic or a
    ROCm build) from the project's wheel index and installs it over this one with ``--no-deps``; its
    top-level ``mamba_ssm/_C`` then wins over the wheel's modules. (Reinstalling from PyPI would bring
    back the same wheel.)"""
    return (
        f"run `{install_kernels_command(index)}`: it installs the mamba-ssm wheel built for this torch from "
        "the project's wheel index over this install (it replaces only mamba-ssm's own files, never torch), "
        "and that wheel's compiled module is used instead of the kernel modules this one carries"
    )


def reinstall_fix(record: InstallRecord | None = None) -> str:
    """Reinstall the package (a broken or partial install)."""
    return f"reinstall the package: `{reinstall_command(index=recorded_index(record))}`"


def failed_attempt_fix(record: InstallRecord) -> str:
    """What to do when the last install attempt failed (``final_mode`` ``error``) and installed nothing:
    its full error is in that install's output; fix its cause and build again (the rebuild leads), or,
    where an index has this version, install the prebuilt kernels without building."""
    index = recorded_index(record)
    again = (
        "the error is in that install's output (pip and uv show a build's output with `-v`): fix its "
        f"cause and build again: `{reinstall_command(index=index)}`"
    )
    if not kernels_fetchable(index):
        return (
            f"{again} (mamba-ssm {installed_version()} is a development version, which no published wheel "
            "index has; MAMBA_WHEEL_INDEX can name a local one that has it)"
        )
    if _no_candidate(record):
        return f"{again}; {no_candidate_fix(record)}"
    return f"{again}; or install the prebuilt kernels for this torch without building: `{install_kernels_command(index)}`"


def deferred_fix(record: InstallRecord | None) -> str:
    """What to do when the kernels were deferred at install time (torch was being installed by the same
    command): install-kernels, or for a development version on no index, the rebuild."""
    index = recorded_index(record)
    if not kernels_fetchable(index):
        return f"the kernels were deferred at install time: {dev_version_fix()}"
    return f"the kernels were deferred at install time: run `{install_kernels_command(index)}`"


def install_notes(record: InstallRecord | None, message: str) -> str:
    """Added to a fallback warning ``message``: the kernels were deferred at install time (unless the
    message already names install-kernels), or no kernels were built and why ("" when neither)."""
    if record is None:
        return ""
    text = ""
    if record.kernels_deferred and install_kernels_command() not in message:
        text += (
            " The kernels were deferred at install time (torch was being installed by the same command): "
            + (
                f"run `{install_kernels_command(recorded_index(record))}`."
                if kernels_fetchable(recorded_index(record))
                else dev_version_fix() + "."
            )
        )
    if record.build is not None and record.build.mode == "python" and record.build.reason:
        text += f" At install time no kernels were built: {record.build.reason.rstrip('.')}."
    return text


# ----------------------------------------------------------------------------- the resolver
def resolver_no_candidate_fix(
    version: str, inst: Installer | None = None, cuda_torch: bool | None = None
) -> str:
    """What to do when no wheel fits (the commands pin ``version`` and never change torch; ``inst``
    and ``cuda_torch``: the target's installer and whether its torch is a CUDA one)."""
    source = source_build_command(version, inst=inst, cuda_torch=cuda_torch)
    return (
        "What to do: install a torch that a prebuilt wheel serves (`python -m mamba_ssm install-kernels "
        "--dry-run` lists them once installed), point MAMBA_WHEEL_INDEX at an index that has your variant, or "
        f"build from source against the torch installed (`{source}`; a CPU torch needs "
        "a C++ compiler, a CUDA torch nvcc as well)."
    )


def resolver_dev_version_fix(
    version: str, inst: Installer | None = None, cuda_torch: bool | None = None
) -> str:
    """The resolver's message for a development version and the release index, which cannot have it:
    nothing is looked for; what to do."""
    source = source_build_command(version, inst=inst, cuda_torch=cuda_torch)
    return (
        f"mamba-ssm {_public(version)} is a development version, which no published wheel index has, so no "
        f"prebuilt wheel was looked for (MAMBA_WHEEL_INDEX names a local index that has it, e.g. a "
        f"release dry run's). What to do: build from source against the torch installed (`{source}`; a CPU "
        "torch needs a C++ compiler, a CUDA torch nvcc as well)."
    )


def resolver_index_fix(version: str) -> str:
    """What to do when the wheel index cannot be used (the mirror command pins ``version``)."""
    return (
        "What to do: check the network/proxy (HTTPS_PROXY, NO_PROXY, SSL_CERT_FILE or PIP_CERT), or set "
        f"MAMBA_WHEEL_INDEX to a reachable copy (to make one: {mirror_hint(version)}), or build from "
        "source (MAMBA_FORCE_BUILD=TRUE)."
    )


# ----------------------------------------------------------------------------- GPUs
def coverage_fix(device_type: str, arch: str | None, torch_cuda: str | None, index: str | None = None) -> str:
    """What to do when the loaded build has no kernel for a device (``""`` when nothing can be done).

    Args:
        device_type: ``"cpu"`` or ``"cuda"`` (CUDA and ROCm devices).
        arch: the device's compute capability (``"7.5"``) or gfx arch (``"gfx1100"``), None if unknown.
        torch_cuda: ``torch.version.cuda`` of the running torch.
        index: the wheel index the install used, when it was not the release index.
    """
    kernels = install_kernels_command(index)
    fetchable = kernels_fetchable(index)
    if device_type == "cpu":
        if not fetchable:
            return f"build from source, which builds the CPU kernel: `{source_build_command()}`"
        return (
            f"install the build for this torch, which carries the CPU kernel: `{kernels}`, "
            f"or build from source: `{source_build_command()}`"
        )
    if device_type != "cuda":
        return ""
    if arch and arch.startswith("gfx"):
        build = source_build_command(env_prefix=f"HIP_BUILD=1 PYTORCH_ROCM_ARCH={arch} ")
        if not fetchable:
            return f"build from source for {arch}: `{build}`"
        return f"install a wheel built for {arch} (`{kernels}` picks one), or build from source for it: `{build}`"
    unservable = archs.gpu_unservable(arch, torch_cuda)
    if unservable:  # a GPU older than everything this torch's CUDA can build for: no build helps
        return unservable
    try:  # MAMBA_CUDA_ARCHS wins over a TORCH_CUDA_ARCH_LIST the user may have set
        targets = archs.arch_list_assignment(archs.ArchSpec(sass=(archs.parse_arch(arch or "").sass,))) + " "
    except ValueError:  # capability unknown: the default archs (torch's that nvcc supports)
        targets = ""
    what = "compute capability " + arch if arch else "this GPU"
    build = source_build_command(env_prefix=targets)
    if not fetchable:
        return f"build from source for {what}: `{build}`"
    return f"install a wheel whose kernels cover {what} (`{kernels}` picks one), or build from source for it: `{build}`"


# ----------------------------------------------------------------------------- backend choice
def backend_choice_fix(choices: tuple[str, ...]) -> str:
    """``MAMBA_SSM_BACKEND`` holds a value that is not a backend."""
    return "set MAMBA_SSM_BACKEND to one of " + ", ".join(choices) + " or unset it"


def unforce_fix(gpu_kernels: bool) -> str:
    """A backend other than ``auto`` keeps an op off its kernels: how to use them again."""
    kernels = "the GPU kernels" if gpu_kernels else "the compiled kernels"
    return f"unset MAMBA_SSM_BACKEND (or call mamba_ssm.set_backend('auto')) to use {kernels}"


def check_failed_fix() -> str:
    """doctor --check found a backend whose result disagrees with the float64 reference."""
    return "run on the PyTorch fallback meanwhile (MAMBA_SSM_BACKEND=torch) and report this output"
