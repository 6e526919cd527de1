"""The shared rules load from the source tree without torch or the mamba_ssm package: setup.py's
``load_private``, the one way the project does that."""

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_compat_modules_load_by_path_without_torch_or_package():
    # -I: isolated mode, so the repository is not on sys.path and `import mamba_ssm` cannot happen.
    out = subprocess.run(
        [
            sys.executable,
            "-I",
            os.path.join(os.path.dirname(os.path.abspath(__file__)), "progs", "compat_by_path.py"),
            REPO,
        ],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "loaded []"
