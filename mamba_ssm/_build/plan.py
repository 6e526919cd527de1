"""What one setup.py run builds: the pure-Python wheel (``MAMBA_SKIP_CUDA_BUILD``), a source build
(``MAMBA_FORCE_BUILD``, build_ext, develop), or, for a wheel, what the resolver hook finds: a prebuilt
wheel, else ``MAMBA_FALLBACK``. The hook (:class:`SetupHook`: setup.py passes
``mamba_ssm/_install/setup_hook.py``, a test its stand-in) also records the decision for
``mamba-ssm doctor``.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import shlex
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Protocol

from .._compat.textenum import TextEnum
from .._install.record import BuildNote, InstallMode
from .config import BuildConfig, probe_torch, resolve_config
from .errors import PreflightError
from .settings import ROOT, CommandKind, Fallback, Settings, package_version

if TYPE_CHECKING:
    from .._install.setup_hook import Outcome, Target

__all__ = [
    "BOTH_FLAGS_WARNING",
    "BuildMode",
    "BuildPlan",
    "SetupHook",
    "auto_targets",
    "plan_build",
    "record_decision",
    "use_target_torch",
]


class SetupHook(Protocol):
    """The resolver hook a wheel build asks: ``mamba_ssm/_install/setup_hook.py`` (the module itself
    is the implementation; setup.py passes it), or a test's stand-in. Its functions' documentation is
    there."""

    def resolve_prebuilt(self, version: str) -> Outcome:
        """Find, download and verify the prebuilt wheel of ``version`` for the target (never raises)."""
        ...

    def requested(self, version: str, reason: str) -> Outcome:
        """The outcome to record for a build mode the user asked for (``reason``: the variable)."""
        ...

    def record(
        self,
        outcome: Outcome,
        final_mode: InstallMode,
        install_id: str | None = None,
        build: BuildNote | None = None,
        message: str | None = None,
    ) -> str | None:
        """Store the install record with what setup.py finally did; its path, None if not written."""
        ...


if TYPE_CHECKING:  # the real hook module implements the protocol (mypy checks the module against it)
    from .._install import setup_hook as _setup_hook

    _REAL_HOOK: SetupHook = _setup_hook


class BuildMode(TextEnum):
    """What a setup.py run builds."""

    PREBUILT = "prebuilt"  # hands over the resolver's verified wheel
    SOURCE = "source"  # compiles mamba_ssm._C
    PYTHON = "python"  # the pure-Python wheel
    METADATA = "metadata"  # nothing (egg_info, sdist, --version, ...)


@dataclass(frozen=True)
class BuildPlan:
    """What this setup.py run builds, why, and what the resolver hook said.

    ``final_mode`` is what the install record gets: the mode's own unless given (``deferred`` for a
    pure-Python wheel built because torch was not there yet; None for a metadata run). ``hook`` records the
    decision (None: nothing is recorded).
    """

    mode: BuildMode
    config: BuildConfig | None = None
    prebuilt_wheel: str | None = None
    outcome: Outcome | None = None
    hook: SetupHook | None = None
    reason: str = ""
    final_mode: InstallMode | None = None

    def __post_init__(self) -> None:
        if self.final_mode is None:  # the mode's own (a frozen dataclass sets its derived field so)
            object.__setattr__(self, "final_mode", InstallMode.lookup(str(self.mode)))


def use_target_torch(target: Target | None) -> str:
    """Make the target environment's torch the one this build imports: under pip's build isolation
    this interpreter sees no torch (or one pip put into the build env, never the user's). The target's
    site-packages is appended to ``sys.path`` (prepended when another torch would win), so the build
    tools stay the isolated env's. Returns a note for the plan's reason ("" when nothing changed).

    Raises ``PreflightError`` when the target's torch cannot be imported here (another Python version).
    """
    if target is None or not target.torch_path:
        return ""
    wanted = os.path.realpath(target.torch_path)
    site = os.path.dirname(wanted)
    version = target.python_version
    if tuple(int(x) for x in version.split(".")[:2] if x.isdigit()) != tuple(sys.version_info[:2]):
        raise PreflightError(
            f"the target's Python {version or '?'} is not this build's {sys.version.split()[0]}, so its torch "
            f"({wanted}) cannot be built against here. Fix: install from the target with "
            f"--no-build-isolation (torch, setuptools and packaging installed there)"
        )
    loaded = sys.modules.get("torch")
    if loaded is not None:
        here = os.path.realpath(os.path.dirname(getattr(loaded, "__file__", "") or ""))
        if here != wanted:
            raise PreflightError(
                f"this build process already imported the torch at {here}, not the target's ({wanted})"
            )
        return ""
    spec = importlib.util.find_spec("torch")
    current = os.path.realpath(os.path.dirname(spec.origin)) if spec is not None and spec.origin else None
    if current == wanted:
        return ""
    if current is not None:
        sys.path.insert(0, site)  # pip put a torch of its own into the build env: the target's wins
    else:
        sys.path.append(site)
    importlib.invalidate_caches()
    named = " ".join(x for x in ("torch", target.torch_version) if x)
    return f"against the target's {named} ({site}), not the build env's"


_ARCH_VARIABLES = ("MAMBA_CUDA_ARCHS", "TORCH_CUDA_ARCH_LIST", "PYTORCH_ROCM_ARCH", "HIP_ARCHITECTURES")


def auto_targets(env: Mapping[str, str], target: Target | None) -> tuple[Mapping[str, str], bool, str]:
    """``(env, cpu_only, note)`` for the auto fallback: pip hides the build's output, so build only for
    the visible GPUs' archs (``MAMBA_CUDA_ARCHS`` / ``PYTORCH_ROCM_ARCH`` set for them), the CPU kernel
    alone where none is visible; archs the user set are kept."""
    if target is None:
        return env, False, ""
    if any(str(env.get(k, "")).strip() for k in _ARCH_VARIABLES):
        return env, False, "archs as set in the environment"
    caps = sorted({g.capability for g in target.gpus if g.vendor == "nvidia" and g.capability})
    gfx = sorted({g.gfx for g in target.gpus if g.vendor == "amd" and g.gfx})
    if caps:
        note = f"for the visible GPU arch(s) only: {', '.join(caps)}"
        return dict(env, MAMBA_CUDA_ARCHS=";".join(caps)), False, note
    if gfx:
        note = f"for the visible GPU arch(s) only: {', '.join(gfx)}"
        return dict(env, PYTORCH_ROCM_ARCH=";".join(gfx)), False, note
    return env, True, "the CPU kernel alone (no GPU visible)"


def _fallback(
    env: Mapping[str, str], outcome_msg: str, root: str = ROOT, outcome: Outcome | None = None
) -> BuildPlan:
    choice = Settings.from_env(env).fallback_choice()
    if choice is Fallback.ERROR:
        raise PreflightError(
            (outcome_msg + " " if outcome_msg else "")
            + "MAMBA_FALLBACK=error: no prebuilt kernel wheel and no fallback allowed. Fix: set "
            "MAMBA_FALLBACK=source (build from source) or MAMBA_FALLBACK=python (pure-Python package)."
        )
    if choice is Fallback.PYTHON:
        return BuildPlan(BuildMode.PYTHON, reason="MAMBA_FALLBACK=python")
    unservable = list(outcome.record.gpu_unservable) if outcome is not None else []
    if (
        choice is Fallback.AUTO and unservable
    ):  # a long build of kernels the GPU cannot run: pure Python, with why
        return BuildPlan(
            BuildMode.PYTHON, reason="MAMBA_FALLBACK=auto: no source build, " + " ".join(unservable)
        )
    target = outcome.target if outcome is not None else None
    try:
        against = use_target_torch(target)
    except PreflightError as e:
        if choice is Fallback.SOURCE:
            raise
        return BuildPlan(
            BuildMode.PYTHON, reason=f"MAMBA_FALLBACK=auto: the source build cannot run here: {e}"
        )
    if (
        choice is Fallback.SOURCE
    ):  # asked for: built (its CPU kernel still serves CPU tensors), with the warning
        warning = (" (warning: " + " ".join(unservable) + ")") if unservable else ""
        return BuildPlan(
            BuildMode.SOURCE,
            config=resolve_config(env, root=root),
            reason="MAMBA_FALLBACK=source" + (f": {against}" if against else "") + warning,
        )
    build_env, cpu_only, archs_note = auto_targets(env, target)
    notes = "; ".join(x for x in ("preflight passed", against, archs_note) if x)
    try:
        return BuildPlan(
            BuildMode.SOURCE,
            config=resolve_config(build_env, root=root, cpu_only=cpu_only),
            reason=f"MAMBA_FALLBACK=auto: {notes}",
        )
    except PreflightError as e:
        return BuildPlan(
            BuildMode.PYTHON, reason=f"MAMBA_FALLBACK=auto: the source build cannot run here: {e}"
        )
    except Exception as e:  # noqa: BLE001 - auto never fails the install over its own probing
        return BuildPlan(
            BuildMode.PYTHON,
            reason=f"MAMBA_FALLBACK=auto: the source build cannot run here: probing it failed "
            f"({type(e).__name__}: {e})",
        )


BOTH_FLAGS_WARNING = (
    "both MAMBA_FORCE_BUILD=TRUE and MAMBA_SKIP_CUDA_BUILD=TRUE are set: MAMBA_SKIP_CUDA_BUILD wins, so "
    "this builds the pure-Python wheel without kernels and nothing is compiled or downloaded. To build "
    "the kernels from source, unset MAMBA_SKIP_CUDA_BUILD; to silence this, unset MAMBA_FORCE_BUILD."
)


def plan_build(
    kind: CommandKind | str,
    env: Mapping[str, str] | None = None,
    root: str = ROOT,
    *,
    hook: SetupHook | None,
) -> BuildPlan:
    """Decide what to build for a command ``kind`` (:func:`.settings.classify_commands`).

    ``hook`` is the resolver a wheel build asks and whose ``record`` keeps the decision (setup.py passes
    ``mamba_ssm/_install/setup_hook.py``); None: no resolver, a wheel goes to ``MAMBA_FALLBACK`` and
    nothing is recorded.

    Raises:
        PreflightError: the build cannot proceed (the message names the value and the fix).
    """
    env = os.environ if env is None else env
    kind = CommandKind.parse(str(kind), "setup.py command kind")
    if kind is CommandKind.METADATA:
        return BuildPlan(BuildMode.METADATA)
    s = Settings.from_env(env)
    s.check_flags()  # a misspelt boolean fails here, before the resolver or a build runs
    if s.skip_cuda_build:
        reason = _as_set(env, "MAMBA_SKIP_CUDA_BUILD")
        if s.force_build:
            reason += " (" + BOTH_FLAGS_WARNING + ")"
            print(f"mamba-ssm: warning: {BOTH_FLAGS_WARNING}", file=sys.stderr, flush=True)
        return _requested(BuildPlan(BuildMode.PYTHON, reason=reason), kind, env, hook)
    if s.force_build:
        plan = _requested(
            BuildPlan(BuildMode.SOURCE, reason=_as_set(env, "MAMBA_FORCE_BUILD")), kind, env, hook
        )
        try:
            probe_torch("MAMBA_FORCE_BUILD=TRUE")  # fail at once under build isolation
            return dataclasses.replace(plan, config=resolve_config(env, root=root))
        except PreflightError as e:
            message = f"{plan.outcome.message} The build failed: {e}" if plan.outcome is not None else None
            record_decision(plan.hook, plan.outcome, InstallMode.ERROR, message=message)
            raise
    if kind is CommandKind.SOURCE:
        return BuildPlan(
            BuildMode.SOURCE, config=resolve_config(env, root=root), reason=f"setup.py {kind} command"
        )
    if kind is CommandKind.EDITABLE:
        return _fallback(env, "", root)
    if hook is None:
        plan = _fallback(env, "", root)
        return dataclasses.replace(plan, reason=plan.reason + " (no resolver hook given)")
    outcome = hook.resolve_prebuilt(package_version(env))
    if outcome.wheel_path:
        if not os.path.isfile(outcome.wheel_path):
            raise PreflightError(f"the resolver returned {outcome.wheel_path!r}, which does not exist")
        plan = BuildPlan(
            BuildMode.PREBUILT, prebuilt_wheel=os.fspath(outcome.wheel_path), reason="prebuilt wheel found"
        )
    elif outcome.deferred:
        plan = BuildPlan(
            BuildMode.PYTHON,
            reason="deferred: torch is being installed by the same command",
            final_mode=InstallMode.DEFERRED,
        )
    else:
        try:
            plan = _fallback(env, outcome.message or "", root, outcome)
        except PreflightError:
            record_decision(hook, outcome, InstallMode.ERROR)
            raise
    return dataclasses.replace(plan, outcome=outcome, hook=hook)


def _as_set(env: Mapping[str, str], name: str) -> str:
    """``NAME=value`` with the value as the user set it (``MAMBA_FORCE_BUILD=1``), quoted for a shell."""
    return f"{name}={shlex.quote(str(env.get(name, '')).strip())}"


def _requested(
    plan: BuildPlan, kind: CommandKind, env: Mapping[str, str], hook: SetupHook | None
) -> BuildPlan:
    """A wheel whose mode the user asked for (SKIP / FORCE) is recorded too, through the hook's
    ``requested`` Outcome (doctor must not show an earlier install's decision for it)."""
    if kind is not CommandKind.WHEEL or hook is None:
        return plan
    return dataclasses.replace(plan, hook=hook, outcome=hook.requested(package_version(env), plan.reason))


def record_decision(
    hook: SetupHook | None,
    outcome: Outcome | None,
    final_mode: InstallMode,
    install_id: str = "",
    build: BuildNote | None = None,
    message: str | None = None,
) -> None:
    """``hook.record(outcome, final_mode, ...)`` (the install id, the build note and the message as
    given; an empty id is none); nothing without a hook or an outcome."""
    if hook is None or outcome is None:
        return
    hook.record(outcome, final_mode, install_id=install_id or None, build=build, message=message)
