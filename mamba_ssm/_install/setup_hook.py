"""setup.py's entry into the resolver (docs/architecture.md, "setup.py and the resolver").

setup.py loads this file by path (it never imports ``mamba_ssm``: no torch in an isolated build)::

    spec = importlib.util.spec_from_file_location("mamba_setup_hook", "mamba_ssm/_install/setup_hook.py")
    hook = importlib.util.module_from_spec(spec); spec.loader.exec_module(hook)
    outcome = hook.resolve_prebuilt(version)        # Outcome(wheel_path, deferred, message)
    ...
    hook.record(outcome, final_mode, install_id=id) # "prebuilt" | "deferred" | "source" | "python" | "error"

When MAMBA_SKIP_CUDA_BUILD / MAMBA_FORCE_BUILD bypass the resolver, ``hook.requested(version, mode,
reason)`` gives the Outcome to record instead. ``install_id`` is the id setup.py also writes into the
wheel's dist-info (``decision.INSTALL_ID_FILE``), so doctor can tell this install's record from an
earlier one's.

Loaded that way, the rest of ``mamba_ssm/_install`` and ``mamba_ssm/_compat`` are imported under a
private package name whose ``__path__`` is this checkout's ``mamba_ssm`` folder, so
``mamba_ssm/__init__.py`` (and torch) is never executed.
"""

# No ``from __future__ import annotations`` here: setup.py may exec this file without registering it
# in sys.modules, and dataclasses then cannot resolve string annotations.
import importlib
import os
import sys
import types
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

__all__ = ["Outcome", "resolve_prebuilt", "requested", "record"]

_BYPATH = "_mamba_ssm_install_bypath"


def _install_pkg() -> types.ModuleType:
    """The ``_install`` package: the real one when imported normally, else a by-path copy."""
    if __package__:
        return importlib.import_module(__package__)
    if _BYPATH not in sys.modules:
        root = types.ModuleType(_BYPATH)
        root.__path__ = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
        sys.modules[_BYPATH] = root
    return importlib.import_module(_BYPATH + "._install")


def _mod(name: str) -> types.ModuleType:
    return importlib.import_module(f"{_install_pkg().__name__}.{name}")


@dataclass
class Outcome:
    """What setup.py does next.

    ``wheel_path``: a verified wheel in the resolver's cache to hand to pip unchanged, or None. Its
    package files are the index wheel's; its version is the sdist's (``relabel.py`` says why pip needs
    that; ``MAMBA_PREBUILT_LABEL=keep`` keeps the index wheel's local label instead). ``deferred``: torch is absent from the target
    (installed by the same command): build the pure-Python wheel, kernels deferred. ``message``: one
    paragraph (what was looked for, the nearest candidates and why they were rejected, what to do).
    ``status``: ``prebuilt`` | ``deferred`` | ``no-candidate`` | ``error``.
    """

    wheel_path: Optional[str]
    deferred: bool
    message: str
    status: str = "error"
    details: Dict[str, Any] = field(default_factory=dict, repr=False)


def _say(text: str) -> None:
    print(f"[mamba-ssm resolver] {text}", file=sys.stderr, flush=True)


def _target(env: Any) -> Optional[Dict[str, Any]]:
    """What setup.py's source fallback needs of the target (it builds against the target's torch, for
    its visible GPUs): its Python, torch folder and version, and the visible GPUs."""
    if env is None:
        return None
    torch = getattr(env, "torch", None)
    return {
        "python_version": env.python_version,
        "executable": env.executable,
        "prefix": env.prefix,
        "torch_path": getattr(torch, "path", None) if torch else None,
        "torch_version": getattr(torch, "version", None) if torch else None,
        "gpus": [
            {"vendor": g.vendor, "capability": g.capability, "gfx": g.gfx, "name": g.name} for g in env.gpus
        ],
    }


def resolve_prebuilt(version: str) -> Outcome:
    """Resolve, download and verify the prebuilt wheel of ``version`` for the target environment.

    Never raises: any fault (no network, a bad index, an unexpected bug) becomes an Outcome without a
    wheel whose message says what happened and what to do.
    """
    try:
        res = _mod("resolve").resolve(version, log=_say)
    except Exception as exc:  # the install must go on to its fallback, with the reason
        msg = f"The prebuilt-wheel resolver failed unexpectedly ({type(exc).__name__}: {exc})."
        _say(msg)
        return Outcome(
            None,
            False,
            msg,
            "error",
            {"record": {"package_version": version, "status": "error", "message": msg}, "prefix": None},
        )
    _say(res.message)
    details = {
        "record": res.record(),
        "prefix": res.env.prefix if res.env else None,
        "target": _target(res.env),
    }
    wheel = res.wheel_path
    if wheel and os.environ.get("MAMBA_PREBUILT_LABEL", "sdist").strip().lower() != "keep":
        # pip refuses a cached wheel whose version differs from the sdist's (see relabel.py)
        try:
            wheel = _mod("relabel").relabel_wheel(
                wheel, version, os.path.join(os.path.dirname(wheel), "as-" + version), res.entry.sha256
            )
        except Exception as exc:
            msg = f"{res.message} Could not give the wheel the sdist's version ({type(exc).__name__}: {exc})."
            _say(msg)
            details["record"]["message"] = msg
            return Outcome(None, False, msg, "error", details)
        if wheel != res.wheel_path:
            _say(
                f"handing pip {os.path.basename(wheel)}: the index wheel with the sdist's version {version} "
                f"(package files unchanged; MAMBA_PREBUILT_LABEL=keep hands over the index wheel as is)"
            )
        details["record"]["installed_wheel"] = os.path.basename(wheel)
    return Outcome(wheel, res.status == "deferred", res.message, res.status, details)


def requested(version: str, final_mode: str, reason: str) -> Outcome:
    """The Outcome for a build whose mode the user asked for (``MAMBA_SKIP_CUDA_BUILD=TRUE`` ->
    ``python``, ``MAMBA_FORCE_BUILD=TRUE`` -> ``source``): the resolver did not run. ``reason`` names
    the variable(s); it becomes the record's message. Never raises."""
    message = f"{reason}: the resolver was not asked (no prebuilt wheel looked for)."
    rec = {
        "package_version": version,
        "status": "requested",
        "wheel": None,
        "requested": reason,
        "message": message,
    }
    return Outcome(None, False, message, "requested", {"record": rec, "prefix": None})


def record(outcome: Outcome, final_mode: str, install_id: Optional[str] = None) -> Optional[str]:
    """Store the decision (with what setup.py finally did: ``prebuilt``, ``deferred``, ``source``,
    ``python`` or ``error``) where doctor finds it. ``install_id``: the id setup.py writes into the
    wheel's dist-info (doctor matches the two). Returns the path, or None when it could not be
    written (never raises: a read-only home must not fail the install)."""
    try:
        details = getattr(outcome, "details", None) or {}
        rec = dict(
            details.get("record")
            or {"message": getattr(outcome, "message", ""), "status": getattr(outcome, "status", None)}
        )
        rec["final_mode"] = final_mode
        rec.setdefault("message", getattr(outcome, "message", ""))
        if install_id:
            rec["install"] = {"install_id": install_id}
        path = _mod("decision").write_decision(rec, details.get("prefix"))
        _say(f"decision recorded in {path} (shown by python -m mamba_ssm doctor)")
        return path
    except Exception as exc:
        _say(f"could not record the decision ({type(exc).__name__}: {exc})")
        return None
