"""Load ``mamba_ssm/_compat/*.py`` by file path, without importing ``mamba_ssm`` (and so torch).

The release tooling and setup.py need the shared rules (versions, archs, build info, variant key)
in environments where importing the runtime package would pull in torch, or where torch is absent.
The modules are registered as ``mamba_ssm_compat_bypath.<name>`` so they never shadow a real
``mamba_ssm`` import in the same process.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
COMPAT_DIR = REPO_ROOT / "mamba_ssm" / "_compat"
_PKG = "mamba_ssm_compat_bypath"


def load_compat(name: str) -> types.ModuleType:
    """Return the module ``mamba_ssm/_compat/<name>.py`` loaded by path (cached per process).

    Raises ImportError naming the file when it does not exist (e.g. before its owner landed it).
    """
    full = f"{_PKG}.{name}"
    if full in sys.modules:
        return sys.modules[full]
    if _PKG not in sys.modules:
        pkg = types.ModuleType(_PKG)
        pkg.__path__ = [str(COMPAT_DIR)]  # lets the modules import each other relatively
        sys.modules[_PKG] = pkg
    path = COMPAT_DIR / f"{name}.py"
    if not path.is_file():
        raise ImportError(f"{path} does not exist: the shared rule module {name!r} is missing")
    spec = importlib.util.spec_from_file_location(full, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[full] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[full]
        raise
    return module
