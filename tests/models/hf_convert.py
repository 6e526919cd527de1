"""Our own mapping between transformers' Mamba / Mamba2 checkpoints and upstream mamba-ssm's format
(the renaming README.md documents), used by the parity tests and the generate benchmark.

    transformers                          mamba-ssm (upstream)
    backbone.embeddings.weight     <->    backbone.embedding.weight  (rows padded to pad_vocab_size_multiple)
    backbone.layers.{i}.norm.weight       same
    backbone.layers.{i}.mixer.*           same (Mamba: A_log D conv1d.* in_proj x_proj dt_proj.* out_proj;
                                          Mamba2: A_log D dt_bias conv1d.* in_proj norm.weight out_proj)
    backbone.norm_f.weight                same
    lm_head.weight                        same (absent from a file when tied)

Config: hidden_size -> d_model, num_hidden_layers -> n_layer, vocab_size, residual_in_fp32,
tie_word_embeddings -> tie_embeddings; the mixer's fields go to ssm_cfg (state_size -> d_state,
conv_kernel -> d_conv, expand, use_bias -> bias, use_conv_bias -> conv_bias, time_step_rank -> dt_rank
(Mamba); head_dim -> headdim, n_groups -> ngroups, chunk_size (Mamba2, with "layer": "Mamba2")).
"""

from __future__ import annotations

import json
import os

import torch

EMBED_HF, EMBED_OURS = "backbone.embeddings.weight", "backbone.embedding.weight"


def padded(vocab_size, multiple):
    return vocab_size if vocab_size % multiple == 0 else vocab_size + multiple - vocab_size % multiple


def hf_to_ours_config(arch, hf, minimal=False, pad_vocab_size_multiple=8):
    """MambaConfig fields for a transformers config dict. ``minimal``: only the fields the hub's Mamba-1
    config.json files hold (the rest must come from MambaConfig's defaults)."""
    if arch == "mamba":
        ssm_cfg = {
            "d_state": hf["state_size"],
            "d_conv": hf.get("conv_kernel", 4),
            "expand": hf.get("expand", 2),
        }
        if hf.get("time_step_rank", "auto") != "auto":
            ssm_cfg["dt_rank"] = hf["time_step_rank"]
        if hf.get("use_bias"):
            ssm_cfg["bias"] = True
        if hf.get("use_conv_bias", True) is False:
            ssm_cfg["conv_bias"] = False
    else:
        ssm_cfg = {
            "layer": "Mamba2",
            "d_state": hf["state_size"],
            "d_conv": hf.get("conv_kernel", 4),
            "expand": hf.get("expand", 2),
            "headdim": hf["head_dim"],
            "ngroups": hf["n_groups"],
            "chunk_size": hf["chunk_size"],
        }
    fields = {
        "d_model": hf["hidden_size"],
        "n_layer": hf["num_hidden_layers"],
        "vocab_size": hf["vocab_size"],
        "ssm_cfg": ssm_cfg,
        "rms_norm": True,
        "residual_in_fp32": hf.get("residual_in_fp32", True),
        "fused_add_norm": True,
        "pad_vocab_size_multiple": pad_vocab_size_multiple,
    }
    if not minimal:
        fields.update(
            d_intermediate=0,
            attn_layer_idx=[],
            attn_cfg={},
            tie_embeddings=hf.get("tie_word_embeddings", arch == "mamba"),
        )
    return fields


def hf_to_ours_state_dict(state_dict, vocab_padded):
    """Rename transformers keys to upstream's; pad the vocabulary rows with zeros."""
    out = {}
    for key, value in state_dict.items():
        key = EMBED_OURS if key == EMBED_HF else key
        if key in (EMBED_OURS, "lm_head.weight") and value.shape[0] < vocab_padded:
            value = torch.cat([value, value.new_zeros(vocab_padded - value.shape[0], value.shape[1])])
        out[key] = value.clone()
    return out


def write_ours(directory, config_fields, state_dict):
    """A checkpoint directory in upstream's format: config.json + pytorch_model.bin."""
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config_fields, f)
    torch.save(state_dict, os.path.join(directory, "pytorch_model.bin"))


def ours_to_hf(our_dir, hf_dir, arch):
    """Our save_pretrained directory -> a transformers checkpoint directory (config.json + safetensors);
    the vocabulary of the transformers config is the padded one."""
    from safetensors.torch import save_file

    with open(os.path.join(our_dir, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    sd = torch.load(os.path.join(our_dir, "pytorch_model.bin"), map_location="cpu", weights_only=True)
    vocab = sd[EMBED_OURS].shape[0]
    ssm = cfg["ssm_cfg"]
    hf = {
        "hidden_size": cfg["d_model"],
        "num_hidden_layers": cfg["n_layer"],
        "vocab_size": vocab,
        "state_size": ssm["d_state"],
        "conv_kernel": ssm.get("d_conv", 4),
        "expand": ssm.get("expand", 2),
        "residual_in_fp32": cfg["residual_in_fp32"],
        "tie_word_embeddings": cfg["tie_embeddings"],
        "layer_norm_epsilon": 1e-5,
        "pad_token_id": 0,
        "bos_token_id": 0,
        "eos_token_id": None,
    }
    if arch == "mamba":
        hf.update(
            model_type="mamba",
            architectures=["MambaForCausalLM"],
            use_bias=ssm.get("bias", False),
            use_conv_bias=ssm.get("conv_bias", True),
        )
        if "dt_rank" in ssm:
            hf["time_step_rank"] = ssm["dt_rank"]
    else:
        d_inner = ssm.get("expand", 2) * cfg["d_model"]
        hf.update(
            model_type="mamba2",
            architectures=["Mamba2ForCausalLM"],
            head_dim=ssm["headdim"],
            num_heads=d_inner // ssm["headdim"],
            n_groups=ssm.get("ngroups", 1),
            chunk_size=ssm.get("chunk_size", 256),
            use_bias=False,
            use_conv_bias=True,
        )
    tensors = {}
    for key, value in sd.items():
        if key == "lm_head.weight" and cfg["tie_embeddings"]:
            continue
        tensors[EMBED_HF if key == EMBED_OURS else key] = value.contiguous()
    os.makedirs(hf_dir, exist_ok=True)
    save_file(tensors, os.path.join(hf_dir, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(hf_dir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(hf, f)
    return hf


REFERENCE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hf_reference.py")


def run_reference(tasks, workdir, timeout=600, with_mamba_ssm=False):
    """Run hf_reference.py on ``tasks`` in a fresh interpreter (mamba_ssm blocked there, or, with
    ``with_mamba_ssm``, importable from this checkout); returns the loaded outputs, one per task. Raises
    RuntimeError with the process's output when it fails."""
    import subprocess
    import sys

    job = os.path.join(workdir, "reference_job.json")
    with open(job, "w", encoding="utf-8") as f:
        json.dump({"tasks": tasks}, f)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH",)}
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        TRANSFORMERS_VERBOSITY="error",
    )
    if with_mamba_ssm:
        env.update(
            MAMBA_HF_REFERENCE_WITH_MAMBA_SSM="1",
            MAMBA_SSM_NO_FALLBACK_WARNING="1",
            PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        )
    proc = subprocess.run(
        [sys.executable, REFERENCE_SCRIPT, job],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"the transformers reference run failed ({proc.returncode}):\n"
            f"{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        )
    return [torch.load(t["out"], map_location="cpu", weights_only=False) for t in tasks]
