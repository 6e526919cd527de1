"""doctor with two declared GPUs, an H200 (9.0) and a T4 (7.5) (no GPU needed).

Run as ``cd <package copy> && python doctor_fake_gpus.py``; prints two JSON lines, ``doctor --json`` then
``doctor``, each ``{"code": exit code, "out": what it printed}``.
"""

# ruff: noqa: E402  (the imports are ordered: each step is observed before the next import)

import contextlib
import io
import json
import types

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)
import torch

# No GPU here: present two, an H200 (9.0) and a T4 (7.5), to doctor.
props = {
    0: types.SimpleNamespace(name="NVIDIA H200", major=9, minor=0, total_memory=141 * 2**30),
    1: types.SimpleNamespace(name="Tesla T4", major=7, minor=5, total_memory=16 * 2**30),
}
torch.cuda.is_available = lambda: True
torch.cuda.device_count = lambda: 2
torch.cuda.get_device_properties = lambda i: props[i]
torch.cuda.get_device_capability = lambda i=None: (props[i].major, props[i].minor)
from mamba_ssm.__main__ import main

for args in (["doctor", "--json"], ["doctor"]):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = main(args)
    print(json.dumps({"code": code, "out": buf.getvalue()}))
