// Causal conv1d GPU kernels, fp16 inputs (one translation unit per dtype).
#include "conv1d_gpu.cuh"

namespace mamba_ssm {
const char* conv1d_fwd_gpu_fp16(const Conv1dParams& p, void* stream) {
  return gpu::conv::fwd_launch<mamba_fp16_t>(p, stream);
}
const char* conv1d_bwd_gpu_fp16(const Conv1dBwdParams& p, void* stream) {
  return gpu::conv::bwd_launch<mamba_fp16_t>(p, stream);
}
const char* conv1d_update_gpu_fp16(const Conv1dUpdateParams& p, void* stream) {
  return gpu::conv::update_launch<mamba_fp16_t>(p, stream);
}
}  // namespace mamba_ssm
