"""The resolver end to end: detect the target, read the index, select, fetch and verify.

Used by setup.py (``setup_hook``), ``python -m mamba_ssm install-kernels`` and
``python -m build_matrix resolve``. The index is ``MAMBA_WHEEL_INDEX`` (an http(s) or file:// URL or a
local path), else the release index of this version (:mod:`.index`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Callable, Mapping

from .._advice import (
    Installer,
    installer,
    is_on_an_index,
    resolver_dev_version_fix,
    resolver_index_fix,
    resolver_no_candidate_fix,
)
from .environment import DetectionError, Environment, detect
from .fetch import FetchError, FetchErrorKind, HttpSettings, fetch_bytes, fetch_wheel, index_url
from .index import RELEASE_INDEX_URL, default_index, wheel_url
from .manifest import MAX_MANIFEST_BYTES, Manifest, ManifestError, Pin, WheelEntry, load_pinned_hashes
from .record import ErrorKind, ErrorStage, InstallRecord, ResolutionStatus, SelectionStatus
from .selection import Selection, select
from .wheelmeta import disagreements, platform_arch, read_wheel_meta, target_problems

__all__ = ["Resolution", "contents_problems", "resolve"]

#: ``resolve(pinned=SDIST_PINS)``: the hashes pinned into the sdist (``pinned_hashes.json``).
SDIST_PINS = "sdist"


@dataclass(frozen=True)
class Resolution:
    """What the resolver found.

    ``status``: :class:`ResolutionStatus` (``wheel_path`` is a verified wheel when ``prebuilt``;
    ``error_kind`` says what failed when ``error``). ``message`` is one paragraph for humans; ``log``
    the lines logged on the way.
    """

    status: ResolutionStatus
    message: str
    version: str
    index: str | None = None
    env: Environment | None = None
    selection: Selection | None = None
    entry: WheelEntry | None = None
    wheel_path: str | None = None
    error_kind: ErrorKind | None = None
    log: tuple[str, ...] = ()

    def record(self) -> InstallRecord:
        """The install record of this resolution (``final_mode`` is set by whoever installs)."""
        found = self.entry is not None and self.wheel_path is not None
        return InstallRecord(
            package_version=self.version,
            status=self.status,
            wheel=self.entry.filename if found and self.entry else None,
            sha256=self.entry.sha256 if found and self.entry else None,
            index=self.index,
            environment=self.env.summary() if self.env else None,
            target_python=self.env.executable if self.env else None,
            selection=self.selection.summary() if self.selection else None,
            message=self.message,
            error_kind=self.error_kind,
            # GPUs no build for the target's torch can run on (setup.py's auto fallback then builds nothing)
            gpu_unservable=self.selection.gpu_unservable if self.selection else (),
        )


def resolve(  # every input of a resolution is a keyword the callers name
    version: str,
    index: str | None = None,
    env: Environment | None = None,
    fetch: bool = True,
    environ: Mapping[str, str] | None = None,
    settings: HttpSettings | None = None,
    pinned: Mapping[str, Pin] | str | None = SDIST_PINS,
    cache: str | None = None,
    log: Callable[[str], None] | None = None,
) -> Resolution:
    """Resolve (and with ``fetch``, download and verify) the wheel for ``version`` (e.g. ``"2.4.0"``).

    ``env``: a declared target (default: detect it). ``pinned``: :data:`SDIST_PINS` (any string) reads
    ``pinned_hashes.json`` shipped in the sdist, None disables the pin check, or the pins by file name.
    Never raises for network, index or environment faults: they come back with status ``error``.
    """
    environ = os.environ if environ is None else environ
    lines: list[str] = []

    def say(text: str) -> None:
        lines.append(text)
        if log:
            log(text)

    def error(
        kind: ErrorKind, message: str, where: str | None = None, target: Environment | None = None
    ) -> Resolution:
        return Resolution(
            ResolutionStatus.ERROR,
            message,
            version,
            index=where,
            env=target,
            error_kind=kind,
            log=tuple(lines),
        )

    try:
        where = index_url(index) if index else default_index(version, environ)
    except ValueError as exc:
        return error(ErrorKind(ErrorStage.INDEX), f"Bad wheel index: {exc}. {resolver_index_fix(version)}")
    # The manifest is read only once detection says it is needed, in this thread: no thread or child
    # process of the resolver outlives this call (a daemon thread left inside OpenSSL while the
    # interpreter exits crashes the build process). Detection's probe reads torch's version.py
    # without importing torch (~0.1 s), so overlapping the two saves too little to keep
    # (docs/benchmarks.md, "Resolver: manifest read after detection").
    if env is None:
        try:
            env = detect(environ=environ)
        except DetectionError as exc:
            return error(
                ErrorKind(ErrorStage.DETECT),
                f"Could not detect the target environment: {exc}. Set MAMBA_TARGET_PYTHON to "
                f"the target interpreter, or run python -m mamba_ssm install-kernels there.",
                where=where,
            )
    say(f"target: {env.summary()} ({env.target_source or 'declared'})")
    if not env.has_torch:  # nothing to match: the manifest is not read
        return Resolution(
            ResolutionStatus.DEFERRED,
            f"torch is not installed in the target environment ({env.prefix or env.executable}) yet: it is "
            f"being installed by the same command, after this package is built. Installed the pure-Python "
            f"package with the kernels deferred; when the install has finished, run "
            f"`python -m mamba_ssm install-kernels` to add the prebuilt kernels for that torch.",
            version,
            index=where,
            env=env,
            log=tuple(lines),
        )
    inst, cuda_torch = _target_form(env)
    if where == index_url(RELEASE_INDEX_URL.format(version=_public(version))) and not is_on_an_index(version):
        # a development version: the release index of a version that is never published
        return Resolution(
            ResolutionStatus.NO_CANDIDATE,
            resolver_dev_version_fix(version, inst, cuda_torch),
            version,
            where,
            env,
            log=tuple(lines),
        )
    manifest_url = where + "manifest.json"
    try:
        # a half-sent or garbled body is fetched again (check); a well-formed but wrong one is not
        raw = fetch_bytes(manifest_url, MAX_MANIFEST_BYTES, settings, environ, log=say, check=_parses_as_json)
        manifest = Manifest.from_json(raw, source=manifest_url)
        pins = load_pinned_hashes() if isinstance(pinned, str) else pinned
    except FetchError as exc:
        if exc.kind is FetchErrorKind.INVALID:
            return error(
                ErrorKind(ErrorStage.MANIFEST),
                f"The wheel index's manifest was refused: {exc}. No wheel was downloaded. "
                f"{resolver_index_fix(version)}",
                where=where,
                target=env,
            )
        return error(
            ErrorKind(ErrorStage.INDEX, exc.kind),
            f"Could not read the wheel index: {exc}. Looked for a wheel for {env.summary()}. "
            f"{resolver_index_fix(version)}",
            where=where,
            target=env,
        )
    except ManifestError as exc:
        return error(
            ErrorKind(ErrorStage.MANIFEST),
            f"The wheel index's manifest was refused: {exc}. No wheel was downloaded. {resolver_index_fix(version)}",
            where=where,
            target=env,
        )
    selection = select(env, manifest, version, pins)
    if selection.status is not SelectionStatus.CHOSEN or selection.chosen is None:
        if selection.gpu_unservable:  # a source build cannot help either: say what runs and the real fix
            unservable = " ".join(u.rstrip(".") + "." for u in selection.gpu_unservable)
            message = f"No prebuilt mamba-ssm wheel fits. {selection.explain()} {unservable}"
        else:
            fix = resolver_no_candidate_fix(version, inst, cuda_torch)
            message = f"No prebuilt mamba-ssm wheel fits. {selection.explain()} {fix}"
        return Resolution(
            ResolutionStatus.NO_CANDIDATE, message, version, where, env, selection, log=tuple(lines)
        )
    if not fetch:
        return Resolution(
            ResolutionStatus.PREBUILT,
            selection.explain(),
            version,
            where,
            env,
            selection,
            entry=selection.chosen,
            log=tuple(lines),
        )
    return _download(version, selection, env, where, pins, cache, settings, environ, say, lines)


def _public(version: str) -> str:
    return version.split("+", 1)[0]


def _target_form(env: Environment) -> tuple[Installer, bool | None]:
    """The installer form of the commands printed for the target ``env`` (its interpreter named for
    uv) and whether its torch is a CUDA build (a CPU or ROCm torch is never told about CUDA_HOME)."""
    torch = env.torch
    return installer(python=env.executable), (bool(torch.cuda) if torch is not None else None)


def _download(  # the resolution's state, handed on
    version: str,
    selection: Selection,
    env: Environment,
    where: str,
    pins: Mapping[str, Pin] | None,
    cache: str | None,
    settings: HttpSettings | None,
    environ: Mapping[str, str],
    say: Callable[[str], None],
    lines: list[str],
) -> Resolution:
    """Download and verify the best candidate that the index really serves."""
    failures = []
    kind: ErrorKind | None = None
    for entry in selection.candidates:
        pin = (pins or {}).get(entry.filename)
        sha = pin.sha256 if pin else entry.sha256
        size = (pin.size or entry.size) if pin else entry.size
        try:
            path = fetch_wheel(
                wheel_url(where, entry), entry.filename, sha, size, cache, settings, environ, log=say
            )
        except FetchError as exc:
            failures.append(str(exc))
            kind = ErrorKind(ErrorStage.FETCH, exc.kind)
            if exc.kind is FetchErrorKind.NOT_FOUND:
                continue  # the manifest lists a wheel the host lacks: try the next candidate
            break
        except (OSError, TimeoutError) as exc:
            failures.append(str(exc))
            kind = ErrorKind(ErrorStage.FETCH, FetchErrorKind.OS)
            break
        problems = contents_problems(path, entry, env)
        if problems:  # the bytes are the index's, but they are not what its name and manifest say
            say(f"refusing {entry.filename}: " + "; ".join(problems))
            failures.append(
                f"{entry.filename}: its contents disagree with its name or the target: " + "; ".join(problems)
            )
            kind = ErrorKind(ErrorStage.FETCH, FetchErrorKind.METADATA)
            continue  # another candidate may be sound
        return Resolution(
            ResolutionStatus.PREBUILT,
            f"{selection.explain()} Downloaded and verified (sha256 {sha[:16]}..., {size} bytes; "
            f"WHEEL tags, METADATA and build info agree).",
            version,
            index=where,
            env=env,
            selection=selection,
            entry=entry,
            wheel_path=path,
            log=tuple(lines),
        )
    joined = " | ".join(failures)
    if kind is not None and kind.cause is FetchErrorKind.LOCAL:  # the network worked; the cache did not
        message = f"The chosen wheel could not be saved: {joined}. {selection.explain()}"
    elif kind is not None and kind.cause is FetchErrorKind.METADATA:
        message = (
            f"No wheel was installed: {joined}. The index serves a mislabelled wheel; "
            f"it was not handed to the installer. {selection.explain()} "
            f"{resolver_no_candidate_fix(version, *_target_form(env))}"
        )
    else:
        message = (
            f"The chosen wheel could not be downloaded: {joined}. "
            f"{selection.explain()} {resolver_index_fix(version)}"
        )
    return Resolution(
        ResolutionStatus.ERROR,
        message,
        version,
        index=where,
        env=env,
        selection=selection,
        error_kind=kind,
        log=tuple(lines),
    )


def contents_problems(path: str, entry: WheelEntry, env: Environment) -> list[str]:
    """Why the downloaded wheel at ``path`` must not be installed although its sha256 matched: its
    WHEEL tags, METADATA (name, version, Requires-Python) or ``_C`` build info contradict its file
    name, the manifest entry, or the target (``wheelmeta``). Empty when it is sound."""
    try:
        meta = read_wheel_meta(path, scratch=os.path.dirname(path))
    except (ValueError, OSError) as exc:
        return [str(exc)]
    problems = disagreements(meta, entry.filename)
    plats = env.platform_tags
    arch = platform_arch(plats[0]) if plats else env.machine
    problems += target_problems(meta, env.python_version, arch)
    if (meta.build_info or None) != (entry.build_info or None):
        problems.append("the compiled module's build info differs from the one the index's manifest lists")
    if entry.requires_python and meta.requires_python != entry.requires_python:
        problems.append(
            f"METADATA Requires-Python {meta.requires_python!r} differs from the manifest's "
            f"{entry.requires_python!r}"
        )
    return problems


def _parses_as_json(raw: bytes) -> None:
    """ValueError (not valid JSON / not UTF-8) for a body worth fetching again."""
    try:
        json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 ({exc})") from None
    except ValueError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
