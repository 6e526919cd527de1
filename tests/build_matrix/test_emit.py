"""emit: the generated release and builder-images workflows and builder images are current (drift),
lint clean with hadolint, actionlint (with shellcheck over every `run:`) and zizmor, and follow the
matrix: one cibuildwheel job per cell whose config (parsed with tomllib) is the cell's plan and gives
cibuildwheel exactly one build identifier; publishing in order; every action pinned by commit from one
pins file; each job with only the token permissions it uses; no repository owner written anywhere."""

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import tomllib
import yaml
from _linters import linter

from build_matrix import build, emit
from build_matrix import matrix as mx
from mamba_ssm._compat import archs as compat_archs

ROOT = mx.REPO_ROOT
WORKFLOWS = (".github/workflows/release.yml", ".github/workflows/builder-images.yml")
PINS = ROOT / "build_matrix" / emit.TEMPLATES_DIR / emit.ACTION_PINS


def _actionlint(*files, cwd=ROOT):
    """actionlint over ``files`` with Debian's shellcheck checking every ``run:`` script."""
    cmd = [linter("actionlint"), "-oneline", "-shellcheck", linter("shellcheck"), *map(str, files)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False)


def _zizmor(*paths, cwd=ROOT):
    """zizmor at its default settings, offline (no GitHub API: the audits that need it are off)."""
    cmd = [linter("zizmor"), "--offline", "--no-progress", "--format", "plain", *map(str, paths)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False)


def _workflows():
    """{path: parsed YAML} of the generated workflows."""
    return {rel: yaml.safe_load((ROOT / rel).read_text()) for rel in WORKFLOWS}


