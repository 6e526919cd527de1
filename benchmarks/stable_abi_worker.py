"""The per-call timings of ``bench_stable_abi.py`` in one process, for the ``mamba_ssm`` of the checkout
at the working directory.

Run as ``cd <checkout> && python <this file> CALLS STEPS``. Prints one JSON object: ``abi`` (the loaded
build's torch ABI line) and, per metric, (wall us, CPU us): the ``causal_conv1d_update`` op (batch 1, dim
1536, width 4), the ``selective_scan_fwd`` op and ``selective_scan_fn`` without grad at (batch, dim,
seqlen, d_state) = (1, 16, 16, 8), and the median of STEPS decode steps of a 130M-shape Mamba-1 model.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())  # the checkout's mamba_ssm, not this script's folder

import torch


def per_call(fn, n, chunks=20):
    """(wall us, CPU us) per call of ``fn``: the fastest of ``chunks`` runs of n // chunks calls. On a
    shared machine a run the scheduler interrupted is slower, never faster, than the uncontended cost."""
    for _ in range(max(10, n // 10)):
        fn()
    k = max(1, n // chunks)
    best_w = best_c = float("inf")
    for _ in range(chunks):
        w, c = time.perf_counter(), time.process_time()
        for _ in range(k):
            fn()
        best_w = min(best_w, (time.perf_counter() - w) / k * 1e6)
        best_c = min(best_c, (time.process_time() - c) / k * 1e6)
    return best_w, best_c


def op_calls(calls, out):
    """The op and selective_scan_fn rows."""
    from mamba_ssm import selective_scan_fn

    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 1536, generator=g)
    state = torch.randn(1, 1536, 3, generator=g)
    w = torch.randn(1536, 4, generator=g)
    b = torch.randn(1536, generator=g)
    update = torch.ops.mamba_ssm.causal_conv1d_update.default
    out["causal_conv1d_update"] = per_call(lambda: update(x, state, w, b, True, None, None), calls)

    bsz, dim, seqlen, dstate = 1, 16, 16, 8
    u = torch.randn(bsz, dim, seqlen, generator=g)
    delta = torch.rand(bsz, dim, seqlen, generator=g) * 0.5
    A = -torch.rand(dim, dstate, generator=g) - 0.1
    B = torch.randn(bsz, dstate, seqlen, generator=g)
    C = torch.randn(bsz, dstate, seqlen, generator=g)
    D = torch.randn(dim, generator=g)
    z = torch.randn(bsz, dim, seqlen, generator=g)
    bias = torch.randn(dim, generator=g) * 0.1
    fwd = torch.ops.mamba_ssm.selective_scan_fwd.default
    out["selective_scan_fwd"] = per_call(lambda: fwd(u, delta, A, B, C, D, z, bias, True), calls)
    with torch.no_grad():
        out["selective_scan_fn"] = per_call(
            lambda: selective_scan_fn(u, delta, A, B, C, D, z, bias, delta_softplus=True), calls
        )


def decode_steps(steps):
    """(median wall us, median CPU us) of one greedy decode step of a 130M-shape Mamba-1 model."""
    from mamba_ssm.models.config_mamba import MambaConfig
    from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel
    from mamba_ssm.utils.generation import InferenceParams

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    config = MambaConfig(d_model=768, n_layer=24, vocab_size=50277, ssm_cfg={"d_state": 16})
    model = MambaLMHeadModel(config).eval()
    prompt = torch.randint(0, 50277, (1, 16), generator=g)
    with torch.no_grad():
        params = InferenceParams(max_seqlen=16 + steps + 8, max_batch_size=1)
        logits = model(prompt, inference_params=params).logits
        params.seqlen_offset += prompt.shape[1]
        token = logits[:, -1].argmax(-1, keepdim=True)

        def step(token):
            logits = model(token, inference_params=params, num_last_tokens=1).logits
            params.seqlen_offset += 1
            return logits[:, -1].argmax(-1, keepdim=True)

        for _ in range(3):
            token = step(token)
        walls, cpus = [], []
        for _ in range(steps):
            w0, c0 = time.perf_counter(), time.process_time()
            token = step(token)
            walls.append((time.perf_counter() - w0) * 1e6)
            cpus.append((time.process_time() - c0) * 1e6)
    return sorted(walls)[len(walls) // 2], sorted(cpus)[len(cpus) // 2]


def main():
    from mamba_ssm import _loader

    torch.set_num_threads(1)
    res = _loader.load()
    if not res.loaded:
        raise SystemExit(f"mamba_ssm._C did not load: {res.reason}")
    calls, steps = int(sys.argv[1]), int(sys.argv[2])
    out = {"abi": res.build_info.describe_abi()}
    op_calls(calls, out)
    out["decode_step_130m"] = decode_steps(steps)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
