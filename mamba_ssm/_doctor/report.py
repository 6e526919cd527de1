"""doctor's report as typed records, and :func:`collect`, which gathers it.

Serialised only at the edge (``Report.to_dict``: the stable JSON keys of ``doctor --json``). Never
raises for a broken install: every failure is recorded in the report, and ``exit_code`` summarises it
(0 kernels everywhere, 1 a fallback for a fixable reason, 2 broken).
"""

from __future__ import annotations

import calendar
import dataclasses
import os
import platform
import sys
import sysconfig
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import _advice, _devices, _dispatch, _gpus, _loader, _version
from .._compat.textenum import TextEnum
from .._dispatch import Backend, BackendChoice
from .._dispatch.config import current as current_config
from .check import CheckResult, check_device

if TYPE_CHECKING:
    from .._install.record import InstallRecord

__all__ = [
    "EXIT_BROKEN",
    "EXIT_FALLBACK",
    "EXIT_OK",
    "SCHEMA",
    "CheckResult",
    "DeviceReport",
    "GpuEntry",
    "GpuReport",
    "OpReport",
    "Problem",
    "Report",
    "Severity",
    "Status",
    "collect",
    "gpu_report",
]

SCHEMA = 1
EXIT_OK = 0
EXIT_FALLBACK = 1
EXIT_BROKEN = 2
_N_PLATFORM_TAGS = 5


class Severity(TextEnum):
    """How bad a problem is."""

    FALLBACK = "fallback"  # an op runs on the PyTorch fallback for a fixable reason
    BROKEN = "broken"  # the install does not work as asked


class Status(TextEnum):
    """The report's verdict (and its exit code)."""

    OK = "ok"
    FALLBACK = "fallback"
    BROKEN = "broken"

    @property
    def exit_code(self) -> int:
        return {Status.OK: EXIT_OK, Status.FALLBACK: EXIT_FALLBACK, Status.BROKEN: EXIT_BROKEN}[self]


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _plain(value: Any) -> Any:
    """A dataclass's fields as JSON values (tuples to lists, text enums to their strings)."""
    if isinstance(value, TextEnum):
        return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class PackageInfo:
    name: str
    version: str
    path: str


@dataclass(frozen=True)
class PythonInfo:
    """The interpreter and the wheel tags it accepts (``packaging.tags``)."""

    version: str
    implementation: str
    executable: str
    sysconfig_platform: str
    interpreter_tag: str | None = None
    most_specific_tag: str | None = None
    platform_tags: tuple[str, ...] = ()
    abi3_compatible: bool | None = None  # can a cp39-abi3 wheel (our limited-API build) be installed here?
    error: str | None = None


@dataclass(frozen=True)
class TorchReport:
    """The running torch, or why it does not import."""

    importable: bool = False
    version: str | None = None
    cuda: str | None = None
    hip: str | None = None
    cxx11_abi: bool | None = None
    path: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class GpuEntry:
    """One GPU torch sees."""

    index: int
    device: str
    name: str
    compute_capability: str
    arch: str
    total_memory_mib: int
    gcn_arch_name: str | None = None


@dataclass(frozen=True)
class GpuReport:
    """The GPUs torch sees (initialising CUDA), or why none."""

    available: bool = False
    count: int = 0
    devices: tuple[GpuEntry, ...] = ()
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        devices = []
        for d in self.devices:
            entry = _plain(d)
            if d.gcn_arch_name is None:
                del entry["gcn_arch_name"]
            devices.append(entry)
        return {"available": self.available, "count": self.count, "devices": devices, "error": self.error}


@dataclass(frozen=True)
class DriverReport:
    nvidia_driver_version: str | None = None
    source: str | None = None  # "nvml" or "nvidia-smi"
    cuda_driver_api_version: str | None = None  # what the driver supports (cuDriverGetVersion), e.g. "13.0"


