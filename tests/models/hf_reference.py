"""The transformers side of the model tests and the generate benchmark, run as a separate process in which
mamba_ssm cannot be imported, so transformers takes its own PyTorch path (the independent reference).

    python hf_reference.py JOB.json

JOB.json: {"tasks": [task, ...]}; each task is

    {"kind": "make", "arch": "mamba"|"mamba2", "config": {transformers config fields}, "seed": int,
     "input_ids": [[...]], "prompt": [[...]], "new_tokens": int, "out": "path.pt"}
        a random MambaForCausalLM / Mamba2ForCausalLM (seeded, then every parameter perturbed so that
        norms, D and biases are not at their trivial initial values); saves its state_dict (transformers
        keys), the fp32 logits on input_ids, the loss gradients (labels = input_ids), and the greedy
        generation of new_tokens tokens from prompt. With "save_dir" (and optionally "max_shard_size"),
        also ``save_pretrained(save_dir)``: a checkpoint folder in transformers' own layout.
    {"kind": "load", "arch": ..., "dir": "checkpoint dir", "input_ids", "prompt", "new_tokens", "out"}
        the same outputs from a checkpoint directory in transformers' format.
    {"kind": "bench", "arch": ..., "dir": ..., "prompt": [[...]], "new_tokens": int, "repeats": int,
     "out": ...}: wall and CPU seconds of each greedy generate call.

Every task's output also records ``reference_path``: that mamba_ssm was refused (the blocker's log),
never imported, and that each kernel function transformers wraps fell back to its own PyTorch version
(``torch_path``; ``packages`` / ``bound_to``: the package each wrapper asked for and what it bound).
With MAMBA_HF_REFERENCE_WITH_MAMBA_SSM=1 mamba_ssm is not blocked (transformers with this package
installed; ``hf_run.run_reference(..., with_mamba_ssm=True)``).
"""

from __future__ import annotations

import importlib.abc
import inspect
import json
import os
import sys
import time
import types


class _BlockMambaSsm(importlib.abc.MetaPathFinder):
    """Refuses ``mamba_ssm`` and its submodules as if they were not installed."""

    refused: list = []

    def find_spec(self, name, path=None, target=None):
        if name == "mamba_ssm" or name.startswith("mamba_ssm."):
            self.refused.append(name)
            raise ModuleNotFoundError(f"No module named {name!r} (blocked for the reference run)", name=name)
        return None


# WITH_MAMBA_SSM_ENV=1 leaves mamba_ssm importable: transformers then binds our kernel functions (the
# run that checks transformers with this package installed against the blocked run).
WITH_MAMBA_SSM_ENV = "MAMBA_HF_REFERENCE_WITH_MAMBA_SSM"
if os.environ.get(WITH_MAMBA_SSM_ENV) != "1":
    sys.meta_path.insert(0, _BlockMambaSsm())

import torch  # noqa: E402
import transformers  # noqa: E402


def _classes(arch):
    if arch == "mamba":
        import transformers.models.mamba.modeling_mamba as modeling
        from transformers import MambaConfig, MambaForCausalLM

        return MambaConfig, MambaForCausalLM, modeling
    if arch == "mamba2":
        import transformers.models.mamba2.modeling_mamba2 as modeling
        from transformers import Mamba2Config, Mamba2ForCausalLM

        return Mamba2Config, Mamba2ForCausalLM, modeling
    raise ValueError(f"unknown arch {arch!r}")


def _reference_path(modeling):
    """Which implementation each of transformers' kernel wrappers bound: True = its own PyTorch code."""
    bound, packages, bound_to = {}, {}, {}
    for name, fn in vars(modeling).items():
        if isinstance(fn, types.FunctionType) and fn.__closure__:
            nonlocals = inspect.getclosurevars(fn).nonlocals
            if "is_new_implementation" in nonlocals:
                bound[name] = not nonlocals["is_new_implementation"] and nonlocals.get(
                    "implementation"
                ) is getattr(fn, "__wrapped__", None)
                packages[name] = nonlocals.get("package")
                impl = nonlocals.get("implementation")
                bound_to[name] = f"{getattr(impl, '__module__', '?')}.{getattr(impl, '__qualname__', '?')}"
    return {
        "refused": sorted(set(_BlockMambaSsm.refused)),
        "imported": sorted(m for m in sys.modules if m == "mamba_ssm" or m.startswith("mamba_ssm.")),
        "torch_path": bound,
        "packages": packages,
        "bound_to": bound_to,
        "transformers": transformers.__version__,
    }


def _greedy(model, prompt, new_tokens):
    ids = torch.tensor(prompt)
    with torch.no_grad():
        out = model.generate(
            ids,
            max_new_tokens=new_tokens,
            do_sample=False,
            use_cache=True,
            attention_mask=torch.ones_like(ids),
            pad_token_id=0,
        )
    return out


def _outputs(model, task):
    ids = torch.tensor(task["input_ids"])
    model.zero_grad()
    result = model(ids, labels=ids)
    result.loss.backward()
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters() if p.grad is not None}
    return {
        "logits": result.logits.detach(),
        "loss": result.loss.detach(),
        "grads": grads,
        "generated": _greedy(model, task["prompt"], task["new_tokens"]),
    }


def run(task):
    config_cls, model_cls, modeling = _classes(task["arch"])
    if task["kind"] == "make":
        torch.manual_seed(task["seed"])
        model = model_cls(config_cls(**task["config"]))
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.1 * torch.randn_like(p))
        model.generation_config.eos_token_id = None
        if task.get("save_dir"):
            model.save_pretrained(task["save_dir"], max_shard_size=task.get("max_shard_size", "5GB"))
        out = {"state_dict": {k: v.clone() for k, v in model.state_dict().items()}, **_outputs(model, task)}
    elif task["kind"] == "load":
        model = model_cls.from_pretrained(task["dir"], dtype=torch.float32)
        model.generation_config.eos_token_id = None
        out = _outputs(model, task)
    elif task["kind"] == "bench":
        torch.set_num_threads(task.get("threads", torch.get_num_threads()))
        model = model_cls.from_pretrained(task["dir"], dtype=torch.float32).eval()
        model.generation_config.eos_token_id = None
        times = []
        for _ in range(task["repeats"]):
            wall, cpu = time.perf_counter(), time.process_time()
            seq = _greedy(model, task["prompt"], task["new_tokens"])
            times.append((time.perf_counter() - wall, time.process_time() - cpu))
        out = {"times": times, "generated": seq}
    else:
        raise ValueError(f"unknown task kind {task['kind']!r}")
    out["reference_path"] = _reference_path(modeling)
    torch.save(out, task["out"])


def main(argv):
    with open(argv[1], encoding="utf-8") as f:
        job = json.load(f)
    for task in job["tasks"]:
        run(task)


if __name__ == "__main__":
    main(sys.argv)
