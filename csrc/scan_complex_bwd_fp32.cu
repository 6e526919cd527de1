// Complex-A selective-scan bwd GPU kernel, fp32 inputs (one translation unit per dtype and direction).
#include "scan_complex_bwd.cuh"

namespace mamba_ssm {
const char* scan_complex_bwd_gpu_fp32(const ScanBwdParams& p, void* stream) {
  return gpu::scan_complex_bwd_launch<float>(p, stream);
}
}  // namespace mamba_ssm