@dataclass(frozen=True)
class CompiledModuleReport:
    """The loader's result (or why the loader failed), the CPU kernel build that runs, and whether the
    loaded module has the complex-A selective-scan kernels (None: nothing loaded)."""

    load: _loader.LoadResult | None
    cpu_isa: str | None = None
    loader_error: str | None = None
    complex_a: bool | None = None
    cpu_isa_cap: str | None = None  # MAMBA_SSM_CPU_ISA when set (it caps cpu_isa), else None

    @property
    def loaded(self) -> bool:
        return self.load is not None and self.load.loaded

    def to_dict(self) -> dict[str, Any]:
        if self.load is None:
            return {
                "found": None,
                "path": None,
                "loaded": False,
                "kind": "error",
                "reason": f"the loader failed: {self.loader_error}",
                "fix": _advice.reinstall_fix(),
                "incompatibilities": [],
                "build_info": None,
                "module_choice": None,
                "cpu_isa": None,
                "cpu_isa_cap": self.cpu_isa_cap,
                "complex_a": None,
            }
        return dict(
            self.load.to_dict(), cpu_isa=self.cpu_isa, cpu_isa_cap=self.cpu_isa_cap, complex_a=self.complex_a
        )


@dataclass(frozen=True)
class RecordReport:
    """The install record, and whether it describes this install (``current``; why not:
    ``stale_reason``). ``unreadable_path`` names a record file that exists but cannot be read.
    ``superseded_by``: for a failed attempt, what was installed or built after it (the loaded compiled
    module, the installed distribution), so the attempt and its advice describe nothing in use."""

    resolver_present: bool = False
    record: InstallRecord | None = None
    error: str | None = None
    unreadable_path: str | None = None
    current: bool = False
    stale_reason: str | None = None
    superseded_by: str | None = None

    @property
    def recorded(self) -> bool:
        return self.record is not None or self.unreadable_path is not None

    @property
    def kernels_deferred(self) -> bool:
        return self.current and self.record is not None and self.record.kernels_deferred

    def to_dict(self) -> dict[str, Any]:
        decision: dict[str, Any] | None = None
        if self.record is not None:
            decision = self.record.to_dict()
        elif self.unreadable_path is not None:
            decision = {"error": self.error, "path": self.unreadable_path}
        return {
            "resolver_present": self.resolver_present,
            "recorded": self.recorded,
            "decision": decision,
            "kernels_deferred": self.kernels_deferred,
            "error": self.error,
            "current": self.current,
            "stale_reason": self.stale_reason,
            "superseded_by": self.superseded_by,
        }


@dataclass(frozen=True)
class BackendReport:
    """The backend asked for and where that came from (``error``: MAMBA_SSM_BACKEND is not a backend)."""

    requested: str | None = None
    source: str | None = None
    env: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class OpReport:
    """What runs one op on one device (``backend``: one of this package's backends; None: the forced
    backend cannot run it)."""

    backend: Backend | None
    reason: str | None = None
    fix: str | None = None
    error: bool = False

    @classmethod
    def of(cls, choice: BackendChoice) -> OpReport:
        backend = None if choice.backend is None else Backend(choice.backend)
        return cls(backend, choice.reason, choice.fix, choice.error)


@dataclass(frozen=True)
class DeviceReport:
    """The ops on one device: what runs each, the build's coverage of the device, and whether the
    compiled (every device) and Triton (GPUs) kernels are active."""

    device: str
    ops: dict[str, OpReport]
    compiled_active: bool = False
    coverage: str | None = None
    triton_active: bool | None = None


@dataclass(frozen=True)
class Problem:
    """Something that keeps an op off its kernels, with the fix, and where it happens."""

    severity: Severity
    reason: str
    fix: str | None
    devices: tuple[str, ...] = ()
    ops: tuple[str, ...] = ()


