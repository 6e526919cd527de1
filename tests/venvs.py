"""Fresh venvs for the tests that install something: one CUDA torch is gigabytes, so a fresh venv
shares this interpreter's torch (and everything else installed beside it) through a .pth file naming
this interpreter's site-packages. A package installed into the venv comes first on its sys.path."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig

#: This interpreter's site-packages (the dev venv's: torch 2.14.1+cu130), which a shared venv reaches.
SHARED_SITE = sysconfig.get_paths()["purelib"]
PTH_NAME = "_shared_torch.pth"


def site_packages(python: str) -> str:
    """The purelib folder of the interpreter ``python``."""
    return subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout.strip()


def share_torch(site: str) -> None:
    """Make the venv whose site-packages is ``site`` see :data:`SHARED_SITE`."""
    with open(os.path.join(site, PTH_NAME), "w") as fh:
        fh.write(SHARED_SITE + "\n")


def _normalized(name: str) -> str:
    return name.lower().replace("-", "_")


def shared_site_without(folder: str, hide: tuple[str, ...]) -> str:
    """A folder of links to every entry of :data:`SHARED_SITE` except the distributions ``hide`` names
    (their import packages and ``.dist-info``), so a venv sharing it sees torch but not, e.g., ``ninja`` or
    ``einops``, as a fresh machine would. Returns the folder."""
    os.makedirs(folder, exist_ok=True)
    hidden = tuple(_normalized(h) for h in hide)
    for entry in os.listdir(SHARED_SITE):
        base = _normalized(entry.split(".", 1)[0].split("-", 1)[0])
        if base in hidden:
            continue
        os.symlink(os.path.join(SHARED_SITE, entry), os.path.join(folder, entry))
    return folder


def fresh_venv(
    path: str | os.PathLike[str],
    base_python: str = sys.executable,
    shared: bool = True,
    with_pip: bool = True,
    hide: tuple[str, ...] = (),
) -> tuple[str, str]:
    """Create a venv at ``path`` from ``base_python``; with ``shared``, torch comes from this interpreter
    (without the distributions ``hide`` names: :func:`shared_site_without`).

    Returns:
        (the venv's python, its site-packages folder).
    """
    argv = [base_python, "-m", "venv", os.fspath(path)] + ([] if with_pip else ["--without-pip"])
    subprocess.run(argv, check=True, capture_output=True, timeout=600)
    python = os.path.join(os.fspath(path), "bin", "python")
    site = site_packages(python)
    if shared and hide:
        with open(os.path.join(site, PTH_NAME), "w") as fh:
            fh.write(shared_site_without(os.fspath(path) + "-shared-site", hide) + "\n")
    elif shared:
        share_torch(site)
    return python, site


def share_site_except(site: str, farm: str | os.PathLike[str], names: tuple[str, ...]) -> None:
    """Make the venv whose site-packages is ``site`` see :data:`SHARED_SITE` except the distributions
    named ``names`` (``"pip"``, ``"uv"``: their packages, dist-infos and ``.pth`` hooks): ``farm`` becomes
    a folder of links to everything else in it, named by a .pth file. A ``uv venv`` has no pip; this
    keeps the shared one out of its reach as well."""
    os.makedirs(farm, exist_ok=True)
    for entry in os.listdir(SHARED_SITE):
        stem = entry.split("-", 1)[0].split(".", 1)[0].lower()
        if stem in names:
            continue
        os.symlink(os.path.join(SHARED_SITE, entry), os.path.join(farm, entry))
    with open(os.path.join(site, PTH_NAME), "w") as fh:
        fh.write(os.fspath(farm) + "\n")
