// Complex-A selective-scan fwd GPU kernel, fp32 inputs (one translation unit per dtype and direction).
#include "scan_complex_fwd.cuh"

namespace mamba_ssm {
const char* scan_complex_fwd_gpu_fp32(const ScanParams& p, void* stream) {
  return gpu::scan_complex_fwd_launch<float>(p, stream);
}
}  // namespace mamba_ssm
