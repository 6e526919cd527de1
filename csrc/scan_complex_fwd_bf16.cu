// Complex-A selective-scan fwd GPU kernel, bf16 inputs (one translation unit per dtype and direction).
#include "scan_complex_fwd.cuh"

namespace mamba_ssm {
#if MAMBA_SSM_HAS_BF16
const char* scan_complex_fwd_gpu_bf16(const ScanParams& p, void* stream) {
  return gpu::scan_complex_fwd_launch<mamba_bf16_t>(p, stream);
}
#else
const char* scan_complex_fwd_gpu_bf16(const ScanParams&, void*) {
  return "bf16 GPU kernels are not built: this HIP toolkit has no hip_bf16.h (ROCm >= 5.7 needed)";
}
#endif
}  // namespace mamba_ssm
