"""Scratch copies of this project for packaging tests (never build inside the shared checkout)."""

import os
import shutil
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A stand-in for csrc/ when a test is about the packaging machinery, not the kernels: one translation
# unit that embeds the build info the way the binding does and has a std::string in its ABI.
TINY_CPP = r"""#include <string>
#include "mamba_ssm_build_info.h"
extern "C" __attribute__((used)) const char mamba_ssm_build_info_blob[] =
    "MAMBA_SSM_BUILD_INFO_BEGIN" MAMBA_SSM_BUILD_INFO_JSON "MAMBA_SSM_BUILD_INFO_END";
std::string mamba_tiny_name(const std::string& prefix) { return prefix + mamba_ssm_build_info_blob; }
"""


def project_files(repo=REPO):
    """Tracked and untracked-but-not-ignored files of the checkout (what a clean clone would have)."""
    out = subprocess.run(
        ["git", "-C", repo, "ls-files", "-co", "--exclude-standard", "-z"], capture_output=True, check=True
    ).stdout.decode()
    return sorted(p for p in out.split("\0") if p and os.path.isfile(os.path.join(repo, p)))


def copy_project(dest, tiny_csrc=False):
    """Copy the project to ``dest``; with ``tiny_csrc`` replace csrc/ by one tiny C++ file."""
    for rel in project_files():
        if rel.startswith(".git/") or (tiny_csrc and rel.startswith("csrc/")):
            continue
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        try:
            shutil.copy2(os.path.join(REPO, rel), target)
        except FileNotFoundError:  # removed since listed (a shared working tree)
            continue
    if tiny_csrc:
        os.makedirs(os.path.join(dest, "csrc"), exist_ok=True)
        with open(os.path.join(dest, "csrc", "tiny.cpp"), "w") as f:
            f.write(TINY_CPP)
    return dest


def sentinel_bin(folder, log):
    """A folder of fake nvcc/hipcc/nvidia-smi that append their name to ``log`` when run."""
    os.makedirs(folder, exist_ok=True)
    for tool in ("nvcc", "hipcc", "nvidia-smi"):
        path = os.path.join(folder, tool)
        with open(path, "w") as f:
            f.write(f"#!/bin/sh\necho {tool} >> {log}\nexit 1\n")
        os.chmod(path, 0o755)
    return folder


def sentinel_torch(folder, log):
    """A package folder whose ``torch`` records being imported in ``log`` and then fails."""
    pkg = os.path.join(folder, "torch")
    os.makedirs(pkg, exist_ok=True)
    with open(os.path.join(pkg, "__init__.py"), "w") as f:
        f.write(f"open({log!r}, 'a').write('torch\\n')\nraise ImportError('sentinel torch')\n")
    return folder
