// Complex-A selective-scan backward GPU kernel (CUDA and HIP). Includes no torch header. Math (the
// adjoint Gamma and the gradient formulas) and layouts: scan_complex.h.
//
// The real backward's scheme (scan_bwd.cuh): one block per (batch, channel); pass 1 stores the state
// entering each chunk in the workspace; pass 2 walks the chunks backwards, recomputes h inside the chunk
// (forward block scan from the stored state) and runs the reverse scan of s_t = a_t Gamma_t:
// s_t = a_t s_{t+1} + a_t 2 dy_t C_t, Gamma_t = s_{t+1} + 2 dy_t C_t (s past the end = conj(dlast)).
#pragma once
#include "scan_complex_common.cuh"

namespace mamba_ssm {
namespace gpu {

template <typename T>
__global__ void __launch_bounds__(kThreads) scan_complex_bwd_kernel(const ScanBwdParams p) {
  __shared__ Complex carry_s[kGpuMaxDState];
  __shared__ Complex dA_s[kGpuMaxDState];
  __shared__ Complex dBc_s[kGpuMaxDState];
  __shared__ Complex dCc_s[kGpuMaxDState];
  __shared__ AffinePair<Complex> scan_buf[2][kMaxWarps];
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
  const float* A = p.A + 2 * ch.d * N;
  const float Dd = p.D ? p.D[ch.d] : 0.f;
  const float bias = p.delta_bias ? p.delta_bias[ch.d] : 0.f;
  const float* Bconst = p.b_variable ? nullptr : static_cast<const float*>(p.B) + 2 * ch.d * N;
  const float* Cconst = p.c_variable ? nullptr : static_cast<const float*>(p.C) + 2 * ch.d * N;
  const int64_t bc_off = 2 * ch.bc_off;
  const int64_t n_chunks = (L + kChunk - 1) / kChunk;
  float* ws = p.workspace + 2 * ch.bd * n_chunks * N;

  // u and dt (after bias and softplus; draw = delta + bias before softplus); dt = 0 past seqlen.
  auto load_u_dt = [&](int64_t t0, float (&uv)[kItems], float (&dt)[kItems], float (&draw)[kItems]) {
    load_items<T>(u, t0, L, uv);
    load_items<T>(delta, t0, L, draw);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      draw[i] += bias;
      dt[i] = t0 + i < L ? (p.delta_softplus ? softplus(draw[i]) : draw[i]) : 0.f;
    }
  };
  // This thread's folded map h -> agg_a h + agg_b of its steps (a[] kept when asked).
  auto fold = [&](const float (&dt)[kItems], const float (&uv)[kItems], const Complex (&Bv)[kItems], Complex An,
                  Complex (&a)[kItems], Complex& agg_a, Complex& agg_b) {
    agg_a = Complex(1.f);
    agg_b = Complex(0.f);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      a[i] = exp_dt(dt[i], An);
      agg_b = a[i] * agg_b + (dt[i] * uv[i]) * Bv[i];
      agg_a = a[i] * agg_a;
    }
  };

  for (int n = threadIdx.x; n < N; n += kThreads) {
    carry_s[n] = Complex(0.f);
    dA_s[n] = dBc_s[n] = dCc_s[n] = Complex(0.f);
  }
  __syncthreads();
  int buf = 0, sbuf = 0;

