// Complex-A selective-scan bwd GPU kernel, fp16 inputs (one translation unit per dtype and direction).
#include "scan_complex_bwd.cuh"

namespace mamba_ssm {
const char* scan_complex_bwd_gpu_fp16(const ScanBwdParams& p, void* stream) {
  return gpu::scan_complex_bwd_launch<mamba_fp16_t>(p, stream);
}
}  // namespace mamba_ssm
