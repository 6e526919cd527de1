"""Load the repository's setup.py as a module (``__name__`` is not ``__main__``, so setup() does not run)."""

import importlib.util
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_setup():
    name = "_mamba_setup_under_test"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, "setup.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def fake_toolkit(root, release=(13, 0), gcc_limit=15, wrapper_dir=None):
    """A directory that looks like a CUDA toolkit root: bin/nvcc printing `nvcc --version` of
    ``release``, include/cuda_runtime.h, include/crt/host_config.h capping GCC at ``gcc_limit``,
    lib64/libcudart.so. Returns the root."""
    major, minor = release
    os.makedirs(os.path.join(root, "bin"), exist_ok=True)
    os.makedirs(os.path.join(root, "include", "crt"), exist_ok=True)
    os.makedirs(os.path.join(root, "lib64"), exist_ok=True)
    nvcc = os.path.join(root, "bin", "nvcc")
    with open(nvcc, "w") as f:
        f.write(
            "#!/bin/sh\n"
            "echo 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
            f"echo 'Cuda compilation tools, release {major}.{minor}, V{major}.{minor}.99'\n"
        )
    os.chmod(nvcc, 0o755)
    open(os.path.join(root, "include", "cuda_runtime.h"), "w").close()
    with open(os.path.join(root, "include", "crt", "host_config.h"), "w") as f:
        f.write(f"#if __GNUC__ > {gcc_limit}\n#error -- unsupported GNU version!\n#endif\n")
    open(os.path.join(root, "lib64", "libcudart.so"), "w").close()
    return root
