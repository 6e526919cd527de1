"""What one setup.py run builds: the pure-Python wheel (``MAMBA_SKIP_CUDA_BUILD``), a source build
(``MAMBA_FORCE_BUILD``, build_ext, develop), or, for a wheel, what the resolver hook
(``mamba_ssm/_install/setup_hook.py``) finds: a prebuilt wheel, else ``MAMBA_FALLBACK``. The hook's
``record`` keeps the decision for ``mamba-ssm doctor``.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import types
from dataclasses import dataclass
from typing import Optional

from .config import BuildConfig, probe_torch, resolve_config
from .errors import PreflightError
from .settings import PACKAGE, ROOT, Settings, package_version


def load_file(path: str, name: str) -> types.ModuleType:
    """Import the Python file ``path`` as module ``name`` (registered in ``sys.modules`` first, so
    dataclasses and pickling see it; removed again when it fails). Raises what the file raises."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def load_setup_hook(env) -> Optional[types.ModuleType]:
    """``mamba_ssm/_install/setup_hook.py`` (or the file ``MAMBA_SETUP_HOOK`` names), loaded without
    ``mamba_ssm/__init__.py``; None when absent. ``PreflightError`` when the override does not exist."""
    override = Settings.from_env(env).setup_hook
    if override:
        if not os.path.isfile(override):
            raise PreflightError(f"MAMBA_SETUP_HOOK={override!r} does not exist; unset it or point it at a file")
        return load_file(override, "_mamba_ssm_setup_hook_override")
    if not os.path.isfile(os.path.join(ROOT, PACKAGE, "_install", "setup_hook.py")):
        return None
    return importlib.import_module(".._install.setup_hook", __package__)


@dataclass
class Plan:
    """What this setup.py run builds: ``mode`` is ``prebuilt``, ``source``, ``python`` or ``metadata``."""

    mode: str
    config: Optional[BuildConfig] = None
    prebuilt_wheel: Optional[str] = None
    outcome: object = None
    hook: Optional[types.ModuleType] = None
    reason: str = ""
    final_mode: str = ""  # what the resolver records: prebuilt | deferred | source | python | error
    install_id: str = ""  # written into the wheel's dist-info and the record (doctor matches them)

    def __post_init__(self):
        self.final_mode = self.final_mode or self.mode


def _gpu_unservable(outcome) -> list:
    """The resolver's word that no build for the target's torch can run on its GPU (see
    ``mamba_ssm/_install/fixes.gpu_unservable``), from the hook's Outcome; [] when absent."""
    details = getattr(outcome, "details", None)
    record = details.get("record") if isinstance(details, dict) else None
    found = record.get("gpu_unservable") if isinstance(record, dict) else None
    return [str(x) for x in found] if isinstance(found, list) else []


def _target_of(outcome) -> Optional[dict]:
    details = getattr(outcome, "details", None)
    target = details.get("target") if isinstance(details, dict) else None
    return target if isinstance(target, dict) else None


def use_target_torch(target: Optional[dict]) -> str:
    """Make the target environment's torch the one this build imports: under pip's build isolation
    this interpreter sees no torch (or one pip put into the build env, never the user's). The target's
    site-packages is appended to ``sys.path`` (prepended when another torch would win), so the build
    tools stay the isolated env's. Returns a note for the plan's reason ("" when nothing changed).

    Raises ``PreflightError`` when the target's torch cannot be imported here (another Python version).
    """
    if not target or not target.get("torch_path"):
        return ""
    wanted = os.path.realpath(str(target["torch_path"]))
    site = os.path.dirname(wanted)
    version = str(target.get("python_version") or "")
    if tuple(int(x) for x in version.split(".")[:2] if x.isdigit()) != tuple(sys.version_info[:2]):
        raise PreflightError(
            f"the target's Python {version or '?'} is not this build's {sys.version.split()[0]}, so its torch "
            f"({wanted}) cannot be built against here. Fix: install from the target with "
            f"--no-build-isolation (torch, setuptools and packaging installed there)")
    loaded = sys.modules.get("torch")
    if loaded is not None:
        here = os.path.realpath(os.path.dirname(getattr(loaded, "__file__", "") or ""))
        if here != wanted:
            raise PreflightError(f"this build process already imported the torch at {here}, not the target's "
                                 f"({wanted})")
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
    named = " ".join(x for x in ("torch", target.get("torch_version")) if x)
    return f"against the target's {named} ({site}), not the build env's"


