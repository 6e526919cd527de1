"""The resolver end to end: detect the target, read the index, select, fetch and verify.

Used by setup.py (``setup_hook``), ``python -m mamba_ssm install-kernels`` and
``python -m build_matrix resolve``. The index is ``MAMBA_WHEEL_INDEX`` (an http(s) or file:// URL or a
local path), else :data:`RELEASE_INDEX_URL` for this version.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional

from . import fixes
from .environment import DetectionError, Environment, detect
from .fetch import FetchError, HttpSettings, fetch_bytes, fetch_wheel, index_url, join_url
from .fixes import RELEASE_INDEX_URL
from .manifest import MAX_MANIFEST_BYTES, Manifest, ManifestError, WheelEntry, load_pinned_hashes
from .selection import Decision, select
from .wheelmeta import disagreements, platform_arch, read_wheel_meta, target_problems

__all__ = [
    "RELEASE_INDEX_URL",
    "Resolution",
    "resolve",
    "default_index",
    "fix_no_candidate",
    "fix_index",
    "contents_problems",
]


def fix_no_candidate(version: str) -> str:
    """What to do when no wheel fits (the commands pin ``version`` and never change torch)."""
    return (
        "What to do: install a torch that a prebuilt wheel serves (`python -m mamba_ssm install-kernels "
        "--dry-run` lists them once installed), point MAMBA_WHEEL_INDEX at an index that has your variant, or build from source "
        f"against the torch installed (`{fixes.source_build_command(version)}`; a CPU torch needs a C++ "
        "compiler, a CUDA torch nvcc as well)."
    )


#: (:data:`RELEASE_INDEX_URL`, from :mod:`.fixes`, is the fallback outside a released sdist.)
#: Written into the sdist at release (``python -m build_matrix release sdist``): ``{"index_url": the
#: release's manifest + PEP 503 roots (GitHub Pages), "wheels_url": where its wheels are served (the
#: GitHub Release assets), "manifest_sha256", "version"}``. Trusted like the pinned hashes: it came
#: with the sdist, not from the host that serves the wheels.
RELEASE_INDEX_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "release_index.json")


def release_index(path: Optional[str] = None) -> Optional[Dict[str, str]]:
    """The release's recorded index (:data:`RELEASE_INDEX_FILE`), or None outside a released sdist.
    Raises ``ValueError`` naming the file when it is unreadable or its URLs are not http(s)/file."""
    path = path or RELEASE_INDEX_FILE
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as fh:
            data = json.load(fh)
        urls = {k: index_url(str(data[k])) for k in ("index_url", "wheels_url")}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a release index record ({exc}); reinstall the sdist") from None
    return dict(data, **urls)


def fix_index(version: str) -> str:
    """What to do when the wheel index cannot be used (the mirror command pins ``version``)."""
    return (
        "What to do: check the network/proxy (HTTPS_PROXY, NO_PROXY, SSL_CERT_FILE or PIP_CERT), or set "
        f"MAMBA_WHEEL_INDEX to a reachable copy (to make one: {fixes.mirror_hint(version)}), or build from "
        "source (MAMBA_FORCE_BUILD=TRUE)."
    )


def default_index(version: str, environ: Optional[Mapping[str, str]] = None) -> str:
    """``MAMBA_WHEEL_INDEX`` or the release index of ``version``, normalised to end in ``/``."""
    environ = os.environ if environ is None else environ
    from packaging.version import Version

    recorded = release_index()
    if environ.get("MAMBA_WHEEL_INDEX"):
        value = environ["MAMBA_WHEEL_INDEX"]
    elif recorded and Version(str(recorded.get("version", version))).public == Version(version).public:
        value = recorded["index_url"]
    else:
        value = RELEASE_INDEX_URL.format(version=Version(version).public)
    return index_url(value)


def wheel_url(index: str, entry: WheelEntry) -> str:
    """Where ``entry`` is downloaded from: the recorded release's wheels URL + file name when
    ``index`` is that release's index (its PEP 503 roots link to the GitHub Release assets), else
    ``<index>/<variant>/mamba-ssm/<file>`` (a mirror, ``build_matrix index``)."""
    try:
        recorded = release_index()
    except ValueError:  # default_index reported it; an explicit index needs no record
        recorded = None
    if recorded and index_url(index) == recorded["index_url"]:
        return join_url(recorded["wheels_url"], entry.filename)
    return join_url(index, entry.relpath)


@dataclass
class Resolution:
    """What the resolver found.

    ``status``: ``prebuilt`` (``wheel_path`` is a verified wheel), ``deferred`` (no torch in the
    target yet), ``no-candidate`` (the index has no fitting wheel), ``error`` (detection, index or
    download failed; ``error_kind`` says which). ``message`` is one paragraph for humans.
    """

    status: str
    message: str
    version: str
    index: Optional[str] = None
    env: Optional[Environment] = None
    decision: Optional[Decision] = None
    entry: Optional[WheelEntry] = None
    wheel_path: Optional[str] = None
    error_kind: Optional[str] = None
    log: List[str] = field(default_factory=list)

    def record(self) -> Dict[str, Any]:
        """The decision record (``decision.write_decision``'s keys, less ``final_mode``)."""
        return {
            "package_version": self.version,
            "status": self.status,
            "wheel": self.entry.filename if self.entry and self.wheel_path else None,
            "sha256": self.entry.sha256 if self.entry and self.wheel_path else None,
            "index": self.index,
            "environment": self.env.summary() if self.env else None,
            "target_python": self.env.executable if self.env else None,
            "decision": self.decision.to_dict() if self.decision else None,
            "message": self.message,
            "error_kind": self.error_kind,
            # GPUs no build for the target's torch can run on (setup.py's auto fallback then builds nothing)
            "gpu_unservable": list(self.decision.gpu_unservable) if self.decision else [],
        }


def resolve(
    version: str,
    index: Optional[str] = None,
    env: Optional[Environment] = None,
    fetch: bool = True,
    environ: Optional[Mapping[str, str]] = None,
    settings: Optional[HttpSettings] = None,
    pinned: Any = "sdist",
    cache: Optional[str] = None,
    log: Optional[Callable[[str], None]] = None,
) -> Resolution:
    """Resolve (and with ``fetch``, download and verify) the wheel for ``version`` (e.g. ``"2.4.0"``).

    ``env``: a declared target (default: detect it). ``pinned``: ``"sdist"`` reads
    ``pinned_hashes.json`` shipped in the sdist, None disables the pin check, or a dict.
    Never raises for network, index or environment faults: they come back as ``status == "error"``.
    """
    environ = os.environ if environ is None else environ
    lines: List[str] = []

    def say(text: str) -> None:
        lines.append(text)
        if log:
            log(text)

    res = Resolution("error", "", version, log=lines)
    try:
        res.index = index_url(index) if index else default_index(version, environ)
    except ValueError as exc:
        res.error_kind, res.message = "index", f"Bad wheel index: {exc}. {fix_index(version)}"
        return res
    manifest_url = res.index + "manifest.json"
    # The manifest is read only once detection says it is needed, in this thread: no thread or child
    # process of the resolver outlives this call (a daemon thread left inside OpenSSL while the
    # interpreter exits crashed the build process, issue 15). Detection's probe reads torch's
    # version.py without importing torch (~0.1 s), so overlapping the two saved too little to keep
    # (docs/benchmarks.md, "Resolver: manifest read after detection").
    if env is None:
        try:
            env = detect(environ=environ)
        except DetectionError as exc:
            res.error_kind = "detect"
            res.message = (
                f"Could not detect the target environment: {exc}. Set MAMBA_TARGET_PYTHON to "
                f"the target interpreter, or run python -m mamba_ssm install-kernels there."
            )
            return res
    res.env = env
    say(f"target: {env.summary()} ({env.target_source or 'declared'})")
    if env.torch is None or not env.torch.version:
        res.status = "deferred"  # nothing to match: the manifest is not read
        res.message = (
            f"torch is not installed in the target environment ({env.prefix or env.executable}) yet: it is "
            f"being installed by the same command, after this package is built. Installed the pure-Python "
            f"package with the kernels deferred; when the install has finished, run "
            f"`python -m mamba_ssm install-kernels` to add the prebuilt kernels for that torch."
        )
        return res
    try:
        # a half-sent or garbled body is fetched again (check); a well-formed but wrong one is not
        raw = fetch_bytes(manifest_url, MAX_MANIFEST_BYTES, settings, environ, log=say, check=_parses_as_json)
        manifest = Manifest.from_json(raw, source=manifest_url)
        pins = load_pinned_hashes() if pinned == "sdist" else pinned
    except FetchError as exc:
        if exc.kind == "invalid":
            res.error_kind = "manifest"
            res.message = f"The wheel index's manifest was refused: {exc}. No wheel was downloaded. {fix_index(version)}"
            return res
        res.error_kind = f"index-{exc.kind}"
        res.message = f"Could not read the wheel index: {exc}. Looked for a wheel for {env.summary()}. {fix_index(version)}"
        return res
    except ManifestError as exc:
        res.error_kind = "manifest"
        res.message = (
            f"The wheel index's manifest was refused: {exc}. No wheel was downloaded. {fix_index(version)}"
        )
        return res
    decision = select(env, manifest, version, pins)
    res.decision = decision
    if decision.status != "chosen":
        res.status = "no-candidate"
        if decision.gpu_unservable:  # a source build cannot help either: say what runs and the real fix
            res.message = (
                f"No prebuilt mamba-ssm wheel fits. {decision.explain()} "
                f"{' '.join(u.rstrip('.') + '.' for u in decision.gpu_unservable)}"
            )
        else:
            res.message = (
                f"No prebuilt mamba-ssm wheel fits. {decision.explain()} {fix_no_candidate(version)}"
            )
        return res
    if not fetch:
        res.status, res.entry = "prebuilt", decision.chosen
        res.message = decision.explain()
        return res
    failures = []
    for entry in decision.candidates:
        pin = (pins or {}).get(entry.filename) if isinstance(pins, dict) else None
        sha = pin["sha256"] if pin else entry.sha256
        size = pin.get("size") or entry.size if pin else entry.size
        url = wheel_url(res.index, entry)
        try:
            res.wheel_path = fetch_wheel(url, entry.filename, sha, size, cache, settings, environ, log=say)
        except (FetchError, OSError, TimeoutError) as exc:
            failures.append(str(exc))
            res.error_kind = f"fetch-{getattr(exc, 'kind', 'os')}"
            if getattr(exc, "kind", None) == "not-found":
                continue  # the manifest lists a wheel the host lacks: try the next candidate
            break
        problems = contents_problems(res.wheel_path, entry, env)
        if problems:  # the bytes are the index's, but they are not what its name and manifest say
            say(f"refusing {entry.filename}: " + "; ".join(problems))
            failures.append(
                f"{entry.filename}: its contents disagree with its name or the target: " + "; ".join(problems)
            )
            res.wheel_path, res.error_kind = None, "fetch-metadata"
            continue  # another candidate may be sound
        res.status, res.entry, res.error_kind = "prebuilt", entry, None
        res.message = (
            f"{decision.explain()} Downloaded and verified (sha256 {sha[:16]}..., {size} bytes; "
            f"WHEEL tags, METADATA and build info agree)."
        )
        return res
    if res.error_kind == "fetch-local":  # the network worked; the cache could not take the file
        res.message = f"The chosen wheel could not be saved: {' | '.join(failures)}. {decision.explain()}"
        return res
    if res.error_kind == "fetch-metadata":
        res.message = (
            f"No wheel was installed: {' | '.join(failures)}. The index serves a mislabelled wheel; "
            f"it was not handed to the installer. {decision.explain()} "
            f"{fix_no_candidate(version)}"
        )
        return res
    res.message = (
        f"The chosen wheel could not be downloaded: {' | '.join(failures)}. "
        f"{decision.explain()} {fix_index(version)}"
    )
    return res


def contents_problems(path: str, entry: WheelEntry, env: Environment) -> List[str]:
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


def main_log(text: str) -> None:  # pragma: no cover - convenience for callers
    print(f"[mamba-ssm resolver] {text}", file=sys.stderr)
