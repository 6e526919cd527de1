// Complex-A selective-scan bwd GPU kernel, bf16 inputs (one translation unit per dtype and direction).
#include "scan_complex_bwd.cuh"

namespace mamba_ssm {
#if MAMBA_SSM_HAS_BF16
const char* scan_complex_bwd_gpu_bf16(const ScanBwdParams& p, void* stream) {
  return gpu::scan_complex_bwd_launch<mamba_bf16_t>(p, stream);
}
#else
const char* scan_complex_bwd_gpu_bf16(const ScanBwdParams&, void*) {
  return "bf16 GPU kernels are not built: this HIP toolkit has no hip_bf16.h (ROCm >= 5.7 needed)";
}
#endif
}  // namespace mamba_ssm