def auto_targets(env, target: Optional[dict]):
    """``(env, cpu_only, note)`` for the auto fallback: pip hides the build's output, so build only for
    the visible GPUs' archs (``MAMBA_CUDA_ARCHS`` / ``PYTORCH_ROCM_ARCH`` set for them), the CPU kernel
    alone where none is visible; archs the user set are kept."""
    if target is None:
        return env, False, ""
    if any(str(env.get(k, "")).strip() for k in ("MAMBA_CUDA_ARCHS", "TORCH_CUDA_ARCH_LIST", "PYTORCH_ROCM_ARCH",
                                                 "HIP_ARCHITECTURES")):
        return env, False, "archs as set in the environment"
    gpus = [g for g in target.get("gpus") or [] if isinstance(g, dict)]
    caps = sorted({str(g["capability"]) for g in gpus if g.get("vendor") == "nvidia" and g.get("capability")})
    gfx = sorted({str(g["gfx"]) for g in gpus if g.get("vendor") == "amd" and g.get("gfx")})
    if caps:
        return dict(env, MAMBA_CUDA_ARCHS=";".join(caps)), False, f"for the visible GPU arch(s) only: {', '.join(caps)}"
    if gfx:
        return dict(env, PYTORCH_ROCM_ARCH=";".join(gfx)), False, f"for the visible GPU arch(s) only: {', '.join(gfx)}"
    return env, True, "the CPU kernel alone (no GPU visible)"


def _fallback(env, outcome_msg: str, root: str = ROOT, outcome=None) -> Plan:
    choice = Settings.from_env(env).fallback_choice()
    if choice == "error":
        raise PreflightError(
            (outcome_msg + " " if outcome_msg else "")
            + "MAMBA_FALLBACK=error: no prebuilt kernel wheel and no fallback allowed. Fix: set "
            "MAMBA_FALLBACK=source (build from source) or MAMBA_FALLBACK=python (pure-Python package)."
        )
    if choice == "python":
        return Plan("python", reason="MAMBA_FALLBACK=python")
    unservable = _gpu_unservable(outcome)
    if choice == "auto" and unservable:  # a long build of kernels the GPU cannot run: pure Python, with why
        return Plan("python", reason="MAMBA_FALLBACK=auto: no source build, " + " ".join(unservable))
    target = _target_of(outcome)
    try:
        against = use_target_torch(target)
    except PreflightError as e:
        if choice == "source":
            raise
        return Plan("python", reason=f"MAMBA_FALLBACK=auto: the source build cannot run here: {e}")
    if choice == "source":  # asked for: built (its CPU kernel still serves CPU tensors), with the warning
        warning = (" (warning: " + " ".join(unservable) + ")") if unservable else ""
        notes = "; ".join(x for x in (against,) if x)
        return Plan("source", config=resolve_config(env, root=root),
                    reason="MAMBA_FALLBACK=source" + (f": {notes}" if notes else "") + warning)
    build_env, cpu_only, archs_note = auto_targets(env, target)
    try:
        notes = "; ".join(x for x in ("preflight passed", against, archs_note) if x)
        return Plan("source", config=resolve_config(build_env, root=root, cpu_only=cpu_only),
                    reason=f"MAMBA_FALLBACK=auto: {notes}")
    except PreflightError as e:
        return Plan("python", reason=f"MAMBA_FALLBACK=auto: the source build cannot run here: {e}")
    except Exception as e:  # noqa: BLE001 - auto never fails the install over its own probing
        return Plan("python", reason=f"MAMBA_FALLBACK=auto: the source build cannot run here: probing it failed "
                                     f"({type(e).__name__}: {e})")


