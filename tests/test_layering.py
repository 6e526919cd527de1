"""The import structure of mamba_ssm and build_matrix, read with ast (imports at module level and inside
functions alike): no cycle, each module imports only its own layer or lower ones, the runtime never
imports the build tooling, the dispatch never imports the ops, and no module of ours is loaded by file
path except through setup.py's ``load_private``.

The layers, lowest first (docs/architecture.md draws them); no exception is listed:

    base      _version, _compat, _cli_io, _gpus           (standard library + packaging)
    install   _install, _advice                            (the resolver and every fix text)
    loader    _loader, _devices                            (find, check and load _C; device coverage)
    families  _families                                    (the ops' implementations, one package per family)
    backends  _backends                                    (one object per backend)
    dispatch  _dispatch                                    (which backend runs an op; one call entry)
    ops       ops                                          (upstream's op paths: checks + one dispatch call)
    utils     utils                                        (generation, checkpoints, determinism)
    modules   modules, distributed                         (the blocks and their tensor-parallel layers)
    models    models                                       (the networks)
    tools     _doctor, __main__

A backend object names its implementations by module and function (imported at the first call):
each such module is in the families layer, and the function exists there.

Build tooling (``mamba_ssm._build``, ``build_matrix``) may import base and install; nothing in the
runtime layers imports it.
"""

from __future__ import annotations

import ast
import os
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TREES = ("mamba_ssm", "build_matrix")

LAYERS = (
    ("base", ("mamba_ssm._version", "mamba_ssm._compat", "mamba_ssm._cli_io", "mamba_ssm._gpus")),
    ("install", ("mamba_ssm._install", "mamba_ssm._advice")),
    ("loader", ("mamba_ssm._loader", "mamba_ssm._devices")),
    ("families", ("mamba_ssm._families",)),
    ("backends", ("mamba_ssm._backends",)),
    ("dispatch", ("mamba_ssm._dispatch",)),
    ("ops", ("mamba_ssm.ops",)),
    ("utils", ("mamba_ssm.utils",)),
    ("modules", ("mamba_ssm.modules", "mamba_ssm.distributed")),
    ("models", ("mamba_ssm.models",)),
    ("tools", ("mamba_ssm._doctor", "mamba_ssm.__main__")),
)
BUILD_TOOLING = ("mamba_ssm._build", "build_matrix")
#: What build tooling may import of the runtime package: the shared rules and the resolver.
BUILD_MAY_IMPORT = ("base", "install")
#: Package __init__ files an implementation's import passes through (Python runs them): they must stay
#: empty of imports.
BACKEND_PARENTS = ("mamba_ssm.ops", "mamba_ssm.ops.triton", "mamba_ssm._families")


