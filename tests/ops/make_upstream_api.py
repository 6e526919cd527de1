"""Writes tests/ops/upstream_api.json: upstream mamba-ssm's public names and their signatures, read
from upstream's source at the given git revisions (never imported), for test_upstream_api.py.

    python tests/ops/make_upstream_api.py PATH/TO/state-spaces/mamba [REV ...]

(default revisions: v2.3.2.post1 and e9594ce, upstream's HEAD when the list was made). Kept: for every
module of upstream's ``mamba_ssm`` package except the Mamba-3 ones (``mamba3``, ``ops/cute``,
``ops/tilelang``: another issue), the top-level functions, classes and assigned names (also inside
top-level ``if`` / ``try`` blocks) whose names do not start with ``_``, the names the package's
``__init__`` re-exports, the underscore entry points of the SSD stage modules listed in
``STAGE_ENTRY_POINTS`` (downstream projects call them), and every underscore name upstream's own
``tests/`` and ``benchmarks/`` import from ``mamba_ssm`` at that revision. Names an ``except`` handler
sets to None are optional-dependency placeholders (``causal_conv1d_fn = None`` when causal-conv1d is
absent, ...), not upstream's own API, and are dropped. Triton ``@jit`` kernels
are dropped (their names start with ``_``, except ``softplus``, a device function kept as kind
``triton_jit``). Per name: its kind and parameters (name, kind, has a default); for a class its
``__init__``'s, for an autograd Function its ``forward``'s (without ``ctx``).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "upstream_api.json")
DEFAULT_REVS = ("v2.3.2.post1", "e9594ce")
EXCLUDED_PREFIXES = ("mamba_ssm.modules.mamba3", "mamba_ssm.ops.cute", "mamba_ssm.ops.tilelang")
EXCLUDED_NAMES = {("mamba_ssm", "Mamba3")}
STAGE_ENTRY_POINTS = {
    "mamba_ssm.ops.triton.ssd_chunk_state": (
        "_chunk_cumsum_fwd",
        "_chunk_cumsum_bwd",
        "_chunk_state_fwd",
        "_chunk_state_bwd_dx",
        "_chunk_state_bwd_db",
        "_chunk_state_bwd_ddAcs_stable",
    ),
    "mamba_ssm.ops.triton.ssd_state_passing": ("_state_passing_fwd", "_state_passing_bwd"),
    "mamba_ssm.ops.triton.ssd_bmm": ("_bmm_chunk_fwd", "_bmm_chunk_bwd"),
    "mamba_ssm.ops.triton.ssd_chunk_scan": ("_chunk_scan_fwd",),
    "mamba_ssm.ops.triton.ssd_combined": ("_mamba_chunk_scan_combined_fwd", "_mamba_chunk_scan_combined_bwd"),
}


def _git(repo, *args):
    return subprocess.check_output(["git", "-C", repo, *args], text=True)


def _params(fn, drop_first=False):
    a = fn.args
    out = []
    positional = a.posonlyargs + a.args
    first_default = len(positional) - len(a.defaults)
    for i, p in enumerate(positional):
        out.append([p.arg, "positional", i >= first_default])
    if a.vararg:
        out.append([a.vararg.arg, "var_positional", False])
    for p, d in zip(a.kwonlyargs, a.kw_defaults):
        out.append([p.arg, "keyword_only", d is not None])
    if a.kwarg:
        out.append([a.kwarg.arg, "var_keyword", False])
    return out[1:] if drop_first else out


def _is_jit(fn):
    return any("jit" in ast.unparse(d) or "autotune" in ast.unparse(d) for d in fn.decorator_list)


def _imported_by_tests(repo, rev):
    """{module: {name, ...}}: the underscore names upstream's tests and benchmarks import from mamba_ssm."""
    found = {}
    listing = _git(repo, "ls-tree", "-r", "--name-only", rev, "tests", "benchmarks").split()
    for path in (p for p in listing if p.endswith(".py")):
        for node in ast.walk(ast.parse(_git(repo, "show", f"{rev}:{path}"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mamba_ssm"):
                for alias in node.names:
                    if alias.name.startswith("_"):
                        found.setdefault(node.module, set()).add(alias.name)
    return found


def _entries(module, tree, is_init, tested=()):
    def walk(body):
        for node in body:
            if isinstance(node, (ast.If, ast.Try)):
                yield from walk(node.body)
                yield from walk(getattr(node, "orelse", []))
                for h in getattr(node, "handlers", []):
                    yield from walk(h.body)
            else:
                yield node

    keep = set(STAGE_ENTRY_POINTS.get(module, ())) | set(tested)
    placeholders = {
        t.id
        for node in ast.walk(tree)
        if isinstance(node, ast.ExceptHandler)
        for stmt in node.body
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant) and stmt.value.value is None
        for t in stmt.targets
        if isinstance(t, ast.Name)
    }
    for node in walk(tree.body):
        if isinstance(node, ast.FunctionDef):
            if node.name.startswith("_") and node.name not in keep:
                continue
            if _is_jit(node):
                yield {"name": node.name, "kind": "triton_jit"}
            else:
                yield {"name": node.name, "kind": "function", "params": _params(node)}
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            bases = [ast.unparse(b) for b in node.bases]
            methods = {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}
            if any(b.endswith("Function") for b in bases) and "forward" in methods:
                yield {
                    "name": node.name,
                    "kind": "autograd_function",
                    "params": _params(methods["forward"], True),
                }
            elif "__init__" in methods:
                yield {"name": node.name, "kind": "class", "params": _params(methods["__init__"], True)}
            else:
                yield {"name": node.name, "kind": "class"}
        elif isinstance(node, ast.Assign):
            for t in node.targets:
                if isinstance(t, ast.Name) and not t.id.startswith("_") and t.id not in placeholders:
                    yield {"name": t.id, "kind": "variable"}
        elif isinstance(node, ast.ImportFrom) and is_init:
            for alias in node.names:
                yield {"name": alias.asname or alias.name, "kind": "import"}


def collect(repo, rev):
    """{(module, name): entry} of upstream's package at ``rev``."""
    found = {}
    tested = _imported_by_tests(repo, rev)
    for path in _git(repo, "ls-tree", "-r", "--name-only", rev, "mamba_ssm").split():
        if not path.endswith(".py"):
            continue
        module = path[:-3].replace("/", ".")
        is_init = module.endswith(".__init__")
        if is_init:
            module = module[: -len(".__init__")]
        if module.startswith(EXCLUDED_PREFIXES) or ".mamba3" in module:
            continue
        tree = ast.parse(_git(repo, "show", f"{rev}:{path}"))
        for entry in _entries(module, tree, is_init, tested.get(module, ())):
            if (module, entry["name"]) not in EXCLUDED_NAMES:
                found[module, entry["name"]] = {"module": module, **entry}
    return found


def main(argv):
    if not argv:
        raise SystemExit(__doc__)
    repo, revs = argv[0], tuple(argv[1:]) or DEFAULT_REVS
    merged = {}
    for rev in revs:
        for key, entry in collect(repo, rev).items():
            signature = json.dumps(entry, sort_keys=True)
            merged.setdefault((key, signature), {**entry, "revisions": []})["revisions"].append(rev)
    rows = sorted(merged.values(), key=lambda e: (e["module"], e["name"], e["revisions"]))
    with open(OUT, "w") as fh:
        json.dump(
            {"source": "github.com/state-spaces/mamba", "revisions": list(revs), "names": rows}, fh, indent=1
        )
        fh.write("\n")
    print(f"{len(rows)} entries ({len({(r['module'], r['name']) for r in rows})} names) -> {OUT}")


if __name__ == "__main__":
    main(sys.argv[1:])
