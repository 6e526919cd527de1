"""``python -m build_matrix sdist-check``: the sdist carries everything a source build compiles.

1. copy the tracked sources into an empty folder and build the sdist there (``python -m build
   --sdist --no-isolation``: setuptools, wheel and packaging from the running environment);
2. unpack it into another empty folder;
3. every compiled source of the repository (``csrc/*``: .cpp, .cu, .h, .cuh) and every file setup.py
   loads by path (``mamba_ssm/_build/*.py``, ``mamba_ssm/_compat/*.py``, ``mamba_ssm/_install/*.py``,
   ``mamba_ssm/_version.py``)
   must be inside; a missing one is named;
4. unless ``--no-build``: build a wheel from the unpacked sdist alone (``pip wheel
   --no-build-isolation --no-deps`` with ``MAMBA_FORCE_BUILD=TRUE``; ``MAMBA_CUDA_ARCHS`` from
   ``--archs``, default 90) and check it holds ``mamba_ssm/_C.abi3.so`` with readable build info.

Exit 0 when all holds, 1 otherwise (each problem printed).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, List, Optional

from mamba_ssm._compat.buildinfo import read_build_info

from .build import source_files
from .layout import REPO_ROOT

REQUIRED_GLOBS = (
    "csrc/*",
    "mamba_ssm/_build/*.py",
    "mamba_ssm/_compat/*.py",
    "mamba_ssm/_install/*.py",
    "mamba_ssm/_version.py",
    "setup.py",
    "pyproject.toml",
)


def required_files(root: Path = REPO_ROOT) -> List[str]:
    """The repository files the sdist must carry (tracked files matching REQUIRED_GLOBS)."""
    tracked = set(source_files(root))
    out = set()
    for pattern in REQUIRED_GLOBS:
        for p in root.glob(pattern):
            rel = str(p.relative_to(root))
            if p.is_file() and rel in tracked:
                out.add(rel)
    return sorted(out)


def _check_run(proc: subprocess.CompletedProcess[str], what: str) -> None:
    """RuntimeError with the output's last 2000 characters when the build step `what` failed."""
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{(proc.stdout + proc.stderr)[-2000:]}")


def _only_file(folder: Path, pattern: str, what: str) -> Path:
    """The one file in `folder` matching `pattern`; RuntimeError when there are none or several."""
    found = sorted(folder.glob(pattern))
    if len(found) != 1:
        raise RuntimeError(f"expected one {what} in {folder}, found {found}")
    return found[0]


def build_sdist(work: Path, extra_files: Optional[Dict[str, str]] = None) -> Path:
    """Build the sdist from a clean copy of the sources (``extra_files``: relative path -> text,
    written into the copy first: the release's pins and index URLs); returns the .tar.gz."""
    src = work / "src"
    for f in source_files():
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / f, src / f)
    for rel, text in (extra_files or {}).items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    dist = work / "dist"
    env = dict(os.environ, MAMBA_SKIP_CUDA_BUILD="TRUE")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(dist), str(src)],
        capture_output=True,
        text=True,
        env=env,
    )
    _check_run(proc, "building the sdist")
    return _only_file(dist, "*.tar.gz", "sdist")


def unpack(sdist: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    with tarfile.open(sdist) as tf:
        for m in tf.getmembers():
            if m.name.startswith("/") or ".." in Path(m.name).parts:
                raise RuntimeError(f"{sdist}: unsafe member {m.name!r}")
        # every member was checked above
        tf.extractall(dest, filter="data") if sys.version_info >= (3, 12) else tf.extractall(dest)  # noqa: S202
    roots = [p for p in dest.iterdir() if p.is_dir()]
    if len(roots) != 1:
        raise RuntimeError(f"{sdist}: expected one top-level folder, found {[p.name for p in roots]}")
    return roots[0]


def missing_files(unpacked: Path, required: List[str]) -> List[str]:
    return [f for f in required if not (unpacked / f).is_file()]


def build_from(unpacked: Path, out: Path, archs: str) -> Path:
    env = dict(os.environ, MAMBA_FORCE_BUILD="TRUE", MAX_JOBS=os.environ.get("MAX_JOBS", "1"))
    env.pop("MAMBA_SKIP_CUDA_BUILD", None)
    if archs:
        env["MAMBA_CUDA_ARCHS"] = archs
    if shutil.which("ccache"):
        env.setdefault("CCACHE_BASEDIR", str(unpacked))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "--no-cache-dir",
            "-w",
            str(out),
            ".",
        ],
        cwd=unpacked,
        capture_output=True,
        text=True,
        env=env,
    )
    (out.parent / "build-from-sdist.log").write_text(proc.stdout + proc.stderr)
    _check_run(proc, "building from the unpacked sdist")
    return _only_file(out, "*.whl", "wheel")


def main(args: argparse.Namespace) -> int:
    work = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="mamba-sdist-check-"))
    if args.out and work.exists():
        if any(work.iterdir()) and not (work / "sdist-build").exists():
            print(
                f"sdist-check: {work} exists and is not an earlier sdist-check folder; pick another --out",
                file=sys.stderr,
            )
            return 2
        shutil.rmtree(work)
    work.mkdir(parents=True)
    problems: List[str] = []
    try:
        sdist = build_sdist(work / "sdist-build")
        shutil.copy2(sdist, work / sdist.name)
        unpacked = unpack(sdist, work / "unpacked")
        required = required_files()
        missing = missing_files(unpacked, required)
        problems += [f"{f} is not in {sdist.name} (add it to MANIFEST.in / package data)" for f in missing]
        print(
            f"sdist {sdist.name}: {len(required) - len(missing)}/{len(required)} required files inside "
            f"({sum(1 for f in required if f.startswith('csrc/'))} under csrc/)"
        )
        if not args.no_build and not missing:
            wheel = build_from(unpacked, work / "wheel", os.environ.get("MAMBA_CUDA_ARCHS", "90"))
            with zipfile.ZipFile(wheel) as zf:
                if "mamba_ssm/_C.abi3.so" not in zf.namelist():
                    problems.append(f"{wheel.name} built from the sdist has no mamba_ssm/_C.abi3.so")
                else:
                    zf.extract("mamba_ssm/_C.abi3.so", work / "so")
                    info = read_build_info(work / "so" / "mamba_ssm" / "_C.abi3.so")
                    print(
                        f"built from the sdist alone: {wheel.name} (torch {info.torch_version}, "
                        f"{info.sass_archs + info.ptx_archs})"
                    )
    except (RuntimeError, ValueError) as exc:
        problems.append(str(exc))
    for p in problems:
        print(f"FAIL {p}")
    print(f"sdist-check: {'passed' if not problems else 'FAILED'} (work in {work})")
    return 1 if problems else 0
