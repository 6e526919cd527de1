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
        [sys.executable, os.path.join(HERE, "progs", "upstream_api_walk.py"), LIST],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    problems = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not problems, f"{len(problems)} of upstream's names differ here:\n" + "\n".join(problems)