@dataclass(frozen=True)
class Report:
    """Everything doctor found (``to_dict``: the JSON keys of the module docstring of ``mamba_ssm._doctor``)."""

    package: PackageInfo
    python: PythonInfo
    torch: TorchReport
    gpus: GpuReport
    driver: DriverReport
    compiled_module: CompiledModuleReport
    install_record: RecordReport
    backend: BackendReport
    devices: tuple[DeviceReport, ...]
    problems: tuple[Problem, ...]
    status: Status
    checks: tuple[CheckResult, ...] | None = None
    schema: int = SCHEMA

    @property
    def exit_code(self) -> int:
        return self.status.exit_code

    @property
    def wheel_install(self) -> str | None:
        """How a per-platform wheel install got its kernels, in one sentence, when the compiled module
        was chosen among the wheel's kernel modules and no install record describes this install (no
        setup hook ran for a wheel, so there is no resolver decision to show); else None."""
        load = self.compiled_module.load
        if load is None or load.module is None or self.install_record.current:
            return None
        m = load.module
        return (
            f"installed from the wheel (kernel modules {', '.join(m.available) or 'none'}; chosen: "
            f"{m.folder or 'none'}); no install-time resolver ran, so no decision was recorded"
        )

    def to_dict(self) -> dict[str, Any]:
        decision = dict(self.install_record.to_dict(), wheel_install=self.wheel_install)
        out: dict[str, Any] = {
            "schema": self.schema,
            "package": _plain(self.package),
            "python": _plain(self.python),
            "torch": _plain(self.torch),
            "gpus": self.gpus.to_dict(),
            "driver": _plain(self.driver),
            "compiled_module": self.compiled_module.to_dict(),
            "install_decision": decision,
            "backend": _plain(self.backend),
            "devices": [_plain(d) for d in self.devices],
            "problems": [_plain(p) for p in self.problems],
            "status": str(self.status),
            "exit_code": self.exit_code,
        }
        if self.checks is not None:
            out["checks"] = [_plain(c) for c in self.checks]
        return out


# ----------------------------------------------------------------------------- the facts
def python_info() -> PythonInfo:
    """The interpreter and, through ``packaging.tags``, the wheel tags it accepts."""
    base = PythonInfo(
        version=platform.python_version(),
        implementation=platform.python_implementation(),
        executable=sys.executable,
        sysconfig_platform=sysconfig.get_platform(),
    )
    try:
        from packaging import tags

        sys_tags = list(tags.sys_tags())
        platforms: list[str] = []
        for tag in tags.platform_tags():
            if tag not in platforms:
                platforms.append(tag)
            if len(platforms) >= _N_PLATFORM_TAGS:
                break
        return dataclasses.replace(
            base,
            interpreter_tag=f"{tags.interpreter_name()}{tags.interpreter_version()}",
            most_specific_tag=str(sys_tags[0]) if sys_tags else None,
            platform_tags=tuple(platforms),
            abi3_compatible=any(t.interpreter == "cp39" and t.abi == "abi3" for t in sys_tags),
        )
    except Exception as exc:  # noqa: BLE001
        return dataclasses.replace(base, error=f"packaging.tags failed: {_error_text(exc)}")


def torch_report() -> TorchReport:
    """The running torch (importing it), or why it does not import."""
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - a broken torch is what doctor reports
        return TorchReport(error=_error_text(exc))
    abi = getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None)
    return TorchReport(
        importable=True,
        version=str(torch.__version__),
        cuda=getattr(torch.version, "cuda", None),
        hip=getattr(torch.version, "hip", None),
        cxx11_abi=None if abi is None else bool(abi),
        path=os.path.dirname(getattr(torch, "__file__", "") or "") or None,
    )


def _cuda_driver_api_version() -> str | None:
    """The CUDA version the installed driver supports (cuDriverGetVersion, e.g. "13.0"), or None."""
    try:
        import torch

        if not torch.version.cuda or not torch.cuda.is_available():
            return None
        # torch._C's stubs do not declare _cuda_getDriverVersion, which CUDA builds of torch define
        value = int(torch._C._cuda_getDriverVersion())  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001
        return None
    return f"{value // 1000}.{(value % 1000) // 10}" if value > 0 else None


