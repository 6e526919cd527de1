// Complex-A selective-scan fwd GPU kernel, fp16 inputs (one translation unit per dtype and direction).
#include "scan_complex_fwd.cuh"

namespace mamba_ssm {
const char* scan_complex_fwd_gpu_fp16(const ScanParams& p, void* stream) {
  return gpu::scan_complex_fwd_launch<mamba_fp16_t>(p, stream);
}
}  // namespace mamba_ssm
