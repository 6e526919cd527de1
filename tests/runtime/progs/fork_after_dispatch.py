"""A CPU dispatch, then os.fork: CUDA stays uninitialised in the parent and the child.

Run as ``cd <package copy> && python fork_after_dispatch.py``; prints one JSON object:
``child_cuda_initialized``, ``parent_cuda_initialized`` and ``backend``.
"""

# ruff: noqa: E402  (the imports are ordered: each step is observed before the next import)

import json
import os

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)
import torch

import mamba_ssm

mamba_ssm.get_backend()
from mamba_ssm import _dispatch

backend = _dispatch.backend_for("selective_scan", "cpu")  # loads (tries) _C, checks CPU coverage
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(r)
    os.write(w, json.dumps({"child_cuda_initialized": torch.cuda.is_initialized()}).encode())
    os._exit(0)
os.close(w)
data = json.loads(os.read(r, 4096).decode())
os.waitpid(pid, 0)
data["parent_cuda_initialized"] = torch.cuda.is_initialized()
data["backend"] = backend
print(json.dumps(data))
