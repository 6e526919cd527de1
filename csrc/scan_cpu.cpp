// CPU selective-scan kernels: the baseline-ISA build and the runtime choice of instruction set.
// No torch header: the parallel loop over tasks lives in the binding.
#include "scan_cpu.h"

#include <cstdlib>
#include <cstring>

#define MAMBA_CPU_NS cpu_generic
#include "scan_cpu_impl.h"
#undef MAMBA_CPU_NS

namespace mamba_ssm {

// MAMBA_SSM_CPU_ISA=generic forces the baseline build (tests use it to check both builds).
static bool use_avx2() {
  static const bool yes = [] {
    const char* force = std::getenv("MAMBA_SSM_CPU_ISA");
    if (force && std::strcmp(force, "generic") == 0) return false;
    return cpu_avx2::available();
  }();
  return yes;
}

void scan_fwd_cpu(const ScanParams& p, int64_t bd_begin, int64_t bd_end) {
  if (use_avx2()) cpu_avx2::scan_fwd(p, bd_begin, bd_end);
  else cpu_generic::scan_fwd(p, bd_begin, bd_end);
}

void scan_bwd_cpu(const ScanBwdParams& p, int64_t task) {
  if (use_avx2()) cpu_avx2::scan_bwd(p, task);
  else cpu_generic::scan_bwd(p, task);
}

const char* scan_cpu_isa() { return use_avx2() ? "avx2" : "generic"; }

}  // namespace mamba_ssm
