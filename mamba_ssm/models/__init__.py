"""Language models built from Mamba blocks (:mod:`.config_mamba`: ``MambaConfig``;
:mod:`.mixer_seq_simple`: ``MixerModel``, ``MambaLMHeadModel``; :mod:`.transformers_format`:
transformers' Mamba / Mamba2 checkpoints, both ways)."""
