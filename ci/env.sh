# shellcheck shell=bash
# Sourced by ci/test.sh and ci/main_job.sh: makes (once) and activates the shared development venv.
#
# One CUDA torch venv is 5.9 GiB (torch 2.14.1+cu130, its CUDA libraries and the dev tools, measured with
# du), so every test venv shares this one torch install: tests that need a fresh venv create it with a
# .pth file pointing at this venv's site-packages (tests/venvs.py).
set -euo pipefail
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export REPO_ROOT
export MAMBA_DEV_HOME="${MAMBA_DEV_HOME:-$HOME/.cache/mamba-ssm-dev}"
export MAMBA_DEV_TORCH="${MAMBA_DEV_TORCH:-2.14.1}"
export MAMBA_DEV_PYTHON="${MAMBA_DEV_PYTHON:-python3.11}"
VENV="$MAMBA_DEV_HOME/torch-$MAMBA_DEV_TORCH-cp311"
export VENV
mkdir -p "$MAMBA_DEV_HOME"
# pip in the background, with a line every MAMBA_ENV_NOTE_EVERY (30) s while it runs: a long download
# or resolve is never silent.
pip_with_notes() {
  local what=$1
  shift
  "$VENV/bin/pip" "$@" &
  local pip_pid=$! waited=0
  while kill -0 "$pip_pid" 2>/dev/null; do
    sleep 1
    waited=$((waited + 1))
    if [ $((waited % ${MAMBA_ENV_NOTE_EVERY:-30})) -eq 0 ] && kill -0 "$pip_pid" 2>/dev/null; then
      echo "[env] still installing $what ($waited s; $(du -sh "$VENV" 2>/dev/null | cut -f1) in $VENV so far)"
    fi
  done
  wait "$pip_pid"
}
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "[env] creating $VENV with torch==$MAMBA_DEV_TORCH: once, about 5.9 GiB on disk (torch's CUDA"
  echo "[env] libraries, downloaded from PyPI: minutes); pip's progress follows, and a line every ${MAMBA_ENV_NOTE_EVERY:-30} s"
  rm -rf "$VENV"
  "$MAMBA_DEV_PYTHON" -m venv "$VENV"
  pip_with_notes torch install "torch==$MAMBA_DEV_TORCH"
  echo "[env] installing the development tools of ci/requirements-dev.txt (once; under a minute)"
fi
# Development tools; pip skips what is already there.
pip_with_notes "the development tools" install -q -r "$REPO_ROOT/ci/requirements-dev.txt" 2>&1 \
  | grep -v "is ignored: it is neither a file nor a directory" || true
# shellcheck disable=SC1091
source "$VENV/bin/activate"
# The toolkit root, never the wrapper script on PATH (torch's guess from it breaks the link).
if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda-13.0/bin/nvcc ]; then
  export CUDA_HOME=/usr/local/cuda-13.0
fi
