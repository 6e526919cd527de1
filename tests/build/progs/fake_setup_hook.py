"""A stand-in for the install-time resolver hook, loaded by setup.py through MAMBA_SETUP_HOOK.

Not run itself: the tests point MAMBA_SETUP_HOOK at this file. ``resolve_prebuilt`` answers with the wheel
named by FAKE_WHEEL (none when unset), deferred when FAKE_DEFERRED=1; each call appends one JSON line
(``{"call": ..., ...}``) to the file named by FAKE_LOG.
"""

import json
import os
from dataclasses import dataclass


@dataclass
class Outcome:
    wheel_path: object
    deferred: bool
    message: str


def resolve_prebuilt(version):
    with open(os.environ["FAKE_LOG"], "a") as f:
        f.write(json.dumps({"call": "resolve_prebuilt", "version": version}) + "\n")
    return Outcome(
        os.environ.get("FAKE_WHEEL") or None,
        os.environ.get("FAKE_DEFERRED") == "1",
        "looked for cu13torch2.14cxx11abiTRUE: nothing in the index",
    )


def record(outcome, final_mode):
    with open(os.environ["FAKE_LOG"], "a") as f:
        f.write(json.dumps({"call": "record", "final_mode": final_mode}) + "\n")
