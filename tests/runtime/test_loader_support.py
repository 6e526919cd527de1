"""Helpers for the loader / dispatch / doctor / import tests (no tests of its own).

Every test runs ``mamba_ssm`` from a temporary copy of the package (the repository's tree without any
``_C*`` file), with fabricated compiled modules put there, in a subprocess whose PYTHONPATH points at
the copy: the repository's own ``mamba_ssm/_C*.so`` (which the build may have made) is never touched
or loaded, and each broken kind gets a fresh process (a dlopen cannot be undone).

The other test files load this one by path (``load_support()``), so they work whether or not
``tests/runtime`` is a package.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE_SRC = os.path.join(REPO_ROOT, "mamba_ssm")
BEGIN = b"MAMBA_SSM_BUILD_INFO_BEGIN"
END = b"MAMBA_SSM_BUILD_INFO_END"
UNDEFINED_SYMBOL = "mamba_ssm_test_symbol_that_no_library_defines"
SUBPROCESS_TIMEOUT = 180
PROGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs")
#: Modules copied over a package copy's files (e.g. a stand-in _families/selective_scan/compiled.py).
STAND_INS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "stand_ins")


def torch_facts():
    """The real torch's identity, from torch itself (the independent side of the comparisons)."""
    import torch

    return {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": torch.version.hip,
        "cxx11_abi": bool(torch._C._GLIBCXX_USE_CXX11_ABI),
    }


def build_info(**overrides):
    """A build-info dict (the JSON keys of docs/architecture.md) matching the real torch here."""
    t = torch_facts()
    info = {
        "package_version": "2.4.0.dev0",
        "torch_version": t["version"],
        "torch_cuda": t["cuda"],
        "torch_hip": t["hip"],
        "nvcc_version": "13.0" if t["cuda"] else None,
        "hipcc_version": None,
        "cxx11_abi": t["cxx11_abi"],
        "sass_archs": ["sm_90"] if t["cuda"] else [],
        "ptx_archs": ["compute_90"] if t["cuda"] else [],
        "gfx_archs": [],
        "python_tag": "cp39-abi3",
        "platform": "linux-x86_64",
        "git_commit": "0123456789abcdef0123456789abcdef01234567",
        "kernels": ["cpu", "cuda"] if t["cuda"] else ["cpu"],
        "schema": 1,
    }
    info.update(overrides)
    return info


def block(info):
    """The bytes the binding embeds: BEGIN marker, the JSON, END marker."""
    return BEGIN + json.dumps(info, sort_keys=True, separators=(",", ":")).encode() + END


def make_package(tmp_path):
    """Copy the repository's ``mamba_ssm`` tree, without ``_C*`` files and caches, under ``tmp_path/root``.

    Returns the root to put on PYTHONPATH."""
    root = tmp_path / "root"
    root.mkdir()

    def ignore(directory, names):
        return [n for n in names if n.startswith("_C") or n == "__pycache__" or n.endswith(".so")]

    shutil.copytree(PACKAGE_SRC, root / "mamba_ssm", ignore=ignore)
    return root


def rebuild_fix(root):
    """The rebuild a package copy under ``root`` (no dist-info beside it, no setup.py above it) must
    print, from its ``_version.py`` and PEP 440: the pinned sdist for a release; for a development
    version, which no index has, README.md's source install (``MAMBA_FORCE_BUILD=TRUE python -m pip
    install --no-build-isolation``, plus the flags that keep the rebuild fresh and away from torch) of
    ``.``, run only where ``mamba_ssm/_version.py`` shows a source tree."""
    import re

    from packaging.version import Version

    with open(os.path.join(root, "mamba_ssm", "_version.py")) as fh:
        (version,) = re.findall(r'^__version__ = "([^"]+)"$', fh.read(), flags=re.MULTILINE)
    flags = "--no-cache-dir --force-reinstall --no-deps"
    if not Version(version).is_devrelease:
        return f"python -m pip install {flags} mamba-ssm=={Version(version).public}"
    return (
        "test -f mamba_ssm/_version.py && MAMBA_FORCE_BUILD=TRUE python -m pip install --no-build-isolation "
        f"{flags} ."
    )


def write_garbage(path):
    """A file that is neither a shared object nor carries build info."""
    path.write_bytes(b"this is not an ELF shared object\n" * 64)


def write_block_not_elf(path, info):
    """A file carrying a valid build-info block that is not a shared object (dlopen must fail)."""
    path.write_bytes(
        b"#not an ELF header, just text around a build-info block\n" * 8 + block(info) + b"\0" * 64
    )


