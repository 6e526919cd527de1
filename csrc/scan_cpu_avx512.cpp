// CPU selective-scan kernels built with AVX-512 (F, DQ, BW, VL) + FMA enabled for this translation unit
// only (the rest of the module keeps the baseline ISA); used only when the CPU and the OS support it
// (scan_cpu.cpp). 16 fp32 lanes: d_state 16, Mamba's default, is one register, and scan_cpu_impl.h adds
// hand-vectorised loops (MAMBA_CPU_AVX512) for d_state up to 64 on top of the plain loops.
// Standard and intrinsics headers are included before the target switch so that only our code gets the
// wider ISA.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif
#include "scan_cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c,prefer-vector-width=512")
#endif
#define MAMBA_CPU_NS cpu_avx512
#define MAMBA_CPU_LANES 16
#define MAMBA_CPU_AVX512 1
#include "scan_cpu_impl.h"
#undef MAMBA_CPU_AVX512
#undef MAMBA_CPU_LANES
#undef MAMBA_CPU_NS
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace mamba_ssm {
namespace cpu_avx512 {
bool available() {
  // __builtin_cpu_supports also checks that the OS saves the AVX-512 state (XCR0).
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
}  // namespace cpu_avx512
}  // namespace mamba_ssm

#else  // not x86-64 GCC/Clang: the baseline build only.
namespace mamba_ssm {
namespace cpu_avx512 {
bool available() { return false; }
void scan_fwd(const ScanParams&, const CpuDtypes&, int64_t, int64_t) {}
void scan_bwd(const ScanBwdParams&, const CpuDtypes&, int64_t) {}
}  // namespace cpu_avx512
}  // namespace mamba_ssm
#endif
