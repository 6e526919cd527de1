#!/usr/bin/env bash
# The GPU check, one script for the reference GPU machine (an H200 with Python 3.12, torch 2.11.0+cu130,
# nvcc, no network), within 7.5 minutes: every command has its own time limit, and all of them at their
# limits sum to 430 s (start-up 30 s: torch/GPU info 12, python --version 2, git 2, ninja 3, nvidia-smi 5,
# nvcc --version 3, pytest check 3; then build 80, doctor 10, GPU kernel tests 45, kernel benchmark 35,
# Triton GPU tests 45, ops benchmark 50, Mamba-3 GPU tests 75, Mamba-3 ops 60). Step 6 is mostly Triton
# compiling Mamba-3's kernels at their first call: about 47 configurations for the tests and 30-40 for
# the benchmark rows, about 1.3 s of CPU each (tests/ops/triton/compile_check.py --only mamba3 for sm_90: 43 in
# 57 s of CPU on a 2-core VM). The steps:
#   1. build mamba_ssm._C in place for sm_90 only (CPU kernel + CUDA kernels), with the build log
#      (MAX_JOBS=16 on the H200: about 30-60 s);
#   2. doctor's JSON (the module loaded, its build info, the backend per device);
#   3. the GPU kernel tests (tests/kernels/test_gpu_kernel.py and test_conv1d_gpu.py: float64 references,
#      fwd+bwd, fp32/fp16/bf16, seqlen 2049 with delta_bias+softplus, dim 65,536, side stream, second device);
#   4. the kernel benchmark (benchmarks/bench_kernel.py --device cuda --repeats 5: B=8, D=2048, d_state 16,
#      L=4096, fp32/bf16, fwd and fwd+bwd, bandwidth, measured copy bandwidth, speed vs the PyTorch fallback);
#   5. the Triton kernels' GPU tests (tests/ops/triton/test_triton_gpu.py: mostly compiling the kernels, a few
#      s each) and the ops benchmark, one call for every op (benchmarks/bench_ops.py --device cuda --reps 3:
#      causal conv1d fwd, fwd+bwd, update and varlen states vs our PyTorch path and F.conv1d, bandwidth vs
#      copy; SSD fwd+bwd vs our PyTorch SSD and the Mamba-1 scan; selective_state_update and the norms vs
#      copy bandwidth; mamba_split_conv1d_scan_combined last);
#   6. Mamba-3 on its Triton kernels: their GPU tests (tests/ops/triton/test_triton_mamba3_gpu.py: the public ops
#      against the float64 oracle: SISO and MIMO rank 4 bf16 fwd+bwd with states and seq_idx, packed
#      sequences in fp32, the decode step) and the Mamba-3 rows of the ops benchmark (--only mamba3, into
#      $OUT/mamba3): mamba3_siso_combined fwd and fwd+bwd, mamba3_mimo fwd+bwd (vs Mamba-2's SSD at the
#      same shape) and mamba3_step (vs selective_state_update), on the backend the dispatcher picks
#      (Triton on a CUDA/ROCm GPU; the row names it).
# Every step writes into $OUT as it goes (summary.txt collects one line per step; the benchmarks rewrite
# their tables after every row), so a run cut short still leaves what it did. A failing step does not stop
# the others. Without a CUDA device (a dry run) the build and doctor still run, the GPU tests skip and the
# benchmarks exit at once saying so.
#
# Usage (repository root):  OUT=/some/dir bash benchmarks/gpu_check.sh
# Environment: PYTHON (default: python3, else python), CUDA_HOME (default: the toolkit that holds the
# nvcc on PATH, resolved through wrapper scripts and symlinks, else /usr/local/cuda), MAX_JOBS (default:
# CPU count, at most 16), BUILD_LIMIT (the build's time limit, default 80 s; raise it only for a dry run
# on a small machine, where a clean build with MAX_JOBS=2 takes 2-4 minutes).
set -uo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO" || exit 1
OUT="${OUT:-$REPO/gpu_check_out}"
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
# Results of an earlier run into the same folder must not pass for this one's.
rm -f "$OUT"/bench_kernel_cuda.* "$OUT"/bench_ops_cuda.* "$OUT"/mamba3/bench_ops_cuda.* "$OUT"/*.xml
START=$(date +%s)

say() { echo "[gpu_check +$(( $(date +%s) - START ))s] $*" | tee -a "$SUMMARY"; }

PYTHON="${PYTHON:-}"
if [ -z "$PYTHON" ]; then
  if command -v python3 >/dev/null 2>&1; then PYTHON=python3; else PYTHON=python; fi
fi

# ---- environment --------------------------------------------------------------------------------
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "host: $(uname -a)"
  echo "git: $(timeout 2 git -C "$REPO" rev-parse HEAD 2>/dev/null || echo 'not a git checkout')"
  echo "python: $(timeout 2 "$PYTHON" --version 2>&1) ($(command -v "$PYTHON"))"
  timeout 12 "$PYTHON" -c "import torch; print('torch:', torch.__version__, 'cuda:', torch.version.cuda, 'gpus:', torch.cuda.device_count(), [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])" 2>&1
  timeout 3 "$PYTHON" -c "import ninja; print('ninja (python):', ninja.__version__)" 2>&1 || true
  echo "ninja on PATH: $(command -v ninja || echo none)"
  command -v nvidia-smi >/dev/null 2>&1 && timeout 5 nvidia-smi 2>&1 | head -20
} >"$OUT/env.txt" 2>&1
say "environment in env.txt: $(grep -E '^(python|torch):' "$OUT/env.txt" | tr '\n' ' ')"

if [ -z "${CUDA_HOME:-}" ]; then
  NVCC_ON_PATH="$(command -v nvcc || true)"
  if [ -n "$NVCC_ON_PATH" ]; then
    NVCC_REAL="$(readlink -f "$NVCC_ON_PATH")"
    # A wrapper script (`exec /usr/local/cuda-X/bin/nvcc "$@"`): take the toolkit it points at.
    if head -c 2 "$NVCC_REAL" 2>/dev/null | grep -q '#!'; then
      TARGET="$(grep -oE '/[^ "]+/bin/nvcc' "$NVCC_REAL" | head -1)"
      [ -n "$TARGET" ] && NVCC_REAL="$(readlink -f "$TARGET")"
    fi
    CUDA_HOME="$(dirname "$(dirname "$NVCC_REAL")")"
  elif [ -x /usr/local/cuda/bin/nvcc ]; then
    CUDA_HOME=/usr/local/cuda
  fi
fi
export CUDA_HOME="${CUDA_HOME:-}"
say "CUDA_HOME=${CUDA_HOME:-unset} ($(timeout 3 "${CUDA_HOME:-/nonexistent}/bin/nvcc" --version 2>/dev/null | grep -oE 'release [0-9.]+' || echo 'no nvcc there'))"

HAVE_PYTEST=0
timeout 3 "$PYTHON" -c "import pytest" >/dev/null 2>&1 && HAVE_PYTEST=1

CPUS="$(nproc 2>/dev/null || echo 4)"
export MAX_JOBS="${MAX_JOBS:-$(( CPUS < 16 ? CPUS : 16 ))}"

# ---- 1. build (sm_90) ---------------------------------------------------------------------------
say "1/6 build: MAMBA_FORCE_BUILD=TRUE MAMBA_CUDA_ARCHS=90 MAX_JOBS=$MAX_JOBS setup.py build_ext --inplace"
b0=$(date +%s)
MAMBA_FORCE_BUILD=TRUE MAMBA_CUDA_ARCHS=90 timeout "${BUILD_LIMIT:-80}" \
  "$PYTHON" setup.py build_ext --inplace >"$OUT/build.log" 2>&1
rc=$?
SO=""
for f in "$REPO"/mamba_ssm/_C*.so; do [ -e "$f" ] && SO="$f" && break; done
if [ $rc -eq 0 ] && [ -n "$SO" ]; then
  say "build ok in $(( $(date +%s) - b0 )) s: $SO ($(stat -c %s "$SO") bytes)"
else
  say "build FAILED (rc=$rc) after $(( $(date +%s) - b0 )) s; last lines of build.log:"
  grep -v -e Deprecat "$OUT/build.log" | tail -n 25 | tee -a "$SUMMARY"
fi

# ---- 2. doctor ----------------------------------------------------------------------------------
timeout 10 "$PYTHON" -m mamba_ssm doctor --json >"$OUT/doctor.json" 2>"$OUT/doctor.stderr"
say "2/6 doctor exit $? (doctor.json)"

# ---- 3. GPU kernel tests ------------------------------------------------------------------------
say "3/6 GPU kernel tests"
if [ "$HAVE_PYTEST" = 1 ]; then
  timeout 45 "$PYTHON" -m pytest -q -rs -p no:cacheprovider -m gpu tests/kernels/test_gpu_kernel.py \
    tests/kernels/test_conv1d_gpu.py \
    --junitxml="$OUT/gpu_tests.xml" >"$OUT/gpu_tests.log" 2>&1
  rc=$?
  say "GPU tests (pytest) exit $rc: $(tail -n 1 "$OUT/gpu_tests.log")"
  [ $rc -ne 0 ] && grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -20 | tee -a "$SUMMARY"
else
  # No pytest on the machine (and no network to install it): the same cases through a plain runner.
  timeout 45 "$PYTHON" tests/kernels/gpu_runner.py >"$OUT/gpu_tests.log" 2>&1
  rc=$?
  say "GPU tests (gpu_runner.py, pytest absent) exit $rc: $(tail -n 1 "$OUT/gpu_tests.log")"
  [ $rc -ne 0 ] && grep -E "^FAIL" "$OUT/gpu_tests.log" | head -20 | tee -a "$SUMMARY"
fi

# ---- 4. kernel benchmark ------------------------------------------------------------------------
say "4/6 kernel benchmark"
timeout 35 "$PYTHON" benchmarks/bench_kernel.py --device cuda --repeats 5 --out "$OUT" >"$OUT/bench_kernel.log" 2>&1
say "kernel benchmark exit $?:"
if [ -f "$OUT/bench_kernel_cuda.md" ]; then tee -a "$SUMMARY" <"$OUT/bench_kernel_cuda.md"
else tail -n 20 "$OUT/bench_kernel.log" | tee -a "$SUMMARY"; fi

# ---- 5. Triton kernels: GPU tests and the ops benchmark ----------------------------------------
# (their own pytest process: tests/ops/triton/conftest.py switches Triton's interpreter on unless
# MAMBA_TRITON_GPU_TESTS=1; the first call of each kernel compiles it, a few seconds each)
say "5/6 Triton kernel tests (tests/ops/triton/test_triton_gpu.py) and the ops benchmark (benchmarks/bench_ops.py --device cuda)"
if [ "$HAVE_PYTEST" = 1 ]; then
  MAMBA_TRITON_GPU_TESTS=1 timeout 45 "$PYTHON" -m pytest -q -rs -p no:cacheprovider -m gpu tests/ops/triton/test_triton_gpu.py \
    --junitxml="$OUT/triton_gpu_tests.xml" >"$OUT/triton_gpu_tests.log" 2>&1
  rc=$?
  say "Triton GPU tests exit $rc: $(tail -n 1 "$OUT/triton_gpu_tests.log")"
  [ $rc -ne 0 ] && grep -E "^(FAILED|ERROR)" "$OUT/triton_gpu_tests.log" | head -20 | tee -a "$SUMMARY"
else
  say "Triton GPU tests skipped: pytest is not installed"
fi
timeout 50 "$PYTHON" benchmarks/bench_ops.py --device cuda --reps 3 --skip mamba3 --out "$OUT" >"$OUT/bench_ops.log" 2>&1
say "ops benchmark exit $?:"
if [ -f "$OUT/bench_ops_cuda.md" ]; then tee -a "$SUMMARY" <"$OUT/bench_ops_cuda.md"
else tail -n 20 "$OUT/bench_ops.log" | tee -a "$SUMMARY"; fi

# ---- 6. Mamba-3: Triton GPU tests and rows -----------------------------------------------------
say "6/6 Mamba-3 Triton GPU tests (tests/ops/triton/test_triton_mamba3_gpu.py) and ops (benchmarks/bench_ops.py --device cuda --only mamba3): fwd, fwd+bwd, MIMO fwd+bwd, step"
if [ "$HAVE_PYTEST" = 1 ]; then
  MAMBA_TRITON_GPU_TESTS=1 timeout 75 "$PYTHON" -m pytest -q -rs -p no:cacheprovider -m gpu \
    tests/ops/triton/test_triton_mamba3_gpu.py --junitxml="$OUT/mamba3_gpu_tests.xml" >"$OUT/mamba3_gpu_tests.log" 2>&1
  rc=$?
  say "Mamba-3 Triton GPU tests exit $rc: $(tail -n 1 "$OUT/mamba3_gpu_tests.log")"
  [ $rc -ne 0 ] && grep -E "^(FAILED|ERROR)" "$OUT/mamba3_gpu_tests.log" | head -20 | tee -a "$SUMMARY"
else
  say "Mamba-3 Triton GPU tests skipped: pytest is not installed"
fi
timeout 60 "$PYTHON" benchmarks/bench_ops.py --device cuda --reps 3 --only mamba3 --out "$OUT/mamba3" \
  >"$OUT/bench_ops_mamba3.log" 2>&1
say "Mamba-3 ops benchmark exit $?:"
if [ -f "$OUT/mamba3/bench_ops_cuda.md" ]; then tee -a "$SUMMARY" <"$OUT/mamba3/bench_ops_cuda.md"
else tail -n 20 "$OUT/bench_ops_mamba3.log" | tee -a "$SUMMARY"; fi

say "done in $(( $(date +%s) - START )) s; results in $OUT"
