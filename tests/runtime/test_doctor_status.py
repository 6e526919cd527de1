"""doctor's text report: the status line, the fix that follows the recorded install decision, and a
decision record that belongs to an earlier install."""
import json
import os
import zipfile

import pytest

from mamba_ssm import _dispatch, _doctor


def _report(monkeypatch, **env):
    monkeypatch.setattr(_doctor, "_gpu_info", lambda torch_ok: {"count": 0, "devices": [], "error": None})
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return _doctor.collect()


def test_ok_status_names_the_ops_with_compiled_kernels(monkeypatch):
    monkeypatch.delenv("MAMBA_SSM_BACKEND", raising=False)
    report = _report(monkeypatch)
    if report["status"] != "ok":
        pytest.skip("the compiled module is not loadable here: " + str(report["compiled_module"].get("reason")))
    text = _doctor.render_text(report)
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
        assert op in line.split(";")[1]
    assert "PyTorch implementation only" in line and line.endswith("(exit 0)")
