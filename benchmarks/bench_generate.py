#!/usr/bin/env python
"""Tokens per second of ``MambaLMHeadModel.generate`` against transformers' ``generate`` on the same
random weights (issue 9): the 130M shapes (d_model 768, 24 layers, vocab 50280) of Mamba-1 (d_state 16)
and Mamba-2 (d_state 128, headdim 64), fp32 on the CPU, a 128-token prompt and 128 new tokens (greedy),
batch 1 and 8.

The transformers side runs in a subprocess in which mamba_ssm cannot be imported (tests/models/
hf_reference.py), so it takes its own PyTorch path (checked from its record, as the tests do). Both
sides use the same number of intra-op threads (``--threads``). Runs are interleaved (ours, then
transformers', for each repeat), and each side's median over ``--repeats`` is reported with the ratio;
tokens/s counts new tokens of the whole batch over the whole generate call (prompt included).

    python benchmarks/bench_generate.py                       # print the table
    python benchmarks/bench_generate.py --write               # also replace its section in docs/benchmarks.md
    python benchmarks/bench_generate.py --repeats 1 --batch 1 # quicker
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests", "models"))
DOC = os.path.join(ROOT, "docs", "benchmarks.md")
BEGIN, END = "<!-- bench_generate:begin -->", "<!-- bench_generate:end -->"

SHAPES = {
    "mamba1": ("mamba", dict(d_model=768, n_layer=24, vocab_size=50280, ssm_cfg=dict(d_state=16))),
    "mamba2": (
        "mamba2",
        dict(
            d_model=768,
            n_layer=24,
            vocab_size=50280,
            ssm_cfg=dict(layer="Mamba2", d_state=128, headdim=64, ngroups=1, chunk_size=256),
        ),
    ),
}


def _load_avg():
    try:
        return "/".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--batch", nargs="+", type=int, default=[1, 8])
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--write", action="store_true", help="replace the section in docs/benchmarks.md")
    args = parser.parse_args(argv)

    import hf_run
    import torch

    from mamba_ssm.models.config_mamba import MambaConfig
    from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel

    torch.set_num_threads(args.threads)
    load_before = _load_avg()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in args.models:
            arch, fields = SHAPES[name]
            torch.manual_seed(0)
            model = MambaLMHeadModel(MambaConfig(**fields)).eval()
            hf_dir = os.path.join(work, f"hf_{name}")
            model.save_pretrained(hf_dir, transformers_format=True)
            for batch in args.batch:
                g = torch.Generator().manual_seed(batch)
                prompt = torch.randint(0, fields["vocab_size"], (batch, args.prompt), generator=g)
                ours, theirs = [], []
                model.generate(prompt[:, :8], max_length=12)  # warm-up
                for rep in range(args.repeats):
                    wall, cpu = time.perf_counter(), time.process_time()
                    seq = model.generate(prompt, max_length=args.prompt + args.new_tokens)
                    ours.append((time.perf_counter() - wall, time.process_time() - cpu))
                    out = hf_run.run_reference(
                        [
                            {
                                "kind": "bench",
                                "arch": arch,
                                "dir": hf_dir,
                                "prompt": prompt.tolist(),
                                "new_tokens": args.new_tokens,
                                "repeats": 1,
                                "threads": args.threads,
                                "out": os.path.join(work, f"bench_{name}_{batch}_{rep}.pt"),
                            }
                        ],
                        work,
                    )[0]
                    path = out["reference_path"]
                    if path["imported"] or not path["torch_path"] or not all(path["torch_path"].values()):
                        raise SystemExit(f"transformers did not take its own PyTorch path: {path}")
                    theirs.extend(out["times"])
                    same = torch.equal(seq, out["generated"])
                rows.append(
                    dict(
                        model=name,
                        batch=batch,
                        ours=ours,
                        theirs=theirs,
                        same=same,
                        tokens=batch * args.new_tokens,
                    )
                )
                r = rows[-1]
                print(_fmt_row(r), flush=True)
    load_after = _load_avg()
    header = (
        f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()} "
        f"{os.cpu_count()} cores, torch {torch.__version__}, transformers {out['reference_path']['transformers']}, "
        f"{args.threads} thread(s) each side, load avg (1/5/15 min) {load_before} before, {load_after} after; "
        f"fp32, prompt {args.prompt}, {args.new_tokens} new tokens, greedy, median of {args.repeats} "
        f"interleaved runs"
    )
    table = _table(rows)
    print(header)
    print(table)
    if args.write:
        _write(header, table, argv)


def _med(xs, i):
    return statistics.median(x[i] for x in xs)


def _fmt_row(r):
    ow, tw = _med(r["ours"], 0), _med(r["theirs"], 0)
    oc, tc = _med(r["ours"], 1), _med(r["theirs"], 1)
    return (
        f"| {r['model']} | {r['batch']} | {r['tokens'] / ow:.1f} | {r['tokens'] / tw:.1f} | {tw / ow:.2f}x | "
        f"{oc:.1f} / {tc:.1f} | {tc / oc:.2f}x | {'yes' if r['same'] else 'NO'} |"
    )


def _table(rows):
    lines = [
        "| model | batch | ours tokens/s | transformers tokens/s | wall speed-up | CPU s ours / transformers "
        "| CPU-time speed-up | same tokens |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    return "\n".join(lines + [_fmt_row(r) for r in rows])


def _write(header, table, argv):
    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    cmd = "python benchmarks/bench_generate.py " + " ".join(argv or sys.argv[1:])
    body = (
        f"{BEGIN}\n## generate on the CPU: ours vs transformers (`benchmarks/bench_generate.py`)\n\n"
        f"`{cmd.strip()}`; {header}.\n\n{table}\n{END}"
    )
    if BEGIN in doc:
        doc = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: body, doc, flags=re.S)
    else:
        doc = doc.rstrip("\n") + "\n\n" + body + "\n"
    with open(DOC, "w", encoding="utf-8") as f:
        f.write(doc)


if __name__ == "__main__":
    main()
