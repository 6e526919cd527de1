"""Mamba blocks (:mod:`.mamba_simple`)."""