def test_no_drift(tmp_path):
    files = emit.generated_files()
    for rel, text in files.items():
        on_disk = ROOT / rel
        assert on_disk.exists(), f"{rel} missing: run python -m build_matrix emit"
        assert on_disk.read_text() == text, f"{rel} drifted from matrix.toml: run python -m build_matrix emit"
    out = subprocess.run(
        [sys.executable, "-m", "build_matrix", "emit", "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
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
        check=False,
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
        check=False,
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
    assert f'"cibuildwheel=={emit.CIBUILDWHEEL_VERSION}"' in wheel
    assert wheel.count("python -m cibuildwheel --platform linux --config-file cibuildwheel.toml") == 1
    assert 'python -m build_matrix emit --cibuildwheel "$CELL" --owner "$OWNER"' in wheel
    assert "packages: read" in wheel and "docker/login-action@" in wheel  # ghcr packages start private
    # the cache survives a failed / timed-out build: saved with if: always(), build step times out first
    save = text.index("uses: actions/cache/save@")
    assert "if: always()" in text[text.rindex("- name:", 0, save) : save]
    assert emit.BUILD_STEP_TIMEOUT_MIN < emit.JOB_TIMEOUT_MIN
    # provenance for every wheel, by a job that runs no build code; the build jobs mint no OIDC token
    attest = _job(text, "attest")
    assert "needs: wheel" in attest and "pattern: wheel-*" in attest
    assert "uses: actions/attest@" in attest and "subject-path: dist/wheels/*.whl" in attest
    assert "id-token: write" not in wheel and "attestations: write" not in wheel


def test_cibuildwheel_tested_is_the_one_the_workflow_runs():
    """The wheel job installs cibuildwheel==CIBUILDWHEEL_VERSION; the tests here run the installed one
    (ci/requirements-dev.txt pins the same version)."""
    from importlib.metadata import version

    dev = (ROOT / "ci" / "requirements-dev.txt").read_text().split()
    assert f"cibuildwheel=={emit.CIBUILDWHEEL_VERSION}" in dev
    assert version("cibuildwheel") == emit.CIBUILDWHEEL_VERSION


def test_publishing_in_order():
    """Release assets -> Pages -> sdist (after the index) -> pin check -> PyPI, each gated on the last."""
    text = (ROOT / ".github/workflows/release.yml").read_text()
    order = [
        ("attest", "needs: wheel"),
        ("release-assets", "needs: [plan, sdist-test, attest]"),
        ("site", "needs: [plan, release-assets]"),
        ("pages", "needs: [plan, site]"),
        ("sdist", "needs: [plan, pages]"),
        ("pypi-wheels", "needs: [plan, sdist]"),
        ("attest-pypi", "needs: pypi-wheels"),
        ("check-pin", "needs: [plan, sdist]"),
        ("publish", "needs: [plan, check-pin, attest-pypi]"),
    ]
    for job, needs in order:
        assert needs in _job(text, job), job
    assert "gh release upload" in _job(text, "release-assets") and "contents: write" in _job(
        text, "release-assets"
    )
    site = _job(text, "site")
    assert "gh release list" in site and "release site" in site  # every earlier release's roots
    assert "actions/upload-pages-artifact@" in site
    assert "actions/deploy-pages@" in _job(text, "pages")
    assert "release sdist --index" in _job(text, "sdist")
    assert "release verify-pin" in _job(text, "check-pin")
    publish = _job(text, "publish")
    assert "environment: pypi" in publish
    # trusted publishing (no token, no password) with a Sigstore-signed PEP 740 attestation, by tools
    # installed from the hash-locked file only
    assert f"pip install --require-hashes --no-deps -r {emit.PUBLISH_REQUIREMENTS}" in publish
    assert "python -m pypi_attestations sign dist/*.tar.gz dist/*.whl" in publish
    assert "pattern: pypi-wheel-*" in publish and "name: sdist" in publish
    assert "twine upload --non-interactive --attestations dist/*" in publish
    assert "password" not in publish and "secrets." not in publish
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
    assert "packages: write" in bw and "uses: docker/bake-action@" in bw


def _steps(wf):
    for name, job in wf["jobs"].items():
        for step in job.get("steps", []):
            yield name, step


def test_every_action_pinned_from_the_pins_file():
    """Every `uses:` of the generated workflows is one line of the pins file (a full commit SHA, its tag
    in a trailing comment), and every pin is used."""
    pins = emit.action_pins()
    assert pins and all(re.fullmatch(r"[\w./-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+", p) for p in pins.values())
    used = set()
    for rel in WORKFLOWS:
        for line in (ROOT / rel).read_text().splitlines():
            if re.match(r"\s*(- )?uses:", line):
                ref = line.split("uses:", 1)[1].strip()
                assert ref in pins.values(), (rel, line)
                used.add(ref.split("@")[0])
    assert used == set(pins), f"pins no workflow uses: {sorted(set(pins) - used)}"


def test_pin_file_errors():
    good = "    - uses: actions/checkout@" + "a" * 40 + " # v7.0.1\n"
    assert emit.action_pins(good) == {"actions/checkout": "actions/checkout@" + "a" * 40 + " # v7.0.1"}
    for bad in (
        "    - uses: actions/checkout@v7 # v7\n",  # a movable tag
        "    - uses: actions/checkout@" + "a" * 39 + " # v7.0.1\n",  # a short SHA
        "    - uses: actions/checkout@" + "a" * 40 + "\n",  # no tag comment
    ):
        with pytest.raises(ValueError, match="is not `- uses: owner/repo@<40-hex"):
            emit.action_pins(bad)
    with pytest.raises(ValueError, match="pinned twice"):
        emit.action_pins(good + good)


def test_template_placeholders_must_match(monkeypatch):
    real = emit.template
    monkeypatch.setattr(
        emit, "template", lambda n: "a: @A@\nb: @PIN nobody/nothing@\n" if n == "t" else real(n)
    )
    with pytest.raises(ValueError) as e:
        emit.fill("t", B="1")
    assert "without a value ['A']" in str(e.value) and "without a placeholder ['B']" in str(e.value)
    assert "without a pin" in str(e.value) and "nobody/nothing" in str(e.value)


def test_checkouts_keep_no_credentials():
    """No job pushes with git: every checkout leaves no token in the workspace (artifacts, caches and
    build steps could carry it off)."""
    n = 0
    for rel, wf in _workflows().items():
        for job, step in _steps(wf):
            if step.get("uses", "").startswith("actions/checkout@"):
                n += 1
                assert step.get("with", {}).get("persist-credentials") is False, (rel, job)
    assert n >= 9


# The token permissions each job may hold (least privilege); every job declares its own.
PERMISSIONS = {
    "plan": {"contents": "read"},
    "sdist-test": {"contents": "read"},
    "wheel": {"contents": "read", "packages": "read"},
    "attest": {"contents": "read", "id-token": "write", "attestations": "write"},
    "release-assets": {"contents": "write"},
    "site": {"contents": "read"},
    "pages": {"pages": "write", "id-token": "write"},
    "sdist": {"contents": "read"},
    "pypi-wheels": {"contents": "read"},
    "attest-pypi": {"contents": "read", "id-token": "write", "attestations": "write"},
    "check-pin": {"contents": "read"},
    "publish": {"contents": "read", "id-token": "write"},
    "bake": {"contents": "read", "packages": "write"},
}


def test_least_privilege_permissions():
    for rel, wf in _workflows().items():
        assert wf["permissions"] == {"contents": "read"}, rel
        for name, job in wf["jobs"].items():
            assert job.get("permissions") == PERMISSIONS[name], (rel, name)
    assert set(PERMISSIONS) == {j for wf in _workflows().values() for j in wf["jobs"]}


def test_no_expression_inside_run_scripts():
    """`${{ }}` is expanded into a script before the shell parses it: values reach `run:` through `env:`."""
    for rel, wf in _workflows().items():
        for job, step in _steps(wf):
            assert "${{" not in step.get("run", ""), (rel, job, step.get("name"))


def test_dependabot_bumps_the_pins_file():
    cfg = yaml.safe_load((ROOT / ".github/dependabot.yml").read_text())
    (actions,) = [u for u in cfg["updates"] if u["package-ecosystem"] == "github-actions"]
    assert (ROOT / actions["directory"].lstrip("/") / "action.yml") == PINS
    assert actions["cooldown"]["default-days"] >= 7


def test_publish_requirements_are_locked():
    """The publish job installs only hash-pinned packages: the .in file's tools at its versions."""
    lock = (ROOT / emit.PUBLISH_REQUIREMENTS).read_text()
    reqs = re.findall(
        r"^([A-Za-z0-9_.-]+)==(\S+) \\\n((?:\s+--hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", lock, re.MULTILINE
    )
    pinned = {name.lower().replace("_", "-"): v for name, v, _ in reqs}
    assert len(reqs) == len(re.findall(r"^[A-Za-z0-9]", lock, re.MULTILINE)), (
        "every requirement pinned with hashes"
    )
    top = (ROOT / emit.PUBLISH_REQUIREMENTS).with_suffix(".in").read_text()
    for name, v in re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", top, re.MULTILINE):
        assert pinned[name.lower()] == v, name
    assert {"twine", "pypi-attestations", "sigstore", "id"} <= set(pinned)


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
    archs = compat_archs
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
            assert "." not in env["MAMBA_CUDA_ARCHS"], "docs/build.md's syntax: 80;90+PTX, not 8.0;9.0+PTX"
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
            check=False,
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
        check=False,
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
        check=False,
    )
    assert out.returncode == 2 and "image owner 'a/b'" in out.stderr


def test_hadolint_clean_and_catches_a_bad_dockerfile(tmp_path):
    exe = linter("hadolint")
    files = sorted((ROOT / "docker").glob("*.Dockerfile"))
    assert files
    out = subprocess.run([exe, *map(str, files)], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    bad = tmp_path / "bad.Dockerfile"
    bad.write_text("FROM quay.io/pypa/manylinux_2_28_x86_64:latest\nRUN cd /tmp && make\n")
    out = subprocess.run([exe, str(bad)], capture_output=True, text=True, check=False)
    assert out.returncode != 0 and "DL3007" in out.stdout  # FROM ...:latest


def _bad_copy(tmp_path, **replacements):
    """A copy of .github/ (workflows and configs) under tmp_path with release.yml's text changed."""
    shutil.copytree(ROOT / ".github", tmp_path / ".github")
    wf = tmp_path / ".github/workflows/release.yml"
    text = wf.read_text()
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new, 1)
    wf.write_text(text)
    return wf


def test_actionlint_clean_and_catches_a_bad_workflow(tmp_path):
    out = _actionlint(*WORKFLOWS)
    assert out.returncode == 0 and out.stdout == "", out.stdout + out.stderr
    wf = _bad_copy(
        tmp_path,
        **{
            "${{ matrix.runner }}": "${{ matrix.runnerr }}",
            "runs-on: ubuntu-24.04\n": "runs-on: ubuntu-99.04\n",
            "mkdir -p dist/indexes": "mkdir -p $INDEXES",  # shellcheck SC2086, through actionlint
            "python -m build_matrix plan\n": 'python -m build_matrix plan "${{ github.event.head_commit.message }}"\n',
        },
    )
    out = _actionlint(wf.relative_to(tmp_path), cwd=tmp_path)
    assert out.returncode == 1
    assert "runnerr" in out.stdout and '"ubuntu-99.04" is unknown' in out.stdout
    assert "SC2086" in out.stdout and "[shellcheck]" in out.stdout
    assert '"github.event.head_commit.message" is potentially untrusted' in out.stdout


def test_pinned_majors_are_not_deprecated():
    """actionlint knows the runtime of popular actions by tag: none of the pins' tags is one it reports
    deprecated (the node20 runtime), as actions/checkout@v4 is."""
    steps = "".join(
        f"      - uses: {p.split('@')[0]}@{p.split('# ')[1]}\n" for p in emit.action_pins().values()
    )
    wf = "on: push\njobs:\n  j:\n    runs-on: ubuntu-24.04\n    steps:\n"
    out = subprocess.run(
        [linter("actionlint"), "-oneline", "-"],
        input=wf + steps,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert out.returncode == 0 and out.stdout == "", out.stdout
    out = subprocess.run(
        [linter("actionlint"), "-oneline", "-"],
        input=wf + "      - uses: actions/checkout@v4\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert 'runtime "node20" is deprecated' in out.stdout


def test_zizmor_clean_and_catches_a_bad_workflow(tmp_path):
    """zizmor at its default settings reports nothing on .github/ and the pins file (no relaxation:
    no zizmor config, no ignore comment), and does report an unpinned action, a checkout that keeps
    its credentials and an expression inside a script."""
    assert not list(ROOT.glob(".github/zizmor.y*ml")) and not list(ROOT.glob("zizmor.y*ml"))
    for text in emit.generated_files().values():
        assert "zizmor: ignore" not in text
    out = _zizmor(".github", PINS.parent.relative_to(ROOT))
    assert out.returncode == 0 and "No findings to report" in out.stdout, out.stdout + out.stderr
    pins = emit.action_pins()
    wf = _bad_copy(
        tmp_path,
        **{
            f"uses: {pins['actions/cache/save']}": "uses: actions/cache/save@v5",
            "        with:\n          persist-credentials: false\n      - uses": "      - uses",
            "python -m build_matrix plan\n": 'python -m build_matrix plan "${{ github.event.head_commit.message }}"\n',
        },
    )
    out = _zizmor(wf.relative_to(tmp_path), cwd=tmp_path)
    assert out.returncode != 0
    for audit in ("unpinned-uses", "artipacked", "template-injection"):
        assert f"[{audit}]" in out.stdout, (audit, out.stdout[-3000:])


def test_pypi_wheels_job_follows_the_pypi_table():
    """One merge job per [pypi] platform, after the sdist (its release_index.json goes in), holding no
    OIDC token; a job of its own attests the wheels; the merge job installs the pinned tools."""
    plan = mx.load_plan()
    wf = _workflows()[".github/workflows/release.yml"]
    job = wf["jobs"]["pypi-wheels"]
    assert job["strategy"]["matrix"]["platform"] == [w.platform for w in plan.pypi] == ["x86_64", "aarch64"]
    run = "\n".join(s.get("run", "") for s in job["steps"])
    assert 'python -m build_matrix pypi-wheel --platform "$PLATFORM" --cells dist/wheels' in run
    assert "--sdist dist/sdist/*.tar.gz" in run
    assert all(r in run for r in emit.PYPI_WHEEL_REQUIRES) and "wheel==" in run
    assert "id-token" not in job["permissions"]
    attest = wf["jobs"]["attest-pypi"]
    assert [s["with"]["subject-path"] for s in attest["steps"] if "attest@" in s.get("uses", "")] == [
        "dist/pypi/*.whl"
    ]