def driver_report(torch_ok: bool) -> DriverReport:
    """The NVIDIA driver (:func:`mamba_ssm._gpus.nvidia_driver`) and, with torch, the CUDA it supports."""
    version, source = _gpus.nvidia_driver()
    return DriverReport(version, source, _cuda_driver_api_version() if torch_ok else None)


def gpu_report(torch_ok: bool) -> GpuReport:
    """The GPUs torch sees (this initialises CUDA), or why none."""
    if not torch_ok:
        return GpuReport()
    try:
        import torch

        if not torch.cuda.is_available():
            return GpuReport()
        devices = []
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            gcn = getattr(props, "gcnArchName", None)
            rocm = bool(getattr(torch.version, "hip", None) and gcn)
            devices.append(
                GpuEntry(
                    index=i,
                    device=f"cuda:{i}",
                    name=props.name,
                    compute_capability=f"{props.major}.{props.minor}",
                    arch=str(gcn).split(":", 1)[0] if rocm else f"sm_{props.major}{props.minor}",
                    total_memory_mib=int(props.total_memory // (1024 * 1024)),
                    gcn_arch_name=str(gcn) if rocm else None,
                )
            )
        return GpuReport(True, len(devices), tuple(devices))
    except Exception as exc:  # noqa: BLE001
        return GpuReport(error=_error_text(exc))


def record_report() -> RecordReport:
    """The install record, and whether it describes the installed distribution."""
    try:
        from .._install import record as records  # the resolver may be absent
    except ImportError as exc:
        return RecordReport(error=f"the install-time resolver is not part of this install ({exc})")
    except Exception as exc:  # noqa: BLE001
        return RecordReport(error=f"the install-time resolver failed to import: {_error_text(exc)}")
    try:
        record = records.read_record()
    except records.RecordError as exc:
        return RecordReport(True, error=str(exc), unreadable_path=exc.path or "")
    except Exception as exc:  # noqa: BLE001
        return RecordReport(True, error=f"reading the recorded decision failed: {_error_text(exc)}")
    if record is None:
        return RecordReport(True)
    try:
        current, why = records.ownership(record)
    except Exception as exc:  # noqa: BLE001
        current, why = False, f"checking the record against the install failed: {_error_text(exc)}"
    return RecordReport(True, record, current=current, stale_reason=why or None)


def superseded_by(record: InstallRecord, compiled_path: str | None) -> str | None:
    """For a failed install attempt, what in use was made after it: the compiled module at
    ``compiled_path`` or the installed distribution's dist-info, written at least a second after the
    attempt was recorded (the record's time has whole seconds); None when neither was, or the record is
    not a failed attempt."""
    if not record.failed_attempt() or not record.time:
        return None
    try:
        recorded = calendar.timegm(time.strptime(record.time, "%Y-%m-%dT%H:%M:%SZ"))
    except ValueError:
        return None
    from .._install.record import installed_dist_infos  # a record implies the resolver's package

    infos = installed_dist_infos()
    for what, path in (
        ("the compiled module", compiled_path),
        ("the installed distribution", infos[0] if infos else None),
    ):
        try:
            mtime = os.stat(path).st_mtime if path else None
        except OSError:
            mtime = None
        if mtime is not None and mtime >= recorded + 1:
            made = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(mtime))
            return f"{what} in use, {path}, made {made}"
    return None


def _cpu_isa() -> str | None:
    """The build of the CPU kernel that runs (``avx512``, ``avx2``, ``generic``), or None when the loaded
    module has no CPU kernel op."""
    try:
        import torch

        return str(torch.ops.mamba_ssm.cpu_isa())
    except Exception:  # noqa: BLE001 - a module without the op, or a bad MAMBA_SSM_CPU_ISA
        return None


def _complex_a_kernels() -> bool:
    """Whether the loaded module registers the complex-A selective-scan ops (``selective_scan_fn`` with
    a complex A runs them on CPU and CUDA/ROCm; without them it runs the PyTorch fallback)."""
    try:
        import torch

        return hasattr(torch.ops.mamba_ssm, "selective_scan_complex_fwd")
    except Exception:  # noqa: BLE001 - torch or the namespace unavailable
        return False


