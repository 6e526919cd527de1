// CPU causal conv1d kernels built with AVX2 + FMA for this translation unit only; used only when the
// CPU reports both (conv1d_cpu.cpp asks scan_cpu_isa()). Standard headers come before the target
// switch so that only our code gets the wider ISA.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#include "conv1d_cpu.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
#define MAMBA_CPU_NS cpu_avx2
#include "conv1d_cpu_impl.h"
#undef MAMBA_CPU_NS
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // not x86-64 GCC/Clang: scan_cpu_isa() is never "avx2", so these are never called.
namespace mamba_ssm {
namespace cpu_avx2 {
namespace conv {
void conv1d_fwd(const Conv1dParams&, int64_t, int64_t) {}
void conv1d_bwd(const Conv1dBwdParams&, int64_t, int64_t) {}
void conv1d_update(const Conv1dUpdateParams&, int64_t, int64_t) {}
}  // namespace conv
}  // namespace cpu_avx2
}  // namespace mamba_ssm
#endif
