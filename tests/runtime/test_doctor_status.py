"""doctor's text report: the status line, the fix that follows the recorded install decision, and a
decision record that belongs to an earlier install."""

import dataclasses
import json
import os

import pytest

from mamba_ssm import _dispatch, _doctor
from mamba_ssm._doctor.report import GpuReport


def _report(monkeypatch, **env):
    """doctor's report (typed) on this machine's CPU, no GPU listed."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return _doctor.collect(gpus=GpuReport())


def test_ok_status_names_the_ops_with_compiled_kernels(monkeypatch):
    monkeypatch.delenv("MAMBA_SSM_BACKEND", raising=False)
    typed = _report(monkeypatch)
    report = typed.to_dict()
    if report["status"] != "ok":
        pytest.skip(
            "the compiled module is not loadable here: " + str(report["compiled_module"].get("reason"))
        )
    text = _doctor.render_text(typed)
    (line,) = [l for l in text.splitlines() if l.startswith("Status:")]
    ops = report["devices"][0]["ops"]
    compiled = [op for op, o in ops.items() if o["backend"] == "compiled"]
    torch_only = [op for op, o in ops.items() if o["backend"] == "torch"]
    assert sorted(compiled) == sorted(_dispatch.COMPILED_OPS)
    assert torch_only, "the single-implementation ops report torch"
    assert "the compiled kernels run on every device (exit" not in line  # the old, imprecise claim
    for op in compiled:
        assert op in line.split(";")[0]
    for op in torch_only:
        assert op in ";".join(line.split(";")[1:])
    # on a CPU the ops with Triton kernels (CUDA/ROCm only) say so rather than "PyTorch only"
    triton_here = [op for op in torch_only if op in _dispatch.TRITON_OPS]
    if triton_here:
        assert "their Triton kernels are for CUDA/ROCm GPUs" in line.split(";")[1], line
    if set(torch_only) - set(_dispatch.TRITON_OPS):
        assert "PyTorch implementation only" in line, line
    assert line.endswith("(exit 0)")


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A stand-in site-packages for the installed distribution, and an empty decision folder."""
    from mamba_ssm._install import record

    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.setattr(record, "_site_dir", lambda: str(site))
    monkeypatch.setenv("MAMBA_SSM_DECISION_DIR", str(tmp_path / "decisions"))
    return site


def _install(site, install_id=None, version="2.4.0.dev0"):
    """What pip leaves: a dist-info with RECORD (and, for wheels setup.py built, the install id)."""
    from mamba_ssm._install import record

    di = site / f"mamba_ssm-{version}.dist-info"
    di.mkdir()
    (di / "RECORD").write_text("mamba_ssm/__init__.py,,\n")
    if install_id:
        (di / record.INSTALL_ID_FILE).write_bytes(record.install_id_file_bytes(install_id))
    return di


def _write(data):
    """Write the install record whose JSON object is ``data``."""
    from mamba_ssm._install import record

    record.write_record(record.InstallRecord.from_dict(data))


def _text_and_decision(monkeypatch):
    typed = _report(monkeypatch)
    return _doctor.render_text(typed), typed.to_dict()["install_decision"]


def test_install_kernels_record_goes_stale_after_a_reinstall(site, monkeypatch):
    from mamba_ssm._install import record

    di = _install(site)
    _write(
        {
            "final_mode": "install-kernels",
            "status": "prebuilt",
            "time": "2026-11-29T10:00:00Z",
            "message": "Downloaded and verified",
            "install": record.dist_info_identity().to_dict(),
        }
    )
    text, dec = _text_and_decision(monkeypatch)
    assert dec["current"] is True and "  final mode: install-kernels" in text

    # MAMBA_SKIP_CUDA_BUILD=TRUE pip install --force-reinstall: pip rewrites the dist-info
    import shutil

    shutil.rmtree(di)
    di = _install(site)
    os.utime(di / "RECORD", ns=(1, 1))
    text, dec = _text_and_decision(monkeypatch)
    assert dec["current"] is False and dec["kernels_deferred"] is False
    assert "final mode: install-kernels\n" not in text and "Downloaded and verified" not in text
    assert (
        "Install decision: the recorded decision belongs to an earlier install (recorded "
        "2026-11-29T10:00:00Z, final mode install-kernels)"
    ) in text


@pytest.mark.parametrize("later", ["other-id", "no-id", "no-install"])
def test_setup_record_is_current_only_for_the_wheel_it_was_written_for(site, monkeypatch, later):
    di = _install(site, "a" * 32)
    _write(
        {
            "final_mode": "deferred",
            "status": "deferred",
            "time": "2026-11-29T09:00:00Z",
            "message": "torch was being installed by the same command",
            "install": {"install_id": "a" * 32},
        }
    )
    text, dec = _text_and_decision(monkeypatch)
    assert dec["current"] is True and dec["kernels_deferred"] is True and "  final mode: deferred" in text

    # rm -rf venv, a new venv at the same path, mamba-ssm installed again (another wheel, or not at all)
    import shutil

    shutil.rmtree(di)
    if later != "no-install":
        _install(site, "b" * 32 if later == "other-id" else None)
    text, dec = _text_and_decision(monkeypatch)
    assert dec["current"] is False and dec["kernels_deferred"] is False
    assert "  final mode: deferred" not in text
    assert "the recorded decision belongs to an earlier install (recorded 2026-11-29T09:00:00Z" in text