def c_string(data: bytes) -> str:
    """``data`` as a C string literal (octal escapes for anything but plain printable ASCII)."""
    out = []
    for ch in data:
        c = chr(ch)
        if c in ('"', "\\", "?"):
            out.append("\\%03o" % ch)
        elif 0x20 <= ch < 0x7F:
            out.append(c)
        else:
            out.append("\\%03o" % ch)
    return '"' + "".join(out) + '"'


def compile_so(path, info, undefined_symbol=False, marker=True, marker_text="loaded"):
    """Compile a real shared object with gcc carrying ``info`` as its build-info block.

    Args:
        undefined_symbol: reference a data symbol no library defines, so dlopen fails with
            "undefined symbol: ..." (a data relocation: resolved at load time even with lazy binding).
        marker: a constructor that, when the library is dlopened, appends ``marker_text`` to the file
            named by the environment variable MAMBA_SSM_TEST_DLOPEN_MARKER (proves whether, and which
            one, was loaded).
    """
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: cannot make a real shared object for this test")
    src = path.parent / (path.name + ".c")
    parts = ["#include <stdio.h>", "#include <stdlib.h>"]
    parts.append(f"__attribute__((used)) const char mamba_ssm_build_info[] = {c_string(block(info))};")
    if undefined_symbol:
        parts.append(f"extern int {UNDEFINED_SYMBOL};")
        parts.append(f"__attribute__((used)) int *mamba_ssm_test_ref = &{UNDEFINED_SYMBOL};")
    if marker:
        parts.append(f"#define MARKER_TEXT {c_string(marker_text.encode())}")
        parts.append(
            textwrap.dedent("""
            __attribute__((constructor)) static void mamba_ssm_test_loaded(void) {
                const char *p = getenv("MAMBA_SSM_TEST_DLOPEN_MARKER");
                if (p) { FILE *f = fopen(p, "a"); if (f) { fputs(MARKER_TEXT, f); fclose(f); } }
            }
        """)
        )
    src.write_text("\n".join(parts) + "\n")
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-O0", "-o", str(path), str(src)],
        check=True,
        capture_output=True,
        text=True,
    )
    return path


def child_env(root, **extra):
    """The environment for a child: PYTHONPATH at the copy, no MAMBA_SSM_* from the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAMBA_SSM_")}
    env["PYTHONPATH"] = str(root)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # An empty decision folder: a decision recorded for this venv elsewhere must not leak in.
    env["MAMBA_SSM_DECISION_DIR"] = str(root.parent / "decisions")
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def run_python(root, code, args=(), env=None, check_package=True):
    """Run ``python -c code`` (or ``-m`` when args start with -m) in the copy; returns CompletedProcess."""
    prefix = ""
    if check_package:
        prefix = textwrap.dedent(f"""
            import sys as _s, os as _o
            import mamba_ssm as _m
            assert _o.path.dirname(_o.path.abspath(_m.__file__)) == {str(root / "mamba_ssm")!r}, _m.__file__
        """)
    cmd = [sys.executable, "-c", prefix + textwrap.dedent(code)] + list(args)
    return subprocess.run(
        cmd,
        cwd=str(root),
        env=env or child_env(root),
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
    )


def prog(name):
    """The path of ``tests/runtime/progs/<name>.py``."""
    return os.path.join(PROGS, name + ".py")


def run_prog(root, name, args=(), env=None):
    """Run ``python tests/runtime/progs/<name>.py ARGS`` in the copy (its working directory); returns
    CompletedProcess. The programs import the copy's ``mamba_ssm`` from the working directory."""
    return subprocess.run(
        [sys.executable, prog(name), *args],
        cwd=str(root),
        env=env or child_env(root),
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
    )


def run_module(root, args, env=None):
    """Run ``python -m mamba_ssm ARGS`` against the copy."""
    cmd = [sys.executable, "-m", "mamba_ssm"] + list(args)
    return subprocess.run(
        cmd,
        cwd=str(root),
        env=env or child_env(root),
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
    )


def last_json(stdout):
    """The JSON object printed on the last line of ``stdout`` by a child script."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    assert lines, "the child printed nothing"
    return json.loads(lines[-1])


def selective_scan_reference(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False):
    """The float64 selective scan of ``tests/oracles.py``: y (batch, dim, seqlen) in float64."""
    import oracles

    return oracles.selective_scan(u, delta, A, B, C, D, z, delta_bias, delta_softplus)[0]


def load_support():
    """This module (for ``from ... import`` free use by the sibling test files)."""
    return sys.modules[__name__]
