"""Each upstream public name of a list: importable here, with a compatible signature.

Run as ``cd <repository> && python tests/ops/progs/upstream_api_walk.py UPSTREAM_API_JSON`` in a fresh
interpreter (every module imports on its own); prints a JSON list of the problems found, one string each.
"""

import os
import sys

sys.path.insert(0, os.getcwd())  # the copy at the working directory, as python -c had it
import importlib
import inspect
import json
import sys

import torch

P = inspect.Parameter
POSITIONAL = (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)


def signature_problems(want, fn, drop_first):
    params = list(inspect.signature(fn).parameters.values())
    if drop_first:
        params = params[1:]
    positional = [p for p in params if p.kind in POSITIONAL]
    by_name = {p.name: p for p in params}
    var_pos = any(p.kind == P.VAR_POSITIONAL for p in params)
    var_kw = any(p.kind == P.VAR_KEYWORD for p in params)
    problems, i, names = [], 0, set()
    for name, kind, has_default in want:
        names.add(name)
        if kind == "positional":
            mine = positional[i] if i < len(positional) else None
            if mine is None or mine.name != name:
                problems.append(
                    f"positional parameter {i} is {mine.name if mine else 'missing'}, upstream's is {name}"
                )
            elif has_default and mine.default is P.empty:
                problems.append(f"{name} has no default (upstream's has one)")
            i += 1
        elif kind == "keyword_only":
            mine = by_name.get(name)
            if mine is None and not var_kw:
                problems.append(f"keyword {name} is not accepted")
            elif mine is not None and (
                mine.kind not in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)
                or (has_default and mine.default is P.empty)
            ):
                problems.append(f"keyword {name} is not an optional keyword here")
        elif kind == "var_positional" and not var_pos:
            problems.append(f"*{name} is not accepted")
        elif kind == "var_keyword" and not var_kw:
            problems.append(f"**{name} is not accepted")
    for p in positional[i:]:
        if p.default is P.empty and not (var_pos or var_kw):
            problems.append(f"our extra parameter {p.name} has no default")
    for p in params:
        if p.kind == P.KEYWORD_ONLY and p.default is P.empty and p.name not in names:
            problems.append(f"our keyword-only {p.name} has no default")
    return problems


def no_triton(exc):
    return isinstance(exc, ModuleNotFoundError) and exc.name == "triton"


out = []
for e in json.load(open(sys.argv[1]))["names"]:
    where = f"{e['module']}.{e['name']} ({', '.join(e['revisions'])})"
    try:
        mod = importlib.import_module(e["module"])
        found = hasattr(mod, e["name"])
    except Exception as exc:  # noqa: BLE001  (any import failure is a reported problem)
        if no_triton(exc):  # (Triton helpers, as upstream's: only where triton is installed)
            continue
        out.append(f"{where}: the module does not import: {type(exc).__name__}: {exc}")
        continue
    if not found:
        out.append(f"{where}: missing")
        continue
    obj = getattr(mod, e["name"])
    kind = e["kind"]
    problems = []
    if kind == "autograd_function":
        if not (inspect.isclass(obj) and issubclass(obj, torch.autograd.Function)):
            problems.append("not a torch.autograd.Function subclass")
        else:
            problems = signature_problems(e["params"], obj.forward, drop_first=True)
    elif kind == "class":
        if not inspect.isclass(obj):
            problems.append(f"not a class ({type(obj).__name__})")
        elif "params" in e:
            problems = signature_problems(e["params"], obj.__init__, drop_first=True)
    elif kind == "function":
        if not callable(obj):
            problems.append("not callable")
        else:
            problems = signature_problems(e["params"], obj, drop_first=False)
    elif kind == "triton_jit" and not callable(obj) and not hasattr(obj, "fn"):
        problems.append("not a Triton function")
    out.extend(f"{where}: {p}" for p in problems)
print(json.dumps(out))
