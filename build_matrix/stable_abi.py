"""The symbol checks of a stable-ABI ``mamba_ssm/_C``: what it imports from libtorch, read from its ELF
dynamic symbol table (pyelftools), never by loading it.

A stable-ABI build (``torch_abi == "stable"`` in its build info) must import

* no mangled C++ symbol of libtorch (``c10::``, ``at::``, ``torch::``, ``caffe2::``): those change
  between torch releases, which is what breaks a classic build under a newer torch;
* only C shim functions (``aoti_torch_*``, ``torch_*``) that the floor torch exports, or the library
  would not load into the floor torch it promises to serve.

The floor torch's exports are recorded in ``data/stable_abi_symbols.json`` from PyPI's wheels (this
module's ``record`` command reads them out of a torch wheel without installing it), so the audit needs
no second torch::

    python -m build_matrix.stable_abi record torch-2.10.0-*.whl --floor 2.10

and ``python -m build_matrix.stable_abi check mamba_ssm/_C.abi3.so --floor 2.10`` runs the checks.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

DATA_PATH = Path(__file__).resolve().parent / "data" / "stable_abi_symbols.json"

# A mangled name in namespace c10 / at / torch / caffe2: _Z, an optional special-name prefix (vtable,
# typeinfo, ...), N, cv/ref qualifiers, then the namespace as <length><name>.
_TORCH_CPP_RE = re.compile(r"^_Z(?:T[VIST])?N[KVRO]*(?:3c10|2at|5torch|6caffe2)")
_SHIM_RE = re.compile(r"^(?:aoti_torch_|torch_)")
# The libraries of a torch install that export the C shim.
SHIM_LIBS = ("libtorch_cpu.so", "libtorch_cuda.so", "libtorch_hip.so")


def _dynsym(path: Path, undefined: bool) -> set[str]:
    from elftools.elf.elffile import ELFFile  # pyelftools (auditwheel's dependency)

    names: set[str] = set()
    with open(path, "rb") as fh:
        sec = ELFFile(fh).get_section_by_name(".dynsym")
        if sec is None:
            return names
        for sym in sec.iter_symbols():
            if not sym.name:
                continue
            is_undef = sym["st_shndx"] == "SHN_UNDEF"
            if is_undef == undefined and (undefined or sym["st_info"]["bind"] in ("STB_GLOBAL", "STB_WEAK")):
                names.add(sym.name)
    return names


def undefined_symbols(so: Path) -> set[str]:
    """The symbols ``so`` imports (undefined in its ``.dynsym``)."""
    return _dynsym(Path(so), undefined=True)


def exported_symbols(lib: Path) -> set[str]:
    """The global / weak symbols ``lib`` defines in its ``.dynsym``."""
    return _dynsym(Path(lib), undefined=False)


def torch_cpp_imports(names: Iterable[str]) -> list[str]:
    """The mangled C++ symbols of libtorch's namespaces among ``names``."""
    return sorted(n for n in names if _TORCH_CPP_RE.match(n))


def shim_imports(names: Iterable[str]) -> list[str]:
    """The C shim functions (``aoti_torch_*``, ``torch_*``) among ``names``."""
    return sorted(n for n in names if _SHIM_RE.match(n))


def load_recorded(path: Path = DATA_PATH) -> dict[str, dict]:
    """``{floor: {"torch": version, "source": ..., "symbols": [...]}}`` from the data file ({} if absent)."""
    try:
        return json.loads(Path(path).read_text())["floors"]
    except FileNotFoundError:
        return {}


