// Parameters of the selective-scan kernels (CPU and GPU). Plain C++: includes no torch header.
//
// Selective scan (Mamba, Gu & Dao 2023, arXiv:2312.00752, eq. 2a-2b and Algorithm 2; zero-order-hold
// discretisation with the simplified B), for each batch b, channel d and time t:
//   dt      = delta[b,d,t] (+ delta_bias[d]; softplus when delta_softplus)
//   h[n]    = exp(dt * A[d,n]) * h[n] + dt * B[n,t] * u[b,d,t]          (h starts at 0)
//   y       = sum_n C[n,t] * h[n] + D[d] * u[b,d,t]
//   out     = y * silu(z[b,d,t])  when z is given, else y
// B and C are either constant, shape (dim, d_state), or variable, shape (batch, groups, d_state,
// seqlen) with channel d reading group d / (dim / groups). Every tensor handed to a kernel is
// contiguous; the binding makes it so. All arithmetic accumulates in fp32.
#pragma once
#include <cstdint>

namespace mamba_ssm {

// Largest d_state the GPU kernels take (state lives in shared memory); larger goes to the fallback.
constexpr int kGpuMaxDState = 256;

struct ScanParams {
  int64_t batch = 0, dim = 0, seqlen = 0, dstate = 0, n_groups = 1;
  bool b_variable = false, c_variable = false;  // (batch, groups, d_state, seqlen) vs (dim, d_state)
  bool bc_fp32 = true;         // variable B/C stored as fp32 (else in the input dtype of u)
  bool delta_softplus = false;
  // Inputs. u, delta, z (and dout, du, ddelta, dz) have the input dtype; A, D, delta_bias and constant
  // B/C are fp32. D, z, delta_bias may be null.
  const void* u = nullptr;      // (batch, dim, seqlen)
  const void* delta = nullptr;  // (batch, dim, seqlen)
  const float* A = nullptr;     // (dim, d_state)
  const void* B = nullptr;
  const void* C = nullptr;
  const float* D = nullptr;           // (dim,)
  const void* z = nullptr;            // (batch, dim, seqlen)
  const float* delta_bias = nullptr;  // (dim,)
  // Outputs of the forward pass.
  void* out = nullptr;                // (batch, dim, seqlen), input dtype
  float* last_state = nullptr;        // (batch, dim, d_state) fp32; may be null
};

struct ScanBwdParams : ScanParams {
  const void* dout = nullptr;         // (batch, dim, seqlen), input dtype
  const float* dlast_state = nullptr; // (batch, dim, d_state) fp32, may be null
  void* du = nullptr;                 // (batch, dim, seqlen), input dtype
  void* ddelta = nullptr;             // (batch, dim, seqlen), input dtype
  void* dz = nullptr;                 // (batch, dim, seqlen), input dtype; null when z is null
  // Per-(batch, channel) partial sums, reduced over batch by the caller:
  float* dA_part = nullptr;           // (batch, dim, d_state)
  float* dD_part = nullptr;           // (batch, dim)
  float* ddelta_bias_part = nullptr;  // (batch, dim)
  // dB / dC: constant B/C -> per-(batch, channel) partials (batch, dim, d_state).
  // Variable B/C: GPU -> (batch, groups, d_state, seqlen) fp32, zero-filled, accumulated atomically;
  // CPU -> (batch, n_split, groups, d_state, seqlen) fp32 partials, one slab per task (see scan_cpu.h).
  float* dB = nullptr;
  float* dC = nullptr;
  float* workspace = nullptr;         // GPU: (batch*dim, n_chunks, d_state) fp32 chunk-start states
  int64_t cpu_n_split = 1;            // CPU: channel ranges per batch (tasks = batch * cpu_n_split)
};

enum class ScalarKind { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

}  // namespace mamba_ssm