def compiled_module_report() -> CompiledModuleReport:
    """The compiled module (loaded here if nothing loaded it yet)."""
    cap = os.environ.get("MAMBA_SSM_CPU_ISA", "").strip() or None
    try:
        load = _loader.load()
    except Exception as exc:  # noqa: BLE001 - the loader never raises; a broken install may
        return CompiledModuleReport(None, loader_error=_error_text(exc), cpu_isa_cap=cap)
    if not load.loaded:
        return CompiledModuleReport(load, cpu_isa_cap=cap)
    return CompiledModuleReport(load, _cpu_isa(), complex_a=_complex_a_kernels(), cpu_isa_cap=cap)


# ----------------------------------------------------------------------------- the verdict
@dataclass
class _Problems:
    """Problems in the order found; one per (severity, reason), gathering its devices and ops."""

    found: list[tuple[Severity, str, str | None, list[str], list[str]]] = field(default_factory=list)

    def add(
        self,
        severity: Severity,
        reason: str,
        fix: str | None,
        where: str | None = None,
        op: str | None = None,
    ) -> None:
        for p in self.found:
            if p[1] == reason and p[0] is severity:
                if where and where not in p[3]:
                    p[3].append(where)
                if op and op not in p[4]:
                    p[4].append(op)
                return
        self.found.append((severity, reason, fix, [where] if where else [], [op] if op else []))

    def join(self, severity: Severity, reason: str, op: str) -> None:
        """Name ``op`` in the problem already found for ``reason`` too (none found: nothing added)."""
        for p in self.found:
            if p[1] == reason and p[0] is severity and op not in p[4]:
                p[4].append(op)

    def frozen(self, deferred_fix: str | None) -> tuple[Problem, ...]:
        out = []
        for severity, reason, fix, devices, ops in self.found:
            full = fix
            if deferred_fix and "install-kernels" not in (fix or ""):
                full = (fix + "; " if fix else "") + deferred_fix
            out.append(Problem(severity, reason, full, tuple(devices), tuple(ops)))
        return tuple(out)


def _device_report(name: str, config: BackendReport, problems: _Problems) -> DeviceReport:
    """What runs each op on ``name`` (the dispatch's own answer), and the problems it shows."""
    try:
        coverage = _devices.device_coverage(name)
    except Exception as exc:  # noqa: BLE001
        coverage = f"coverage check failed: {_error_text(exc)}"
    ops: dict[str, OpReport] = {}
    for op in _dispatch.OPS:
        try:
            ops[op] = OpReport.of(_dispatch.plan(op, name))
        except Exception as exc:  # noqa: BLE001
            ops[op] = OpReport(None, _error_text(exc), None, True)
    gpu = name.startswith("cuda")
    # The install is judged by the selective-scan ops (the conv ops are reported; a device the scan
    # kernels cover runs the conv kernels too).
    compiled_ops = [
        op for op in _dispatch.OPS if op in _dispatch.COMPILED_OPS and op not in _dispatch.CONV1D_OPS
    ]
    triton_ops = [op for op in _dispatch.OPS if op in _dispatch.TRITON_OPS]
    # The ops whose GPU kernel should run here: the compiled ones everywhere, the Triton ones on
    # CUDA/ROCm devices (on a CPU their PyTorch implementation is the only one: nothing to fix).
    for op in compiled_ops + (triton_ops if gpu else []):
        o = ops[op]
        if o.error:
            fix = o.fix or "unset MAMBA_SSM_BACKEND"
            if config.requested in ("compiled", "triton"):
                fix = f"{fix}; or unset MAMBA_SSM_BACKEND (now {config.env!r}) to run on the PyTorch fallback"
            problems.add(Severity.BROKEN, o.reason or "", fix, name, op)
        elif o.backend in (Backend.TORCH, Backend.REF):
            if o.fix:
                problems.add(Severity.FALLBACK, o.reason or "", o.fix, name, op)
            else:
                problems.add(
                    Severity.FALLBACK,
                    f"the {o.backend} backend was chosen ({config.source}={config.requested})",
                    _advice.unforce_fix(gpu_kernels=op in _dispatch.TRITON_OPS),
                    name,
                    op,
                )
    # The conv ops that run PyTorch code for the same reason are named in that problem as well.
    for op in _dispatch.OPS:
        o = ops[op]
        if op in _dispatch.CONV1D_OPS and not o.error and o.backend in (Backend.TORCH, Backend.REF):
            problems.join(Severity.FALLBACK, o.reason or "", op)
    return DeviceReport(
        device=name,
        ops=ops,
        compiled_active=all(ops[op].backend is Backend.COMPILED for op in compiled_ops),
        coverage=coverage,
        triton_active=all(ops[op].backend is Backend.TRITON for op in triton_ops) if gpu else None,
    )


