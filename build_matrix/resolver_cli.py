"""The resolver's commands of ``python -m build_matrix``: ``index``, ``resolve``, ``mirror``.

``build_matrix/cli.py`` calls :func:`register` with its subparsers; each command's function is
``args.func(args) -> int`` (exit status).

* ``index DIR [--add WHEEL ...] [--pin FILE] [--pin-sdist SDIST ...]``: PEP 503 roots per variant + manifest.json
  (:mod:`build_matrix.index`).
* ``resolve [--index URL] [--explain] [--env-json FILE] [--json] [--fetch] [--version V]``: what the
  install would choose here (or for a declared target) and why. stdout carries only the result
  (the chosen wheel, or the JSON with --json); messages and the --explain listing (candidates,
  rejections, what the index's wheels serve) go to stderr. Exit 0 chosen, 1 no candidate, 2 error,
  3 no torch in the target (deferred).
* ``mirror --for ENV.json --to DIR [--index URL] [--all]``: download and verify the wheel(s) a declared
  target needs into DIR as an index of their own, for air-gapped installs
  (``MAMBA_WHEEL_INDEX=file:///DIR pip install mamba-ssm`` there).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from typing import TYPE_CHECKING, Any, List, Optional

if TYPE_CHECKING:
    from mamba_ssm._install.environment import Environment

__all__ = ["main", "register"]

EXIT = {"prebuilt": 0, "no-candidate": 1, "error": 2, "deferred": 3}


def _sdist_version() -> str:
    from mamba_ssm._version import __version__

    return __version__


def _load_env(path: Optional[str]) -> Environment:
    from mamba_ssm._install.environment import Environment, detect

    if not path:
        return detect()
    try:
        with open(path) as fh:
            env = Environment.from_json(fh.read())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--env-json {path}: {exc}") from None
    # A file written by ``--print-env`` carries how *that* run found its interpreter; here the target
    # is the one the file declares.
    env.target_source = f"declared, from {path}"
    return env


def cmd_index(args: argparse.Namespace) -> int:
    from build_matrix.index import IndexError_, build_index, pin_sdist

    try:
        manifest = build_index(
            args.dir, add=args.add or [], pin=args.pin, allow_unrepaired=args.allow_unrepaired
        )
        for sdist in args.pin_sdist or []:
            pin_sdist(sdist, manifest)
            print(f"pinned {len(manifest.wheels)} wheel hash(es) into {sdist}")
    except IndexError_ as exc:
        print(f"index: {exc}", file=sys.stderr)
        return 2
    for w in manifest.wheels:
        print(f"{w.variant}/mamba-ssm/{w.filename}  {w.size} bytes  sha256 {w.sha256}")
    print(
        f"{len(manifest.wheels)} wheel(s); manifest: {os.path.join(os.path.abspath(args.dir), 'manifest.json')}"
        + (f"; pins: {args.pin}" if args.pin else "")
    )
    return 0


def cmd_resolve(args: argparse.Namespace) -> int:
    from mamba_ssm._install.resolve import resolve

    env = _load_env(args.env_json)
    if args.print_env:
        print(env.to_json())
        return 0
    log = (lambda t: print(f"[resolve] {t}", file=sys.stderr)) if args.explain and not args.json else None
    res = resolve(
        args.version or _sdist_version(),
        index=args.index,
        env=env,
        fetch=args.fetch,
        pinned=None if args.no_pins else "sdist",
        log=log,
    )
    if args.json:
        out = {
            "status": res.status,
            "index": res.index,
            "message": res.message,
            "wheel": res.entry.filename if res.entry else None,
            "wheel_path": res.wheel_path,
            "environment": res.env.to_dict() if res.env else None,
            "decision": res.selection.summary().to_dict() if res.selection else None,
        }
        print(json.dumps(out, indent=1, sort_keys=True))
    else:
        # stdout carries only the result (WHEEL=$(python -m build_matrix resolve)); the message and
        # the --explain listing are diagnostics, on stderr.
        if res.status == "prebuilt":
            print(res.wheel_path or (res.entry.filename if res.entry else ""))
        if args.explain or res.status != "prebuilt":
            err = sys.stderr
            print(res.message, file=err)
            if args.explain and res.selection:
                for c in res.selection.candidates:
                    print(f"  candidate: {c.filename}", file=err)
                for f, r in res.selection.rejected:
                    print(f"  rejected:  {f}: {r}", file=err)
                if res.selection.served:
                    print("the index's wheels serve:", file=err)
                    for line in res.selection.served:
                        print(f"  serves:    {line}", file=err)
    return EXIT.get(str(res.status), 2)


def cmd_mirror(args: argparse.Namespace) -> int:
    from build_matrix.index import write_index
    from mamba_ssm._advice import in_a_checkout, is_on_an_index, requirement
    from mamba_ssm._install.fetch import FetchError, fetch_wheel
    from mamba_ssm._install.index import wheel_url
    from mamba_ssm._install.resolve import resolve

    env = _load_env(args.for_env)
    res = resolve(
        args.version or _sdist_version(),
        index=args.index,
        env=env,
        fetch=False,
        pinned=None if args.no_pins else "sdist",
    )
    if res.status != "prebuilt":
        print(res.message, file=sys.stderr)
        return EXIT.get(str(res.status), 2)
    if res.selection is None or res.selection.chosen is None:
        print(res.message, file=sys.stderr)
        return EXIT.get(str(res.status), 2)
    wanted = list(res.selection.candidates) if args.all else [res.selection.chosen]
    root = os.path.abspath(args.to)
    for entry in wanted:
        try:
            path = fetch_wheel(wheel_url(res.index or "", entry), entry.filename, entry.sha256, entry.size)
        except (FetchError, OSError, TimeoutError) as exc:
            print(f"mirror: could not download {entry.filename}: {exc}", file=sys.stderr)
            return 2
        dest = os.path.join(root, entry.variant, "mamba-ssm", entry.filename)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        try:
            shutil.copyfile(path, dest + ".part")
            os.replace(dest + ".part", dest)
        finally:
            if os.path.exists(dest + ".part"):  # a failed copy (disk full) leaves nothing half-written
                os.unlink(dest + ".part")
        print(f"mirrored {entry.filename}")
    write_index(root, wanted)
    version = args.version or _sdist_version()
    index = f"MAMBA_WHEEL_INDEX={shlex.quote('file://' + root)}"
    if is_on_an_index(version):
        install = f"{index} python -m pip install {requirement(version)}"
    else:  # the target installs a copy of the checkout, its resolver taking the wheel from the mirror
        install = in_a_checkout(f"{index} python -m pip install --no-build-isolation .", version)
    print(f"index for this target at {root}: {install}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``index``, ``resolve`` and ``mirror`` to ``python -m build_matrix``'s subparsers."""
    p = subparsers.add_parser(
        "index", help="write the PEP 503 wheel index and manifest.json for a folder of wheels"
    )
    p.add_argument("dir", help="the index folder (wheels under it are gathered and placed)")
    p.add_argument("--add", nargs="*", metavar="WHEEL", help="wheel files to copy into the index")
    p.add_argument(
        "--pin",
        metavar="FILE",
        help="also write the sha256 pins (release: mamba_ssm/_install/pinned_hashes.json)",
    )
    p.add_argument(
        "--pin-sdist",
        nargs="*",
        metavar="SDIST",
        help="add the pins as mamba_ssm/_install/pinned_hashes.json to these .tar.gz sdists",
    )
    p.add_argument(
        "--allow-unrepaired",
        action="store_true",
        help="accept linux_* wheels that auditwheel did not repair (a local test index only)",
    )
    p.set_defaults(func=cmd_index)

    p = subparsers.add_parser("resolve", help="show which prebuilt wheel the install would choose, and why")
    p.add_argument(
        "--index", help="wheel index URL or path (default: MAMBA_WHEEL_INDEX or the release index)"
    )
    p.add_argument(
        "--explain",
        action="store_true",
        help="print (on stderr) every candidate and rejection with its reason, and the torches/targets the index's wheels serve",
    )
    p.add_argument(
        "--env-json",
        metavar="FILE",
        help="resolve for a declared target (Environment JSON) instead of this one",
    )
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--fetch", action="store_true", help="also download and verify the chosen wheel into the cache"
    )
    p.add_argument("--version", help="the mamba-ssm version to match (default: this checkout's)")
    p.add_argument("--no-pins", action="store_true", help="ignore pinned_hashes.json (development)")
    p.add_argument(
        "--print-env",
        action="store_true",
        help="print the detected (or declared) environment as JSON and exit",
    )
    p.set_defaults(func=cmd_resolve)

    p = subparsers.add_parser(
        "mirror", help="copy the wheel(s) a declared target needs into a local index (air-gapped)"
    )
    p.add_argument(
        "--for", dest="for_env", required=True, metavar="ENV.json", help="the target (Environment JSON)"
    )
    p.add_argument("--to", required=True, metavar="DIR", help="the mirror folder")
    p.add_argument("--index", help="source index (default: MAMBA_WHEEL_INDEX or the release index)")
    p.add_argument("--all", action="store_true", help="every compatible wheel, not only the best")
    p.add_argument("--version", help="the mamba-ssm version (default: this checkout's)")
    p.add_argument("--no-pins", action="store_true", help="ignore pinned_hashes.json")
    p.set_defaults(func=cmd_mirror)


def main(argv: Optional[List[str]] = None) -> int:
    """Standalone entry (``python -m build_matrix.resolver_cli``), until cli.py wires it in."""
    parser = argparse.ArgumentParser(prog="python -m build_matrix")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
