// CPU kernels of the selective scan with complex A built with AVX2 + FMA enabled for this translation unit
// only; used only where the real kernels' choice is AVX2 or AVX-512 (scan_complex_cpu.cpp). Standard
// headers are included before the target switch so that only our code gets the wider ISA.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "scan_complex.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
#define MAMBA_CPU_NS cpu_avx2
#include "scan_complex_cpu_impl.h"
#undef MAMBA_CPU_NS
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

#else  // not x86-64 GCC/Clang: scan_cpu_isa() is always "generic" there, so these are never called.
namespace mamba_ssm {
namespace cpu_avx2 {
void scan_complex_fwd(const ScanParams&, int64_t, int64_t) {}
void scan_complex_bwd(const ScanBwdParams&, int64_t) {}
}  // namespace cpu_avx2
}  // namespace mamba_ssm
#endif
