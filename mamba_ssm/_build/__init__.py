"""The source-build logic of mamba-ssm, torch-free, behind the thin ``setup.py``.

* ``settings``: every ``MAMBA_*`` (and torch-compatible) environment variable read into one typed
  ``Settings`` object, the version with its local label, the command-line classification;
* ``toolkit``: discovery and preflight of the tools a build uses (ninja, the CUDA toolkit and nvcc, the
  host compiler, ROCm's hipcc), each failure a ``PreflightError`` naming the value and the fix;
* ``config``: ``resolve_config`` (the preflight as a whole) giving the ``BuildConfig`` of a source build;
* ``plan``: what one setup.py run builds (prebuilt wheel from the resolver, source, pure Python);
* ``commands``: the setuptools command classes and the ``mamba_ssm._C`` Extension (setuptools and, for
  a source build, torch are imported there and only there).

setup.py reaches this package through its ``load_private`` (a private package over this tree's
``mamba_ssm`` folder), never through ``import mamba_ssm``: a build must not run ``mamba_ssm/__init__.py``
or pick up an installed copy. Nothing here imports torch at module level.
"""
