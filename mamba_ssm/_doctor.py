"""``python -m mamba_ssm doctor``: what is installed, what runs where, and why.

Reports the package version; torch's version, CUDA/HIP version and C++ ABI; the Python interpreter
tag and platform tags (``packaging.tags``); the GPUs with compute capability and the driver version;
the compiled module ``mamba_ssm._C`` (found, path, build info, loaded or not and the exact reason);
the decision the install-time resolver recorded; and the backend each op uses on each device (CPU
and every visible GPU).

Unlike ``import mamba_ssm``, doctor initialises CUDA (to list GPUs and check their coverage).

Exit status: 0 when the compiled backend is active for every device present (and, on each GPU, the
Triton kernels of the ops that have them: SSD, selective_state_update, the norms); 1 when some device
runs on the PyTorch fallback for a fixable reason (the fix is printed; e.g. a GPU without a usable
triton >= 3.0); 2 when broken (torch cannot be imported, a bad ``MAMBA_SSM_BACKEND``, a forced backend
that cannot run).

``--json`` prints one JSON object with these stable top-level keys: ``schema``, ``package``, ``python``,
``torch``, ``gpus``, ``driver``, ``compiled_module``, ``install_decision``, ``backend``, ``devices``,
``problems``, ``status``, ``exit_code`` (and ``checks`` with ``--check``: selective_scan forward and
backward run on every device through the chosen backend, compared with a float64 reference).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
from typing import Any, Dict, List, Optional, Tuple

from mamba_ssm import _version
from mamba_ssm._compat import buildinfo as _buildinfo

__all__ = ["collect", "render_text", "main", "SCHEMA", "EXIT_OK", "EXIT_FALLBACK", "EXIT_BROKEN"]

SCHEMA = 1
EXIT_OK = 0
EXIT_FALLBACK = 1
EXIT_BROKEN = 2
_N_PLATFORM_TAGS = 5


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _python_info() -> Dict[str, Any]:
    info: Dict[str, Any] = {
        "version": platform.python_version(),
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "sysconfig_platform": sysconfig.get_platform(),
        "interpreter_tag": None,
        "most_specific_tag": None,
        "platform_tags": [],
        "abi3_compatible": None,
        "error": None,
    }
    try:
        from packaging import tags  # noqa: PLC0415

        info["interpreter_tag"] = f"{tags.interpreter_name()}{tags.interpreter_version()}"
        sys_tags = list(tags.sys_tags())
        info["most_specific_tag"] = str(sys_tags[0]) if sys_tags else None
        platforms: List[str] = []
        for tag in tags.platform_tags():
            if tag not in platforms:
                platforms.append(tag)
            if len(platforms) >= _N_PLATFORM_TAGS:
                break
        info["platform_tags"] = platforms
        # Can a cp39-abi3 wheel (what our limited-API build ships) be installed here?
        info["abi3_compatible"] = any(t.interpreter == "cp39" and t.abi == "abi3" for t in sys_tags)
    except Exception as exc:  # noqa: BLE001
        info["error"] = f"packaging.tags failed: {_error_text(exc)}"
    return info


def _torch_info() -> Dict[str, Any]:
    info: Dict[str, Any] = {
        "importable": False,
        "version": None,
        "cuda": None,
        "hip": None,
        "cxx11_abi": None,
        "path": None,
        "error": None,
    }
    try:
        import torch  # noqa: PLC0415
    except BaseException as exc:  # noqa: BLE001 - even SystemExit/KeyboardInterrupt-free broken installs
        if isinstance(exc, KeyboardInterrupt):
            raise
        info["error"] = _error_text(exc)
        return info
    info["importable"] = True
    info["version"] = str(torch.__version__)
    info["cuda"] = getattr(torch.version, "cuda", None)
    info["hip"] = getattr(torch.version, "hip", None)
    abi = getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None)
    info["cxx11_abi"] = None if abi is None else bool(abi)
    info["path"] = os.path.dirname(getattr(torch, "__file__", "") or "") or None
    return info


def _nvml_driver_version() -> Optional[str]:
    """The NVIDIA driver version through NVML (libnvidia-ml.so.1), or None when there is no driver."""
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return None
    try:
        init = getattr(lib, "nvmlInit_v2", None) or lib.nvmlInit
        if init() != 0:
            return None
        try:
            buf = ctypes.create_string_buffer(96)
            if lib.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(96)) != 0:
                return None
            return buf.value.decode("ascii", "replace") or None
        finally:
            lib.nvmlShutdown()
    except Exception:  # noqa: BLE001
        return None


def _nvidia_smi_driver_version() -> Optional[str]:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        out = subprocess.run(
            [exe, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return lines[0] if out.returncode == 0 and lines else None


def _cuda_driver_api_version(torch_ok: bool) -> Optional[str]:
    """The CUDA version the installed driver supports (cuDriverGetVersion, e.g. "13.0"), or None."""
    if not torch_ok:
        return None
    try:
        import torch  # noqa: PLC0415

        if not torch.version.cuda or not torch.cuda.is_available():
            return None
        value = int(torch._C._cuda_getDriverVersion())
    except Exception:  # noqa: BLE001
        return None
    return f"{value // 1000}.{(value % 1000) // 10}" if value > 0 else None


def _driver_info(torch_ok: bool = False) -> Dict[str, Any]:
    version = _nvml_driver_version()
    source = "nvml" if version else None
    if version is None:
        version = _nvidia_smi_driver_version()
        source = "nvidia-smi" if version else None
    return {
        "nvidia_driver_version": version,
        "source": source,
        "cuda_driver_api_version": _cuda_driver_api_version(torch_ok),
    }


def _gpu_info(torch_ok: bool) -> Dict[str, Any]:
    out: Dict[str, Any] = {"available": False, "count": 0, "devices": [], "error": None}
    if not torch_ok:
        return out
    try:
        import torch  # noqa: PLC0415

        if not torch.cuda.is_available():
            return out
        out["available"] = True
        out["count"] = torch.cuda.device_count()
        for i in range(out["count"]):
            props = torch.cuda.get_device_properties(i)
            entry = {
                "index": i,
                "device": f"cuda:{i}",
                "name": props.name,
                "compute_capability": f"{props.major}.{props.minor}",
                "arch": f"sm_{props.major}{props.minor}",
                "total_memory_mib": int(props.total_memory // (1024 * 1024)),
            }
            gcn = getattr(props, "gcnArchName", None)
            if getattr(torch.version, "hip", None) and gcn:
                entry["arch"] = str(gcn).split(":", 1)[0]
                entry["gcn_arch_name"] = str(gcn)
            out["devices"].append(entry)
    except Exception as exc:  # noqa: BLE001
        out["error"] = _error_text(exc)
    return out


def _decision_info() -> Dict[str, Any]:
    info: Dict[str, Any] = {
        "resolver_present": False,
        "recorded": False,
        "decision": None,
        "kernels_deferred": False,
        "error": None,
    }
    try:
        from mamba_ssm._install import decision as _decision  # noqa: PLC0415
    except ImportError as exc:
        info["error"] = f"the install-time resolver is not part of this install ({exc})"
        return info
    except Exception as exc:  # noqa: BLE001
        info["error"] = f"the install-time resolver failed to import: {_error_text(exc)}"
        return info
    info["resolver_present"] = True
    try:
        value = _decision.read_decision()
    except Exception as exc:  # noqa: BLE001
        info["error"] = f"reading the recorded decision failed: {_error_text(exc)}"
        return info
    from mamba_ssm import _loader  # noqa: PLC0415

    decision: Optional[Dict[str, Any]]
    if value is None or isinstance(value, dict):
        decision = value
    else:
        decision = {"repr": repr(value)}
    if decision is not None and decision.get("error"):
        info["error"] = str(decision["error"])
    info["recorded"] = decision is not None
    info["decision"] = decision
    info["current"] = False
    info["stale_reason"] = None
    if decision is not None and not decision.get("error"):
        try:
            current, why = _decision.record_belongs_to_install(decision)
        except Exception as exc:  # noqa: BLE001
            current, why = False, f"checking the record against the install failed: {_error_text(exc)}"
        info["current"], info["stale_reason"] = current, (why or None)
    info["kernels_deferred"] = info["current"] and _loader.kernels_deferred(decision)
    return info


def _causal_conv1d_package() -> Any:
    """The causal-conv1d package's functions as the ops use them, or None (absent or broken)."""
    try:
        from mamba_ssm.ops.causal_conv1d import external_package  # noqa: PLC0415

        return external_package()
    except Exception:  # noqa: BLE001
        return None


