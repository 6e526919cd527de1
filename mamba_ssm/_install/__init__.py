"""The install-time resolver: which prebuilt ``mamba_ssm`` wheel fits the *target* environment.

Flow (docs/architecture.md)::

    detect() -> Environment -> select(Environment, Manifest, sdist version) -> Selection -> fetch -> wheel
        -> Resolution -> InstallRecord

* ``environment`` (+ ``probe``, the module run in the target interpreter): detection of the target
  interpreter, torch, platform tags, GPUs and driver (outside pip's / uv's isolated build environment).
* ``index``: where the wheels are (the release's recorded index, ``MAMBA_WHEEL_INDEX``).
* ``manifest``: the wheel index's ``manifest.json`` and the hashes pinned into the sdist.
* ``selection``: the pure selection function and its explanation.
* ``fetch``: downloads with timeouts, retries, proxy/CA settings, size + sha256 checks, a shared cache.
* ``record``: the install record (``InstallRecord``) that ``python -m mamba_ssm doctor`` shows.
* ``resolve``: the steps above end to end; ``setup_hook`` (setup.py's entry), ``install_kernels``.

Standard library + ``packaging`` only (``filelock`` when present); nothing here imports torch at
module level; setup.py reaches ``setup_hook`` through its ``load_private`` (it never imports
``mamba_ssm``). Every fix text is ``mamba_ssm._advice``'s.
"""
