"""Every fix command we print is safe to paste, and is tested by running it.

A venv whose torch (2.14.1, shared from the dev venv through a .pth file) differs from its installed
mamba-ssm's ``_C`` (build info: torch 2.13 + CUDA 12.6) gets the loader's and doctor's fixes, and the
fixes that follow each recorded decision. The installed mamba-ssm is a released version (the sdist
of this tree with ``_version.py`` saying 2.4.0): every ``pip install`` command among them must pin it,
and, executed with ``pip --dry-run --report`` against a loopback PEP 503 index that serves that sdist
(plus a torch 2.13.0, a packaging and an einops wheel, as PyPI would), must plan to install mamba-ssm and nothing
else. The unpinned ``--force-reinstall`` command these messages printed before plans torch as well
(checked as a control, so the harness can fail).

A development version (this tree's ``2.4.0.dev0``) is on no index, so a pinned command for it fails
when pasted: installed by pip from a folder (a second venv), its fixes rebuild that folder with
README.md's source-install command, which a dry run in that folder plans as mamba-ssm alone.

The index serves no setuptools, so the dry runs add ``--no-build-isolation`` (pip then prepares our
sdist's metadata with the venv's setuptools; the dependency plan is the same). pip's own
configuration on the machine (extra indexes, find-links, constraints) is switched off.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import threading
from pathlib import Path

import pytest
from packaging.version import Version

sys.path.insert(0, os.path.dirname(__file__))
from helpers import build_info, make_wheel

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_SITE = sysconfig.get_paths()["purelib"]
VERSION = "2.4.0"  # a final release (PEP 440): an index serves it
CUSTOM_INDEX = "https://wheels.example.invalid/mamba/"


def _run(cmd, env, timeout=300, check=True, cwd=None):
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if check and proc.returncode != 0:
        raise AssertionError(f"{cmd} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _pip_env(base):
    env = {k: v for k, v in base.items() if not k.startswith(("PIP_", "UV_"))}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    return env


def _fake_wheel(folder, name, version):
    """A minimal valid pure-Python wheel ``name==version`` (stands in for torch / packaging)."""
    import base64
    import hashlib
    import zipfile

    dist = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": b"",
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    rows = [
        f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}"
        for n, d in files.items()
    ] + [f"{dist}/RECORD,,"]
    files[f"{dist}/RECORD"] = ("\n".join(rows) + "\n").encode()
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}-{version}-py3-none-any.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for n, d in files.items():
            zf.writestr(n, d)
    return os.path.basename(path)


def _version_file(version):
    """mamba_ssm/_version.py of this tree with ``version`` as ``__version__``."""
    with open(os.path.join(REPO, "mamba_ssm", "_version.py")) as fh:
        text = fh.read()
    out, n = re.subn(r'^__version__ = "[^"]+"$', f'__version__ = "{version}"', text, flags=re.MULTILINE)
    assert n == 1
    return out


def _venv_with_mamba(venv, source, env):
    """A venv at ``venv`` sharing this torch through a .pth file, with mamba-ssm installed by pip from
    ``source`` (an sdist or a folder; the pure-Python package). Returns its python and site folder."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], env)
    py = str(venv / "bin" / "python")
    site = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], env).stdout.strip()
    with open(os.path.join(site, "_shared_torch.pth"), "w") as fh:
        fh.write(SHARED_SITE + "\n")
    _run(
        [
            py,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-cache-dir",
            str(source),
        ],
        dict(env, MAMBA_SKIP_CUDA_BUILD="TRUE"),
        timeout=600,
    )
    return py, site


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    if not os.path.isdir("/proc") or sys.version_info[:2] != (3, 11):
        pytest.skip("needs the dev venv (Python 3.11 with torch)")
    work = tmp_path_factory.mktemp("fixes")
    env = _pip_env(dict(os.environ, MAMBA_SSM_CACHE_DIR=str(work / "cache")))
    env.pop("MAMBA_WHEEL_INDEX", None)
    # the sdist of this tree as the released VERSION, served as a PEP 503 project with a torch, a
    # packaging and an einops wheel (its dependencies)
    from build_matrix import sdist_check

    sdist = str(sdist_check.build_sdist(work / "sdist", {"mamba_ssm/_version.py": _version_file(VERSION)}))
    assert os.path.basename(sdist) == f"mamba_ssm-{VERSION}.tar.gz"
    simple = work / "index" / "simple"
    # beside the sdist, the same version's per-platform wheel, as PyPI serves it: a printed rebuild must
    # still take the sdist (pip and uv prefer a wheel)
    pypi_wheel = make_wheel(
        str(work / "pypi-wheel"),
        "",
        None,
        version=VERSION,
        python_tag="cp310",
        requires_dist=("torch>=2.10", "packaging", "einops"),
    )
    for project, files in (
        ("mamba-ssm", [sdist, pypi_wheel]),
        ("torch", ["torch:2.13.0"]),
        ("packaging", ["packaging:24.0"]),
        ("einops", ["einops:0.8.1"]),
    ):
        folder = simple / project
        folder.mkdir(parents=True)
        names = []
        for f in files:
            if ":" in f:
                names.append(_fake_wheel(str(folder), *f.split(":")))
            else:
                os.link(f, folder / os.path.basename(f))
                names.append(os.path.basename(f))
        (folder / "index.html").write_text("".join(f'<a href="{n}">{n}</a>\n' for n in names))
    (simple / "index.html").write_text(
        '<a href="mamba-ssm/">mamba-ssm</a><a href="torch/">torch</a><a href="packaging/">packaging</a>'
        '<a href="einops/">einops</a>'
    )
    # the venv: torch 2.14.1 shared, mamba-ssm installed from the sdist (pure Python), then a _C whose
    # build info says torch 2.13 + CUDA 12.6, as pip's wheel cache can hand over
    py, site = _venv_with_mamba(work / "venv", sdist, env)
    blob = (
        b"\x7fELF-fake"
        b"MAMBA_SSM_BUILD_INFO_BEGIN"
        + json.dumps(build_info(torch="2.13.0+cu126", cuda="12.6", nvcc="12.6", version=VERSION)).encode()
        + b"MAMBA_SSM_BUILD_INFO_END"
    )
    with open(os.path.join(site, "mamba_ssm", "_C.abi3.so"), "wb") as fh:
        fh.write(blob)
    with _static_server(str(work / "index")) as url:
        yield {"work": work, "py": py, "site": site, "env": env, "simple": url + "simple/", "blob": blob}


