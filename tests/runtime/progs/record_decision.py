"""Write an install record for the package copy (as the resolver would) and print its path.

Run as ``cd <package copy> && python record_decision.py deferred|prebuilt``; first marks the copy as an
install (a dist-info beside it carrying the install id that setup.py writes into every wheel, which doctor
matches a record against), then writes a deferred or a prebuilt record and prints the path it went to.
"""

import os
import sys

import _package_copy  # noqa: F401  (the copy at the working directory, asserted)

from mamba_ssm._install import record
from mamba_ssm._install.record import InstallRecord, write_record

dist_info = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(record.__file__))), "..", "mamba_ssm-2.4.0.dev0.dist-info"
)
os.makedirs(dist_info, exist_ok=True)
with open(os.path.join(dist_info, record.INSTALL_ID_FILE), "wb") as fh:
    fh.write(record.install_id_file_bytes("feedc0de" * 4))
INSTALL = {"install_id": "feedc0de" * 4}


DEFERRED = {
    "package_version": "2.4.0.dev0",
    "final_mode": "deferred",
    "status": "deferred",
    "install": INSTALL,
    "wheel": None,
    "message": "torch was being installed by the same command",
}
PREBUILT = {
    "package_version": "2.4.0",
    "final_mode": "prebuilt",
    "status": "chosen",
    "install": INSTALL,
    "wheel": "mamba_ssm-2.4.0+cu13torch2.14cxx11abitrue-cp39-abi3-manylinux_2_34_x86_64.whl",
    "sha256": "ab" * 32,
    "index": "https://example.invalid/whl",
    "time": "2026-11-29T12:34:56Z",
    "environment": "torch 2.14.1+cu130, Python 3.11, linux_x86_64",
    "installed_wheel": "mamba_ssm-2.4.0-cp39-abi3-manylinux_2_34_x86_64.whl",
    "decision": {
        "status": "chosen",
        "chosen": "mamba_ssm-2.4.0+cu13torch2.14cxx11abitrue-cp39-abi3-manylinux_2_34_x86_64.whl",
        "candidates": ["mamba_ssm-2.4.0+cu13torch2.14cxx11abitrue-cp39-abi3-manylinux_2_34_x86_64.whl"],
        "rejected": [
            {
                "filename": "mamba_ssm-2.4.0+cu12torch2.14cxx11abitrue-cp39-abi3-manylinux_2_34_x86_64.whl",
                "reason": "built for CUDA 12, torch has CUDA 13.0",
            },
            {
                "filename": "mamba_ssm-2.4.0+cu13torch2.13cxx11abitrue-cp39-abi3-manylinux_2_34_x86_64.whl",
                "reason": "built for torch 2.13, torch is 2.14.1+cu130",
            },
        ],
        "looked_for": "cu13torch2.14cxx11abiTRUE",
        "notes": [],
    },
    "message": "Chose the cu13 wheel.",
}
print(write_record(InstallRecord.from_dict({"deferred": DEFERRED, "prebuilt": PREBUILT}[sys.argv[1]])))
