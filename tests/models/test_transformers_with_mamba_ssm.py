"""transformers' own MambaForCausalLM / Mamba2ForCausalLM with this package installed.

transformers (5.x) binds mamba_ssm's functions when the package is importable (``selective_scan_fn``,
``mamba_inner_fn``, ``selective_state_update``, ``mamba_chunk_scan_combined``, ...; arguments it passes
are filtered by our signatures, so a renamed parameter would be dropped silently). The same seeded
random models run twice in fresh interpreters: once with mamba_ssm blocked (transformers' own PyTorch
path, the independent reference) and once with it importable from this checkout; logits, loss, loss
gradients and 16 greedy tokens must agree, and the second run must really have called our functions.
"""

from __future__ import annotations

import hf_run
import pytest
import torch

pytest.importorskip("transformers")

NEW_TOKENS = 16
CASES = {
    "mamba": dict(
        vocab_size=101,
        hidden_size=32,
        state_size=8,
        num_hidden_layers=2,
        expand=2,
        conv_kernel=4,
        time_step_rank=4,
    ),
    "mamba2": dict(
        vocab_size=96,
        hidden_size=32,
        state_size=16,
        num_hidden_layers=2,
        expand=2,
        head_dim=16,
        num_heads=4,
        n_groups=2,
        chunk_size=16,
    ),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tasks = {}
    for i, (arch, cfg) in enumerate(CASES.items()):
        g = torch.Generator().manual_seed(7 + i)
        tasks[arch] = {
            "kind": "make",
            "arch": arch,
            "config": cfg,
            "seed": 40 + i,
            "input_ids": torch.randint(0, cfg["vocab_size"], (2, 37), generator=g).tolist(),
            "prompt": torch.randint(0, cfg["vocab_size"], (2, 6), generator=g).tolist(),
            "new_tokens": NEW_TOKENS,
        }
    out = {}
    for mode, with_ours in (("blocked", False), ("ours", True)):
        work = tmp_path_factory.mktemp(f"hf_{mode}")
        todo = [dict(t, out=str(work / f"{arch}.pt")) for arch, t in tasks.items()]
        out[mode] = dict(
            zip(tasks, hf_run.run_reference(todo, str(work), timeout=900, with_mamba_ssm=with_ours))
        )
    return out


@pytest.mark.parametrize("arch", list(CASES))
def test_transformers_binds_and_agrees_with_mamba_ssm(runs, arch):
    blocked, ours = runs["blocked"][arch], runs["ours"][arch]
    ref_path = blocked["reference_path"]
    assert ref_path["imported"] == [] and all(ref_path["torch_path"].values()), ref_path
    path = ours["reference_path"]
    wants_us = sorted(name for name, pkg in path["packages"].items() if pkg == "mamba_ssm")
    assert wants_us, path  # transformers asks for mamba_ssm for some of its kernel functions
    for name in wants_us:  # ... and bound each to ours, not to its own fallback
        assert not path["torch_path"][name] and path["bound_to"][name].startswith("mamba_ssm."), (name, path)
    assert "mamba_ssm.ops.selective_scan_interface" in path["imported"]
    # the same random weights (same seed, same transformers init), so the same outputs
    for key, value in blocked["state_dict"].items():
        assert torch.equal(ours["state_dict"][key], value), key
    torch.testing.assert_close(ours["logits"], blocked["logits"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours["loss"], blocked["loss"], rtol=1e-6, atol=1e-6)
    assert ours["grads"].keys() == blocked["grads"].keys()
    for key, grad in blocked["grads"].items():
        torch.testing.assert_close(ours["grads"][key], grad, rtol=1e-4, atol=1e-5, msg=key)
    assert torch.equal(ours["generated"], blocked["generated"])
    assert ours["generated"].shape == (2, 6 + NEW_TOKENS)
