// CPU selective-scan kernels: entry points. Includes no torch header.
//
// Every pointer in the params is fp32 here (the binding converts fp16/bf16 inputs and converts the
// results back). Work is split into independent tasks the caller runs in parallel (at::parallel_for):
//   forward:  one task per (batch, channel) range, scan_fwd_cpu(p, bd_begin, bd_end)
//   backward: task k = b * cpu_n_split + s covers batch b and the s-th of cpu_n_split channel ranges.
//             Variable dB/dC go to the task's own zero-filled slab (batch, n_split, groups, d_state,
//             seqlen), summed over n_split by the caller, so no two tasks write the same element.
// Any d_state works on the CPU.
#pragma once
#include <cstdint>
#include "scan_params.h"

namespace mamba_ssm {

void scan_fwd_cpu(const ScanParams& p, int64_t bd_begin, int64_t bd_end);
void scan_bwd_cpu(const ScanBwdParams& p, int64_t task);
// "avx2" when the AVX2+FMA build of the CPU kernels runs on this CPU, else "generic".
const char* scan_cpu_isa();

namespace cpu_generic {
void scan_fwd(const ScanParams& p, int64_t bd_begin, int64_t bd_end);
void scan_bwd(const ScanBwdParams& p, int64_t task);
}  // namespace cpu_generic
namespace cpu_avx2 {
bool available();  // compiled in (x86-64 GCC/Clang) and supported by this CPU
void scan_fwd(const ScanParams& p, int64_t bd_begin, int64_t bd_end);
void scan_bwd(const ScanBwdParams& p, int64_t task);
}  // namespace cpu_avx2

inline int64_t cpu_channel_begin(int64_t dim, int64_t n_split, int64_t s) { return dim * s / n_split; }

}  // namespace mamba_ssm
