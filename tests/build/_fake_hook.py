"""A stand-in for the resolver hook (``mamba_ssm/_install/setup_hook.py``) that the planning tests pass
to ``mamba_ssm._build.plan.plan_build``: the whole ``SetupHook`` interface, with answers set by the test
instead of a resolver run. Its outcomes are the real ``Outcome`` records."""

from __future__ import annotations

from mamba_ssm._install.record import InstallRecord, ResolutionStatus, requested_message
from mamba_ssm._install.setup_hook import Outcome

#: What the stand-in says when it has no wheel.
NOTHING_FOUND = "looked for cu13torch2.14cxx11abiTRUE: nothing in the index"


class FakeHook:
    """``resolve_prebuilt`` answers with ``wheel`` (None: nothing found), deferred when ``deferred``.

    ``calls`` lists each resolver and record call (``{"call": "resolve_prebuilt", "version": ...}``,
    ``{"call": "record", "final_mode": ...}``) in order; ``requested`` calls (a SKIP / FORCE build,
    which asks no resolver) go to ``requested_reasons``.
    """

    def __init__(self, wheel: str | None = None, deferred: bool = False) -> None:
        self.wheel = wheel
        self.deferred = deferred
        self.calls: list[dict[str, str]] = []
        self.requested_reasons: list[str] = []

    def resolve_prebuilt(self, version: str) -> Outcome:
        self.calls.append({"call": "resolve_prebuilt", "version": version})
        if self.wheel:
            status = ResolutionStatus.PREBUILT
        elif self.deferred:
            status = ResolutionStatus.DEFERRED
        else:
            status = ResolutionStatus.NO_CANDIDATE
        rec = InstallRecord(status=status, package_version=version, message=NOTHING_FOUND)
        return Outcome(self.wheel, self.deferred, NOTHING_FOUND, status, rec)

    def requested(self, version: str, reason: str) -> Outcome:
        self.requested_reasons.append(reason)
        message = requested_message(reason)
        rec = InstallRecord(
            status=ResolutionStatus.REQUESTED, package_version=version, requested=reason, message=message
        )
        return Outcome(None, False, message, ResolutionStatus.REQUESTED, rec)

    def record(self, outcome, final_mode, install_id=None, build=None, message=None):
        self.calls.append({"call": "record", "final_mode": str(final_mode)})
