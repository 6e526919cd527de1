"""Upstream's ``mamba_ssm.ops.tilelang`` import path (its TileLang Mamba-3 MIMO kernels). Here the same
names run this package's implementation (:mod:`.mamba3.mamba3_mimo`); TileLang is not used or needed."""
