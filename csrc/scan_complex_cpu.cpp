// CPU kernels of the selective scan with complex A: the baseline-ISA build, and the choice between it and
// the AVX2+FMA build (scan_complex_cpu_avx2.cpp) that follows the real kernels' (scan_cpu_isa(): the AVX2
// build wherever AVX2 or AVX-512 is chosen; MAMBA_SSM_CPU_ISA=generic forces the baseline). No torch
// header.
#include <cstring>

#include "scan_complex.h"
#include "scan_cpu.h"

#define MAMBA_CPU_NS cpu_generic
#include "scan_complex_cpu_impl.h"
#undef MAMBA_CPU_NS

namespace mamba_ssm {
namespace {

bool use_avx2() { return std::strcmp(scan_cpu_isa(), "generic") != 0; }

}  // namespace

void scan_complex_fwd_cpu(const ScanParams& p, int64_t bd_begin, int64_t bd_end) {
  if (use_avx2()) cpu_avx2::scan_complex_fwd(p, bd_begin, bd_end);
  else cpu_generic::scan_complex_fwd(p, bd_begin, bd_end);
}

void scan_complex_bwd_cpu(const ScanBwdParams& p, int64_t task) {
  if (use_avx2()) cpu_avx2::scan_complex_bwd(p, task);
  else cpu_generic::scan_complex_bwd(p, task);
}

}  // namespace mamba_ssm
