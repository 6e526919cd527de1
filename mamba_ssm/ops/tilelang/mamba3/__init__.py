"""Upstream's ``mamba_ssm.ops.tilelang.mamba3`` path: :mod:`.mamba3_mimo` (``mamba3_mimo``)."""
