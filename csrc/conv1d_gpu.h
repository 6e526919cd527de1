// Host entry points of the GPU causal conv1d kernels (defined in conv1d_{fp32,fp16,bf16}.cu). Includes
// no torch and no CUDA header. `stream` is a cudaStream_t / hipStream_t. Each returns nullptr on
// success, else a static message naming what failed. Math: conv1d_params.h.
//   fwd / bwd / update: x (and out, dout, dx, the update's state) in the entry's dtype, everything else fp32;
//   bwd: dweight / dbias zero-filled by the caller (accumulated with atomics), workspace = dpre
//   (batch, dim, seqlen) fp32 with x's strides.
//   varlen states: raw copy of elements of 2, 4 or 8 bytes.
#pragma once
#include <cstdint>
#include "conv1d_params.h"

namespace mamba_ssm {

// Positions of one row each GPU thread computes.
constexpr int kConvGpuItems = 16;

const char* conv1d_fwd_gpu_fp32(const Conv1dParams& p, void* stream);
const char* conv1d_fwd_gpu_fp16(const Conv1dParams& p, void* stream);
const char* conv1d_fwd_gpu_bf16(const Conv1dParams& p, void* stream);
const char* conv1d_bwd_gpu_fp32(const Conv1dBwdParams& p, void* stream);
const char* conv1d_bwd_gpu_fp16(const Conv1dBwdParams& p, void* stream);
const char* conv1d_bwd_gpu_bf16(const Conv1dBwdParams& p, void* stream);
const char* conv1d_update_gpu_fp32(const Conv1dUpdateParams& p, void* stream);
const char* conv1d_update_gpu_fp16(const Conv1dUpdateParams& p, void* stream);
const char* conv1d_update_gpu_bf16(const Conv1dUpdateParams& p, void* stream);
const char* conv1d_varlen_states_gpu(const Conv1dVarlenParams& p, int elem_size, void* stream);

// Why the GPU kernels cannot run these sizes, or nullptr.
inline const char* conv_gpu_unsupported_reason(int64_t batch, int64_t dim, int64_t seqlen, int64_t width) {
  if (width < kConvMinWidth || width > kConvMaxWidth) return "causal conv1d: width must be 2, 3 or 4";
  const int64_t runs = (seqlen + kConvGpuItems - 1) / kConvGpuItems;
  if (batch * dim * runs > (int64_t{1} << 31) * 64) return "causal conv1d: batch * dim * seqlen is too large";
  return nullptr;
}

}  // namespace mamba_ssm
