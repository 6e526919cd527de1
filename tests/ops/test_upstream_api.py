"""Upstream mamba-ssm's public names at v2.3.2.post1 and HEAD (e9594ce) exist here at the same import
paths with compatible signatures: the list in upstream_api.json was read from upstream's source by
make_upstream_api.py (Mamba-3's names excepted: another issue).

Compatible: every upstream positional parameter is ours at the same position with the same name (with a
default where upstream has one), every keyword-only one is accepted by name, ``*args`` / ``**kwargs``
where upstream has them, and every parameter we add has a default. Classes are checked through their
constructor, ``torch.autograd.Function`` subclasses through ``forward`` (without ``ctx``) and must be
real subclasses. The walk runs in a fresh interpreter, so every module imports on its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
LIST = os.path.join(HERE, "upstream_api.json")

WALK = r"""
import importlib, inspect, json, sys
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
                problems.append(f"positional parameter {i} is {mine.name if mine else 'missing'}, upstream's is {name}")
            elif has_default and mine.default is P.empty:
                problems.append(f"{name} has no default (upstream's has one)")
            i += 1
        elif kind == "keyword_only":
            mine = by_name.get(name)
            if mine is None and not var_kw:
                problems.append(f"keyword {name} is not accepted")
            elif mine is not None and (mine.kind not in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)
                                       or (has_default and mine.default is P.empty)):
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
    except Exception as exc:
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
"""


def _names():
    with open(LIST) as fh:
        return json.load(fh)


def test_the_list_covers_both_revisions():
    data = _names()
    assert data["revisions"] == ["v2.3.2.post1", "e9594ce"]
    names = {(e["module"], e["name"]) for e in data["names"]}
    assert len(names) >= 135, len(names)
    for must in (
        ("mamba_ssm.ops.triton.ssd_chunk_state", "_chunk_cumsum_fwd"),
        ("mamba_ssm.ops.triton.ssd_state_passing", "state_passing"),
        ("mamba_ssm.utils.determinism", "use_deterministic_mode"),
        ("mamba_ssm.utils.generation", "capture_graph"),
        ("mamba_ssm.ops.selective_scan_interface", "SelectiveScanFn"),
        (
            "mamba_ssm.ops.triton.ssd_combined",
            "_chunk_scan_chunk_state_bwd_dx",
        ),  # (upstream's tests import it)
    ):
        assert must in names, must
    assert not any("mamba3" in m or n == "Mamba3" for m, n in names), "Mamba-3 names belong to another issue"
    heads = [e for e in data["names"] if e["name"] == "mamba_chunk_scan_combined"]
    head = next(e for e in heads if "e9594ce" in e["revisions"])
    assert head["params"][-1] == ["state_dtype", "positional", True]


def test_every_upstream_name_exists_with_a_compatible_signature():
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run(
        [sys.executable, "-c", WALK, LIST], capture_output=True, text=True, timeout=600, cwd=REPO, env=env
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    problems = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not problems, f"{len(problems)} of upstream's names differ here:\n" + "\n".join(problems)
