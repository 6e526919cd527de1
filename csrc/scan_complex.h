// Selective scan with complex A (S4D-style diagonal complex state): entry points of the CPU and GPU
// kernels and the layouts they read and write. Includes no torch and no CUDA header.
//
// Math (Mamba, Gu & Dao 2023, arXiv:2312.00752, section 3.2 and Algorithm 2, with a complex diagonal A
// as in S4D, Gu et al. 2022, arXiv:2206.11893), for each batch b, channel d and time t:
//   dt   = delta[b,d,t] (+ delta_bias[d]; softplus when delta_softplus)             real
//   h[n] = exp(dt * A[d,n]) * h[n] + dt * u[b,d,t] * B[n,t]     complex A, B, h (h starts at 0)
//   y    = 2 * Re(sum_n C[n,t] * h[n]) + D[d] * u[b,d,t]        complex C; y, u, D real
//   out  = y * silu(z[b,d,t])  when z is given, else y
// The d_state complex states stand for 2 * d_state real ones in conjugate pairs (S4D), whose summed
// output is twice the real part of one of each pair.
//
// Gradients are complex in PyTorch's convention (dL/d(re) + i dL/d(im), for the real loss L). With
// Gamma_t = conj(dL/dh_t) the adjoint obeys Gamma_t = 2 dy_t C_t + a_{t+1} Gamma_{t+1} (a_t =
// exp(dt_t A), dy_t = dout_t silu(z_t), Gamma past the end = conj(dlast_state)); then
//   dB_t = dt_t u_t conj(Gamma_t)          dC_t = 2 dy_t conj(h_t)
//   dA   = sum_t dt_t conj(q_t)            q_t  = Gamma_t a_t h_{t-1}
//   du_t = D dy_t + dt_t Re(sum_n Gamma_t B_t)
//   ddt_t = Re(sum_n q_t A) + u_t Re(sum_n Gamma_t B_t)   (times sigmoid(delta + bias) with softplus)
// and dD, dz, ddelta_bias as for real A (scan_params.h, scan_bwd.cuh).
//
// Parameters: the ScanParams / ScanBwdParams of scan_params.h, with every complex tensor stored as
// interleaved (re, im) fp32 pairs:
//   A                (dim, d_state, 2) fp32
//   constant B / C   (dim, d_state, 2) fp32
//   variable B / C   (batch, groups, d_state, 2 * seqlen): element (re, im) of time t at 2t, 2t + 1
//                    (upstream mamba-ssm's layout of a complex input-dependent B/C); fp32, or u's
//                    dtype on GPUs (bc_fp32 says which); the CPU kernel reads fp32 only
//   last_state, dlast_state, dA_part, constant dB / dC partials   (batch, dim, d_state, 2) fp32
//   variable dB / dC  GPU: (batch, groups, d_state, 2 * seqlen) fp32, zero-filled, atomics;
//                     CPU: (batch, n_split, groups, d_state, 2 * seqlen) fp32 slabs (as scan_cpu.h)
//   workspace         GPU: (batch * dim, n_chunks, d_state, 2) fp32 chunk-start states
// u, delta, z, dout, out, du, ddelta, dz: as for real A (the CPU kernel takes and writes fp32 only;
// its binding converts).
#pragma once
#include <cstdint>

#include "scan_params.h"

namespace mamba_ssm {

// GPU (scan_complex_{fwd,bwd}_{fp32,fp16,bf16}.cu; built with CUDA/HIP only). nullptr on success, else
// a static message (gpu_unsupported_reason of scan_gpu.h, or a launch error).
const char* scan_complex_fwd_gpu_fp32(const ScanParams& p, void* stream);
const char* scan_complex_fwd_gpu_fp16(const ScanParams& p, void* stream);
const char* scan_complex_fwd_gpu_bf16(const ScanParams& p, void* stream);
const char* scan_complex_bwd_gpu_fp32(const ScanBwdParams& p, void* stream);
const char* scan_complex_bwd_gpu_fp16(const ScanBwdParams& p, void* stream);
const char* scan_complex_bwd_gpu_bf16(const ScanBwdParams& p, void* stream);

// CPU (scan_complex_cpu.cpp), every per-sequence tensor fp32. Forward: channels [bd_begin, bd_end) of
// batch * dim. Backward: task k = b * cpu_n_split + s, batch b and the s-th of cpu_n_split channel
// ranges, writing variable dB / dC into its own slab. They run the baseline or the AVX2+FMA build
// (scan_complex_cpu_impl.h, compiled into these namespaces), as scan_cpu_isa() chooses (scan_cpu.h).
void scan_complex_fwd_cpu(const ScanParams& p, int64_t bd_begin, int64_t bd_end);
void scan_complex_bwd_cpu(const ScanBwdParams& p, int64_t task);
namespace cpu_generic {
void scan_complex_fwd(const ScanParams& p, int64_t bd_begin, int64_t bd_end);
void scan_complex_bwd(const ScanBwdParams& p, int64_t task);
}  // namespace cpu_generic
namespace cpu_avx2 {
void scan_complex_fwd(const ScanParams& p, int64_t bd_begin, int64_t bd_end);
void scan_complex_bwd(const ScanBwdParams& p, int64_t task);
}  // namespace cpu_avx2

}  // namespace mamba_ssm
