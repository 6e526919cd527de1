// CPU selective-scan kernels: the baseline-ISA build and the runtime choice of instruction set.
// No torch header: the parallel loop over tasks lives in the binding.
#include "scan_cpu.h"

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#define MAMBA_CPU_NS cpu_generic
#include "scan_cpu_impl.h"
#undef MAMBA_CPU_NS

namespace mamba_ssm {
namespace {

enum class Isa { kGeneric = 0, kAvx2 = 1, kAvx512 = 2 };

Isa widest_supported() {
  static const Isa best = cpu_avx512::available() ? Isa::kAvx512
                          : cpu_avx2::available() ? Isa::kAvx2
                                                  : Isa::kGeneric;
  return best;
}

// MAMBA_SSM_CPU_ISA=generic|avx2|avx512 caps the build used (tests force each one this way); read at
// every call (a getenv, nothing next to a scan) so that a test can switch it inside one process.
Isa active_isa() {
  const Isa best = widest_supported();
  const char* force = std::getenv("MAMBA_SSM_CPU_ISA");
  if (!force || !*force) return best;
  Isa want;
  if (std::strcmp(force, "generic") == 0) want = Isa::kGeneric;
  else if (std::strcmp(force, "avx2") == 0) want = Isa::kAvx2;
  else if (std::strcmp(force, "avx512") == 0) want = Isa::kAvx512;
  else
    throw std::invalid_argument(std::string("mamba_ssm: MAMBA_SSM_CPU_ISA=") + force +
                                " names no build of the CPU kernel. Fix: set it to generic, avx2 or avx512, "
                                "or unset it to use the widest this CPU supports");
  return static_cast<int>(want) < static_cast<int>(best) ? want : best;
}

}  // namespace

void scan_fwd_cpu(const ScanParams& p, const CpuDtypes& k, int64_t bd_begin, int64_t bd_end) {
  switch (active_isa()) {
    case Isa::kAvx512: cpu_avx512::scan_fwd(p, k, bd_begin, bd_end); break;
    case Isa::kAvx2: cpu_avx2::scan_fwd(p, k, bd_begin, bd_end); break;
    default: cpu_generic::scan_fwd(p, k, bd_begin, bd_end);
  }
}

void scan_bwd_cpu(const ScanBwdParams& p, const CpuDtypes& k, int64_t task) {
  switch (active_isa()) {
    case Isa::kAvx512: cpu_avx512::scan_bwd(p, k, task); break;
    case Isa::kAvx2: cpu_avx2::scan_bwd(p, k, task); break;
    default: cpu_generic::scan_bwd(p, k, task);
  }
}

const char* scan_cpu_isa() {
  switch (active_isa()) {
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx2: return "avx2";
    default: return "generic";
  }
}

}  // namespace mamba_ssm
