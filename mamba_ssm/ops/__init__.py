"""Mamba's ops: the selective scan (:mod:`.selective_scan_interface`), causal conv1d, and the modules
under :mod:`.triton` (upstream's import paths; PyTorch implementations here, Triton optional).

Kept import-light: nothing is imported until a submodule is.
"""
