// Selective-scan backward GPU kernel (CUDA and HIP). Includes no torch header.
//
// Gradients (same notation as scan_params.h; a_t = exp(dt_t A_n), b_t = dt_t B_t u_t, h_t = a_t h_{t-1}
// + b_t, dy_t = dout_t * silu(z_t)). The adjoint g_t = dL/dh_t obeys g_t = C_t dy_t + a_{t+1} g_{t+1}
// (+ dlast_state at t = L-1). Writing s_t = a_t g_t, s_t = a_t s_{t+1} + a_t C_t dy_t is a reverse scan
// of affine maps, and g_t = s_{t+1} + C_t dy_t. Then
//   dC_t += dy_t h_t        dB_t += g_t dt_t u_t      du_t += D dy_t + sum_n g_t dt_t B_t
//   ddt_t += sum_n g_t (B_t u_t + A_n a_t h_{t-1})    dA_n += sum_t g_t a_t h_{t-1} dt_t
//   dD += sum_t dy_t u_t     dz_t = dout_t y_t silu'(z_t)     ddelta = ddt * sigmoid(delta + bias)
// (the last with softplus, else ddelta = ddt), ddelta_bias += ddelta.
//
// One block per (batch, channel). Pass 1 runs the forward recurrence over all chunks and stores the
// state entering each chunk in the workspace. Pass 2 walks the chunks backwards: recompute h inside
// the chunk from the stored state (forward block scan), then the reverse block scan for g.
#pragma once
#include "scan_common.cuh"

namespace mamba_ssm {
namespace gpu {

template <typename T>
__global__ void __launch_bounds__(kThreads) scan_bwd_kernel(const ScanBwdParams p) {
  __shared__ float carry_s[kGpuMaxDState];
  __shared__ float dA_s[kGpuMaxDState];
  __shared__ float dBc_s[kGpuMaxDState];
  __shared__ float dCc_s[kGpuMaxDState];
  __shared__ AffinePair<float> scan_buf[2][kMaxWarps];
  __shared__ float4 sum_buf[2][kMaxWarps];
  const Channel ch = channel_of(p);
  const int64_t L = p.seqlen;
  const int N = static_cast<int>(p.dstate);
  const T* u = static_cast<const T*>(p.u) + ch.seq_off;
  const T* delta = static_cast<const T*>(p.delta) + ch.seq_off;
  const T* z = p.z ? static_cast<const T*>(p.z) + ch.seq_off : nullptr;
  const T* dout = static_cast<const T*>(p.dout) + ch.seq_off;
  T* du = static_cast<T*>(p.du) + ch.seq_off;
  T* ddelta = static_cast<T*>(p.ddelta) + ch.seq_off;
  T* dz = p.dz ? static_cast<T*>(p.dz) + ch.seq_off : nullptr;
  const float* A = p.A + ch.d * N;
  const float Dd = p.D ? p.D[ch.d] : 0.f;
  const float bias = p.delta_bias ? p.delta_bias[ch.d] : 0.f;
  const float* Bconst = p.b_variable ? nullptr : static_cast<const float*>(p.B) + ch.d * N;
  const float* Cconst = p.c_variable ? nullptr : static_cast<const float*>(p.C) + ch.d * N;
  const int64_t n_chunks = (L + kChunk - 1) / kChunk;
  float* ws = p.workspace + ch.bd * n_chunks * N;

  auto load_BC = [&](int n, int64_t t0, float (&Bv)[kItems], float (&Cv)[kItems], bool with_C) {
    if (p.b_variable) {
      load_bc_items<T>(p.B, p.bc_fp32, ch.bc_off + n * L, t0, L, Bv);
    } else {
#pragma unroll
      for (int i = 0; i < kItems; ++i) Bv[i] = Bconst[n];
    }
    if (!with_C) return;
    if (p.c_variable) {
      load_bc_items<T>(p.C, p.bc_fp32, ch.bc_off + n * L, t0, L, Cv);
    } else {
#pragma unroll
      for (int i = 0; i < kItems; ++i) Cv[i] = Cconst[n];
    }
  };
  // Loads u and dt (after bias and softplus; draw = delta + bias before softplus); dt = 0 past seqlen.
  auto load_u_dt = [&](int64_t t0, float (&uv)[kItems], float (&dt)[kItems], float (&draw)[kItems]) {
    load_items<T>(u, t0, L, uv);
    load_items<T>(delta, t0, L, draw);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      draw[i] += bias;
      dt[i] = t0 + i < L ? (p.delta_softplus ? softplus(draw[i]) : draw[i]) : 0.f;
    }
  };

