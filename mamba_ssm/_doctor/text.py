"""doctor's report as text (what ``python -m mamba_ssm doctor`` prints without ``--json``)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .._compat.buildinfo import describe_torch_abi
from .._dispatch import TRITON_OPS, Backend
from .report import Report, Status

if TYPE_CHECKING:
    from .._install.record import InstallRecord

__all__ = ["render_record", "render_text"]

_REJECTED_SHOWN = 10


def _yes(value: object) -> str:
    return "yes" if value else "no"


def _user_set(record: InstallRecord) -> bool:
    """The user set the mode (``MAMBA_FORCE_BUILD`` / ``MAMBA_SKIP_CUDA_BUILD``): the resolver did not run,
    so the record holds no decision of its."""
    return record.status_text() == "requested"


def _others(record: InstallRecord) -> dict[str, object]:
    """The record's fields without a line of their own, and what another version wrote."""
    shown = {"status", "final_mode", "error_kind"}
    out: dict[str, object] = {k: v for k, v in record.extra.items() if k not in shown}
    if record.requested and not _user_set(record):
        out["requested"] = record.requested
    if record.gpu_unservable:
        out["gpu_unservable"] = list(record.gpu_unservable)
    return out


def _user_set_title(record: InstallRecord, when: str) -> str:
    """What the user's variable made setup.py do, named as set (``MAMBA_FORCE_BUILD=1``)."""
    asked = record.requested or "an install-time variable"
    if "MAMBA_SKIP_CUDA_BUILD" in asked:  # it wins over MAMBA_FORCE_BUILD when both are set
        what = f"the pure-Python package (no kernels), requested with {asked}"
    elif "MAMBA_FORCE_BUILD" in asked:
        what = f"a source build, forced with {asked}"
    else:
        what = f"the mode set with {asked}"
    return (
        f"Install (recorded by setup.py{when}): {what}; the resolver was not asked, so no prebuilt wheel "
        "was looked for:"
    )


def render_record(record: InstallRecord, error: str | None = None) -> list[str]:
    """The install record as readable lines: final mode, chosen wheel, index, when, what was looked
    for, the rejected candidates with reasons (``error``: why the record could not be read). A record
    of a mode the user set (status ``requested``) is titled by the variable, with no resolver status and
    no wheel choice: the resolver made none."""
    from .._install.record import requested_message  # a record implies the resolver's package

    when = f", {record.time}" if record.time else ""
    user_set = _user_set(record)
    title = (
        _user_set_title(record, when) if user_set else f"Install decision (recorded by the resolver{when}):"
    )
    out = [title]
    add = out.append
    if error:
        add(f"  ! {error}")
    mode = record.final_mode_text() or "-"
    status = record.status_text()
    shown_status = status and status != mode and not user_set
    add(f"  final mode: {mode}" + (f" (resolver status: {status})" if shown_status else ""))
    sel = record.selection
    wheel = record.wheel or (sel.chosen if sel else None)
    if wheel:
        add(f"  wheel: {wheel}" + (f" (sha256 {record.sha256})" if record.sha256 else ""))
        if record.installed_wheel and record.installed_wheel != wheel:
            add(f"    installed as: {record.installed_wheel}")
    elif not user_set:
        add("  wheel: none chosen")
    if record.index:
        add(f"  index: {record.index}")
    if record.package_version:
        add(f"  package version: {record.package_version}")
    if record.environment:
        add(f"  environment: {record.environment}")
    if record.target_python:
        add(f"  target Python: {record.target_python}")
    if sel is not None:
        if sel.looked_for:
            add(f"  looked for: {sel.looked_for}")
        compatible = [c for c in sel.candidates if c != wheel]
        if compatible:
            add(f"  other compatible wheels: {', '.join(compatible)}")
        if sel.rejected:
            add(f"  rejected candidates ({len(sel.rejected)}):")
            for r in sel.rejected[:_REJECTED_SHOWN]:
                add(f"    - {r.filename}: {r.reason}")
            if len(sel.rejected) > _REJECTED_SHOWN:
                more = len(sel.rejected) - _REJECTED_SHOWN
                add(f"    ... and {more} more (python -m mamba_ssm doctor --json lists all)")
        for note in sel.notes:
            add(f"  note: {note}")
    kind = record.error_kind or record.extra.get("error_kind")
    if kind:
        add(f"  error kind: {kind}")
    if record.message and not (user_set and record.message == requested_message(record.requested or "")):
        add(f"  message: {record.message}")  # the title says what the standard requested message does
    build = record.build
    if build is not None:  # what setup.py built when no prebuilt wheel was used
        kernels = ", ".join(build.kernels) or "none"
        add(
            f"  install-time build: {build.mode} ({'failed, ' if build.failed else ''}kernels: "
            f"{kernels}; {build.seconds} s): {build.reason}"
        )
    for key, value in sorted(_others(record).items()):
        add(f"  {key.replace('_', ' ')}: {value if isinstance(value, str) else json.dumps(value)}")
    if record.path:
        add(f"  record: {record.path}")
    return out


