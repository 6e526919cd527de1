// CPU selective-scan kernels: entry points. Includes no torch header.
//
// The per-sequence tensors (u, delta, z, dout, variable B/C and the results out, du, ddelta, dz) are
// read and written in their own dtype, fp32, fp16 or bf16 (CpuDtypes), converted to fp32 a tile at a
// time inside the kernel: no full-size fp32 copy is made. A, D, delta_bias, constant B/C and every
// accumulator are fp32. Work is split into independent tasks the caller runs in parallel:
//   forward:  one task per (batch, channel) range, scan_fwd_cpu(p, k, bd_begin, bd_end)
//   backward: task k = b * cpu_n_split + s covers batch b and the s-th of cpu_n_split channel ranges.
//             Variable dB/dC go to the task's own zero-filled slab (batch, n_split, groups, d_state,
//             seqlen), summed over n_split by the caller, so no two tasks write the same element.
// Any d_state works on the CPU.
#pragma once
#include <cstdint>
#include "scan_params.h"

namespace mamba_ssm {

// Storage dtype of each per-sequence tensor. out and du have u's dtype, ddelta delta's, dz z's.
struct CpuDtypes {
  ScalarKind u = ScalarKind::kFloat32, delta = ScalarKind::kFloat32, z = ScalarKind::kFloat32;
  ScalarKind B = ScalarKind::kFloat32, C = ScalarKind::kFloat32;  // variable B/C only
  ScalarKind dout = ScalarKind::kFloat32;
};

void scan_fwd_cpu(const ScanParams& p, const CpuDtypes& k, int64_t bd_begin, int64_t bd_end);
void scan_bwd_cpu(const ScanBwdParams& p, const CpuDtypes& k, int64_t task);

// The build of the CPU kernels that runs: "avx512" (AVX-512 F/DQ/BW/VL + FMA), "avx2" (AVX2 + FMA) or
// "generic" (the baseline ISA): the widest this CPU supports, or the one MAMBA_SSM_CPU_ISA asks for
// (read at every call, so tests can switch it; a build the CPU lacks falls back to the next narrower
// one). Throws std::invalid_argument for a MAMBA_SSM_CPU_ISA that names no build.
const char* scan_cpu_isa();

namespace cpu_generic {
void scan_fwd(const ScanParams& p, const CpuDtypes& k, int64_t bd_begin, int64_t bd_end);
void scan_bwd(const ScanBwdParams& p, const CpuDtypes& k, int64_t task);
}  // namespace cpu_generic
namespace cpu_avx2 {
bool available();  // compiled in (x86-64 GCC/Clang) and supported by this CPU
void scan_fwd(const ScanParams& p, const CpuDtypes& k, int64_t bd_begin, int64_t bd_end);
void scan_bwd(const ScanBwdParams& p, const CpuDtypes& k, int64_t task);
}  // namespace cpu_avx2
namespace cpu_avx512 {
bool available();  // compiled in (x86-64 GCC/Clang) and supported by this CPU and OS
void scan_fwd(const ScanParams& p, const CpuDtypes& k, int64_t bd_begin, int64_t bd_end);
void scan_bwd(const ScanBwdParams& p, const CpuDtypes& k, int64_t task);
}  // namespace cpu_avx512

inline int64_t cpu_channel_begin(int64_t dim, int64_t n_split, int64_t s) { return dim * s / n_split; }

}  // namespace mamba_ssm
