"""transformers' Mamba2Mixer on seeded weights: outputs and parameter gradients, the reference side.

Run as ``python tests/modules/progs/transformers_mamba2_side.py CASES_JSON OUT_PT DIMS_JSON`` with
USE_HUB_KERNELS=0 and no PYTHONPATH: importing ``mamba_ssm`` or ``causal_conv1d`` is refused here, so
transformers binds its own PyTorch functions. ``CASES_JSON`` lists the cases (ngroups, chunk_size, seqlen,
bias, dt_limit), ``DIMS_JSON`` holds d_model, d_state and headdim. Saves per case the state dict, the
gradients, the inputs u, g and the output to ``OUT_PT``; prints one JSON object: ``own`` (the module of
each op transformers bound), ``module``, ``attempts`` (the refused imports), ``mamba_ssm_loaded``.
"""

# ruff: noqa: E402  (the import blocker is installed before torch and transformers are imported)

import importlib.abc
import inspect
import json
import sys

BLOCKED = ("mamba_ssm", "causal_conv1d")
attempts = []


class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            attempts.append(name)
            raise ModuleNotFoundError(f"blocked for the reference run: {name}", name=name)


sys.meta_path.insert(0, Block())
import torch
from transformers import Mamba2Config
from transformers.models.mamba2 import modeling_mamba2 as mm

own = {}
for fn in (
    "mamba2_chunk_scan",
    "mamba2_selective_state_update",
    "mamba2_split_conv1d_scan_combined",
    "causal_conv1d_fn",
    "causal_conv1d_update",
):
    f = getattr(mm, fn, None)
    if f is None:
        continue
    impl = inspect.getclosurevars(f).nonlocals.get("implementation", f)
    own[fn] = impl.__module__
cases = json.loads(sys.argv[1])
out_path = sys.argv[2]
dims = json.loads(sys.argv[3])
D_MODEL, D_STATE, HEADDIM = dims["d_model"], dims["d_state"], dims["headdim"]
results = []
for i, c in enumerate(cases):
    cfg = Mamba2Config(
        hidden_size=D_MODEL,
        state_size=D_STATE,
        expand=2,
        head_dim=HEADDIM,
        num_heads=2 * D_MODEL // HEADDIM,
        n_groups=c["ngroups"],
        conv_kernel=4,
        chunk_size=c["chunk_size"],
        use_bias=c["bias"],
        use_conv_bias=True,
        time_step_limit=tuple(c["dt_limit"]),
        layer_norm_epsilon=1e-5,
        num_hidden_layers=1,
        vocab_size=16,
    )
    torch.manual_seed(100 + i)
    mixer = mm.Mamba2Mixer(cfg, layer_idx=0).eval()
    gen = torch.Generator().manual_seed(i)
    with torch.no_grad():
        for name, p in mixer.named_parameters():
            if name == "A_log":
                p.copy_(torch.log(torch.rand(p.shape, generator=gen) * 4 + 0.5))
            elif name == "dt_bias":
                p.copy_(torch.rand(p.shape, generator=gen) * 2 - 3)
            elif name in ("D", "norm.weight"):
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    u = torch.randn(2, c["seqlen"], D_MODEL, generator=gen)
    g = torch.randn(2, c["seqlen"], D_MODEL, generator=gen)
    out = mixer(u)
    (out * g).sum().backward()
    results.append(
        {
            "state_dict": {k: v.detach().clone() for k, v in mixer.state_dict().items()},
            "grads": {k: p.grad.clone() for k, p in mixer.named_parameters()},
            "u": u,
            "g": g,
            "out": out.detach(),
        }
    )
torch.save(results, out_path)
print(
    json.dumps(
        {
            "own": own,
            "module": mm.__name__,
            "attempts": sorted(set(attempts)),
            "mamba_ssm_loaded": any(m.split(".")[0] in BLOCKED for m in sys.modules),
        }
    )
)
