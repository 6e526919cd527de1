#!/usr/bin/env bash
# README's first command: the whole main job on this machine.
#
#   1. build the host cell (python -m build_matrix build --host --no-audit: torch 2.14.1+cu130, cxx11abi
#      TRUE, sm_90)
#   2. audit it (the one full audit, runtime check included)
#   3. build our sdist
#   4. index the wheel (PEP 503 root per variant + manifest.json) and pin its sha256 into the sdist
#   5. serve the index on a loopback port (python -m http.server on 127.0.0.1)
#   6. install the sdist into a fresh venv (torch shared through a .pth file) through the resolver, with
#      MAMBA_WHEEL_INDEX pointing at the loopback server and no compiler or CUDA toolkit reachable
#   7. doctor --check: exit 0 (OK) or the job fails
#
# Environment: MAIN_JOB_DIR (work folder, default build/main_job), MAIN_JOB_ARCHS (default 90),
# MAIN_JOB_WHEEL (skip steps 1-2 and use this wheel).
set -euo pipefail
# shellcheck source=ci/env.sh
source "$(dirname "$0")/env.sh"
cd "$REPO_ROOT"

WORK="${MAIN_JOB_DIR:-$REPO_ROOT/build/main_job}"
ARCHS="${MAIN_JOB_ARCHS:-90}"
step() { echo; echo "=== [main job] $*"; }
rm -rf "${WORK:?}/index" "${WORK:?}/sdist" "${WORK:?}/venv" "${WORK:?}/home"
mkdir -p "$WORK/cells" "$WORK/index" "$WORK/sdist" "$WORK/home"
SERVER_PID=""
cleanup() { if [ -n "$SERVER_PID" ]; then kill "$SERVER_PID" 2>/dev/null || true; fi; }
trap cleanup EXIT

if [ -n "${MAIN_JOB_WHEEL:-}" ]; then
  step "1-2. using the given wheel $MAIN_JOB_WHEEL"
  WHEEL="$MAIN_JOB_WHEEL"
else
  step "1. build the host cell (archs $ARCHS)"
  # --no-audit: step 2 is the one full audit (runtime check included), not a second one here
  python -m build_matrix build --host --archs "$ARCHS" --out "$WORK/cells" --no-audit
  WHEEL=""  # the newest wheel of the folder (the one just built)
  for w in "$WORK"/cells/mamba_ssm-*.whl; do
    if [ -z "$WHEEL" ] || [ "$w" -nt "$WHEEL" ]; then WHEEL="$w"; fi
  done
  [ -f "$WHEEL" ] || { echo "no wheel in $WORK/cells"; exit 1; }
  step "2. audit $WHEEL"
  python -m build_matrix audit "$WHEEL" --archs "$ARCHS" --torch-from "$VENV"
fi

step "3. build our sdist"
python -m build --sdist --no-isolation -o "$WORK/sdist" . >"$WORK/sdist.log" 2>&1 || { tail -n 40 "$WORK/sdist.log"; exit 1; }
sdists=("$WORK"/sdist/mamba_ssm-*.tar.gz)
SDIST="${sdists[0]}"
[ -f "$SDIST" ] || { echo "no sdist in $WORK/sdist"; exit 1; }
echo "$SDIST"

step "4. index the wheel and pin its sha256 into the sdist"
python -m build_matrix index "$WORK/index" --add "$WHEEL" --pin-sdist "$SDIST"

step "5. serve the index on 127.0.0.1"
PORT="$(python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')"
python -m http.server "$PORT" --bind 127.0.0.1 --directory "$WORK/index" >"$WORK/http.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 50); do
  python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$PORT/manifest.json', timeout=1)" 2>/dev/null && break
  sleep 0.2
done
INDEX_URL="http://127.0.0.1:$PORT/"
echo "serving $WORK/index at $INDEX_URL"
python -m build_matrix resolve --index "$INDEX_URL" --explain

step "6. install the sdist into a fresh venv through the resolver (no compiler, no CUDA toolkit)"
python -m venv "$WORK/venv"
SITE="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
VSITE="$("$WORK/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$SITE" >"$VSITE/_mamba_shared_torch.pth"   # share the dev venv's torch (5.4 GiB) instead of copying it
# PATH without CUDA folders and without any nvcc (a folder holding one, like /usr/local/bin here, is
# replaced by a shadow folder of links to everything else in it)
NO_NVCC_PATH=""
i=0
IFS=: read -r -a path_dirs <<<"$PATH"
for d in "${path_dirs[@]}"; do
  i=$((i + 1))
  case "$d" in ""|*cuda*|"$VENV"/bin) continue ;; esac
  if [ -e "$d/nvcc" ]; then
    shadow="$WORK/path-shadow-$i"; rm -rf "$shadow"; mkdir -p "$shadow"
    for f in "$d"/*; do [ "$(basename "$f")" = nvcc ] || ln -s "$f" "$shadow/"; done
    d="$shadow"
  fi
  NO_NVCC_PATH="${NO_NVCC_PATH:+$NO_NVCC_PATH:}$d"
done
if PATH="$NO_NVCC_PATH" command -v nvcc >/dev/null; then echo "nvcc still on PATH"; exit 1; fi
start=$(date +%s.%N)
env PATH="$WORK/venv/bin:$NO_NVCC_PATH" CUDA_HOME=/nonexistent CC=false CXX=false \
    MAMBA_WHEEL_INDEX="$INDEX_URL" MAMBA_SSM_CACHE_DIR="$WORK/home/cache" \
    "$WORK/venv/bin/pip" install --no-cache-dir -v "$SDIST" 2>&1 | tee "$WORK/install.log" \
    | "$REPO_ROOT/ci/filter_install_log.sh" || true
end=$(date +%s.%N)
grep -q "Successfully installed.*mamba-ssm" "$WORK/install.log" || { echo "install failed, see $WORK/install.log"; exit 1; }
echo "install took $(python -c "print(round($end - $start, 1))") s"
# The package files are the index wheel's, byte for byte (same RECORD rows); only the dist-info name and
# METADATA's Version differ (pip needs the sdist's version: mamba_ssm/_install/relabel.py).
pkg_rows() { tr -d '\r' | grep -v -e '\.dist-info/' -e '^\.\./' -e '__pycache__' | sort; }
if diff <(unzip -p "$WHEEL" '*.dist-info/RECORD' | pkg_rows) <(pkg_rows <"$VSITE"/mamba_ssm-*.dist-info/RECORD); then
  echo "installed package files == the index wheel's ($(unzip -p "$WHEEL" '*.dist-info/RECORD' | pkg_rows | wc -l) RECORD rows)"
else
  echo "installed files differ from the index wheel's"; exit 1
fi

step "7. doctor --check (the installed kernels against the float64 reference; the job fails unless OK)"
echo "(the installed package is in $WORK/venv; to ask it yourself, outside this clone, whose source tree"
echo " would be imported instead, with the install decision this job recorded:"
echo " cd /tmp && MAMBA_SSM_CACHE_DIR=$WORK/home/cache $WORK/venv/bin/python -m mamba_ssm doctor)"
cd "$WORK"
MAMBA_SSM_CACHE_DIR="$WORK/home/cache" "$WORK/venv/bin/python" -m mamba_ssm doctor --check
