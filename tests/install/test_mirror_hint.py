"""The offline-mirror advice: build_matrix is not in an installed wheel, so the hint says where to get it
(an unpacked sdist of the same, pinned version) and how to describe this machine first."""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from helpers import env_dict

from mamba_ssm import _advice
from mamba_ssm._install import resolve
from mamba_ssm._install.environment import Environment


def test_hint_pins_the_version_and_never_touches_torch():
    hint = _advice.mirror_hint("2.4.0+cu13torch2.14cxx11abitrue")
    assert "mamba-ssm==2.4.0 " in hint or hint.endswith("mamba-ssm==2.4.0`") or "mamba-ssm==2.4.0`" in hint, (
        hint
    )
    assert "VERSION" not in hint
    download = hint.split("`python -m pip download", 1)[1].split("`", 1)[0]
    assert "--no-deps" in download and "torch" not in download, download
    assert "install-kernels --print-env" in hint and "python -m build_matrix mirror --for ENV.json" in hint


def test_index_failure_message_carries_the_pinned_hint(tmp_path):
    # a declared target and a file:// index with no manifest: the resolver cannot read the index
    env = Environment.from_dict(env_dict())
    res = resolve.resolve("2.4.0", index=f"file://{tmp_path}", env=env, fetch=False, environ={})
    assert res.status == "error" and res.error_kind.startswith("index"), (res.status, res.error_kind)
    assert "mamba-ssm==2.4.0" in res.message and "build_matrix mirror" in res.message, res.message
