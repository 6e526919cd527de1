"""One measured load of ``bench_checkpoint_load.py``, in a process of its own.

Run as ``python <this file> '{"mode": MODE, "dir": FOLDER}'`` with ``mamba_ssm`` importable (the
benchmark sets PYTHONPATH). MODE: ``from_pretrained`` (``MambaLMHeadModel.from_pretrained(FOLDER)``),
``model only`` (the floor: the model built from FOLDER's config.json, no checkpoint read), or anything
else (every checkpoint file of FOLDER read whole with safetensors / ``torch.load``, then
``load_state_dict``). Prints one JSON object: ``base`` / ``peak`` (VmRSS before, VmHWM after, MiB),
``base_anon`` / ``peak_anon`` (RssAnon before, its sampled peak, MiB), ``seconds`` and ``cpu`` (wall
and process CPU time of the load). Linux only (reads /proc/self).
"""

import json
import os
import sys
import threading
import time
import warnings

import torch

from mamba_ssm.models.config_mamba import MambaConfig
from mamba_ssm.models.mixer_seq_simple import MambaLMHeadModel
from mamba_ssm.utils.hf import load_config_hf


def status(field):
    """``field`` of /proc/self/status in MiB (nan when absent)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def load(mode, folder):
    """Load the checkpoint in ``folder`` the way ``mode`` names; returns the model."""
    if mode == "from_pretrained":
        return MambaLMHeadModel.from_pretrained(folder)
    model = MambaLMHeadModel(MambaConfig(**load_config_hf(folder)))
    if mode == "model only":
        return model
    from safetensors.torch import load_file

    state = {}
    for name in sorted(f for f in os.listdir(folder) if f.endswith((".safetensors", ".bin"))):
        path = os.path.join(folder, name)
        state.update(
            load_file(path) if name.endswith(".safetensors") else torch.load(path, weights_only=True)
        )
    model.load_state_dict(state, strict=False)
    return model


def main():
    job = json.loads(sys.argv[1])
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    peak_anon = [0.0]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak_anon[0] = max(peak_anon[0], status("RssAnon"))
            time.sleep(0.002)

    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")  # resets VmHWM to the current RSS
    base, base_anon = status("VmRSS"), status("RssAnon")
    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    wall, cpu = time.perf_counter(), time.process_time()
    model = load(job["mode"], job["dir"])
    seconds, cpu = time.perf_counter() - wall, time.process_time() - cpu
    done.set()
    thread.join()
    del model
    out = {"base": base, "peak": status("VmHWM"), "base_anon": base_anon, "peak_anon": peak_anon[0]}
    print(json.dumps({**out, "seconds": seconds, "cpu": cpu}))


if __name__ == "__main__":
    main()