def check(so: Path, floor: str, recorded: dict[str, dict] | None = None) -> list[str]:
    """Why the stable-ABI library ``so`` breaks its promise to load into every torch >= ``floor``
    (empty when it keeps it). Each entry names the symbols and the fix."""
    undefined = undefined_symbols(so)
    problems = []
    cpp = torch_cpp_imports(undefined)
    if cpp:
        problems.append(
            f"imports {len(cpp)} C++ symbol(s) of libtorch, which change between torch releases: "
            f"{', '.join(cpp[:6])}{' ...' if len(cpp) > 6 else ''} (a non-stable torch header or API reached "
            "the binding: build with -DTORCH_TARGET_VERSION, which makes those headers #error)"
        )
    recorded = load_recorded() if recorded is None else recorded
    entry = recorded.get(floor)
    shims = shim_imports(undefined)
    if entry is None:
        problems.append(
            f"no recorded C shim exports for torch {floor} in {DATA_PATH.name}: record them with "
            f"`python -m build_matrix.stable_abi record <torch {floor} wheel> --floor {floor}`"
        )
    else:
        missing = sorted(set(shims) - set(entry["symbols"]))
        if missing:
            problems.append(
                f"imports C shim function(s) that torch {entry['torch']} (the floor {floor}) does not export: "
                f"{', '.join(missing)} (raise the floor, or keep the call behind TORCH_TARGET_VERSION)"
            )
    return problems


def _shim_exports_of(paths: Iterable[Path]) -> set[str]:
    out: set[str] = set()
    for p in paths:
        out |= {n for n in exported_symbols(p) if _SHIM_RE.match(n)}
    return out


def record(source: Path, floor: str, path: Path = DATA_PATH) -> dict[str, dict]:
    """Record the C shim exports of a torch wheel (or a ``torch/lib`` folder) as ``floor``'s in ``path``;
    returns the new table. The wheel's libraries are read from the zip, nothing is installed."""
    source = Path(source)
    tmp = Path(tempfile.mkdtemp(prefix="mamba-shim-"))
    try:
        if source.suffix == ".whl":
            with zipfile.ZipFile(source) as zf:
                members = [n for n in zf.namelist() if n.rsplit("/", 1)[-1] in SHIM_LIBS]
                for n in members:
                    zf.extract(n, tmp)
                libs = [tmp / n for n in members]
                version = next(
                    (
                        line.split(":", 1)[1].strip()
                        for n in zf.namelist()
                        if n.endswith(".dist-info/METADATA")
                        for line in zf.read(n).decode().splitlines()
                        if line.startswith("Version:")
                    ),
                    "?",
                )
        else:
            libs = [source / name for name in SHIM_LIBS if (source / name).is_file()]
            version = "?"
        if not libs:
            raise SystemExit(f"{source}: none of {', '.join(SHIM_LIBS)} found")
        symbols = sorted(_shim_exports_of(libs))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    table = load_recorded(path)
    table[floor] = {
        "torch": version,
        "source": f"{source.name}: {', '.join(sorted(p.name for p in libs))}",
        "symbols": symbols,
    }
    doc = {
        "about": "C shim functions (aoti_torch_*, torch_*) each stable-ABI floor's torch exports; written by "
        "`python -m build_matrix.stable_abi record`, read by the audit",
        "floors": dict(sorted(table.items())),
    }
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")
    return table


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m build_matrix.stable_abi", description=__doc__.split("\n\n")[0]
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record a torch wheel's C shim exports as a floor's")
    r.add_argument("source", type=Path, help="a torch wheel (.whl) or a torch/lib folder")
    r.add_argument("--floor", required=True, help="the floor it is, e.g. 2.10")
    c = sub.add_parser("check", help="check a stable-ABI _C against a floor")
    c.add_argument("so", type=Path)
    c.add_argument("--floor", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "record":
        table = record(args.source, args.floor)
        print(
            f"recorded {len(table[args.floor]['symbols'])} C shim exports of torch {table[args.floor]['torch']} "
            f"as floor {args.floor} in {DATA_PATH}"
        )
        return 0
    problems = check(args.so, args.floor)
    for p in problems:
        print(f"problem: {p}")
    print(f"{args.so}: {'OK' if not problems else 'FAILED'} (stable ABI, torch >= {args.floor})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
