"""Where the prebuilt wheels are: the release index of a version, ``MAMBA_WHEEL_INDEX``, and the URL of
one wheel.

A released sdist carries ``release_index.json`` (written by ``python -m build_matrix release sdist``):
``{"index_url": the release's manifest + PEP 503 roots (GitHub Pages), "wheels_url": where its wheels
are served (the GitHub Release assets), "manifest_sha256", "version"}``. It is trusted like the pinned
hashes: it came with the sdist, not from the host that serves the wheels. Outside a released sdist the
index of a version is :data:`RELEASE_INDEX_URL`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Mapping

from .fetch import index_url, join_url
from .manifest import WheelEntry

__all__ = [
    "RELEASE_INDEX_FILE",
    "RELEASE_INDEX_URL",
    "ReleaseIndex",
    "default_index",
    "release_index",
    "wheel_url",
]

#: The project's release wheel index (a static PEP 503 tree per release, written by
#: ``python -m build_matrix index``); ``{version}`` is the sdist's public version.
RELEASE_INDEX_URL = "https://mamba-ssm.github.io/wheels/v{version}/"
RELEASE_INDEX_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "release_index.json")


@dataclass(frozen=True)
class ReleaseIndex:
    """A released sdist's recorded index: its manifest root, where its wheels are, and its version."""

    index_url: str
    wheels_url: str
    version: str | None = None


def release_index(path: str | None = None) -> ReleaseIndex | None:
    """The release's recorded index (:data:`RELEASE_INDEX_FILE`), or None outside a released sdist.

    Raises:
        ValueError: the file is unreadable or its URLs are not http(s)/file; the message names the file.
    """
    path = path or RELEASE_INDEX_FILE
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as fh:
            data = json.load(fh)
        version = data.get("version")
        return ReleaseIndex(
            index_url=index_url(str(data["index_url"])),
            wheels_url=index_url(str(data["wheels_url"])),
            version=None if version is None else str(version),
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: not a release index record ({exc}); reinstall the sdist") from None


def default_index(version: str, environ: Mapping[str, str] | None = None) -> str:
    """``MAMBA_WHEEL_INDEX`` or the release index of ``version``, normalised to end in ``/``.

    Raises:
        ValueError: the index is not an http(s)/file URL or a path, or the recorded release index is
            unreadable.
    """
    environ = os.environ if environ is None else environ
    from packaging.version import Version  # packaging only where a version is compared

    recorded = release_index()
    if environ.get("MAMBA_WHEEL_INDEX"):
        value = environ["MAMBA_WHEEL_INDEX"]
    elif recorded and Version(recorded.version or version).public == Version(version).public:
        value = recorded.index_url
    else:
        value = RELEASE_INDEX_URL.format(version=Version(version).public)
    return index_url(value)


def wheel_url(index: str, entry: WheelEntry) -> str:
    """Where ``entry`` is downloaded from: the recorded release's wheels URL + file name when ``index``
    is that release's index (its PEP 503 roots link to the GitHub Release assets), else
    ``<index>/<variant>/mamba-ssm/<file>`` (a mirror, ``build_matrix index``)."""
    try:
        recorded = release_index()
    except ValueError:  # default_index reported it; an explicit index needs no record
        recorded = None
    if recorded and index_url(index) == recorded.index_url:
        return join_url(recorded.wheels_url, entry.filename)
    return join_url(index, entry.relpath)
