#!/usr/bin/env bash
# The test command (README.md, .ci/run): set up the shared venv, build mamba_ssm._C in place for a
# reduced arch set, run the test suite.
#
# The in-place build is incremental (ninja): only what changed recompiles. It is the one real build CI
# does (CPU kernel + sm_90); tests/build/test_real_build.py checks the library it leaves behind.
# Set MAMBA_CI_SKIP_BUILD=1 to run the tests against whatever is there.
set -euo pipefail
# shellcheck source=ci/env.sh
source "$(dirname "$0")/env.sh"
cd "$REPO_ROOT"
# One arch in CI (the tests check the build used exactly this list).
export MAMBA_CUDA_ARCHS="${MAMBA_CUDA_ARCHS:-90}"
if [ "${MAMBA_CI_SKIP_BUILD:-0}" != "1" ]; then
  if compgen -G "csrc/*.cpp" >/dev/null; then
    echo "[test] building mamba_ssm._C in place (MAMBA_CUDA_ARCHS=$MAMBA_CUDA_ARCHS, CUDA_HOME=${CUDA_HOME:-unset})"
    start=$(date +%s)
    mkdir -p build
    log=build/ci_inplace_build.log
    if ! MAMBA_FORCE_BUILD=TRUE python setup.py build_ext --inplace >"$log" 2>&1; then
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
# Arguments replace the default test path: `bash ci/test.sh tests/build -x`.
if [ "$#" -eq 0 ]; then set -- tests; fi
python -m pytest -q -ra "$@"
