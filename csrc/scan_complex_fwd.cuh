// Complex-A selective-scan forward GPU kernel (CUDA and HIP). Includes no torch header. Math and
// layouts: scan_complex.h.
//
// The real kernel's scheme (scan_fwd.cuh) with a complex state: one block per (batch, channel), chunks of
// kChunk timesteps, each thread kItems consecutive steps; per state index the thread folds its steps'
// maps h -> a h + b (a = exp(dt A), b = dt u B, complex) and block_scan<Complex> gives the state entering
// its first step, the chunk's last state carried in shared memory.
#pragma once
#include "scan_complex_common.cuh"

namespace mamba_ssm {
namespace gpu {

template <typename T>
__global__ void __launch_bounds__(kThreads) scan_complex_fwd_kernel(const ScanParams p) {
  __shared__ Complex carry_s[kGpuMaxDState];
  __shared__ AffinePair<Complex> scan_buf[2][kMaxWarps];
  const Channel ch = channel_of(p);
  const int64_t L = p.seqlen;
  const int N = static_cast<int>(p.dstate);
  const T* u = static_cast<const T*>(p.u) + ch.seq_off;
  const T* delta = static_cast<const T*>(p.delta) + ch.seq_off;
  const T* z = p.z ? static_cast<const T*>(p.z) + ch.seq_off : nullptr;
  T* out = static_cast<T*>(p.out) + ch.seq_off;
  const float* A = p.A + 2 * ch.d * N;
  const float Dd = p.D ? p.D[ch.d] : 0.f;
  const float bias = p.delta_bias ? p.delta_bias[ch.d] : 0.f;
  const float* Bconst = p.b_variable ? nullptr : static_cast<const float*>(p.B) + 2 * ch.d * N;
  const float* Cconst = p.c_variable ? nullptr : static_cast<const float*>(p.C) + 2 * ch.d * N;
  const int64_t bc_off = 2 * ch.bc_off;  // (b, g) in the interleaved (batch, groups, d_state, 2L)

  for (int n = threadIdx.x; n < N; n += kThreads) carry_s[n] = Complex(0.f);
  __syncthreads();
  int buf = 0;
  const int64_t n_chunks = (L + kChunk - 1) / kChunk;
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t t0 = c * kChunk + static_cast<int64_t>(threadIdx.x) * kItems;
    float uv[kItems], dt[kItems], y[kItems];
    load_items<T>(u, t0, L, uv);
    load_items<T>(delta, t0, L, dt);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const float v = dt[i] + bias;
      dt[i] = t0 + i < L ? (p.delta_softplus ? softplus(v) : v) : 0.f;  // dt = 0 past seqlen: a = 1, b = 0
      y[i] = 0.f;
    }
    for (int n = 0; n < N; ++n) {
      const Complex An = load_complex(A, n);
      Complex a[kItems], bb[kItems], Cv[kItems];
      load_bc_complex<T>(p.b_variable, p.B, p.bc_fp32, bc_off + n * 2 * L, Bconst, n, t0, L, bb);
      load_bc_complex<T>(p.c_variable, p.C, p.bc_fp32, bc_off + n * 2 * L, Cconst, n, t0, L, Cv);
      Complex agg_a(1.f), agg_b(0.f);
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        a[i] = exp_dt(dt[i], An);
        bb[i] = (dt[i] * uv[i]) * bb[i];
        agg_b = a[i] * agg_b + bb[i];
        agg_a = a[i] * agg_a;
      }
      Complex total;
      Complex h = block_scan<false>(agg_a, agg_b, carry_s[n], scan_buf[buf], total);
      buf ^= 1;
      if (threadIdx.x == 0) carry_s[n] = total;
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        h = a[i] * h + bb[i];
        y[i] += re_mul(Cv[i], h);
      }
    }
    if (z) {
      float zv[kItems];
      load_items<T>(z, t0, L, zv);
#pragma unroll
      for (int i = 0; i < kItems; ++i) y[i] = (2.f * y[i] + Dd * uv[i]) * (zv[i] / (1.f + __expf(-zv[i])));
    } else {
#pragma unroll
      for (int i = 0; i < kItems; ++i) y[i] = 2.f * y[i] + Dd * uv[i];
    }
    store_items<T>(out, t0, L, y);
    // carry_s[n] written by thread 0 after the last barrier of state n (see scan_fwd.cuh).
    __syncthreads();
  }
  if (p.last_state) {
    for (int n = threadIdx.x; n < N; n += kThreads) store_complex(p.last_state, ch.bd * N + n, carry_s[n]);
  }
}

template <typename T>
const char* scan_complex_fwd_launch(const ScanParams& p, void* stream) {
  if (const char* why = gpu_unsupported_reason(p)) return why;
  if (p.batch * p.dim == 0) return nullptr;
  MAMBA_SSM_LAUNCH(scan_complex_fwd_kernel<T>, static_cast<unsigned>(p.batch * p.dim), kThreads,
                   static_cast<mamba_stream_t>(stream), p);
  const mamba_error_t err = mambaGetLastError();
  return err == MAMBA_GPU_SUCCESS ? nullptr : mambaGetErrorString(err);
}

}  // namespace gpu
}  // namespace mamba_ssm