@contextlib.contextmanager
def _static_server(root):
    """A PEP 503 static index on 127.0.0.1 (the standard library's file server: text/html pages)."""
    handler = functools.partial(_QuietHandler, directory=root)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _dry_run(world, command, name, versions=False, files=None):
    """Execute ``command`` as printed (``[cd DIR &&] VAR=value ... python -m pip install ...``) in the
    venv with ``--dry-run``; returns the names pip would install (``name==version`` with ``versions``).
    ``files``: a dict that receives each planned name's file (the last part of its URL)."""
    words = shlex.split(command, comments=True)
    env = dict(world["env"])
    cwd = str(world["work"])
    if words[0] == "cd" and words[2] == "&&":  # `cd <source tree> && ...`
        cwd = words[1]
        words = words[3:]
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        key, value = words.pop(0).split("=", 1)
        env[key] = value
    assert words[:4] == ["python", "-m", "pip", "install"], command
    report = str(world["work"] / f"report-{name}.json")
    args = [world["py"]] + words[1:] + ["--dry-run", "--report", report, "--index-url", world["simple"]]
    if "--no-build-isolation" not in args:
        args.append("--no-build-isolation")
    proc = _run(args, env, check=False, cwd=cwd)
    assert proc.returncode == 0, (
        f"{command!r} failed under --dry-run:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    )
    with open(report) as fh:
        items = json.load(fh)["install"]
    meta = [item["metadata"] for item in items]
    if files is not None:
        for item in items:
            files[item["metadata"]["name"].lower()] = item["download_info"]["url"].rsplit("/", 1)[-1]
    return sorted(m["name"].lower() + (f"=={m['version']}" if versions else "") for m in meta)


def _commands(text):
    """The pip commands a message names (in backticks or single quotes)."""
    return [
        c for c in re.findall(r"`([^`]+)`|'([^']*pip install[^']*)'", text) for c in c if "pip install" in c
    ]


@pytest.fixture(scope="module")
def printed(world):
    """The fix texts, collected in the venv (one process: the loader imports torch)."""
    return json.loads(
        _run(
            [
                world["py"],
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "collect_fix_commands.py"),
                VERSION,
                CUSTOM_INDEX,
            ],
            world["env"],
            cwd=str(world["work"]),
        )
        .stdout.strip()
        .splitlines()[-1]
    )


