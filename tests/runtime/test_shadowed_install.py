"""Python started inside a source checkout imports the checkout's ``mamba_ssm``, which has no compiled
module, ahead of an installed one that has: the loader's reason and fix say so (the fresh-user trial
met a bare "not installed" and a build command here).

Two copies of the package: ``checkout/mamba_ssm`` (no ``_C``) and ``site/mamba_ssm`` (this build's real
``_C.abi3.so``), both on ``sys.path`` with the checkout first, as ``cd checkout && python`` with the
installed copy on ``PYTHONPATH`` gives; and, as the control, the same started elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILT = os.path.join(REPO, "mamba_ssm", "_C.abi3.so")
PROBE = (
    "import json, mamba_ssm; from mamba_ssm import _loader; r = _loader.load(); "
    "print(json.dumps([str(r.kind), r.reason, r.fix, mamba_ssm.__file__]))"
)


def _copy_package(dest: str, with_c: bool) -> str:
    pkg = os.path.join(dest, "mamba_ssm")
    shutil.copytree(
        os.path.join(REPO, "mamba_ssm"), pkg, ignore=shutil.ignore_patterns("*.so", "__pycache__", "_kernels")
    )
    if with_c:
        shutil.copyfile(BUILT, os.path.join(pkg, "_C.abi3.so"))
    return os.path.realpath(pkg)


def _probe(cwd: str, site: str) -> list:
    env = dict(os.environ, PYTHONPATH=site, MAMBA_SSM_NO_FALLBACK_WARNING="1")
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not os.path.isfile(BUILT), reason="needs the in-place build's mamba_ssm/_C.abi3.so")
def test_a_checkout_that_hides_an_installed_copy_says_so(tmp_path):
    checkout = tmp_path / "checkout"
    checkout_pkg = _copy_package(str(checkout), with_c=False)
    installed = _copy_package(str(tmp_path / "site"), with_c=True)
    kind, reason, fix, imported = _probe(str(checkout), str(tmp_path / "site"))
    assert os.path.realpath(os.path.dirname(imported)) == checkout_pkg
    assert kind == "missing"
    assert f"hides the one at {installed}" in reason, reason
    assert fix.startswith(f"run Python outside {checkout}"), fix
    assert f"`cd {checkout} && python setup.py build_ext --inplace`" in fix, fix
    # the control: started elsewhere, the installed copy is imported and its module loads
    kind, reason, _, imported = _probe(str(tmp_path), str(tmp_path / "site"))
    assert os.path.realpath(os.path.dirname(imported)) == installed
    assert kind == "loaded", reason


def test_a_checkout_alone_gets_the_usual_fix(tmp_path):
    """No other copy on sys.path: nothing is said about shadowing."""
    checkout = tmp_path / "checkout"
    _copy_package(str(checkout), with_c=False)
    kind, reason, fix, _ = _probe(str(checkout), str(tmp_path / "nothing-here"))
    assert kind == "missing"
    assert "hides" not in reason and "run Python outside" not in fix, (reason, fix)
