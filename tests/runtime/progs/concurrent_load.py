"""Eight threads call _loader.load() at once: the library is loaded once, one result shared.

Run as ``cd <package copy> && python concurrent_load.py``; counts torch.ops.load_library calls and prints
one JSON object: ``calls``, ``same``, ``n``, ``loaded``, ``peek_same``, ``again_same``.
"""

# ruff: noqa: E402  (the imports are ordered: each step is observed before the next import)

import json
import threading

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)
import torch

calls = []
real = torch.ops.load_library


def counting(path):
    calls.append(path)
    return real(path)


torch.ops.load_library = counting
from mamba_ssm import _loader

assert _loader.peek() is None
barrier = threading.Barrier(8)
results = []


def worker():
    barrier.wait()
    results.append(_loader.load())


threads = [threading.Thread(target=worker) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(
    json.dumps(
        {
            "calls": len(calls),
            "same": all(r is results[0] for r in results),
            "n": len(results),
            "loaded": results[0].loaded,
            "peek_same": _loader.peek() is results[0],
            "again_same": _loader.load() is results[0],
        }
    )
)
