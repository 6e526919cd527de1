"""setup.py's entry into the resolver (docs/architecture.md, "setup.py and the resolver").

setup.py imports this module from the source tree without running ``mamba_ssm/__init__.py`` (its
``load_private``; no torch is imported in the build process)::

    outcome = hook.resolve_prebuilt(version)   # Outcome(wheel_path, deferred, message, status, record, ...)
    ...
    hook.record(outcome, final_mode, install_id=id, build=note)

When MAMBA_SKIP_CUDA_BUILD / MAMBA_FORCE_BUILD bypass the resolver, ``hook.requested(version, reason)``
gives the Outcome to record instead. ``install_id`` is the id setup.py also writes into the wheel's
dist-info (``record.INSTALL_ID_FILE``), so doctor can tell this install's record from an earlier one's.

These three functions are ``mamba_ssm._build.plan.SetupHook``, the interface setup.py's plan asks (a
test passes a stand-in of its own instead of this module).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass

from .._gpus import Gpu
from .environment import Environment
from .record import (
    BuildNote,
    InstallIdentity,
    InstallMode,
    InstallRecord,
    ResolutionStatus,
    requested_message,
    write_record,
)
from .relabel import relabel_wheel
from .resolve import resolve

__all__ = ["Outcome", "Target", "record", "requested", "resolve_prebuilt"]


@dataclass(frozen=True)
class Target:
    """What setup.py's source fallback needs of the target (it builds against the target's torch, for
    its visible GPUs): its Python, torch folder and version, and the visible GPUs."""

    python_version: str
    executable: str | None = None
    prefix: str | None = None
    torch_path: str | None = None
    torch_version: str | None = None
    gpus: tuple[Gpu, ...] = ()

    @classmethod
    def of(cls, env: Environment) -> Target:
        """The target of a detected environment."""
        torch = env.torch
        return cls(
            python_version=env.python_version,
            executable=env.executable,
            prefix=env.prefix,
            torch_path=torch.path if torch else None,
            torch_version=torch.version if torch else None,
            gpus=tuple(env.gpus),
        )


@dataclass(frozen=True)
class Outcome:
    """What setup.py does next.

    ``wheel_path``: a verified wheel in the resolver's cache to hand to pip unchanged, or None. Its
    package files are the index wheel's; its version is the sdist's (``relabel.py`` says why pip needs
    that; ``MAMBA_PREBUILT_LABEL=keep`` keeps the index wheel's local label instead). ``deferred``: torch
    is absent from the target (installed by the same command): build the pure-Python wheel, kernels
    deferred. ``message``: one paragraph (what was looked for, the nearest candidates and why they were
    rejected, what to do). ``record``: the install record so far (``final_mode`` is added by
    :func:`record`); ``prefix``: the target's ``sys.prefix``, which keys the record; ``target``: the
    target for a source build (None when detection failed).
    """

    wheel_path: str | None
    deferred: bool
    message: str
    status: ResolutionStatus
    record: InstallRecord
    prefix: str | None = None
    target: Target | None = None


def _say(text: str) -> None:
    print(f"[mamba-ssm resolver] {text}", file=sys.stderr, flush=True)


def resolve_prebuilt(version: str) -> Outcome:
    """Resolve, download and verify the prebuilt wheel of ``version`` for the target environment.

    Never raises: any fault (no network, a bad index, an unexpected bug) becomes an Outcome without a
    wheel whose message says what happened and what to do.
    """
    try:
        res = resolve(version, log=_say)
    except Exception as exc:  # noqa: BLE001 - the install must go on to its fallback, with the reason
        msg = f"The prebuilt-wheel resolver failed unexpectedly ({type(exc).__name__}: {exc})."
        _say(msg)
        rec = InstallRecord(package_version=version, status=ResolutionStatus.ERROR, message=msg)
        return Outcome(None, False, msg, ResolutionStatus.ERROR, rec)
    _say(res.message)
    rec = res.record()
    prefix = res.env.prefix if res.env else None
    target = Target.of(res.env) if res.env else None
    wheel = res.wheel_path
    if wheel and res.entry and os.environ.get("MAMBA_PREBUILT_LABEL", "sdist").strip().lower() != "keep":
        # pip refuses a cached wheel whose version differs from the sdist's (see relabel.py)
        try:
            wheel = relabel_wheel(
                wheel, version, os.path.join(os.path.dirname(wheel), "as-" + version), res.entry.sha256
            )
        except Exception as exc:  # noqa: BLE001 - no wheel then, with the reason
            msg = f"{res.message} Could not give the wheel the sdist's version ({type(exc).__name__}: {exc})."
            _say(msg)
            failed = dataclasses.replace(rec, message=msg)
            return Outcome(None, False, msg, ResolutionStatus.ERROR, failed, prefix, target)
        if wheel != res.wheel_path:
            _say(
                f"handing pip {os.path.basename(wheel)}: the index wheel with the sdist's version {version} "
                f"(package files unchanged; MAMBA_PREBUILT_LABEL=keep hands over the index wheel as is)"
            )
        rec = dataclasses.replace(rec, installed_wheel=os.path.basename(wheel))
    return Outcome(
        wheel, res.status is ResolutionStatus.DEFERRED, res.message, res.status, rec, prefix, target
    )


def requested(version: str, reason: str) -> Outcome:
    """The Outcome for a build whose mode the user asked for (``MAMBA_SKIP_CUDA_BUILD=TRUE``: the
    pure-Python wheel, ``MAMBA_FORCE_BUILD=TRUE``: a source build): the resolver did not run. ``reason``
    names the variable(s); it becomes the record's message. Never raises."""
    message = requested_message(reason)
    rec = InstallRecord(
        package_version=version, status=ResolutionStatus.REQUESTED, requested=reason, message=message
    )
    return Outcome(None, False, message, ResolutionStatus.REQUESTED, rec)


def record(
    outcome: Outcome,
    final_mode: InstallMode,
    install_id: str | None = None,
    build: BuildNote | None = None,
    message: str | None = None,
) -> str | None:
    """Store the install record with what setup.py finally did (``final_mode``) where doctor finds it.

    Args:
        outcome: what :func:`resolve_prebuilt` or :func:`requested` gave.
        final_mode: ``prebuilt``, ``deferred``, ``source``, ``python`` or ``error``.
        install_id: the id setup.py writes into the wheel's dist-info (doctor matches the two).
        build: what setup.py built when no prebuilt wheel was used.
        message: replaces the outcome's message (e.g. with why the build failed).

    Returns the path, or None when it could not be written (never raises: a read-only home must not
    fail the install).
    """
    if message is None:
        message = outcome.record.message
        if final_mode is InstallMode.SOURCE and _WHAT_TO_DO in message:
            # the resolver's advice was for an install without kernels; the fallback built them
            message = message.split(_WHAT_TO_DO, 1)[0].rstrip() + " " + _BUILT_INSTEAD
    try:
        rec = dataclasses.replace(
            outcome.record,
            final_mode=final_mode,
            install=InstallIdentity(install_id=install_id) if install_id else outcome.record.install,
            build=build or outcome.record.build,
            message=message,
        )
        path = write_record(rec, outcome.prefix)
    except Exception as exc:  # noqa: BLE001 - the install goes on without a record
        _say(f"could not record the decision ({type(exc).__name__}: {exc})")
        return None
    if final_mode is InstallMode.ERROR:  # nothing was installed: the record says so, and so does this line
        _say(
            f"this failed attempt (nothing installed) is recorded in {path} (shown by python -m mamba_ssm doctor)"
        )
    else:
        what = (
            "install" if outcome.status is ResolutionStatus.REQUESTED else "decision"
        )  # requested: none made
        _say(f"{what} recorded in {path} (shown by python -m mamba_ssm doctor)")
    return path


#: Where the resolver's message turns to advice (``_advice.resolver_*_fix``).
_WHAT_TO_DO = "What to do:"
_BUILT_INSTEAD = (
    "The install went on with a source build of the kernels (the fallback), so nothing is left to do."
)