def test_every_printed_fix_pins_the_version_and_never_changes_torch(world, printed):
    out = printed
    assert "2.13" not in out["incompatible"] and "install-kernels" in out["incompatible"]
    # the first fix for a wheel built for another torch is install-kernels, which installs only our wheel
    assert out["incompatible"].index("install-kernels") < out["incompatible"].index("pip install")
    assert not Version(VERSION).is_devrelease and not Version(VERSION).is_prerelease
    commands = {}
    for key, text in out.items():
        found = _commands(text) if "`" in text or "'" in text else [text]
        for cmd in found:
            if "pip install" in cmd:
                commands.setdefault(cmd, key)
    assert len(commands) >= 4, commands
    for cmd, key in commands.items():
        assert f"mamba-ssm=={VERSION}" in cmd.split(), (key, cmd)
        assert "--force-reinstall" not in cmd or "--no-deps" in cmd, (key, cmd)
    for i, (cmd, key) in enumerate(sorted(commands.items())):
        files: dict = {}
        planned = _dry_run(world, cmd, f"{i}", files=files)
        # a reinstall plans mamba-ssm alone; a plain install finds it already there and plans nothing
        assert planned == (["mamba-ssm"] if "--force-reinstall" in cmd else []), (key, cmd, planned)
        # ... from the sdist, though the index also serves the per-platform wheel of that version
        if planned:
            assert files["mamba-ssm"] == f"mamba_ssm-{VERSION}.tar.gz", (key, cmd, files)


def test_the_harness_sees_torch_in_the_old_unpinned_fix(world):
    """Control: the command printed before (no version, no --no-deps) plans torch 2.13.0 from the index."""
    planned = _dry_run(world, "python -m pip install --no-cache-dir --force-reinstall mamba-ssm", "old")
    assert "torch" in planned and "mamba-ssm" in planned


def test_fixes_follow_the_recorded_decision_and_its_index(printed):
    out = printed
    # an install that used another index: install-kernels and the reinstall go there again
    custom = out["prebuilt_custom_index:mismatch"]
    assert (
        f"install-kernels --index {CUSTOM_INDEX}" in custom
        and f"MAMBA_WHEEL_INDEX={CUSTOM_INDEX} python -m pip" in custom
    )
    assert out["prebuilt_custom_index:FIX_REINSTALL"].startswith(f"MAMBA_WHEEL_INDEX={CUSTOM_INDEX} ")
    # no wheel fitted: install-kernels is not the fix (it fails the same way); the source build is
    for key in ("no_candidate:missing", "no_candidate:mismatch"):
        text = out[key]
        assert "fails the same way" in text and "MAMBA_FORCE_BUILD=TRUE python -m pip install" in text, text
        assert not text.startswith("run `python -m mamba_ssm install-kernels")
    # an unreachable index: the plain install-kernels after pointing MAMBA_WHEEL_INDEX elsewhere
    assert "MAMBA_WHEEL_INDEX" in out["unreachable:missing"] and "--index" not in out["unreachable:missing"]
    assert "now that torch is present" in out["deferred:missing"]
    assert "MAMBA_SKIP_CUDA_BUILD=TRUE" in out["skip_requested:missing"]
    assert f"mamba-ssm=={VERSION}" in out["skip_requested:missing"]


