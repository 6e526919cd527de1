"""``torch.compile(fullgraph=True)`` of a Mamba block on the process's first call: the dispatch imports
a backend's implementation modules while tracing (eagerly: dynamo refuses to trace an import) and the
traced call finds them. Before that was so, the first compiled call failed with dynamo's "Attempted to
call function marked as skipped" (``importlib.import_module``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = os.path.join(REPO, "tests", "ops", "progs", "compile_first_call.py")


def test_fullgraph_compile_of_a_block_on_the_first_call():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MAMBA_SSM_BACKEND", "TORCH_COMPILE"))}
    proc = subprocess.run(
        [sys.executable, PROG], cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    # The conv's implementation module was not imported before tracing: the trace had to import it.
    assert out["target"] not in out["imported_before"], out
    assert out["max_err"] <= 1e-5, out
