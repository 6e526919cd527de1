"""The probe the resolver runs in the *target* interpreter: ``python probe.py`` prints one JSON object
between :data:`BEGIN` and :data:`END` (anything else the interpreter prints around it is ignored).

Run by path (``mamba_ssm._install.environment`` starts it with pip's / uv's isolation removed), in any
Python the package supports, with only the standard library (``packaging.tags`` when the target has
it, else pip's vendored copy). Importable too: :func:`collect` returns the same object.

torch is read without importing it where that settles everything: ``torch/version.py`` for the
versions and, for the C++ ABI, ``std::__cxx11`` names in ``torch/lib/libc10.so`` (they exist only in a
``_GLIBCXX_USE_CXX11_ABI=1`` build). Anything unclear, or ``MAMBA_PROBE_IMPORT_TORCH=1``, imports torch
(``torch._C._GLIBCXX_USE_CXX11_ABI``). ``torch.cuda`` is never touched.

Keys: ``executable``, ``prefix`` and ``base_prefix`` (realpaths), ``python_version``, ``implementation``,
``platform`` (sysconfig), ``machine``, ``libc``, ``tags`` (``sys_tags()`` as strings, most preferred
first, or None), ``tags_source``, ``notes`` and ``torch``: None when torch is absent, else ``version``,
``cuda``, ``hip``, ``git_version``, ``cxx11_abi``, ``path``, ``error`` (import failure), ``source``.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and sys.path and sys.path[0] == os.path.dirname(os.path.abspath(__file__)):
    # Run by path: this file's folder is sys.path[0], where its sibling modules would shadow
    # top-level modules of the same name for everything imported below (torch included).
    del sys.path[0]

import importlib
import importlib.util
import json
import mmap
import platform
import sysconfig
from typing import Any

BEGIN = "@@MAMBA_SSM_PROBE_BEGIN@@"
END = "@@MAMBA_SSM_PROBE_END@@"
ENV_IMPORT_TORCH = "MAMBA_PROBE_IMPORT_TORCH"
FAST_SOURCE = "torch/version.py + lib/libc10.so"
IMPORT_SOURCE = "import torch"

__all__ = ["BEGIN", "END", "collect", "main"]


def _tags(out: dict[str, Any]) -> None:
    for name in ("packaging.tags", "pip._vendor.packaging.tags"):
        try:
            tags = importlib.import_module(name)
            out["tags"] = [str(t) for t in tags.sys_tags()]
            out["tags_source"] = name
        except Exception as exc:  # noqa: BLE001 - a broken or absent copy: try the next, note why
            out["notes"].append(f"{name}: {exc}")
        else:
            return


def _torch_read(folder: str, notes: list[str]) -> dict[str, Any] | None:
    """torch's identity from its files, or None when they do not settle it (then torch is imported)."""
    try:
        ns: dict[str, Any] = {}
        with open(os.path.join(folder, "version.py")) as fh:
            exec(compile(fh.read(), "torch/version.py", "exec"), ns)  # noqa: S102 - torch's own version file
        with (
            open(os.path.join(folder, "lib", "libc10.so"), "rb") as lib,
            mmap.mmap(lib.fileno(), 0, access=mmap.ACCESS_READ) as data,
        ):
            if data.find(b"__cxx11") < 0:
                return None
        return {
            "path": folder,
            "error": None,
            "version": str(ns["__version__"]),
            "cuda": ns.get("cuda"),
            "hip": ns.get("hip"),
            "git_version": ns.get("git_version"),
            "cxx11_abi": True,
            "source": FAST_SOURCE,
        }
    except Exception as exc:  # noqa: BLE001 - unclear: import torch instead, note why
        notes.append(f"fast torch probe: {type(exc).__name__}: {exc}")
        return None


def _torch_imported(folder: str | None) -> dict[str, Any]:
    info: dict[str, Any] = {"path": folder, "error": None, "source": IMPORT_SOURCE}
    try:
        import torch  # only when the files did not settle it

        abi = getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", None)
        info.update(
            version=str(torch.__version__),
            cuda=getattr(torch.version, "cuda", None),
            hip=getattr(torch.version, "hip", None),
            git_version=getattr(torch.version, "git_version", None),
            cxx11_abi=None if abi is None else bool(abi),
        )
    except BaseException as exc:  # noqa: BLE001 - a broken torch is a fact to report
        info["error"] = f"import torch failed: {type(exc).__name__}: {exc}"
        try:
            from importlib.metadata import version

            info["version"] = version("torch")
        except Exception:  # noqa: BLE001
            info["version"] = None
    return info


def collect() -> dict[str, Any]:
    """The probe's JSON object (see the module docstring)."""
    notes: list[str] = []
    out: dict[str, Any] = {
        "executable": sys.executable,
        "prefix": os.path.realpath(sys.prefix),
        "base_prefix": os.path.realpath(getattr(sys, "base_prefix", sys.prefix)),
        "python_version": "{}.{}.{}".format(*sys.version_info[:3]),
        "implementation": sys.implementation.name,
        "platform": sysconfig.get_platform(),
        "machine": platform.machine(),
        "libc": " ".join(x for x in platform.libc_ver() if x) or None,
        "tags": None,
        "tags_source": None,
        "torch": None,
        "notes": notes,
    }
    _tags(out)
    try:
        spec = importlib.util.find_spec("torch")
    except Exception as exc:  # noqa: BLE001
        notes.append(f"find_spec(torch): {exc}")
        spec = None
    if spec is None:
        return out
    folder = os.path.dirname(spec.origin) if spec.origin else None
    fast = None
    if folder and os.environ.get(ENV_IMPORT_TORCH) != "1":
        fast = _torch_read(folder, notes)
    out["torch"] = fast if fast is not None else _torch_imported(folder)
    return out


def main() -> None:
    """Print :func:`collect`'s object between the markers."""
    sys.stdout.write("\n" + BEGIN + json.dumps(collect()) + END + "\n")


if __name__ == "__main__":
    main()