def _ok_title(report: Report) -> str:
    """The OK status line, naming which ops have kernels (exit 0 means: every op that has a kernel runs
    it on every device it targets; the others run PyTorch code there)."""
    ops: list[str] = []
    for entry in report.devices:
        for op, o in entry.ops.items():
            if o.backend in (Backend.COMPILED, Backend.TRITON) and op not in ops:
                ops.append(op)
    others: list[str] = []
    for entry in report.devices:
        others += [op for op in entry.ops if op not in ops and op not in others]
    if not ops:
        return "OK: nothing to fix"
    text = f"OK: the kernels ({', '.join(ops)}) run on every device they target"
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


def _environment_lines(report: Report) -> list[str]:
    lines: list[str] = []
    add = lines.append
    pkg, py, tinfo, gpus, drv = report.package, report.python, report.torch, report.gpus, report.driver
    add(f"mamba-ssm {pkg.version}  ({pkg.path})")
    add(f"Python {py.version} ({py.implementation}, {py.executable})")
    add(f"  interpreter tag: {py.interpreter_tag}   most specific tag: {py.most_specific_tag}")
    add(f"  platform tags: {', '.join(py.platform_tags) or '-'}   (sysconfig: {py.sysconfig_platform})")
    if py.error:
        add(f"  ! {py.error}")
    if tinfo.importable:
        add(
            f"torch {tinfo.version}  CUDA {tinfo.cuda or '-'}  HIP {tinfo.hip or '-'}  "
            f"cxx11abi {tinfo.cxx11_abi}  ({tinfo.path})"
        )
    else:
        add(f"torch: cannot be imported: {tinfo.error}")
    driver = drv.nvidia_driver_version
    if gpus.devices:
        api = drv.cuda_driver_api_version
        add(
            f"GPUs ({gpus.count}), driver {driver or 'unknown'}"
            + (f" (supports CUDA {api})" if api else "")
            + ":"
        )
        for g in gpus.devices:
            add(
                f"  {g.device}: {g.name}, compute capability {g.compute_capability} ({g.arch}), "
                f"{g.total_memory_mib} MiB"
            )
    else:
        why = gpus.error or ("torch sees no GPU" if tinfo.importable else "torch cannot be imported")
        add(f"GPUs: none ({why}); NVIDIA driver: {driver or 'none found'}")
    return lines


def _compiled_lines(report: Report) -> list[str]:
    cm = report.compiled_module
    view = cm.to_dict()
    lines = ["Compiled module mamba_ssm._C:"]
    add = lines.append
    add(f"  found: {_yes(view['found'])}{'  ' + view['path'] if view['path'] else ''}")
    module = cm.load.module if cm.load is not None else None
    if module is not None:
        add(
            f"  wheel kernel module: {module.folder or 'none'} (of {', '.join(module.available)}): "
            f"{module.reason}"
        )
    bi = cm.load.build_info if cm.load is not None else None
    if bi is not None:
        add(
            f"  built for: torch {bi.torch_version}, CUDA {bi.torch_cuda or '-'}, HIP {bi.torch_hip or '-'}, "
            f"cxx11abi {bi.cxx11_abi}, {bi.python_tag}, {bi.platform}"
        )
        runtime_major = str(bi.cuda_runtime_version).split(".")[0]
        if runtime_major != str(bi.torch_cuda).split(".")[0]:  # a stable-ABI module for another CUDA major
            add(
                f"  CUDA runtime: {bi.cuda_runtime_version} (nvcc's; it loads under CUDA {runtime_major} "
                "torches only, whatever the CUDA of the torch whose headers compiled it)"
            )
        add(
            "  torch ABI: "
            + describe_torch_abi(bi.torch_abi, bi.torch_abi_floor, bi.torch_version, bi.cxx11_abi)
        )
        add(
            f"  kernels: {', '.join(bi.kernels) or '-'}; SASS {', '.join(bi.sass_archs) or '-'}; "
            f"PTX {', '.join(bi.ptx_archs) or '-'}; gfx {', '.join(bi.gfx_archs) or '-'}"
        )
        add(
            f"  compiled by: nvcc {bi.nvcc_version or '-'}, hipcc {bi.hipcc_version or '-'}; "
            f"package {bi.package_version}, commit {bi.git_commit or '-'}"
        )
    add(f"  loaded: {_yes(cm.loaded)}")
    if cm.cpu_isa:
        why = f"MAMBA_SSM_CPU_ISA={cm.cpu_isa_cap} caps it" if cm.cpu_isa_cap else "the widest this CPU runs"
        add(f"  CPU kernel build: {cm.cpu_isa} ({why})")
    if cm.complex_a is not None:
        where = "compiled kernels" if cm.complex_a else "PyTorch fallback (this build has no complex-A ops)"
        add(f"  complex A (selective_scan_fn, mamba_inner_fn): {where}")
    if not cm.loaded:
        add(f"  reason: {view['reason']}")
    return lines


