// Causal conv1d GPU kernels, bf16 inputs (one translation unit per dtype).
#include "conv1d_gpu.cuh"

namespace mamba_ssm {
#if MAMBA_SSM_HAS_BF16
const char* conv1d_fwd_gpu_bf16(const Conv1dParams& p, void* stream) {
  return gpu::conv::fwd_launch<mamba_bf16_t>(p, stream);
}
const char* conv1d_bwd_gpu_bf16(const Conv1dBwdParams& p, void* stream) {
  return gpu::conv::bwd_launch<mamba_bf16_t>(p, stream);
}
const char* conv1d_update_gpu_bf16(const Conv1dUpdateParams& p, void* stream) {
  return gpu::conv::update_launch<mamba_bf16_t>(p, stream);
}
#else
static const char* const kNoBf16 =
    "bf16 GPU kernels are not built: this HIP toolkit has no hip_bf16.h (ROCm >= 5.7 needed)";
const char* conv1d_fwd_gpu_bf16(const Conv1dParams&, void*) { return kNoBf16; }
const char* conv1d_bwd_gpu_bf16(const Conv1dBwdParams&, void*) { return kNoBf16; }
const char* conv1d_update_gpu_bf16(const Conv1dUpdateParams&, void*) { return kNoBf16; }
#endif
}  // namespace mamba_ssm
