// Host entry points of the GPU selective-scan kernels (defined in scan_{fwd,bwd}_{fp32,fp16,bf16}.cu).
// Includes no torch and no CUDA header. `stream` is a cudaStream_t / hipStream_t.
// Each returns nullptr on success, else a static message naming what failed (a launch error, or a
// shape the kernels do not support, e.g. d_state > kGpuMaxDState).
#pragma once
#include "scan_params.h"

namespace mamba_ssm {

// Chunk of timesteps a block scans at once; the backward workspace holds one state per chunk.
constexpr int kGpuThreads = 128;
constexpr int kGpuItems = 8;
constexpr int kGpuChunk = kGpuThreads * kGpuItems;

inline int64_t gpu_num_chunks(int64_t seqlen) { return (seqlen + kGpuChunk - 1) / kGpuChunk; }

const char* scan_fwd_gpu_fp32(const ScanParams& p, void* stream);
const char* scan_fwd_gpu_fp16(const ScanParams& p, void* stream);
const char* scan_fwd_gpu_bf16(const ScanParams& p, void* stream);
const char* scan_bwd_gpu_fp32(const ScanBwdParams& p, void* stream);
const char* scan_bwd_gpu_fp16(const ScanBwdParams& p, void* stream);
const char* scan_bwd_gpu_bf16(const ScanBwdParams& p, void* stream);

// Why the GPU kernels cannot run these parameters, or nullptr.
inline const char* gpu_unsupported_reason(const ScanParams& p) {
  if (p.dstate > kGpuMaxDState) return "d_state > 256 is not supported by the GPU kernels";
  if (p.dstate < 1) return "d_state must be at least 1";
  if (p.batch * p.dim > 2147483647LL) return "batch * dim exceeds 2^31 - 1 blocks";
  return nullptr;
}

}  // namespace mamba_ssm