  for (int n = threadIdx.x; n < N; n += kThreads) {
    carry_s[n] = 0.f; dA_s[n] = 0.f; dBc_s[n] = 0.f; dCc_s[n] = 0.f;
  }
  __syncthreads();
  int buf = 0, sbuf = 0;

  // Pass 1: states entering each chunk.
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t t0 = c * kChunk + static_cast<int64_t>(threadIdx.x) * kItems;
    float uv[kItems], dt[kItems], draw[kItems];
    load_u_dt(t0, uv, dt, draw);
    for (int n = 0; n < N; ++n) {
      const float An = A[n];
      float Bv[kItems], Cv[kItems];
      load_BC(n, t0, Bv, Cv, false);
      float agg_a = 1.f, agg_b = 0.f;
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        const float a = __expf(dt[i] * An);
        agg_b = a * agg_b + dt[i] * uv[i] * Bv[i];
        agg_a = a * agg_a;
      }
      const float carry = carry_s[n];
      if (threadIdx.x == 0) ws[c * N + n] = carry;
      float total;
      block_scan<false>(agg_a, agg_b, carry, scan_buf[buf], total);
      buf ^= 1;
      if (threadIdx.x == 0) carry_s[n] = total;
    }
  }
  __syncthreads();
  // carry_s now holds the reverse-scan carry s_{t+1} of the chunk after the current one.
  for (int n = threadIdx.x; n < N; n += kThreads)
    carry_s[n] = p.dlast_state ? p.dlast_state[ch.bd * N + n] : 0.f;
  __syncthreads();

  float dD_acc = 0.f, dbias_acc = 0.f;
  for (int64_t c = n_chunks - 1; c >= 0; --c) {
    const int64_t t0 = c * kChunk + static_cast<int64_t>(threadIdx.x) * kItems;
    float uv[kItems], dt[kItems], draw[kItems], dy[kItems], dov[kItems], y[kItems], du_acc[kItems],
        ddt[kItems];
    load_u_dt(t0, uv, dt, draw);
    load_items<T>(dout, t0, L, dov);
    float zv[kItems];
    if (z) load_items<T>(z, t0, L, zv);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      dy[i] = z ? dov[i] * zv[i] / (1.f + __expf(-zv[i])) : dov[i];
      y[i] = 0.f;
      du_acc[i] = 0.f;
      ddt[i] = 0.f;
    }
    for (int n = 0; n < N; ++n) {
      const float An = A[n];
      float a[kItems], hp[kItems], Bv[kItems], Cv[kItems];
      float agg_a = 1.f, agg_b = 0.f;
      load_BC(n, t0, Bv, Cv, true);
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        a[i] = __expf(dt[i] * An);
        agg_b = a[i] * agg_b + dt[i] * uv[i] * Bv[i];
        agg_a = a[i] * agg_a;
      }
      float total;
      float h = block_scan<false>(agg_a, agg_b, ws[c * N + n], scan_buf[buf], total);
      buf ^= 1;
      float dC_loc = 0.f;
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        hp[i] = h;
        h = a[i] * h + dt[i] * uv[i] * Bv[i];
        y[i] += Cv[i] * h;
        const float dCv = dy[i] * h;
        if (p.c_variable) {
          if (t0 + i < L) atomicAdd(p.dC + ch.bc_off + n * L + t0 + i, dCv);
        } else {
          dC_loc += dCv;
        }
      }
      // Reverse scan of s_t = a_t s_{t+1} + a_t C_t dy_t over this thread's items (last to first).
      float ragg_a = 1.f, ragg_b = 0.f;
