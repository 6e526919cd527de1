"""Placeholder for upstream's ``mamba_ssm.ops.tilelang`` (the TileLang Mamba-3 MIMO kernels, e.g.
``mamba_ssm.ops.tilelang.mamba3.mamba3_mimo``), which this version does not have: importing it or any
module under it raises :class:`ModuleNotFoundError` (an :class:`ImportError`) saying so and what to use
instead."""

from mamba_ssm import _missing_module

raise _missing_module(__name__)
