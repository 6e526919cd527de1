#!/usr/bin/env bash
# The test command (README.md, .ci/run): set up the shared venv, build mamba_ssm._C in place for a
# reduced arch set, run the test suite.
set -euo pipefail
source "$(dirname "$0")/env.sh"
cd "$REPO_ROOT"
python -m pytest -q -ra tests "$@"