def _modules() -> dict[str, str]:
    found = {}
    for tree in TREES:
        for folder, _, files in os.walk(os.path.join(REPO, tree)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    dotted = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
                    found[dotted.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _target(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _ours(name: str) -> str | None:
    """The module of ours that importing ``name`` runs (its deepest existing prefix), or None."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        is_package = path.endswith("__init__.py")
        edges: set[str] = set()
        with open(path) as fh:
            tree = ast.parse(fh.read(), path)
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                target = _target(module, is_package, node)
                names = [f"{target}.{a.name}" for a in node.names]
                if any(name not in MODULES for name in names):  # a name defined in the package itself
                    names.append(target)
            for name in names:
                ours = _ours(name)
                if ours and ours != module and (ours not in ("mamba_ssm", "build_matrix") or name == ours):
                    edges.add(ours)
        graph[module] = edges
    return graph


GRAPH = _graph()


def _layer(module: str) -> str | None:
    best, length = None, -1
    for layer, prefixes in LAYERS:
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = layer, len(prefix)
    return best


def _build_tooling(module: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in BUILD_TOOLING)


RANK = {name: i for i, (name, _) in enumerate(LAYERS)}


def test_every_runtime_module_has_a_layer():
    loose = [m for m in MODULES if not _build_tooling(m) and m not in ("mamba_ssm",) and _layer(m) is None]
    assert loose == [], f"modules without a layer (add them to LAYERS and docs/architecture.md): {loose}"


def test_no_import_cycle():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert cycles == [], f"import cycles: {cycles}"


def test_the_cycle_check_finds_a_cycle(monkeypatch):
    """Control: the same walk over a graph with a cycle reports it."""
    fake = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    monkeypatch.setattr(sys.modules[__name__], "GRAPH", fake)
    with pytest.raises(AssertionError, match=r"\['a', 'b', 'c'\]"):
        test_no_import_cycle()


def test_each_module_imports_only_its_layer_or_lower_ones():
    upward = []
    for module, edges in GRAPH.items():
        layer = _layer(module)
        if layer is None:
            continue
        for target in edges:
            other = _layer(target)
            if other is not None and RANK[other] > RANK[layer]:
                upward.append(f"{module} ({layer}) -> {target} ({other})")
    assert upward == [], "upward imports:\n" + "\n".join(sorted(upward))


def test_runtime_never_imports_build_tooling():
    bad = [
        f"{m} -> {t}"
        for m, edges in GRAPH.items()
        if not _build_tooling(m)
        for t in edges
        if _build_tooling(t)
    ]
    assert bad == [], bad


def test_build_tooling_imports_only_the_shared_rules_and_the_resolver():
    bad = []
    for module, edges in GRAPH.items():
        if not _build_tooling(module) or module == "build_matrix.runtime_check":
            continue  # runtime_check runs inside an installed wheel's venv, not in the build tooling
        for target in edges:
            layer = _layer(target)
            if layer is not None and layer not in BUILD_MAY_IMPORT:
                bad.append(f"{module} -> {target} ({layer})")
    assert bad == [], bad


def test_dispatch_never_imports_the_ops():
    bad = [
        f"{m} -> {t}"
        for m, edges in GRAPH.items()
        if _layer(m) in ("dispatch", "backends", "families")
        for t in edges
        if t == "mamba_ssm.ops" or t.startswith("mamba_ssm.ops.")
    ]
    assert bad == [], bad


def _family_packages() -> list[str]:
    return [
        m
        for m, path in MODULES.items()
        if m.startswith("mamba_ssm._families") and path.endswith("__init__.py")
    ]


def test_the_packages_an_implementation_import_passes_through_import_nothing_of_ours():
    parents = (*BACKEND_PARENTS, *_family_packages())
    assert {p: sorted(GRAPH[p]) for p in parents if GRAPH[p]} == {}


def _targets() -> list[tuple[str, str, str, str]]:
    """``(backend module, table, module, function)`` for every string target of the backend objects: the
    module-level ``Target`` tuples and constants of mamba_ssm/_backends/*.py, read with ast."""
    found = []
    for module, path in MODULES.items():
        if not module.startswith("mamba_ssm._backends."):
            continue
        with open(path) as fh:
            tree = ast.parse(fh.read(), path)
        constants = {
            node.targets[0].id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        }
        for node in ast.walk(tree):
            if not isinstance(node, ast.AnnAssign) or not isinstance(node.value, ast.Dict):
                continue
            table = node.target.id if isinstance(node.target, ast.Name) else "?"
            for value in node.value.values:
                if isinstance(value, ast.Tuple) and len(value.elts) == 2:
                    first, second = value.elts
                    name = (
                        constants.get(first.id)
                        if isinstance(first, ast.Name)
                        else getattr(first, "value", None)
                    )
                    function = getattr(second, "value", None)
                    # A target the reader cannot resolve (an f-string, a call) is reported as unresolved.
                    found.append(
                        (module, table, name if isinstance(name, str) else "<unresolved>", str(function))
                    )
    return found


def _defines(module: str, name: str) -> bool:
    with open(MODULES[module]) as fh:
        tree = ast.parse(fh.read(), MODULES[module])
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Import, ast.ImportFrom)) and any(
            (a.asname or a.name) == name for a in node.names
        ):
            return True
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return True
    return False


def test_every_backend_target_is_a_function_of_the_families():
    """The backend objects import their implementations by name (at the first call), which the import
    graph above cannot see: each named module is in the families layer and defines the function."""
    targets = _targets()
    assert len(targets) >= 20, targets  # the reader found the tables
    bad = [
        f"{backend}.{table}: {module}.{function}"
        for backend, table, module, function in targets
        if module not in MODULES or _layer(module) != "families" or not _defines(module, function)
    ]
    assert bad == [], bad


def _calls(name: str) -> list[str]:
    found = []
    for module, path in {**MODULES, "setup": os.path.join(REPO, "setup.py")}.items():
        with open(path) as fh:
            tree = ast.parse(fh.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == name:
                found.append(module)
    return sorted(set(found))


def test_one_way_to_load_a_module_by_path():
    """setup.py's private package (load_private) loads the tree's own modules; no module loads a file
    by its path (the resolver hook, too, is this tree's module, passed to the plan as an argument)."""
    assert _calls("spec_from_file_location") == []
    assert _calls("__path__") == ["setup"]