#pragma unroll
      for (int i = kItems - 1; i >= 0; --i) {
        ragg_b = a[i] * (ragg_b + Cv[i] * dy[i]);
        ragg_a = a[i] * ragg_a;
      }
      const float carry = carry_s[n];
      float s = block_scan<true>(ragg_a, ragg_b, carry, scan_buf[buf], total);
      buf ^= 1;
      if (threadIdx.x == 0) carry_s[n] = total;
      float dA_loc = 0.f, dB_loc = 0.f;
#pragma unroll
      for (int i = kItems - 1; i >= 0; --i) {
        const float g = s + Cv[i] * dy[i];
        const float dBv = g * dt[i] * uv[i];
        du_acc[i] += g * dt[i] * Bv[i];
        const float ga = g * a[i] * hp[i];
        ddt[i] += g * Bv[i] * uv[i] + ga * An;
        dA_loc += ga * dt[i];
        if (p.b_variable) {
          if (t0 + i < L) atomicAdd(p.dB + ch.bc_off + n * L + t0 + i, dBv);
        } else {
          dB_loc += dBv;
        }
        s = a[i] * g;
      }
      const float3 sums = block_sum3(make_float3(dA_loc, dB_loc, dC_loc), sum_buf[sbuf]);
      sbuf ^= 1;
      if (threadIdx.x == 0) { dA_s[n] += sums.x; dBc_s[n] += sums.y; dCc_s[n] += sums.z; }
    }
    float dz_v[kItems];
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      const bool valid = t0 + i < L;
      if (p.delta_softplus) ddt[i] *= sigmoid(draw[i]);
      du_acc[i] += Dd * dy[i];
      dD_acc += valid ? dy[i] * uv[i] : 0.f;
      dbias_acc += valid ? ddt[i] : 0.f;
      if (z) {
        const float sg = 1.f / (1.f + __expf(-zv[i]));
        dz_v[i] = dov[i] * (y[i] + Dd * uv[i]) * sg * (1.f + zv[i] * (1.f - sg));
      }
    }
    store_items<T>(du, t0, L, du_acc);
    store_items<T>(ddelta, t0, L, ddt);
    if (dz) store_items<T>(dz, t0, L, dz_v);
  }
  const float3 sums = block_sum3(make_float3(dD_acc, dbias_acc, 0.f), sum_buf[sbuf]);
  __syncthreads();
  if (threadIdx.x == 0) {
    p.dD_part[ch.bd] = sums.x;
    p.ddelta_bias_part[ch.bd] = sums.y;
  }
  for (int n = threadIdx.x; n < N; n += kThreads) {
    p.dA_part[ch.bd * N + n] = dA_s[n];
    if (!p.b_variable) p.dB[ch.bd * N + n] = dBc_s[n];
    if (!p.c_variable) p.dC[ch.bd * N + n] = dCc_s[n];
  }
}

template <typename T>
const char* scan_bwd_launch(const ScanBwdParams& p, void* stream) {
  if (const char* why = gpu_unsupported_reason(p)) return why;
  if (p.batch * p.dim == 0) return nullptr;
  MAMBA_SSM_LAUNCH(scan_bwd_kernel<T>, static_cast<unsigned>(p.batch * p.dim), kThreads,
                   static_cast<mamba_stream_t>(stream), p);
  const mamba_error_t err = mambaGetLastError();
  return err == MAMBA_GPU_SUCCESS ? nullptr : mambaGetErrorString(err);
}

}  // namespace gpu
}  // namespace mamba_ssm
