// Selective-scan forward GPU kernel (CUDA and HIP). Includes no torch header.
//
// One block per (batch, channel) on blockIdx.x (no y/z grid dimension, so dim of 65,536 and more is
// fine). The sequence is processed in chunks of kChunk = kThreads * kItems timesteps; each thread owns
// kItems consecutive timesteps. For every state index n the recurrence h_t = a_t h_{t-1} + b_t is a
// composition of affine maps, scanned across the block (warp shuffles, then across warps through
// shared memory) and seeded with the state carried over from the previous chunk. Positions past
// seqlen get dt = 0 (a = 1, b = 0: the identity) and C = 0, so they change nothing.
#pragma once
#include "scan_common.cuh"

namespace mamba_ssm {
namespace gpu {

template <typename T>
__global__ void __launch_bounds__(kThreads) scan_fwd_kernel(const ScanParams p) {
  __shared__ float carry_s[kGpuMaxDState];
  __shared__ AffinePair<float> scan_buf[2][kMaxWarps];
  const Channel ch = channel_of(p);
  const int64_t L = p.seqlen;
  const int N = static_cast<int>(p.dstate);
  const T* u = static_cast<const T*>(p.u) + ch.seq_off;
  const T* delta = static_cast<const T*>(p.delta) + ch.seq_off;
  const T* z = p.z ? static_cast<const T*>(p.z) + ch.seq_off : nullptr;
  T* out = static_cast<T*>(p.out) + ch.seq_off;
  const float* A = p.A + ch.d * N;
  const float Dd = p.D ? p.D[ch.d] : 0.f;
  const float bias = p.delta_bias ? p.delta_bias[ch.d] : 0.f;
  const float* Bconst = p.b_variable ? nullptr : static_cast<const float*>(p.B) + ch.d * N;
  const float* Cconst = p.c_variable ? nullptr : static_cast<const float*>(p.C) + ch.d * N;

  for (int n = threadIdx.x; n < N; n += kThreads) carry_s[n] = 0.f;
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
      dt[i] = t0 + i < L ? (p.delta_softplus ? softplus(v) : v) : 0.f;  // dt = 0 past seqlen
      y[i] = 0.f;
    }
    for (int n = 0; n < N; ++n) {
      const float An = A[n];
      float a[kItems], bb[kItems], Cv[kItems];
      if (p.b_variable) {
        load_bc_items<T>(p.B, p.bc_fp32, ch.bc_off + n * L, t0, L, bb);
      } else {
#pragma unroll
        for (int i = 0; i < kItems; ++i) bb[i] = Bconst[n];
      }
      if (p.c_variable) {
        load_bc_items<T>(p.C, p.bc_fp32, ch.bc_off + n * L, t0, L, Cv);
      } else {
#pragma unroll
        for (int i = 0; i < kItems; ++i) Cv[i] = Cconst[n];
      }
      float agg_a = 1.f, agg_b = 0.f;
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        a[i] = __expf(dt[i] * An);
        bb[i] = dt[i] * uv[i] * bb[i];
        agg_b = a[i] * agg_b + bb[i];
        agg_a = a[i] * agg_a;
      }
      const float carry = carry_s[n];
      float total;
      float h = block_scan<false>(agg_a, agg_b, carry, scan_buf[buf], total);
      buf ^= 1;
      if (threadIdx.x == 0) carry_s[n] = total;
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        h = a[i] * h + bb[i];
        y[i] += Cv[i] * h;
      }
    }
    if (z) {
      float zv[kItems];
      load_items<T>(z, t0, L, zv);
#pragma unroll
      for (int i = 0; i < kItems; ++i) y[i] = (y[i] + Dd * uv[i]) * (zv[i] / (1.f + __expf(-zv[i])));
    } else {
#pragma unroll
      for (int i = 0; i < kItems; ++i) y[i] += Dd * uv[i];
    }
    store_items<T>(out, t0, L, y);
    // Thread 0 wrote carry_s[n] after the last barrier that other threads pass for state n in this
    // chunk; with d_state == 1 no other barrier follows before the next chunk reads it back.
    __syncthreads();
  }
  if (p.last_state) {
    for (int n = threadIdx.x; n < N; n += kThreads) p.last_state[ch.bd * N + n] = carry_s[n];
  }
}

template <typename T>
const char* scan_fwd_launch(const ScanParams& p, void* stream) {
  if (const char* why = gpu_unsupported_reason(p)) return why;
  if (p.batch * p.dim == 0) return nullptr;
  MAMBA_SSM_LAUNCH(scan_fwd_kernel<T>, static_cast<unsigned>(p.batch * p.dim), kThreads,
                   static_cast<mamba_stream_t>(stream), p);
  const mamba_error_t err = mambaGetLastError();
  return err == MAMBA_GPU_SUCCESS ? nullptr : mambaGetErrorString(err);
}

}  // namespace gpu
}  // namespace mamba_ssm