def test_install_kernels_uses_the_index_the_install_used(world, tmp_path):
    """With no --index and no MAMBA_WHEEL_INDEX, install-kernels goes to the recorded index, not the
    release index (here a local index with no wheel for this torch: exit 1, no-candidate)."""
    root = tmp_path / "other-index"
    make_wheel(
        str(root),
        "cu12torch2.13cxx11abiTRUE",
        build_info(torch="2.13.0+cu126", cuda="12.6", nvcc="12.6", version=VERSION),
        platform="manylinux_2_28_x86_64",
        version=VERSION,
    )
    from build_matrix.index import build_index

    build_index(str(root))
    script = (
        "import sys; from mamba_ssm._install import record as D; "
        "D.write_record(D.InstallRecord.from_dict({'package_version': sys.argv[1], 'status': 'prebuilt', "
        "'final_mode': 'prebuilt', 'index': sys.argv[2], 'install': D.dist_info_identity().to_dict()}))"
    )
    index = root.as_uri() + "/"
    _run([world["py"], "-c", script, VERSION, index], world["env"], cwd=str(tmp_path))
    proc = _run(
        [world["py"], "-m", "mamba_ssm", "install-kernels", "--dry-run"],
        dict(world["env"], MAMBA_SSM_NO_NVML="1"),
        check=False,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"wheel index {index}: the one this install used" in proc.stderr
    assert "cu12torch2.13cxx11abitrue" in (proc.stdout + proc.stderr).lower()


def _readme_source_install():
    """README.md's source-install command ("Building from source"), without the variables that say where
    this machine's toolkit is and which archs to build (the defaults serve any machine)."""
    with open(os.path.join(REPO, "README.md")) as fh:
        text = fh.read()
    block = text[text.index("## Building from source") :].split("```", 2)[1]
    (line,) = [l for l in block.splitlines() if "pip install --no-build-isolation" in l]
    words = shlex.split(line)
    while words[0].split("=", 1)[0] in ("CUDA_HOME", "MAMBA_CUDA_ARCHS"):
        words.pop(0)
    return words


@pytest.fixture(scope="module")
def dev_world(world):
    """A second venv (torch shared the same way) where pip installed this tree's development version
    from a folder holding its sources (a checkout), with the same incompatible ``_C``."""
    from build_matrix.build import source_files

    with open(os.path.join(REPO, "mamba_ssm", "_version.py")) as fh:
        (dev,) = re.findall(r'^__version__ = "([^"]+)"$', fh.read(), flags=re.MULTILINE)
    if not Version(dev).is_devrelease:
        pytest.skip(f"this tree's version {dev} is not a development version")
    work, env = world["work"], world["env"]
    checkout = work / "checkout of mamba-ssm"  # a space: the printed `cd` must quote it
    for rel in source_files():
        dest = checkout / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.join(REPO, rel), dest)
    py, site = _venv_with_mamba(work / "devvenv", checkout, env)
    with open(os.path.join(site, "mamba_ssm", "_C.abi3.so"), "wb") as fh:
        fh.write(world["blob"].replace(f'"{VERSION}"'.encode(), f'"{dev}"'.encode()))
    return dict(world, py=py, site=site, version=dev, checkout=str(checkout))


def test_a_development_version_is_rebuilt_from_the_folder_pip_installed_it_from(dev_world):
    """No index has a .dev version (PEP 440 development release), so `pip install mamba-ssm==<it>` fails
    when pasted: every fix rebuilds the folder pip installed it from (PEP 610 direct_url.json) with
    README.md's source-install command plus --no-cache-dir --force-reinstall --no-deps, and a dry run
    of each in that folder plans this version of mamba-ssm alone."""
    dev, checkout = dev_world["version"], dev_world["checkout"]
    (direct_url,) = Path(dev_world["site"]).glob("mamba_ssm-*.dist-info/direct_url.json")
    assert json.loads(direct_url.read_text())["url"] == Path(checkout).as_uri()  # what pip recorded
    out = json.loads(
        _run(
            [
                dev_world["py"],
                os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "collect_fix_commands.py"),
            ]
            + [dev, CUSTOM_INDEX],
            dev_world["env"],
            cwd=str(dev_world["work"]),
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    assert out["setup_probe_torch"] == ""  # setup.py names only the checkout command for it
    expected = ["cd", checkout, "&&"] + _readme_source_install()
    expected[-1:-1] = ["--no-cache-dir", "--force-reinstall", "--no-deps"]
    commands = {}
    for key, text in out.items():
        named = _commands(text)
        # reinstalling and building from source are one command here: a fix offers it once
        assert len(named) == len(set(named)), (key, text)
        for cmd in named:
            commands.setdefault(cmd, key)
    assert f"mamba-ssm=={dev}" not in json.dumps(out)
    # a resolver message names a version, not this install: the checkout is unknown there
    guarded = [c for c in commands if c.startswith("test -f mamba_ssm/_version.py && ")]
    assert [commands[c] for c in guarded] == ["no_candidate_msg"], guarded
    for cmd in set(commands) - set(guarded):
        assert shlex.split(cmd) == expected, (commands[cmd], cmd)
    assert len(commands) == 2, commands
    planned = _dry_run(dev_world, [c for c in commands if c not in guarded][0], "dev", versions=True)
    assert planned == [f"mamba-ssm=={dev}"]
    # the guarded command runs in a source tree only (its comment says which), there the same build
    (cmd,) = guarded
    assert shlex.split(cmd, comments=True)[4:] == expected[3:]
    assert cmd.endswith(
        f"# in a source checkout of mamba-ssm {dev}: no package index has a development version"
    )
    planned = _dry_run(dev_world, f"cd {shlex.quote(checkout)} && " + cmd.split(" && ", 1)[1], "guarded")
    assert planned == ["mamba-ssm"]
    assert "MAMBA_FORCE_BUILD=TRUE" in cmd and "mamba-ssm==" not in cmd