def test_record_without_install_identity_is_not_presented_as_current(site, monkeypatch):
    _install(site, "a" * 32)
    _write({"final_mode": "prebuilt", "status": "prebuilt", "time": "2026-01-01T00:00:00Z"})
    text, dec = _text_and_decision(monkeypatch)
    assert dec["current"] is False and "older mamba-ssm" in dec["stale_reason"]
    assert "belongs to an earlier install (recorded 2026-01-01T00:00:00Z" in text


def test_a_failed_install_attempt_is_reported_as_failed(site, monkeypatch):
    """A source build that failed after setup.py recorded it (final mode ``error``, as setup.py's
    preflight writes it through the setup hook) is the last attempt, which installed nothing: doctor
    says so with the recorded error and what to do, not that an older mamba-ssm wrote the record."""
    from mamba_ssm import _advice
    from mamba_ssm._install import setup_hook
    from mamba_ssm._install.record import InstallMode, InstallRecord

    monkeypatch.setattr(setup_hook, "_say", lambda text: None)
    outcome = setup_hook.requested("2.4.0.dev0", "MAMBA_FORCE_BUILD=TRUE")
    error = "nvcc was not found (set CUDA_HOME to a CUDA toolkit)"
    setup_hook.record(outcome, InstallMode.ERROR, message=f"{outcome.message} The build failed: {error}")
    text, dec = _text_and_decision(monkeypatch)
    assert dec["current"] is False
    assert "older mamba-ssm" not in text and "older mamba-ssm" not in (dec["stale_reason"] or "")
    lines = text.splitlines()
    (i,) = [n for n, l in enumerate(lines) if l.startswith("Install decision:")]
    assert lines[i].startswith("Install decision: the last install attempt failed (recorded 20")
    assert lines[i].endswith(") and installed nothing; it recorded:")
    assert "  final mode: error" in lines[i:]
    assert any(l.startswith("  message: ") and l.endswith(f"The build failed: {error}") for l in lines[i:])
    (todo,) = [l for l in lines if l.startswith("  what to do: ")]
    # a development version is on no index: the rebuild leads, install-kernels is not offered
    rebuild = _advice.reinstall_command()
    assert todo.startswith("  what to do: the error is in that install's output")
    assert f"fix its cause and build again: `{rebuild}`" in todo and "install-kernels" not in todo
    assert "is a development version, which no published wheel index has" in todo
    # a release (an index has it): the rebuild still leads, then the prebuilt kernels
    monkeypatch.setattr(_advice, "installed_version", lambda *a: "2.4.0")
    release = _advice.failed_attempt_fix(
        InstallRecord.from_dict(json.loads(open(dec["decision"]["path"]).read()))
    )
    assert release.index("build again") < release.index("`python -m mamba_ssm install-kernels`")


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_RECORDS = {
    "offline": {
        "final_mode": "python",
        "status": "error",
        "error_kind": "index-dns",
        "index": "https://wheels.example.invalid/mamba-ssm/",
        "message": "Could not resolve the index host wheels.example.invalid.",
    },
    "skip": {
        "final_mode": "python",
        "status": "requested",
        "requested": "MAMBA_SKIP_CUDA_BUILD=TRUE",
        "message": "MAMBA_SKIP_CUDA_BUILD=TRUE: the resolver was not asked (no prebuilt wheel looked for).",
    },
}