def _causal_conv1d_explain(device: str) -> Tuple[Optional[str], Optional[str]]:
    """``mamba_ssm.ops.causal_conv1d.explain(device)``: (what the conv ops run, why), or (None, None)."""
    try:
        from mamba_ssm.ops.causal_conv1d import explain  # noqa: PLC0415

        return explain(device)
    except Exception:  # noqa: BLE001
        return None, None


def _json_safe(value: Any) -> Any:
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        if isinstance(value, dict):
            return {str(k): _json_safe(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [_json_safe(v) for v in value]
        return repr(value)


def _scan_reference(u, delta, A, B, C, D, z, delta_bias):
    """Sequential float64 selective scan with softplus(delta + delta_bias) (Gu & Dao 2023, Algorithm 2,
    zero-order hold for A): x_t = exp(dt_t A) x_{t-1} + dt_t B_t u_t; y_t = C_t . x_t + D u_t; y *= silu(z).
    Shapes: u, delta, z (batch, dim, seqlen); A (dim, d_state); B, C (batch, d_state, seqlen); D,
    delta_bias (dim,)."""
    import torch  # noqa: PLC0415

    u, delta, A, B, C, D, z, delta_bias = (
        t.detach().double().cpu() for t in (u, delta, A, B, C, D, z, delta_bias)
    )
    dt = torch.nn.functional.softplus(delta + delta_bias[:, None])
    x = torch.zeros(u.shape[0], u.shape[1], A.shape[1], dtype=torch.float64)
    ys = []
    for t in range(u.shape[2]):
        x = torch.exp(dt[:, :, t, None] * A) * x + dt[:, :, t, None] * B[:, None, :, t] * u[:, :, t, None]
        ys.append((x * C[:, None, :, t]).sum(-1))
    y = torch.stack(ys, -1) + D[:, None] * u
    return y * z * torch.sigmoid(z)


def _cpu_isa() -> Optional[str]:
    """The build of the CPU kernel that runs (``avx512``, ``avx2``, ``generic``), or None when the loaded
    module has no CPU kernel op."""
    try:
        import torch  # noqa: PLC0415

        return str(torch.ops.mamba_ssm.cpu_isa())
    except Exception:  # noqa: BLE001 - a module without the op, or a bad MAMBA_SSM_CPU_ISA
        return None


def _complex_a_kernels() -> bool:
    """Whether the loaded module registers the complex-A selective-scan ops (``selective_scan_fn`` with
    complex A runs them on CPU and CUDA/ROCm; without them it runs the PyTorch fallback)."""
    try:
        import torch

        return hasattr(torch.ops.mamba_ssm, "selective_scan_complex_fwd")
    except Exception:  # noqa: BLE001 - torch or the namespace unavailable
        return False


def _check_device(device: str) -> Dict[str, Any]:
    """Run selective_scan_fn (forward and backward) on ``device`` through the dispatcher and compare the
    output with the float64 reference; fp32, batch 2, dim 8, d_state 4, seqlen 37."""
    import warnings  # noqa: PLC0415

    import torch  # noqa: PLC0415

    from mamba_ssm import _dispatch  # noqa: PLC0415

    result: Dict[str, Any] = {
        "device": device,
        "backend": None,
        "ok": False,
        "max_abs_err": None,
        "tolerance": None,
        "error": None,
    }
    try:
        result["backend"] = _dispatch.plan("selective_scan", device)["backend"]
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn  # noqa: PLC0415

        g = torch.Generator().manual_seed(0)
        b, d, n, length = 2, 8, 4, 37
        tensors = [
            torch.randn(b, d, length, generator=g),
            torch.rand(b, d, length, generator=g) * 0.5,
            -torch.rand(d, n, generator=g) - 0.5,
            torch.randn(b, n, length, generator=g),
            torch.randn(b, n, length, generator=g),
            torch.randn(d, generator=g),
            torch.randn(b, d, length, generator=g),
            torch.rand(d, generator=g) * 0.1,
        ]
        u, delta, A, B, C, D, z, delta_bias = (t.to(device).requires_grad_(True) for t in tensors)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            y = selective_scan_fn(u, delta, A, B, C, D, z, delta_bias, delta_softplus=True)
            y.sum().backward()
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)
        grads_finite = all(
            t.grad is not None and bool(torch.isfinite(t.grad).all()) for t in (u, delta, A, B, C)
        )
        ref = _scan_reference(u, delta, A, B, C, D, z, delta_bias)
        err = float((y.detach().double().cpu() - ref).abs().max())
        tol = 1e-4 * max(1.0, float(ref.abs().max()))
        result.update(max_abs_err=err, tolerance=tol, ok=bool(err <= tol and grads_finite))
        if not grads_finite:
            result["error"] = "non-finite or missing gradients"
    except Exception as exc:  # noqa: BLE001 - a failing kernel is what this check is for
        result["error"] = _error_text(exc)
    return result


def collect(check: bool = False) -> Dict[str, Any]:
    """Gather the report as a JSON-serialisable dict (see the module docstring for the keys).

    Args:
        check: also run selective_scan_fn forward+backward on every device through the chosen backend
            and compare with a float64 reference (adds the key ``checks``).

    Never raises for a broken install: every failure is recorded in the report, and ``exit_code``
    summarises (0 compiled everywhere, 1 fallback for a fixable reason, 2 broken).
    """
    report: Dict[str, Any] = {"schema": SCHEMA}
    package_dir = os.path.dirname(os.path.abspath(__file__))
    report["package"] = {"name": "mamba-ssm", "version": _version.__version__, "path": package_dir}
    report["python"] = _python_info()
    torch_info = _torch_info()
    report["torch"] = torch_info
    report["gpus"] = _gpu_info(torch_info["importable"])
    report["driver"] = _driver_info(torch_info["importable"])
    problems: List[Dict[str, Any]] = []

    def problem(
        severity: str, reason: str, fix: Optional[str], where: Optional[str] = None, op: Optional[str] = None
    ) -> None:
        for p in problems:
            if p["reason"] == reason and p["severity"] == severity:
                if where and where not in p["devices"]:
                    p["devices"].append(where)
                if op and op not in p["ops"]:
                    p["ops"].append(op)
                return
        problems.append(
            {
                "severity": severity,
                "reason": reason,
                "fix": fix,
                "devices": [where] if where else [],
                "ops": [op] if op else [],
            }
        )

    # The compiled module (loaded here if nothing loaded it yet).
    from mamba_ssm import _loader  # noqa: PLC0415

    try:
        load = _loader.load()
        report["compiled_module"] = _json_safe(load.to_dict())
        report["compiled_module"]["cpu_isa"] = _cpu_isa() if load.loaded else None
        report["compiled_module"]["complex_a"] = _complex_a_kernels() if load.loaded else None
    except Exception as exc:  # noqa: BLE001
        report["compiled_module"] = {
            "found": None,
            "path": None,
            "loaded": False,
            "kind": "error",
            "reason": f"the loader failed: {_error_text(exc)}",
            "fix": f"reinstall: `{_loader.FIX_REINSTALL}`",
            "incompatibilities": [],
            "build_info": None,
        }
    report["install_decision"] = _json_safe(_decision_info())

    # Backend per op and device.
    backend: Dict[str, Any] = {
        "requested": None,
        "source": None,
        "env": os.environ.get("MAMBA_SSM_BACKEND"),
        "error": None,
    }
    devices: List[Dict[str, Any]] = []
    report["backend"] = backend
    report["devices"] = devices
    if not torch_info["importable"]:
        problem("broken", f"torch cannot be imported ({torch_info['error']})", _loader.FIX_REPAIR_TORCH)
    else:
        from mamba_ssm import _dispatch  # noqa: PLC0415

        try:
            backend["requested"] = _dispatch.get_backend()
            backend["source"] = _dispatch._requested()[1]
        except ValueError as exc:
            backend["error"] = str(exc)
            problem(
                "broken",
                str(exc),
                "set MAMBA_SSM_BACKEND to one of " + ", ".join(_dispatch.CHOICES) + " or unset it",
            )
        names = ["cpu"] + [g["device"] for g in report["gpus"]["devices"]]
        for name in names:
            entry: Dict[str, Any] = {"device": name, "ops": {}, "compiled_active": False, "coverage": None}
            try:
                entry["coverage"] = _loader.device_coverage(name)
            except Exception as exc:  # noqa: BLE001
                entry["coverage"] = f"coverage check failed: {_error_text(exc)}"
            for op in _dispatch.OPS:
                try:
                    p = _dispatch.plan(op, name)
                except Exception as exc:  # noqa: BLE001
                    entry["ops"][op] = {
                        "backend": None,
                        "reason": _error_text(exc),
                        "fix": None,
                        "error": True,
                    }
                    continue
                entry["ops"][op] = {
                    "backend": p["backend"],
                    "reason": p["reason"],
                    "fix": p["fix"],
                    "error": p["error"],
                }
                if op in _dispatch.CONV1D_OPS and not p["error"]:
                    impl, why = _causal_conv1d_explain(name)  # the same question the ops ask
                    if impl is not None:
                        entry["ops"][op]["backend"], entry["ops"][op]["reason"] = impl, why
                        if (
                            impl == "torch"
                            and name.startswith("cuda")
                            and _causal_conv1d_package() is not None
                        ):
                            entry["ops"][op]["reason"] = (
                                f"the causal-conv1d package is installed but not used: the {backend['requested']} "
                                f"backend was asked for ({backend['source']}); {op} runs on its PyTorch "
                                f"implementation"
                            )
            # The install is judged by the selective-scan ops (the conv ops are reported above; a device
            # the scan kernels cover runs the conv kernels too).
            compiled_ops = [
                op for op in _dispatch.OPS if op in _dispatch.COMPILED_OPS and op not in _dispatch.CONV1D_OPS
            ]
            entry["compiled_active"] = all(entry["ops"][op]["backend"] == "compiled" for op in compiled_ops)
            # The ops whose GPU kernel should run here: the compiled ones everywhere, the Triton ones on
            # CUDA/ROCm devices (on a CPU their PyTorch implementation is the only one: nothing to fix).
            kernel_ops = compiled_ops + (
                [op for op in _dispatch.OPS if op in _dispatch.TRITON_OPS] if name.startswith("cuda") else []
            )
            entry["triton_active"] = (
                all(
                    entry["ops"][op]["backend"] == "triton"
                    for op in _dispatch.OPS
                    if op in _dispatch.TRITON_OPS
                )
                if name.startswith("cuda")
                else None
            )
            for op in kernel_ops:
                o = entry["ops"][op]
                if o["error"]:
                    fix = o["fix"] or "unset MAMBA_SSM_BACKEND"
                    if backend["requested"] in ("compiled", "triton"):
                        fix = (
                            f"{fix}; or unset MAMBA_SSM_BACKEND (now {backend['env']!r}) to run on "
                            "the PyTorch fallback"
                        )
                    problem("broken", o["reason"], fix, name, op)
                elif o["backend"] in ("torch", "ref"):
                    if o["fix"]:
                        problem("fallback", o["reason"], o["fix"], name, op)
                    else:
                        problem(
                            "fallback",
                            f"the {o['backend']} backend was chosen "
                            f"({backend['source']}={backend['requested']})",
                            "unset MAMBA_SSM_BACKEND (or call mamba_ssm.set_backend('auto')) to use "
                            "the GPU kernels"
                            if op in _dispatch.TRITON_OPS
                            else "unset MAMBA_SSM_BACKEND (or call mamba_ssm.set_backend('auto')) to use "
                            "the compiled kernels",
                            name,
                            op,
                        )
            devices.append(entry)

    if check:
        checks: List[Dict[str, Any]] = []
        if torch_info["importable"]:
            for entry in devices:
                if entry["ops"].get("selective_scan", {}).get("backend") is None:
                    continue  # the op cannot run there (already a problem)
                c = _check_device(entry["device"])
                checks.append(c)
                if not c["ok"]:
                    why = c["error"] or (f"max abs error {c['max_abs_err']:.3g} exceeds {c['tolerance']:.3g}")
                    problem(
                        "broken",
                        f"selective_scan on {c['device']} ({c['backend']} backend) failed the "
                        f"check against the float64 reference: {why}",
                        "run on the PyTorch fallback meanwhile (MAMBA_SSM_BACKEND=torch) and report this "
                        "output",
                        c["device"],
                        "selective_scan",
                    )
        report["checks"] = checks

    if any(p["severity"] == "broken" for p in problems):
        status, code = "broken", EXIT_BROKEN
    elif problems:
        status, code = "fallback", EXIT_FALLBACK
    else:
        status, code = "ok", EXIT_OK
    if report["install_decision"].get("kernels_deferred") and code == EXIT_FALLBACK:
        for p in problems:
            if "install-kernels" not in (p["fix"] or ""):
                p["fix"] = (p["fix"] + "; " if p["fix"] else "") + (
                    f"the kernels were deferred at install time: run `{_loader.FIX_INSTALL_KERNELS}`"
                )
    report["problems"] = problems
    report["status"] = status
    report["exit_code"] = code
    return report


def _yes(value: Any) -> str:
    return "yes" if value else "no"


#: Keys of the decision record that _render_decision shows in its own lines (the rest: "key: value").
_DECISION_SHOWN = {
    "schema",
    "time",
    "prefix",
    "path",
    "package_version",
    "final_mode",
    "status",
    "wheel",
    "installed_wheel",
    "sha256",
    "index",
    "environment",
    "target_python",
    "decision",
    "message",
    "error_kind",
    "error",
    "install",
    "build",
}
_REJECTED_SHOWN = 10


def _render_decision(d: Dict[str, Any]) -> List[str]:
    """The recorded install decision (``mamba_ssm._install.decision`` record keys) as readable lines:
    final mode, chosen wheel, index, when, what was looked for, the rejected candidates with reasons."""
    out = [f"Install decision (recorded by the resolver{', ' + str(d['time']) if d.get('time') else ''}):"]
    add = out.append
    if d.get("error"):
        add(f"  ! {d['error']}")
    mode = d.get("final_mode") or "-"
    status = d.get("status")
    add(f"  final mode: {mode}" + (f" (resolver status: {status})" if status and status != mode else ""))
    sel = d.get("decision") if isinstance(d.get("decision"), dict) else {}
    wheel = d.get("wheel") or sel.get("chosen")
    if wheel:
        add(f"  wheel: {wheel}" + (f" (sha256 {d['sha256']})" if d.get("sha256") else ""))
        if d.get("installed_wheel") and d["installed_wheel"] != wheel:
            add(f"    installed as: {d['installed_wheel']}")
    else:
        add("  wheel: none chosen")
    if d.get("index"):
        add(f"  index: {d['index']}")
    if d.get("package_version"):
        add(f"  package version: {d['package_version']}")
    if d.get("environment"):
        add(f"  environment: {d['environment']}")
    if d.get("target_python"):
        add(f"  target Python: {d['target_python']}")
    if sel.get("looked_for"):
        add(f"  looked for: {sel['looked_for']}")
    compatible = [c for c in sel.get("candidates") or [] if c != wheel]
    if compatible:
        add(f"  other compatible wheels: {', '.join(map(str, compatible))}")
    rejected = sel.get("rejected") or []
    if rejected:
        add(f"  rejected candidates ({len(rejected)}):")
        for r in rejected[:_REJECTED_SHOWN]:
            if isinstance(r, dict):
                add(f"    - {r.get('filename', '?')}: {r.get('reason', '?')}")
            else:
                add(f"    - {r}")
        if len(rejected) > _REJECTED_SHOWN:
            add(
                f"    ... and {len(rejected) - _REJECTED_SHOWN} more (python -m mamba_ssm doctor --json lists all)"
            )
    for note in sel.get("notes") or []:
        add(f"  note: {note}")
    if d.get("error_kind"):
        add(f"  error kind: {d['error_kind']}")
    if d.get("message"):
        add(f"  message: {d['message']}")
    build = d.get("build")
    if isinstance(build, dict):  # what setup.py built when no prebuilt wheel was used
        kernels = ", ".join(build.get("kernels") or []) or "none"
        add(
            f"  install-time build: {build.get('mode')} ({'failed, ' if build.get('failed') else ''}kernels: "
            f"{kernels}; {build.get('seconds')} s): {build.get('reason')}"
        )
    for key in sorted(k for k in d if k not in _DECISION_SHOWN):
        value = d[key]
        add(f"  {key.replace('_', ' ')}: {value if isinstance(value, str) else json.dumps(value)}")
    if d.get("path"):
        add(f"  record: {d['path']}")
    return out


def _ok_title(report: Dict[str, Any]) -> str:
    """The OK status line, naming which ops have compiled kernels (exit 0 means: every op that has a
    compiled kernel runs it on every device; the other ops have a single PyTorch implementation)."""
    ops: List[str] = []
    for entry in report.get("devices") or []:
        for op, o in (entry.get("ops") or {}).items():
            if o.get("backend") in ("compiled", "triton") and op not in ops:
                ops.append(op)
    others: List[str] = []
    for entry in report.get("devices") or []:
        others += [op for op in (entry.get("ops") or {}) if op not in ops and op not in others]
    if not ops:
        return "OK: nothing to fix"
    text = f"OK: the kernels ({', '.join(ops)}) run on every device they target"
    from mamba_ssm._dispatch import TRITON_OPS  # noqa: PLC0415 (stdlib-only module, already imported)

    gpu_kernels = [op for op in others if op in TRITON_OPS]
    torch_only = [op for op in others if op not in TRITON_OPS]
    if gpu_kernels:
        text += (
            f"; the other ops ({', '.join(gpu_kernels)}) run PyTorch code on these devices (their Triton "
            "kernels are for CUDA/ROCm GPUs)"
        )
    if torch_only:
        text += f"; the other ops ({', '.join(torch_only)}) have a PyTorch implementation only"
    return text


def render_text(report: Dict[str, Any]) -> str:
    """The human-readable report (what ``doctor`` prints without ``--json``)."""
    lines: List[str] = []
    add = lines.append
    pkg, py, tinfo, gpus, drv = (
        report["package"],
        report["python"],
        report["torch"],
        report["gpus"],
        report["driver"],
    )
    add(f"mamba-ssm {pkg['version']}  ({pkg['path']})")
    add(f"Python {py['version']} ({py['implementation']}, {py['executable']})")
    add(f"  interpreter tag: {py['interpreter_tag']}   most specific tag: {py['most_specific_tag']}")
    add(f"  platform tags: {', '.join(py['platform_tags']) or '-'}   (sysconfig: {py['sysconfig_platform']})")
    if py.get("error"):
        add(f"  ! {py['error']}")
    if tinfo["importable"]:
        add(
            f"torch {tinfo['version']}  CUDA {tinfo['cuda'] or '-'}  HIP {tinfo['hip'] or '-'}  "
            f"cxx11abi {tinfo['cxx11_abi']}  ({tinfo['path']})"
        )
    else:
        add(f"torch: cannot be imported: {tinfo['error']}")
    driver = drv.get("nvidia_driver_version")
    if gpus["devices"]:
        api = drv.get("cuda_driver_api_version")
        add(
            f"GPUs ({gpus['count']}), driver {driver or 'unknown'}"
            + (f" (supports CUDA {api})" if api else "")
            + ":"
        )
        for g in gpus["devices"]:
            add(
                f"  {g['device']}: {g['name']}, compute capability {g['compute_capability']} ({g['arch']}), "
                f"{g['total_memory_mib']} MiB"
            )
    else:
        why = gpus.get("error") or (
            "torch sees no GPU" if tinfo["importable"] else "torch cannot be imported"
        )
        add(f"GPUs: none ({why}); NVIDIA driver: {driver or 'none found'}")

    cm = report["compiled_module"]
    add("Compiled module mamba_ssm._C:")
    add(f"  found: {_yes(cm.get('found'))}{'  ' + cm['path'] if cm.get('path') else ''}")
    bi = cm.get("build_info")
    if bi:
        add(
            f"  built for: torch {bi.get('torch_version')}, CUDA {bi.get('torch_cuda') or '-'}, "
            f"HIP {bi.get('torch_hip') or '-'}, cxx11abi {bi.get('cxx11_abi')}, {bi.get('python_tag')}, "
            f"{bi.get('platform')}"
        )
        add(
            "  torch ABI: "
            + _buildinfo.describe_torch_abi(
                bi.get("torch_abi", "classic"),
                bi.get("torch_abi_floor"),
                bi.get("torch_version"),
                bi.get("cxx11_abi"),
            )
        )
        add(
            f"  kernels: {', '.join(bi.get('kernels') or []) or '-'}; SASS {', '.join(bi.get('sass_archs') or []) or '-'}; "
            f"PTX {', '.join(bi.get('ptx_archs') or []) or '-'}; gfx {', '.join(bi.get('gfx_archs') or []) or '-'}"
        )
        add(
            f"  compiled by: nvcc {bi.get('nvcc_version') or '-'}, hipcc {bi.get('hipcc_version') or '-'}; "
            f"package {bi.get('package_version')}, commit {bi.get('git_commit') or '-'}"
        )
    add(f"  loaded: {_yes(cm.get('loaded'))}")
    if cm.get("cpu_isa"):
        add(f"  CPU kernel build: {cm['cpu_isa']} (MAMBA_SSM_CPU_ISA caps it)")
    if cm.get("complex_a") is not None:
        where = (
            "compiled kernels" if cm["complex_a"] else "PyTorch fallback (this build has no complex-A ops)"
        )
        add(f"  complex A (selective_scan_fn, mamba_inner_fn): {where}")
    if not cm.get("loaded"):
        add(f"  reason: {cm.get('reason')}")

    dec = report["install_decision"]
    if dec.get("recorded") and dec.get("current") is False and not dec.get("error"):
        d = dec.get("decision") or {}
        add(
            f"Install decision: the recorded decision belongs to an earlier install (recorded "
            f"{d.get('time') or 'at an unknown time'}, final mode {d.get('final_mode') or '-'}): "
            f"{dec.get('stale_reason') or 'it does not match the installed distribution'}; it is not shown "
            "as this install's. Reinstall through pip (or run install-kernels) to record a new one"
            + (f"; record: {d['path']}" if d.get("path") else "")
        )
    elif dec.get("recorded"):
        lines.extend(_render_decision(dec.get("decision") or {}))
    else:
        add(f"Install decision: {dec.get('error') or 'none recorded'}")

    be = report["backend"]
    add(
        f"Backend requested: {be.get('requested') or '-'} (from {be.get('source') or '-'})"
        + (f"  ! {be['error']}" if be.get("error") else "")
    )
    for entry in report["devices"]:
        add(f"  {entry['device']}:")
        for op, o in entry["ops"].items():
            add(f"    {op:<24} {o['backend'] or 'ERROR'}")

    for c in report.get("checks", []):
        if c["ok"]:
            add(f"Check {c['device']}: ok ({c['backend']} backend, max abs error {c['max_abs_err']:.2e})")
        else:
            add(
                f"Check {c['device']}: FAILED ({c['backend']} backend): "
                f"{c['error'] or 'max abs error %.3g > %.3g' % (c['max_abs_err'], c['tolerance'])}"
            )

    status = report["status"]
    title = {
        "ok": _ok_title(report),
        "fallback": "FALLBACK: some ops run on the PyTorch fallback",
        "broken": "BROKEN",
    }[status]
    add(f"Status: {title} (exit {report['exit_code']})")
    for p in report["problems"]:
        where = ", ".join((p.get("ops") or []) + (p.get("devices") or []))
        where = f" [{where}]" if where else ""
        add(f"  - {p['reason']}{where}")
        if p.get("fix"):
            add(f"    fix: {p['fix']}")
    return "\n".join(lines) + "\n"


def main(argv: Optional[List[str]] = None, prog: str = "python -m mamba_ssm doctor") -> int:
    """``doctor [--json] [--check]``; returns the exit status (0 ok, 1 fallback with a fix, 2 broken).
    ``prog``: the command shown in ``--help`` (the program name the user invoked)."""
    parser = argparse.ArgumentParser(prog=prog, description="Report what mamba-ssm runs on, and why.")
    parser.add_argument("--json", action="store_true", help="print one JSON object (stable keys)")
    parser.add_argument(
        "--check",
        action="store_true",
        help="also run selective_scan forward+backward on every device and compare with a "
        "float64 reference (a failure exits 2)",
    )
    args = parser.parse_args(argv)
    try:
        report = collect(check=args.check)
    except Exception as exc:  # noqa: BLE001 - doctor itself must not crash without a report
        report = {
            "schema": SCHEMA,
            "status": "broken",
            "exit_code": EXIT_BROKEN,
            "problems": [
                {
                    "severity": "broken",
                    "reason": f"doctor failed: {_error_text(exc)}",
                    "fix": None,
                    "devices": [],
                    "ops": [],
                }
            ],
        }
        if args.json:
            print(json.dumps(report, indent=2, sort_keys=True))
        else:
            print(f"mamba-ssm doctor failed: {_error_text(exc)}", file=sys.stderr)
        return EXIT_BROKEN
    if args.json:
        print(json.dumps(report, indent=2, sort_keys=True))
    else:
        sys.stdout.write(render_text(report))
    return int(report["exit_code"])
