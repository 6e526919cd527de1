"""Tensor parallelism on ``torch.distributed`` (upstream's ``mamba_ssm.distributed``):
:mod:`.distributed_utils` (collectives along the first dimension, and their autograd forms) and
:mod:`.tensor_parallel` (column/row-parallel linears, vocabulary-parallel embeddings)."""
