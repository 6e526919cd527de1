// CPU causal conv1d kernels: entry points. Includes no torch header. Math: conv1d_params.h.
//
// Every float pointer is fp32 (the binding converts fp16/bf16 and converts the results back). Work is
// split into independent tasks that the caller runs in parallel:
//   forward / backward: task k covers batch k / conv_cpu_blocks(dim) and channels
//     [(k % blocks) * kConvCpuBlock, ... + kConvCpuBlock). The forward takes both layouts (x_sl == 1,
//     or channel_last with x_sd == 1); the backward takes x_sl == 1 only. The backward writes
//     per-batch partials: dweight (batch, dim, width) and dbias (batch, dim), summed by the caller.
//   update: a range of channels [d_begin, d_end) over every batch row; state is fp32.
//   varlen states: one call; elements are copied as raw bits of elem_size bytes (2, 4 or 8).
// The instruction set (AVX2+FMA or the baseline) is the selective scan's (scan_cpu_isa()).
#pragma once
#include <cstdint>
#include "conv1d_params.h"

namespace mamba_ssm {

constexpr int64_t kConvCpuBlock = 64;
inline int64_t conv_cpu_blocks(int64_t dim) { return (dim + kConvCpuBlock - 1) / kConvCpuBlock; }

void conv1d_fwd_cpu(const Conv1dParams& p, int64_t task_begin, int64_t task_end);
void conv1d_bwd_cpu(const Conv1dBwdParams& p, int64_t task_begin, int64_t task_end);
void conv1d_update_cpu(const Conv1dUpdateParams& p, int64_t d_begin, int64_t d_end);
// Returns nullptr, or why the call was refused (an element size other than 2, 4, 8).
const char* conv1d_varlen_states_cpu(const Conv1dVarlenParams& p, int elem_size);

namespace cpu_generic {
namespace conv {
void conv1d_fwd(const Conv1dParams& p, int64_t task_begin, int64_t task_end);
void conv1d_bwd(const Conv1dBwdParams& p, int64_t task_begin, int64_t task_end);
void conv1d_update(const Conv1dUpdateParams& p, int64_t d_begin, int64_t d_end);
}  // namespace conv
}  // namespace cpu_generic
namespace cpu_avx2 {
namespace conv {
void conv1d_fwd(const Conv1dParams& p, int64_t task_begin, int64_t task_end);
void conv1d_bwd(const Conv1dBwdParams& p, int64_t task_begin, int64_t task_end);
void conv1d_update(const Conv1dUpdateParams& p, int64_t d_begin, int64_t d_end);
}  // namespace conv
}  // namespace cpu_avx2

}  // namespace mamba_ssm