def _record_lines(report: Report) -> list[str]:
    wheel = report.wheel_install
    lines = _recorded_lines(report)
    if wheel is None:
        return lines
    if report.install_record.record is None and report.install_record.unreadable_path is None:
        return [f"Install: {wheel}"]  # instead of "none recorded"
    return [f"Install: {wheel}", *lines]


def _recorded_lines(report: Report) -> list[str]:
    rec = report.install_record
    if rec.record is not None and not rec.current and not rec.error:
        r = rec.record
        if r.failed_attempt() and rec.superseded_by:
            return [
                f"Install decision: an install attempt failed earlier (recorded {r.time}) and installed nothing; "
                f"{rec.superseded_by}, came after it, so that attempt and its advice no longer apply"
                + (f"; record: {r.path}" if r.path else "")
            ]
        if r.failed_attempt():
            from .. import _advice

            when = r.time or "at an unknown time"
            title = (
                f"Install decision: the last install attempt failed (recorded {when}) and installed nothing;"
            )
            return [
                f"{title} it recorded:",
                *render_record(r)[1:],
                f"  what to do: {_advice.failed_attempt_fix(r)}",
            ]
        return [
            f"Install decision: the recorded decision belongs to an earlier install (recorded "
            f"{r.time or 'at an unknown time'}, final mode {r.final_mode_text() or '-'}): "
            f"{rec.stale_reason or 'it does not match the installed distribution'}; it is not shown "
            "as this install's. Reinstall through pip (or run install-kernels) to record a new one"
            + (f"; record: {r.path}" if r.path else "")
        ]
    if rec.record is not None:
        return render_record(rec.record)
    if rec.unreadable_path is not None:
        from .._install.record import InstallRecord  # the resolver is present then

        return render_record(InstallRecord(path=rec.unreadable_path or None), rec.error)
    return [f"Install decision: {rec.error or 'none recorded'}"]


def render_text(report: Report) -> str:
    """The human-readable report (what ``doctor`` prints without ``--json``)."""
    lines = _environment_lines(report) + _compiled_lines(report) + _record_lines(report)
    add = lines.append
    be = report.backend
    add(
        f"Backend requested: {be.requested or '-'} (from {be.source or '-'})"
        + (f"  ! {be.error}" if be.error else "")
    )
    for entry in report.devices:
        add(f"  {entry.device}:")
        for op, o in entry.ops.items():
            add(f"    {op:<24} {o.backend or 'ERROR'}")
    for c in report.checks or ():
        if c.ok:
            add(f"Check {c.device}: ok ({c.backend} backend, max abs error {c.max_abs_err:.2e})")
        else:
            detail = c.error or f"max abs error {c.max_abs_err:.3g} > {c.tolerance:.3g}"
            add(f"Check {c.device}: FAILED ({c.backend} backend): {detail}")
    title = {
        Status.OK: _ok_title(report),
        Status.FALLBACK: "FALLBACK: some ops run on the PyTorch fallback",
        Status.BROKEN: "BROKEN",
    }[report.status]
    add(f"Status: {title} (exit {report.exit_code})")
    for p in report.problems:
        where = ", ".join(p.ops + p.devices)
        where = f" [{where}]" if where else ""
        add(f"  - {p.reason}{where}")
        if p.fix:
            add(f"    fix: {p.fix}")
    return "\n".join(lines) + "\n"
