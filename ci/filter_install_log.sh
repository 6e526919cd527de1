#!/usr/bin/env bash
# Filter `pip install -v` output (stdin) down to what the main job shows: the resolver's lines
# ("[mamba-ssm resolver] ...", "mamba-ssm: ..."), errors, and pip's own result lines for mamba-ssm.
# Dropped: pip's isolated build environment ("  Successfully installed packaging setuptools wheel",
# indented) and packages pip upgrades in the venv on the side (setuptools, pulled by torch): the
# top-level "Successfully installed ..." line keeps only mamba-ssm. The full log stays in install.log.
grep -e "mamba-ssm resolver" -e "mamba-ssm:" -e "ERROR" -e "^Successfully built" -e "^Successfully installed" \
  | sed -E 's/^(Successfully installed) (.* )?(mamba-ssm-[^ ]+)( .*)?$/\1 \3/' \
  || true