@pytest.mark.parametrize("cause", sorted(_RECORDS))
def test_fix_follows_the_recorded_cause(tmp_path, cause):
    """A package without _C whose (current) record says why: doctor's fix answers that cause."""
    import shutil
    import subprocess
    import sys

    root = tmp_path / "root"
    shutil.copytree(
        os.path.join(REPO, "mamba_ssm"),
        root / "mamba_ssm",
        ignore=lambda d, names: [n for n in names if n.startswith("_C") or n == "__pycache__"],
    )
    di = root / "mamba_ssm-2.4.0.dev0.dist-info"
    di.mkdir()
    (di / "mamba_ssm_install.json").write_text(json.dumps({"install_id": "c" * 32}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAMBA_")}
    env.update(
        PYTHONPATH=str(root), MAMBA_SSM_DECISION_DIR=str(tmp_path / "decisions"), PYTHONDONTWRITEBYTECODE="1"
    )
    rec = dict(_RECORDS[cause], install={"install_id": "c" * 32})
    code = (
        "from mamba_ssm._install.record import InstallRecord, write_record; "
        f"write_record(InstallRecord.from_dict({rec!r}))"
    )
    subprocess.run([sys.executable, "-c", code], cwd=str(root), env=env, check=True, timeout=120)
    p = subprocess.run(
        [sys.executable, "-m", "mamba_ssm", "doctor"],
        cwd=str(root),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 1, p.stdout + p.stderr
    status = p.stdout[p.stdout.index("Status:") :]
    fixes = [l.strip() for l in status.splitlines() if l.strip().startswith("fix:")]
    assert fixes, status
    if cause == "offline":
        assert all(
            "MAMBA_WHEEL_INDEX" in f and "python -m build_matrix mirror" in f and "index-dns" in f
            for f in fixes
        ), fixes
    else:
        assert all(
            "pure-Python package was requested" in f
            and "MAMBA_SKIP_CUDA_BUILD" in f
            and "install-kernels" in f
            for f in fixes
        ), fixes


def test_forced_source_build_is_titled_by_the_variable_not_as_a_resolver_decision(
    site, monkeypatch, tmp_path
):
    """A wheel built with MAMBA_FORCE_BUILD set: setup.py's real plan and record calls write the record
    (the resolver never runs), and doctor names the variable as the user set it, with no resolver
    status and no wheel choice."""
    from mamba_ssm._build.commands import build_note
    from mamba_ssm._build.plan import plan_build, record_decision
    from mamba_ssm._install import setup_hook

    cuda_home = os.environ.get("CUDA_HOME", "/usr/local/cuda-13.0")
    if not os.access(os.path.join(cuda_home, "bin", "nvcc"), os.X_OK):
        pytest.skip(f"no nvcc under CUDA_HOME={cuda_home}")
    project = tmp_path / "proj"
    (project / "csrc").mkdir(parents=True)
    (project / "csrc" / "tiny.cpp").write_text("int mamba_tiny() { return 1; }\n")
    typed = "1"  # any of env_flag's spellings; doctor must repeat this one
    env = {
        "PATH": os.environ["PATH"],
        "CUDA_HOME": cuda_home,
        "MAMBA_CUDA_ARCHS": "90",
        "MAMBA_FORCE_BUILD": typed,
    }
    plan = plan_build("wheel", env, str(project), hook=setup_hook)
    assert plan.mode == "source" and plan.hook is not None
    record_decision(plan.hook, plan.outcome, plan.final_mode, "d" * 32, build=build_note(plan, 12.3))
    _install(site, "d" * 32)

    text, dec = _text_and_decision(monkeypatch)
    assert dec["current"] is True and dec["decision"]["status"] == "requested"
    section = text[text.index("Install") : text.index("Backend requested:")].splitlines()
    when = dec["decision"]["time"]
    assert section[0] == (
        f"Install (recorded by setup.py, {when}): a source build, forced with MAMBA_FORCE_BUILD={typed}; "
        "the resolver was not asked, so no prebuilt wheel was looked for:"
    )
    assert section[1] == "  final mode: source"
    assert section[-2].startswith("  install-time build: source (kernels: ") and section[-2].endswith(
        f"; 12.3 s): MAMBA_FORCE_BUILD={typed}"
    )
    assert section[-1] == f"  record: {dec['decision']['path']}"
    assert "resolver status" not in text and "recorded by the resolver" not in text
    assert "wheel: none chosen" not in text and "MAMBA_FORCE_BUILD=TRUE" not in text


def test_a_failed_attempt_before_the_module_in_use_is_not_shown_as_current(site, monkeypatch):
    """A failed install attempt recorded before the compiled module now loaded was built (a later
    in-place or source build that wrote no record): doctor says the attempt came first and shows none
    of its advice; recorded after it, the attempt is the last word, with what to do."""
    import time

    from mamba_ssm import _loader
    from mamba_ssm._install import setup_hook
    from mamba_ssm._install.record import InstallMode

    load = _loader.load()
    if not load.loaded or not load.path:
        pytest.skip("no compiled module loads here")
    monkeypatch.setattr(setup_hook, "_say", lambda text: None)
    built = os.stat(load.path).st_mtime
    for when, superseded in ((built - 120, True), (time.time() + 5, False)):
        outcome = setup_hook.requested("2.4.0.dev0", "MAMBA_FORCE_BUILD=TRUE")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
        outcome = dataclasses.replace(outcome, record=dataclasses.replace(outcome.record, time=stamp))
        setup_hook.record(outcome, InstallMode.ERROR, message="The build failed: MAMBA_CUDA_ARCHS='95'")
        text, dec = _text_and_decision(monkeypatch)
        (line,) = [l for l in text.splitlines() if l.startswith("Install decision:")]
        if superseded:
            assert line.startswith(f"Install decision: an install attempt failed earlier (recorded {stamp})")
            assert f"the compiled module in use, {load.path}, made 20" in line
            assert "what to do:" not in text and "  message: " not in text
            assert dec["superseded_by"].startswith(f"the compiled module in use, {load.path}")
        else:
            assert line.startswith("Install decision: the last install attempt failed")
            assert "  what to do: " in text and dec["superseded_by"] is None