def _backend_report(problems: _Problems) -> BackendReport:
    env = os.environ.get(_dispatch.ENV_BACKEND)
    try:
        config = current_config()
    except ValueError as exc:
        problems.add(Severity.BROKEN, str(exc), _advice.backend_choice_fix(_dispatch.CHOICES))
        return BackendReport(env=env, error=str(exc))
    return BackendReport(str(config.requested), config.source, env)


def collect(check: bool = False, gpus: GpuReport | None = None) -> Report:
    """Gather the report.

    Args:
        check: also run selective_scan_fn forward+backward on every device through the chosen backend
            and compare with a float64 reference (``Report.checks``).
        gpus: the GPUs to report on (default: what torch sees, :func:`gpu_report`).

    Never raises for a broken install: every failure is recorded in the report.
    """
    package_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    torch_info = torch_report()
    gpus = gpu_report(torch_info.importable) if gpus is None else gpus
    problems = _Problems()
    compiled = compiled_module_report()
    record = record_report()
    if record.record is not None and not record.current:
        later = superseded_by(record.record, compiled.load.path if compiled.load is not None else None)
        record = dataclasses.replace(record, superseded_by=later)
    devices: list[DeviceReport] = []
    if not torch_info.importable:
        backend = BackendReport(env=os.environ.get(_dispatch.ENV_BACKEND))
        problems.add(Severity.BROKEN, f"torch cannot be imported ({torch_info.error})", _advice.REPAIR_TORCH)
    else:
        backend = _backend_report(problems)
        for name in ["cpu"] + [g.device for g in gpus.devices]:
            devices.append(_device_report(name, backend, problems))
    checks: tuple[CheckResult, ...] | None = None
    if check:
        results = []
        for entry in devices if torch_info.importable else []:
            scan = entry.ops.get("selective_scan")
            if scan is None or scan.backend is None:
                continue  # the op cannot run there (already a problem)
            result = check_device(entry.device)
            results.append(result)
            if not result.ok:
                why = result.error or f"max abs error {result.max_abs_err:.3g} exceeds {result.tolerance:.3g}"
                problems.add(
                    Severity.BROKEN,
                    f"selective_scan on {result.device} ({result.backend} backend) failed the "
                    f"check against the float64 reference: {why}",
                    _advice.check_failed_fix(),
                    result.device,
                    "selective_scan",
                )
        checks = tuple(results)
    if any(p[0] is Severity.BROKEN for p in problems.found):
        status = Status.BROKEN
    elif problems.found:
        status = Status.FALLBACK
    else:
        status = Status.OK
    deferred_fix = None
    if record.kernels_deferred and status is Status.FALLBACK:
        deferred_fix = _advice.deferred_fix(_loader.install_record())
    return Report(
        package=PackageInfo("mamba-ssm", _version.__version__, package_dir),
        python=python_info(),
        torch=torch_info,
        gpus=gpus,
        driver=driver_report(torch_info.importable),
        compiled_module=compiled,
        install_record=record,
        backend=backend,
        devices=tuple(devices),
        problems=problems.frozen(deferred_fix),
        status=status,
        checks=checks,
    )
