"""Placeholder for upstream's ``mamba_ssm.modules.mamba3`` (the Mamba-3 block), which this version does not
have: importing it raises :class:`ModuleNotFoundError` (an :class:`ImportError`) saying so and what to use
instead (the same text as ``from mamba_ssm import Mamba3``)."""

from mamba_ssm import _missing_module

raise _missing_module(__name__)
