#!/usr/bin/env python
"""Peak memory of ``MambaLMHeadModel.from_pretrained`` per weights layout, against reading the whole
state_dict first and then ``load_state_dict`` (upstream's way; ``load_state_dict_hf`` here).

A Mamba-1 model of the 130M shapes (d_model 768, 24 layers, vocab 50280; about 129M parameters,
fp32: ~520 MB) is written once per layout with ``huggingface_hub.save_torch_state_dict`` (one file, or
shards of ``--shard-mb``) and read in a fresh interpreter per run. The number is the process's peak
resident set (VmHWM, reset through /proc/self/clear_refs after the imports) during the load, minus the
resident set before it, in multiples of the weights' bytes. "model only" (building the model from
config.json, reading no weights) is the floor every way of loading pays. RSS counts file pages a process
has mapped (a memory-mapped ``.bin``) as well as its own memory (RssAnon); both are shown (peak RssAnon
is sampled every 2 ms).

    python benchmarks/bench_checkpoint_load.py           # print the table
    python benchmarks/bench_checkpoint_load.py --write   # also replace its section in docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
BEGIN, END = "<!-- bench_checkpoint_load:begin -->", "<!-- bench_checkpoint_load:end -->"
FIELDS = dict(d_model=768, n_layer=24, vocab_size=50280, ssm_cfg=dict(d_state=16))

CHILD = os.path.join(ROOT, "benchmarks", "checkpoint_load_child.py")  # one measured load per process


def _run(mode, folder):
    env = dict(os.environ, PYTHONPATH=ROOT, MAMBA_SSM_NO_FALLBACK_WARNING="1", OMP_NUM_THREADS="1")
    out = subprocess.run(
        [sys.executable, CHILD, json.dumps({"mode": mode, "dir": folder})],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"{mode} on {folder} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shard-mb", type=int, default=100)
    parser.add_argument("--write", action="store_true", help="replace the section in docs/benchmarks.md")
    args = parser.parse_args(argv)

    import huggingface_hub
    import torch

    from mamba_ssm.models.config_mamba import MambaConfig
    from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel

    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-ckpt-") as work:
        torch.manual_seed(0)
        model = MambaLMHeadModel(MambaConfig(**FIELDS))
        state = model.state_dict()
        nbytes = sum(v.numel() * v.element_size() for k, v in state.items() if k != "lm_head.weight")
        layouts = {}
        for name, safe, shard in (
            ("model.safetensors", True, None),
            ("model.safetensors.index.json", True, args.shard_mb),
            ("pytorch_model.bin", False, None),
            ("pytorch_model.bin.index.json", False, args.shard_mb),
        ):
            folder = os.path.join(work, name)
            os.makedirs(folder)
            huggingface_hub.save_torch_state_dict(
                state,
                folder,
                safe_serialization=safe,
                max_shard_size=f"{shard}MB" if shard else "100GB",
            )
            with open(os.path.join(folder, "config.json"), "w") as f:
                json.dump(model.config.to_dict(), f)
            layouts[name] = folder
        del model, state
        for name, folder in layouts.items():
            for mode in (("model only",) if name == "model.safetensors" else ()) + (
                "from_pretrained",
                "whole state_dict, then load_state_dict",
            ):
                r = _run(mode, folder)
                mib = nbytes / 2**20
                rows.append(
                    f"| {name} | {mode} | {(r['peak'] - r['base']) / mib:.2f} | "
                    f"{(r['peak_anon'] - r['base_anon']) / mib:.2f} | {r['peak'] - r['base']:.0f} | "
                    f"{r['seconds']:.1f} / {r['cpu']:.1f} |"
                )
                print(rows[-1], flush=True)
    header = (
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()} "
        f"{os.cpu_count()} cores, torch {torch.__version__}, huggingface_hub {huggingface_hub.__version__}, "
        f"load avg (1/5/15 min) {'/'.join(f'{x:.1f}' for x in load_before)} before; weights "
        f"{nbytes / 2**20:.0f} MiB (fp32), shards of {args.shard_mb} MB"
    )
    table = "\n".join(
        [
            "| layout | how | peak RSS / weights | peak RssAnon / weights | peak RSS MiB | wall / CPU s |",
            "| --- | --- | ---: | ---: | ---: | ---: |",
            *rows,
        ]
    )
    print(header)
    print(table)
    if args.write:
        from _docsection import replace_section  # benchmarks/ beside this script

        cmd = "python benchmarks/bench_checkpoint_load.py " + " ".join(argv or sys.argv[1:])
        replace_section(
            DOC,
            BEGIN,
            END,
            f"{BEGIN}\n## Checkpoint loading: peak memory (`benchmarks/bench_checkpoint_load.py`)\n\n"
            f"`{cmd.strip()}`; {header}. Peaks are during the load, over the weights' bytes; "
            f"'model only' builds the model and reads no checkpoint (the floor: the parameters plus "
            f"initialisation temporaries). RssAnon is the process's own memory; RSS adds the file pages "
            f"it has mapped (page cache, reclaimable): a single pytorch_model.bin is one memory map, "
            f"released when it has been read.\n\n{table}\n{END}\n",
        )


if __name__ == "__main__":
    main()
