"""The install-time resolver: which prebuilt ``mamba_ssm`` wheel fits the *target* environment.

Flow (docs/architecture.md)::

    detect() -> Environment -> select(Environment, Manifest, sdist version) -> Decision -> fetch -> wheel

* ``environment``: detection of the target interpreter, torch, platform tags, GPUs and driver
  (outside pip's / uv's isolated build environment).
* ``manifest``: the wheel index's ``manifest.json`` and the hashes pinned into the sdist.
* ``selection``: the pure selection function and its explanation.
* ``fetch``: downloads with timeouts, retries, proxy/CA settings, size + sha256 checks, a shared cache.
* ``decision``: the recorded decision that ``python -m mamba_ssm doctor`` shows.
* ``resolve``: the steps above end to end; ``setup_hook`` (setup.py's entry), ``install_kernels``.

Standard library + ``packaging`` only (``filelock`` when present); nothing here imports torch at
module level, and ``setup_hook.py`` can be loaded by file path (setup.py never imports ``mamba_ssm``).
"""