BOTH_FLAGS_WARNING = (
    "both MAMBA_FORCE_BUILD=TRUE and MAMBA_SKIP_CUDA_BUILD=TRUE are set: MAMBA_SKIP_CUDA_BUILD wins, so "
    "this builds the pure-Python wheel without kernels and nothing is compiled or downloaded. To build "
    "the kernels from source, unset MAMBA_SKIP_CUDA_BUILD; to silence this, unset MAMBA_FORCE_BUILD."
)


def plan_build(kind: str, env=None, root: str = ROOT) -> Plan:
    """Decide what to build for a command ``kind`` (``classify_commands``). Raises ``PreflightError``."""
    env = os.environ if env is None else env
    if kind == "metadata":
        return Plan("metadata")
    s = Settings.from_env(env)
    if s.skip_cuda_build:
        reason = "MAMBA_SKIP_CUDA_BUILD=TRUE"
        if s.force_build:
            reason += " (" + BOTH_FLAGS_WARNING + ")"
            print(f"mamba-ssm: warning: {BOTH_FLAGS_WARNING}", file=sys.stderr, flush=True)
        return _requested(Plan("python", reason=reason), kind, env)
    if s.force_build:
        plan = _requested(Plan("source", reason="MAMBA_FORCE_BUILD=TRUE"), kind, env)
        try:
            probe_torch("MAMBA_FORCE_BUILD=TRUE")  # fail at once under build isolation
            plan.config = resolve_config(env, root=root)
        except PreflightError as e:
            details = getattr(plan.outcome, "details", None)
            if isinstance(details, dict) and isinstance(details.get("record"), dict):
                details["record"]["message"] = f"{details['record'].get('message', '')} The build failed: {e}"
            record_decision(plan.hook, plan.outcome, "error")
            raise
        return plan
    if kind == "source":
        return Plan("source", config=resolve_config(env, root=root), reason=f"setup.py {kind} command")
    if kind == "editable":
        return _fallback(env, "", root)
    hook = load_setup_hook(env)
    if hook is None:
        plan = _fallback(env, "", root)
        plan.reason += " (no resolver hook in this checkout)"
        return plan
    outcome = hook.resolve_prebuilt(package_version(env))
    wheel = getattr(outcome, "wheel_path", None)
    if wheel:
        if not os.path.isfile(wheel):
            raise PreflightError(f"the resolver returned {wheel!r}, which does not exist")
        plan = Plan("prebuilt", prebuilt_wheel=os.fspath(wheel), reason="prebuilt wheel found")
    elif getattr(outcome, "deferred", False):
        plan = Plan("python", reason="deferred: torch is being installed by the same command",
                    final_mode="deferred")
    else:
        try:
            plan = _fallback(env, str(getattr(outcome, "message", "") or ""), root, outcome)
        except PreflightError:
            record_decision(hook, outcome, "error")
            raise
    plan.outcome, plan.hook = outcome, hook
    return plan


def _requested(plan: Plan, kind: str, env) -> Plan:
    """A wheel whose mode the user asked for (SKIP / FORCE) is recorded too, through the hook's
    ``requested`` Outcome (doctor must not show an earlier install's decision for it)."""
    if kind != "wheel":
        return plan
    try:
        hook = load_setup_hook(env)
    except PreflightError:
        return plan
    make = getattr(hook, "requested", None) if hook is not None else None
    if make is not None:
        plan.hook, plan.outcome = hook, make(package_version(env), plan.mode, plan.reason)
    return plan


def record_decision(hook, outcome, final_mode: str, install_id: str = "") -> None:
    """``hook.record(outcome, final_mode[, install_id=])`` when the hook has ``record`` (older hooks
    take no install id); nothing otherwise."""
    record = getattr(hook, "record", None) if hook is not None else None
    if record is None:
        return
    try:
        takes_id = "install_id" in inspect.signature(record).parameters
    except (TypeError, ValueError):
        takes_id = False
    if takes_id:
        record(outcome, final_mode, install_id=install_id or None)
    else:
        record(outcome, final_mode)
