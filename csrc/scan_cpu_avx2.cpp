// CPU selective-scan kernels built with AVX2 + FMA enabled for this translation unit only (the rest
// of the module keeps the baseline ISA); used only when the CPU reports both (scan_cpu.cpp). 8 fp32
// lanes: scan_cpu_impl.h adds hand-vectorised loops (MAMBA_CPU_AVX2) for d_state up to 32 on top of the
// plain loops. Standard and intrinsics headers are included before the target switch so that only our
// code gets the wider ISA.
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
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
#define MAMBA_CPU_NS cpu_avx2
#define MAMBA_CPU_AVX2 1
#include "scan_cpu_impl.h"
#undef MAMBA_CPU_AVX2
#undef MAMBA_CPU_NS
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

namespace mamba_ssm {
namespace cpu_avx2 {
bool available() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
}  // namespace cpu_avx2
}  // namespace mamba_ssm

#else  // not x86-64 GCC/Clang: the baseline build only.
namespace mamba_ssm {
namespace cpu_avx2 {
bool available() { return false; }
void scan_fwd(const ScanParams&, const CpuDtypes&, int64_t, int64_t) {}
void scan_bwd(const ScanBwdParams&, const CpuDtypes&, int64_t) {}
}  // namespace cpu_avx2
}  // namespace mamba_ssm
#endif
