// Causal conv1d GPU kernels, fp32 inputs (one translation unit per dtype).
#include "conv1d_gpu.cuh"

namespace mamba_ssm {
const char* conv1d_fwd_gpu_fp32(const Conv1dParams& p, void* stream) {
  return gpu::conv::fwd_launch<float>(p, stream);
}
const char* conv1d_bwd_gpu_fp32(const Conv1dBwdParams& p, void* stream) {
  return gpu::conv::bwd_launch<float>(p, stream);
}
const char* conv1d_update_gpu_fp32(const Conv1dUpdateParams& p, void* stream) {
  return gpu::conv::update_launch<float>(p, stream);
}
// The varlen-states copy moves raw bits, so one instantiation per element size serves every dtype.
const char* conv1d_varlen_states_gpu(const Conv1dVarlenParams& p, int elem_size, void* stream) {
  switch (elem_size) {
    case 2: return gpu::conv::varlen_launch<uint16_t>(p, stream);
    case 4: return gpu::conv::varlen_launch<uint32_t>(p, stream);
    case 8: return gpu::conv::varlen_launch<uint64_t>(p, stream);
    default: return "causal_conv1d_varlen_states: element size must be 2, 4 or 8 bytes";
  }
}
}  // namespace mamba_ssm
