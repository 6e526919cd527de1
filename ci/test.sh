#!/usr/bin/env bash
# The test command (README.md, .ci/run): set up the shared venv, check lint, format and types, build
# mamba_ssm._C in place for a reduced arch set, run the test suite: the fast tier, then the slow one.
#
# The in-place build is incremental (ninja): only what changed recompiles. It is the one real build CI
# does (CPU kernel + sm_90); tests/build/test_real_build.py checks the library it leaves behind.
# Set MAMBA_CI_SKIP_BUILD=1 to run the tests against whatever is there, MAMBA_CI_SKIP_LINT=1 to skip
# the checks (a targeted run while editing).
set -euo pipefail
# shellcheck source=ci/env.sh
source "$(dirname "$0")/env.sh"
cd "$REPO_ROOT"
if [ "${MAMBA_CI_SKIP_LINT:-0}" != "1" ]; then
  # Seconds: a finding stops the run before the build and the tests. Config: pyproject.toml.
  echo "[test] ruff check, ruff format --check, mypy"
  python -m ruff check . || { echo "[test] ruff check failed: fix the findings (many: ruff check --fix .)"; exit 1; }
  python -m ruff format --check . || { echo "[test] ruff format would change files: run ruff format ."; exit 1; }
  python -m mypy || { echo "[test] mypy failed: fix the type errors above (files: pyproject.toml [tool.mypy])"; exit 1; }
fi
# One arch in CI (the tests check the build used exactly this list).
export MAMBA_CUDA_ARCHS="${MAMBA_CUDA_ARCHS:-90}"
if [ "${MAMBA_CI_SKIP_BUILD:-0}" != "1" ]; then
  if compgen -G "csrc/*.cpp" >/dev/null; then
    archs_shown="$MAMBA_CUDA_ARCHS"  # quoted as shlex.quote does, so the line pastes into a shell
    case "$archs_shown" in *[!A-Za-z0-9_@%+=:,./-]*) archs_shown="'$archs_shown'" ;; esac
    echo "[test] building mamba_ssm._C in place (MAMBA_CUDA_ARCHS=$archs_shown, CUDA_HOME=${CUDA_HOME:-unset})"
    start=$(date +%s)
    mkdir -p build
    log=build/ci_inplace_build.log
    # the whole output to $log; a line per compiled unit (and one when quiet for a while) here
    if ! MAMBA_FORCE_BUILD=TRUE python setup.py build_ext --inplace 2>&1 |
      python -m build_matrix.progress "$log" "the in-place build"; then
      grep -v -e "Deprecat" -e "^!!" -e "^ *\*\*\*" "$log" | tail -n 80
      echo "[test] the in-place build of mamba_ssm._C failed (full log: $log)"
      exit 1
    fi
    grep -e "^mamba-ssm:" -e "ninja: no work" "$log" || true
    echo "[test] in-place build done in $(( $(date +%s) - start )) s"
  else
    echo "[test] csrc/ has no .cpp sources yet: no in-place build"
  fi
fi
# Arguments replace the default run: `bash ci/test.sh tests/build -x`.
if [ "$#" -gt 0 ]; then
  exec python -m pytest -q -ra "$@"
fi
# Two tiers, each named: the fast one (`pytest -m "not slow"`, the inner loop of CONTRIBUTING.md),
# then the end-to-end builds and installs. Each prints its 25 slowest tests (where the time goes).
echo "[test] fast tier: pytest -m 'not slow'"
python -m pytest -q -ra --durations=25 -m "not slow" tests
echo "[test] slow tier: pytest -m slow"
python -m pytest -q -ra --durations=25 -m slow tests