  // Pass 1: states entering each chunk.
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t t0 = c * kChunk + static_cast<int64_t>(threadIdx.x) * kItems;
    float uv[kItems], dt[kItems], draw[kItems];
    load_u_dt(t0, uv, dt, draw);
    for (int n = 0; n < N; ++n) {
      Complex Bv[kItems], a[kItems], agg_a, agg_b;
      load_bc_complex<T>(p.b_variable, p.B, p.bc_fp32, bc_off + n * 2 * L, Bconst, n, t0, L, Bv);
      fold(dt, uv, Bv, load_complex(A, n), a, agg_a, agg_b);
      const Complex carry = carry_s[n];
      if (threadIdx.x == 0) store_complex(ws, c * N + n, carry);
      Complex total;
      block_scan<false>(agg_a, agg_b, carry, scan_buf[buf], total);
      buf ^= 1;
      if (threadIdx.x == 0) carry_s[n] = total;
    }
  }
  __syncthreads();
  // carry_s now holds s of the step after the current chunk: conj(dlast_state) past the end.
  for (int n = threadIdx.x; n < N; n += kThreads)
    carry_s[n] = p.dlast_state ? conj(load_complex(p.dlast_state, ch.bd * N + n)) : Complex(0.f);
  __syncthreads();

  float dD_acc = 0.f, dbias_acc = 0.f;
  for (int64_t c = n_chunks - 1; c >= 0; --c) {
    const int64_t t0 = c * kChunk + static_cast<int64_t>(threadIdx.x) * kItems;
    float uv[kItems], dt[kItems], draw[kItems], dy[kItems], dov[kItems], y[kItems], du_acc[kItems],
        ddt[kItems], zv[kItems];
    load_u_dt(t0, uv, dt, draw);
    load_items<T>(dout, t0, L, dov);
    if (z) load_items<T>(z, t0, L, zv);
#pragma unroll
    for (int i = 0; i < kItems; ++i) {
      dy[i] = z ? dov[i] * zv[i] / (1.f + __expf(-zv[i])) : dov[i];
      y[i] = 0.f;
      du_acc[i] = 0.f;
      ddt[i] = 0.f;
    }
    for (int n = 0; n < N; ++n) {
      const Complex An = load_complex(A, n);
      Complex a[kItems], hp[kItems], Bv[kItems], Cv[kItems], agg_a, agg_b, total;
      load_bc_complex<T>(p.b_variable, p.B, p.bc_fp32, bc_off + n * 2 * L, Bconst, n, t0, L, Bv);
      load_bc_complex<T>(p.c_variable, p.C, p.bc_fp32, bc_off + n * 2 * L, Cconst, n, t0, L, Cv);
      fold(dt, uv, Bv, An, a, agg_a, agg_b);
      Complex h = block_scan<false>(agg_a, agg_b, load_complex(ws, c * N + n), scan_buf[buf], total);
      buf ^= 1;
      Complex dC_loc(0.f);
#pragma unroll
      for (int i = 0; i < kItems; ++i) {
        hp[i] = h;
        h = a[i] * h + (dt[i] * uv[i]) * Bv[i];
        y[i] += re_mul(Cv[i], h);
        const Complex dCv = (2.f * dy[i]) * conj(h);
        if (p.c_variable) {
          if (t0 + i < L) {
            float* dst = p.dC + bc_off + n * 2 * L + 2 * (t0 + i);
            atomicAdd(dst, dCv.re);
            atomicAdd(dst + 1, dCv.im);
          }
        } else {
          dC_loc = dC_loc + dCv;
        }
      }
      // Reverse scan of s_t = a_t s_{t+1} + a_t 2 dy_t C_t over this thread's items (last to first).
      Complex ragg_a(1.f), ragg_b(0.f);
#pragma unroll
      for (int i = kItems - 1; i >= 0; --i) {
        ragg_b = a[i] * (ragg_b + (2.f * dy[i]) * Cv[i]);
        ragg_a = a[i] * ragg_a;
      }
      Complex s = block_scan<true>(ragg_a, ragg_b, carry_s[n], scan_buf[buf], total);
      buf ^= 1;
      if (threadIdx.x == 0) carry_s[n] = total;
      Complex dA_loc(0.f), dB_loc(0.f);
#pragma unroll
      for (int i = kItems - 1; i >= 0; --i) {
        const Complex g = s + (2.f * dy[i]) * Cv[i];  // Gamma_t
        const Complex dBv = (dt[i] * uv[i]) * conj(g);
        const float gB = re_mul(g, Bv[i]);
        const Complex q = g * a[i] * hp[i];
        du_acc[i] += dt[i] * gB;
        ddt[i] += re_mul(q, An) + uv[i] * gB;
        dA_loc = dA_loc + dt[i] * conj(q);
        if (p.b_variable) {
          if (t0 + i < L) {
            float* dst = p.dB + bc_off + n * 2 * L + 2 * (t0 + i);
            atomicAdd(dst, dBv.re);
            atomicAdd(dst + 1, dBv.im);
          }
        } else {
          dB_loc = dB_loc + dBv;
        }
        s = a[i] * g;
      }
      // Six sums in two block_sum3 calls (each one barrier; the buffers alternate).
      const float3 s1 = block_sum3(make_float3(dA_loc.re, dA_loc.im, dB_loc.re), sum_buf[sbuf]);
      sbuf ^= 1;
      const float3 s2 = block_sum3(make_float3(dB_loc.im, dC_loc.re, dC_loc.im), sum_buf[sbuf]);
      sbuf ^= 1;
      if (threadIdx.x == 0) {
        dA_s[n] = dA_s[n] + Complex(s1.x, s1.y);
        dBc_s[n] = dBc_s[n] + Complex(s1.z, s2.x);
        dCc_s[n] = dCc_s[n] + Complex(s2.y, s2.z);
      }
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
        dz_v[i] = dov[i] * (2.f * y[i] + Dd * uv[i]) * sg * (1.f + zv[i] * (1.f - sg));
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
    store_complex(p.dA_part, ch.bd * N + n, dA_s[n]);
    if (!p.b_variable) store_complex(p.dB, ch.bd * N + n, dBc_s[n]);
    if (!p.c_variable) store_complex(p.dC, ch.bd * N + n, dCc_s[n]);
  }
}

template <typename T>
const char* scan_complex_bwd_launch(const ScanBwdParams& p, void* stream) {
  if (const char* why = gpu_unsupported_reason(p)) return why;
  if (p.batch * p.dim == 0) return nullptr;
  MAMBA_SSM_LAUNCH(scan_complex_bwd_kernel<T>, static_cast<unsigned>(p.batch * p.dim), kThreads,
                   static_cast<mamba_stream_t>(stream), p);
  const mamba_error_t err = mambaGetLastError();
  return err == MAMBA_GPU_SUCCESS ? nullptr : mambaGetErrorString(err);
}

}  // namespace gpu
}  // namespace mamba_ssm
