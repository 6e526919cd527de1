// CPU selective-scan kernels: the implementation, compiled once per instruction set (scan_cpu.cpp for
// the baseline ISA, scan_cpu_avx2.cpp with AVX2+FMA, scan_cpu_avx512.cpp with AVX-512), inside namespace
// MAMBA_CPU_NS. Includes no torch header. Math: scan_params.h (forward); the gradients below.
//
// Vectorisation: loops over d_state in groups of kLanes (MAMBA_CPU_LANES: 8, or 16 for AVX-512) that
// the compiler turns into SIMD (the state is padded to a multiple of kLanes with A = B = C = 0, which
// keeps the padding at h = 0), with a branch-free exp2. Sums over d_state use kLanes partial sums
// folded in halves, so no reassociation (and no -ffast-math) is needed to vectorise them. The AVX-512
// build adds hand-written loops for d_state <= 32 (MAMBA_CPU_AVX512): the state stays in registers and
// the per-timestep sums over d_state are done 16 timesteps at a time by one transpose-and-add tree.
//
// Inputs in fp16/bf16 are converted a row (or a B/C tile) at a time into small fp32 buffers; results
// are rounded to their dtype (round to nearest even) as each row is written.
//
// Backward (per channel, the whole sequence): pass 1 runs the recurrence to find the state entering
// each segment (kSegBytes of decays + states: 2048 timesteps at d_state 16; at least 64); then,
// segments last to first, the segment's decays a_t and states h_t are recomputed and kept (a few
// hundred KiB, cache-resident) and the reverse recurrence
//   G_t = C_t dy_t + a_{t+1} G_{t+1}     (G = dL/dh_t; the step past the end is dlast_state)
// gives  dC_t += dy_t h_t,  dB_t += G_t dt_t u_t,  du_t = D dy_t + dt_t sum_n G_t B_t,
//        d dt_t = sum_n G_t a_t h_{t-1} A + u_t sum_n G_t B_t (times sigmoid for softplus),
//        dA += G_t a_t h_{t-1} dt_t,  dD += dy_t u_t,  and dz from y_t (recomputed) and the silu gate.
// Up to one segment long, pass 1 has nothing to do and the backward evaluates each decay once, as many
// exps as the forward (which keeps nothing for the backward: the op saves only its inputs).
#ifndef MAMBA_CPU_NS
#error "define MAMBA_CPU_NS before including scan_cpu_impl.h"
#endif
#ifndef MAMBA_CPU_LANES
#define MAMBA_CPU_LANES 8
#endif
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#include "scan_cpu.h"
#include "scan_params.h"

#if defined(__GNUC__) && !defined(__clang__)
// The clamps in exp2_approx are float compares; with GCC's default -ftrapping-math they count as
// control flow that may trap and block vectorisation. Nothing here relies on FP exception flags.
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif

namespace mamba_ssm {
namespace MAMBA_CPU_NS {

constexpr int kLanes = MAMBA_CPU_LANES;
constexpr int64_t kTile = 512;           // forward: timesteps per tile (B/C transposed per tile)
constexpr int64_t kSegBytes = 256 << 10;  // backward: bytes of the kept decays + states of one segment
constexpr float kLog2e = 1.44269504088896341f;

// ------------------------------------------------------------------------------------ conversions
static inline float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof(f));
  return f;
}
static inline uint32_t float_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof(b));
  return b;
}
static inline float bf16_to_float(uint16_t v) { return bits_to_float(static_cast<uint32_t>(v) << 16); }
static inline uint16_t float_to_bf16(float f) {  // round to nearest even; NaN stays a (quiet) NaN
  uint32_t b = float_to_bits(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40u);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}
static inline float half_to_float(uint16_t h) {  // IEEE binary16 -> binary32, exact
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;  // mant * 2^-24
    return sign ? -v : v;
  }
  return bits_to_float(sign | ((exp + 112u) << 23) | (mant << 13));
}
static inline uint16_t float_to_half(float f) {  // round to nearest even, overflow to inf
  const uint32_t b = float_to_bits(f);
  const uint32_t sign = (b >> 16) & 0x8000u, a = b & 0x7fffffffu;
  if (a >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a < 0x38800000u) {  // below 2^-14: a subnormal half, mant = round(|f| * 2^24)
    const float m = std::nearbyint(bits_to_float(a) * 16777216.0f);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(m));
  }
  uint32_t r = a - (112u << 23);  // rebias the exponent (127 -> 15)
  r += 0xfffu + ((r >> 13) & 1u);
  return static_cast<uint16_t>(sign | (r >> 13));
}

// n elements of a per-sequence tensor, from element offset off, -> fp32 dst.
static inline void load_row(const void* base, ScalarKind kind, int64_t off, int64_t n, float* dst) {
  if (kind == ScalarKind::kFloat32) {
    std::memcpy(dst, static_cast<const float*>(base) + off, n * sizeof(float));
    return;
  }
  const uint16_t* src = static_cast<const uint16_t*>(base) + off;
  if (kind == ScalarKind::kBFloat16)
    for (int64_t j = 0; j < n; ++j) dst[j] = bf16_to_float(src[j]);
  else
    for (int64_t j = 0; j < n; ++j) dst[j] = half_to_float(src[j]);
}

// fp32 src -> n elements of a per-sequence tensor at element offset off, rounded to its dtype.
static inline void store_row(void* base, ScalarKind kind, int64_t off, int64_t n, const float* src) {
  if (kind == ScalarKind::kFloat32) {
    std::memcpy(static_cast<float*>(base) + off, src, n * sizeof(float));
    return;
  }
  uint16_t* dst = static_cast<uint16_t*>(base) + off;
  if (kind == ScalarKind::kBFloat16)
    for (int64_t j = 0; j < n; ++j) dst[j] = float_to_bf16(src[j]);
  else
    for (int64_t j = 0; j < n; ++j) dst[j] = float_to_half(src[j]);
}

// (d_state, seqlen) rows [t0, t0 + tn) of a variable B or C (any kind) -> tile (tn, Np) fp32; the
// padding lanes are left as they are (0). row is a scratch buffer of tn floats.
static inline void transpose_in(const void* base, ScalarKind kind, int64_t off, int64_t N, int64_t L,
                                int64_t t0, int64_t tn, int64_t Np, float* row, float* tile) {
  for (int64_t n = 0; n < N; ++n) {
    load_row(base, kind, off + n * L + t0, tn, row);
    for (int64_t j = 0; j < tn; ++j) tile[j * Np + n] = row[j];
  }
}

// ------------------------------------------------------------------------------------ math helpers
// 2^t for t in float range, relative error ~2e-7: 2^k * 2^f with k = round(t), |f| <= 1/2, degree-6
// Taylor polynomial of e^(f ln 2). Branch-free so that loops calling it vectorise. exp(x) = 2^(x log2 e):
// the callers pre-scale A by log2 e.
static inline float exp2_approx(float t) {
  t = t < -126.0f ? -126.0f : t;  // (no std::min/max: they would not inline across the pragmas)
  t = t > 127.0f ? 127.0f : t;
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float kf = (t + shifter) - shifter;
  const float f = t - kf;
  float poly = 1.5403530393381606e-4f;
  poly = poly * f + 1.3333558146428443e-3f;
  poly = poly * f + 9.6181291076284772e-3f;
  poly = poly * f + 5.5504108664821580e-2f;
  poly = poly * f + 2.4022650695910071e-1f;
  poly = poly * f + 6.9314718055994531e-1f;
  poly = poly * f + 1.0f;
  const int32_t ki = static_cast<int32_t>(kf);
  return poly * bits_to_float(static_cast<uint32_t>(ki + 127) << 23);
}

static inline float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }
static inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }
static inline int64_t padded(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// Sum of kLanes partial sums, folded in halves (vectorises; the order is fixed).
static inline float fold(float* acc) {
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

// sum_j x[j] * y[j] and sum_j x[j] with kLanes partial sums (vectorise; the order is fixed).
static inline float dot(const float* __restrict x, const float* __restrict y, int64_t n) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[j + l] * y[j + l];
  float tail = 0.f;
  for (; j < n; ++j) tail += x[j] * y[j];
  return fold(acc) + tail;
}
static inline float sum(const float* __restrict x, int64_t n) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[j + l];
  float tail = 0.f;
  for (; j < n; ++j) tail += x[j];
  return fold(acc) + tail;
}

// delta row -> dt (bias, softplus), keeping the pre-softplus value in draw when asked; dtu = dt * u.
static inline void make_dt(const float* delta, const float* u, int64_t n, float bias, bool softplus_on,
                           float* dt, float* draw, float* dtu) {
  if (draw)
    for (int64_t j = 0; j < n; ++j) draw[j] = delta[j] + bias;
  if (softplus_on)
    for (int64_t j = 0; j < n; ++j) dt[j] = softplus(delta[j] + bias);
  else
    for (int64_t j = 0; j < n; ++j) dt[j] = delta[j] + bias;
  for (int64_t j = 0; j < n; ++j) dtu[j] = dt[j] * u[j];
}

// ------------------------------------------------------------------------------------ forward steps
// tn steps of the recurrence over all Np (padded) states, from state h (updated in place):
//   a = 2^(dt A2), h = a h + dtu B_j;  y_j = sum_n C_j h  (kY);  kStore keeps a_j at abuf + j * Ss and
// the state after step j at hbuf + j * Ss. B/C rows advance by Bs/Cs floats per step (0: constant).
template <bool kY, bool kStore>
static inline void fwd_steps_plain(int64_t tn, int64_t Np, const float* __restrict dt,
                                   const float* __restrict dtu, const float* __restrict A2,
                                   const float* __restrict B, int64_t Bs, const float* __restrict C,
                                   int64_t Cs, float* __restrict h, float* __restrict y,
                                   float* __restrict abuf, float* __restrict hbuf, int64_t Ss) {
  for (int64_t j = 0; j < tn; ++j) {
    const float dtj = dt[j], dtuj = dtu[j];
    const float* __restrict Bj = B + j * Bs;
    const float* __restrict Cj = C + j * Cs;
    float acc[kLanes] = {};
    for (int64_t nb = 0; nb < Np; nb += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const int64_t n = nb + l;
        const float a = exp2_approx(dtj * A2[n]);
        const float hn = a * h[n] + dtuj * Bj[n];
        h[n] = hn;
        if (kStore) {
          abuf[j * Ss + n] = a;
          hbuf[j * Ss + n] = hn;
        }
        if (kY) acc[l] += Cj[n] * hn;
      }
    }
    if (kY) y[j] = fold(acc);
  }
}

// ------------------------------------------------------------------------------------ reverse steps
// The steps j = tn-1 .. 0 of the reverse recurrence (see the top of the file), on one segment.
//   sc:  per step {dt, dt u, dy} (3 floats);
//   ah:  tn + 1 rows of 2 Np: row 0 = {unused, the state before step 0}, row j + 1 = {a_j, h_j};
//   B/C: rows advancing by Bs/Cs floats per step (0: constant); dB/dC likewise by Bs/Cs (0: one
//        accumulator for a constant B/C);
//   s:   a_{t+1} G_{t+1} on entry, a_t0 G_t0 on exit; dA accumulated;
//   sumB[j] = sum_n G B and sumT[j] = sum_n G a h_{t-1} A written.
static inline void rev_steps_plain(int64_t tn, int64_t Np, const float* __restrict sc,
                                   const float* __restrict A, const float* __restrict B, int64_t Bs,
                                   const float* __restrict C, int64_t Cs, const float* __restrict ah,
                                   float* __restrict s, float* __restrict dA, float* dB, float* dC,
                                   float* __restrict sumB, float* __restrict sumT) {
  for (int64_t j = tn - 1; j >= 0; --j) {
    const float dtj = sc[3 * j], dtuj = sc[3 * j + 1], dyj = sc[3 * j + 2];
    const float* __restrict Bj = B + j * Bs;
    const float* __restrict Cj = C + j * Cs;
    const float* __restrict hp = ah + j * 2 * Np + Np;
    const float* __restrict aj = hp + Np;
    const float* __restrict hj = aj + Np;
    float* dBj = dB + j * Bs;
    float* dCj = dC + j * Cs;
    float accB[kLanes] = {}, accT[kLanes] = {};
    for (int64_t nb = 0; nb < Np; nb += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const int64_t n = nb + l;
        const float g = s[n] + Cj[n] * dyj;
        const float ga = g * aj[n] * hp[n];
        dCj[n] += dyj * hj[n];
        dBj[n] += g * dtuj;
        accB[l] += g * Bj[n];
        accT[l] += ga * A[n];
        dA[n] += ga * dtj;
        s[n] = aj[n] * g;
      }
    }
    sumB[j] = fold(accB);
    sumT[j] = fold(accT);
  }
}

#if defined(MAMBA_CPU_AVX512)
// ------------------------------------------------------------------------------------ AVX-512 loops
// The same two loops for Np = 16 * NV (NV = 1, 2), the state in registers. Everything they call is
// inlined (a call would make the compiler keep the loop-carried vectors in memory).
#define MAMBA_AVX512_INLINE inline __attribute__((always_inline))

static MAMBA_AVX512_INLINE __m512 exp2_v(__m512 t) {
  t = _mm512_max_ps(t, _mm512_set1_ps(-150.0f));  // keeps -inf from turning f into NaN
  const __m512 k = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, k);
  __m512 p = _mm512_set1_ps(1.5403530393381606e-4f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.3333558146428443e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(9.6181291076284772e-3f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(5.5504108664821580e-2f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.4022650695910071e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(6.9314718055994531e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, k);  // p * 2^k, 0 / inf past the float range
}

// rows[i] (i < 16, 16 floats each, 64-byte aligned) -> lane i = sum of rows[i]: a transpose-and-add tree
// (45 shuffles/adds for 16 sums, against 8 per sum one at a time).
static MAMBA_AVX512_INLINE __m512 sum_rows16(const float* rows) {
  __m512 w[8];
  for (int i = 0; i < 8; ++i) {
    const __m512 a = _mm512_load_ps(rows + 32 * i), b = _mm512_load_ps(rows + 32 * i + 16);
    w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xEE));
  }
  __m512 x[4];
  for (int i = 0; i < 4; ++i)
    x[i] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xDD));
  // x[i]: 128-bit block k = 4 partial sums of row 4i + k.
  const __m512 y0 = _mm512_add_ps(_mm512_shuffle_ps(x[0], x[1], 0x44), _mm512_shuffle_ps(x[0], x[1], 0xEE));
  const __m512 y1 = _mm512_add_ps(_mm512_shuffle_ps(x[2], x[3], 0x44), _mm512_shuffle_ps(x[2], x[3], 0xEE));
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(y0, y1, 0x88), _mm512_shuffle_ps(y0, y1, 0xDD));
  // r lane 4k + m = sum of row 4m + k.
  const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_permutexvar_ps(idx, r);
}

template <int NV, bool kY, bool kStore>
static inline void fwd_steps_v(int64_t tn, const float* __restrict dt, const float* __restrict dtu,
                               const float* __restrict A2, const float* __restrict B, int64_t Bs,
                               const float* __restrict C, int64_t Cs, float* __restrict h,
                               float* __restrict y, float* __restrict abuf, float* __restrict hbuf,
                               int64_t Ss) {
  alignas(64) float prod[16 * 16];
  __m512 hv[NV], a2[NV];
  for (int v = 0; v < NV; ++v) {
    hv[v] = _mm512_loadu_ps(h + 16 * v);
    a2[v] = _mm512_loadu_ps(A2 + 16 * v);
  }
  for (int64_t j0 = 0; j0 < tn; j0 += 16) {
    const int64_t jn = std::min<int64_t>(16, tn - j0);
    for (int64_t i = 0; i < jn; ++i) {
      const int64_t j = j0 + i;
      const __m512 dtj = _mm512_set1_ps(dt[j]), dtuj = _mm512_set1_ps(dtu[j]);
      __m512 acc = _mm512_setzero_ps();
      for (int v = 0; v < NV; ++v) {
        const __m512 a = exp2_v(_mm512_mul_ps(dtj, a2[v]));
        hv[v] = _mm512_fmadd_ps(a, hv[v], _mm512_mul_ps(dtuj, _mm512_loadu_ps(B + j * Bs + 16 * v)));
        if (kStore) {
          _mm512_storeu_ps(abuf + j * Ss + 16 * v, a);
          _mm512_storeu_ps(hbuf + j * Ss + 16 * v, hv[v]);
        }
        if (kY) acc = _mm512_fmadd_ps(_mm512_loadu_ps(C + j * Cs + 16 * v), hv[v], acc);
      }
      if (kY) _mm512_store_ps(prod + 16 * i, acc);
    }
    if (kY) {
      for (int64_t i = jn; i < 16; ++i) _mm512_store_ps(prod + 16 * i, _mm512_setzero_ps());
      _mm512_mask_storeu_ps(y + j0, static_cast<__mmask16>((1u << jn) - 1u), sum_rows16(prod));
    }
  }
  for (int v = 0; v < NV; ++v) _mm512_storeu_ps(h + 16 * v, hv[v]);
}

// kVarB / kVarC: variable B / C (rows and dB / dC rows advance by Bs / Cs per step) or constant (one row;
// its gradient accumulated in registers).
template <int NV, bool kVarB, bool kVarC>
static inline void rev_steps_v(int64_t tn, const float* __restrict sc, const float* __restrict A,
                               const float* __restrict B, int64_t Bs, const float* __restrict C, int64_t Cs,
                               const float* __restrict ah, float* __restrict s, float* __restrict dA,
                               float* dB, float* dC, float* __restrict sumB, float* __restrict sumT) {
  constexpr int64_t Np = 16 * NV;
  alignas(64) float pBT[2 * 16 * 16];  // per step: sum_n G B terms, then (at +256) sum_n G a h A terms
  __m512 sv[NV], dAv[NV], Av[NV], dBc[NV], dCc[NV];
  for (int v = 0; v < NV; ++v) {
    sv[v] = _mm512_loadu_ps(s + 16 * v);
    dAv[v] = _mm512_loadu_ps(dA + 16 * v);
    Av[v] = _mm512_loadu_ps(A + 16 * v);
    dBc[v] = kVarB ? _mm512_setzero_ps() : _mm512_loadu_ps(dB + 16 * v);
    dCc[v] = kVarC ? _mm512_setzero_ps() : _mm512_loadu_ps(dC + 16 * v);
  }
  for (int64_t jhi = tn; jhi > 0; jhi -= 16) {
    const int64_t jlo = std::max<int64_t>(0, jhi - 16), jn = jhi - jlo;
    for (int64_t j = jhi - 1; j >= jlo; --j) {
      const __m512 dtj = _mm512_set1_ps(sc[3 * j]), dtuj = _mm512_set1_ps(sc[3 * j + 1]),
                   dyj = _mm512_set1_ps(sc[3 * j + 2]);
      const float* __restrict hp = ah + j * 2 * Np + Np;
      __m512 accB = _mm512_setzero_ps(), accT = _mm512_setzero_ps();
      for (int v = 0; v < NV; ++v) {
        const __m512 a = _mm512_loadu_ps(hp + Np + 16 * v);
        const __m512 hj = _mm512_loadu_ps(hp + 2 * Np + 16 * v);
        const __m512 g = _mm512_fmadd_ps(_mm512_loadu_ps(C + (kVarC ? j * Cs : 0) + 16 * v), dyj, sv[v]);
        const __m512 ga = _mm512_mul_ps(_mm512_mul_ps(g, a), _mm512_loadu_ps(hp + 16 * v));
        if (kVarC) {
          float* q = dC + j * Cs + 16 * v;
          _mm512_storeu_ps(q, _mm512_fmadd_ps(dyj, hj, _mm512_loadu_ps(q)));
        } else {
          dCc[v] = _mm512_fmadd_ps(dyj, hj, dCc[v]);
        }
        if (kVarB) {
          float* q = dB + j * Bs + 16 * v;
          _mm512_storeu_ps(q, _mm512_fmadd_ps(g, dtuj, _mm512_loadu_ps(q)));
        } else {
          dBc[v] = _mm512_fmadd_ps(g, dtuj, dBc[v]);
        }
        accB = _mm512_fmadd_ps(g, _mm512_loadu_ps(B + (kVarB ? j * Bs : 0) + 16 * v), accB);
        accT = _mm512_fmadd_ps(ga, Av[v], accT);
        dAv[v] = _mm512_fmadd_ps(ga, dtj, dAv[v]);
        sv[v] = _mm512_mul_ps(a, g);
      }
      _mm512_store_ps(pBT + 16 * (j - jlo), accB);
      _mm512_store_ps(pBT + 256 + 16 * (j - jlo), accT);
    }
    for (int64_t i = jn; i < 16; ++i) {
      _mm512_store_ps(pBT + 16 * i, _mm512_setzero_ps());
      _mm512_store_ps(pBT + 256 + 16 * i, _mm512_setzero_ps());
    }
    const __mmask16 m = static_cast<__mmask16>((1u << jn) - 1u);
    _mm512_mask_storeu_ps(sumB + jlo, m, sum_rows16(pBT));
    _mm512_mask_storeu_ps(sumT + jlo, m, sum_rows16(pBT + 256));
  }
  for (int v = 0; v < NV; ++v) {
    _mm512_storeu_ps(s + 16 * v, sv[v]);
    _mm512_storeu_ps(dA + 16 * v, dAv[v]);
    if (!kVarB) _mm512_storeu_ps(dB + 16 * v, dBc[v]);
    if (!kVarC) _mm512_storeu_ps(dC + 16 * v, dCc[v]);
  }
}

template <int NV>
static inline void rev_steps_nv(int64_t tn, const float* sc, const float* A, const float* B, int64_t Bs,
                                const float* C, int64_t Cs, const float* ah, float* s, float* dA, float* dB,
                                float* dC, float* sumB, float* sumT) {
  if (Bs && Cs) return rev_steps_v<NV, true, true>(tn, sc, A, B, Bs, C, Cs, ah, s, dA, dB, dC, sumB, sumT);
  if (Bs) return rev_steps_v<NV, true, false>(tn, sc, A, B, Bs, C, Cs, ah, s, dA, dB, dC, sumB, sumT);
  if (Cs) return rev_steps_v<NV, false, true>(tn, sc, A, B, Bs, C, Cs, ah, s, dA, dB, dC, sumB, sumT);
  rev_steps_v<NV, false, false>(tn, sc, A, B, Bs, C, Cs, ah, s, dA, dB, dC, sumB, sumT);
}
#undef MAMBA_AVX512_INLINE
#endif  // MAMBA_CPU_AVX512

template <bool kY, bool kStore>
static inline void fwd_steps(int64_t tn, int64_t Np, const float* dt, const float* dtu, const float* A2,
                             const float* B, int64_t Bs, const float* C, int64_t Cs, float* h, float* y,
                             float* abuf, float* hbuf, int64_t Ss) {
#if defined(MAMBA_CPU_AVX512)
  if (Np == 16) return fwd_steps_v<1, kY, kStore>(tn, dt, dtu, A2, B, Bs, C, Cs, h, y, abuf, hbuf, Ss);
  if (Np == 32) return fwd_steps_v<2, kY, kStore>(tn, dt, dtu, A2, B, Bs, C, Cs, h, y, abuf, hbuf, Ss);
#endif
  fwd_steps_plain<kY, kStore>(tn, Np, dt, dtu, A2, B, Bs, C, Cs, h, y, abuf, hbuf, Ss);
}

static inline void rev_steps(int64_t tn, int64_t Np, const float* sc, const float* A, const float* B,
                             int64_t Bs, const float* C, int64_t Cs, const float* ah, float* s, float* dA,
                             float* dB, float* dC, float* sumB, float* sumT) {
#if defined(MAMBA_CPU_AVX512)
  if (Np == 16) return rev_steps_nv<1>(tn, sc, A, B, Bs, C, Cs, ah, s, dA, dB, dC, sumB, sumT);
  if (Np == 32) return rev_steps_nv<2>(tn, sc, A, B, Bs, C, Cs, ah, s, dA, dB, dC, sumB, sumT);
#endif
  rev_steps_plain(tn, Np, sc, A, B, Bs, C, Cs, ah, s, dA, dB, dC, sumB, sumT);
}

// ------------------------------------------------------------------------------------ forward
// Tiles outer, channels inner: the transposed B/C tile of a (batch, group) is made once per tile and
// shared by every channel of that group in this range.
void scan_fwd(const ScanParams& p, const CpuDtypes& k, int64_t bd_begin, int64_t bd_end) {
  const int64_t L = p.seqlen, N = p.dstate, Np = padded(N);
  const int64_t per_group = p.dim / p.n_groups;
  const int64_t n_ch = bd_end - bd_begin;
  if (n_ch <= 0) return;
  // Per-channel constants, padded: A * log2 e, constant B / C.
  std::vector<float> A2(n_ch * Np, 0.f), Bc(p.b_variable ? 0 : n_ch * Np, 0.f),
      Cc(p.c_variable ? 0 : n_ch * Np, 0.f);
  for (int64_t c = 0; c < n_ch; ++c) {
    const int64_t d = (bd_begin + c) % p.dim;
    for (int64_t n = 0; n < N; ++n) {
      A2[c * Np + n] = p.A[d * N + n] * kLog2e;
      if (!p.b_variable) Bc[c * Np + n] = static_cast<const float*>(p.B)[d * N + n];
      if (!p.c_variable) Cc[c * Np + n] = static_cast<const float*>(p.C)[d * N + n];
    }
  }
  std::vector<float> Bt(p.b_variable ? kTile * Np : 0, 0.f), Ct(p.c_variable ? kTile * Np : 0, 0.f);
  std::vector<float> ut(kTile), dt(kTile), dtu(kTile), zt(kTile), yt(kTile), row(kTile);
  std::vector<float> states(n_ch * Np, 0.f);
  for (int64_t t0 = 0; t0 < L; t0 += kTile) {
    const int64_t tn = std::min(kTile, L - t0);
    int64_t cached_bg = -1;
    for (int64_t bd = bd_begin; bd < bd_end; ++bd) {
      const int64_t c = bd - bd_begin, b = bd / p.dim, d = bd % p.dim, g = d / per_group;
      const int64_t bg = b * p.n_groups + g;
      if ((p.b_variable || p.c_variable) && bg != cached_bg) {
        const int64_t off = bg * N * L;
        if (p.b_variable) transpose_in(p.B, k.B, off, N, L, t0, tn, Np, row.data(), Bt.data());
        if (p.c_variable) transpose_in(p.C, k.C, off, N, L, t0, tn, Np, row.data(), Ct.data());
        cached_bg = bg;
      }
      load_row(p.u, k.u, bd * L + t0, tn, ut.data());
      load_row(p.delta, k.delta, bd * L + t0, tn, row.data());
      make_dt(row.data(), ut.data(), tn, p.delta_bias ? p.delta_bias[d] : 0.f, p.delta_softplus, dt.data(),
              nullptr, dtu.data());
      fwd_steps<true, false>(tn, Np, dt.data(), dtu.data(), A2.data() + c * Np,
                             p.b_variable ? Bt.data() : Bc.data() + c * Np, p.b_variable ? Np : 0,
                             p.c_variable ? Ct.data() : Cc.data() + c * Np, p.c_variable ? Np : 0,
                             states.data() + c * Np, yt.data(), nullptr, nullptr, 0);
      const float Dd = p.D ? p.D[d] : 0.f;
      if (p.z) {
        load_row(p.z, k.z, bd * L + t0, tn, zt.data());
        for (int64_t j = 0; j < tn; ++j) yt[j] = (yt[j] + Dd * ut[j]) * (zt[j] * sigmoid(zt[j]));
      } else if (p.D) {
        for (int64_t j = 0; j < tn; ++j) yt[j] += Dd * ut[j];
      }
      store_row(p.out, k.u, bd * L + t0, tn, yt.data());
    }
  }
  if (p.last_state)
    for (int64_t bd = bd_begin; bd < bd_end; ++bd)
      std::copy(states.begin() + (bd - bd_begin) * Np, states.begin() + (bd - bd_begin) * Np + N,
                p.last_state + bd * N);
}

// ------------------------------------------------------------------------------------ backward
// du = D dy + dt sumB and ddelta = sumT + u sumB (before the softplus factor), per step.
static inline void bwd_row_grads(int64_t n, float Dd, const float* __restrict dy, const float* __restrict dt,
                                 const float* __restrict u, const float* __restrict sumB,
                                 const float* __restrict sumT, float* __restrict du, float* __restrict dd) {
  for (int64_t j = 0; j < n; ++j) {
    du[j] = Dd * dy[j] + dt[j] * sumB[j];
    dd[j] = sumT[j] + u[j] * sumB[j];
  }
}

static inline void interleave3(int64_t n, const float* __restrict x, const float* __restrict y,
                               const float* __restrict z, float* __restrict out) {
  for (int64_t j = 0; j < n; ++j) {
    out[3 * j] = x[j];
    out[3 * j + 1] = y[j];
    out[3 * j + 2] = z[j];
  }
}

// A row of a per-sequence tensor as fp32: the tensor's own memory when it is fp32, else converted into buf.
static inline const float* row_f32(const void* base, ScalarKind kind, int64_t off, int64_t n, float* buf) {
  if (kind == ScalarKind::kFloat32) return static_cast<const float*>(base) + off;
  load_row(base, kind, off, n, buf);
  return buf;
}

// Channels of one task one at a time, each over the whole sequence (see the top of the file). The
// transposed B/C of the current (batch, group), (seqlen, {B, C} x Np), and its dB/dC accumulators of
// the same layout are shared by the group's channels; the accumulators are added into the task's slab
// when the group changes.
void scan_bwd(const ScanBwdParams& p, const CpuDtypes& k, int64_t task) {
  const int64_t L = p.seqlen, N = p.dstate, Np = padded(N);
  const int64_t per_group = p.dim / p.n_groups;
  const int64_t b = task / p.cpu_n_split, split = task % p.cpu_n_split;
  const int64_t d_begin = p.dim * split / p.cpu_n_split;
  const int64_t d_end = p.dim * (split + 1) / p.cpu_n_split;
  if (d_end <= d_begin || L == 0) {
    for (int64_t d = d_begin; d < d_end; ++d) {  // seqlen 0: every gradient is 0
      const int64_t bd = b * p.dim + d;
      std::fill(p.dA_part + bd * N, p.dA_part + bd * N + N, 0.f);
      if (!p.b_variable) std::fill(p.dB + bd * N, p.dB + bd * N + N, 0.f);
      if (!p.c_variable) std::fill(p.dC + bd * N, p.dC + bd * N + N, 0.f);
      p.dD_part[bd] = 0.f;
      p.ddelta_bias_part[bd] = 0.f;
    }
    return;
  }
  const int64_t seg = std::max<int64_t>(64, kSegBytes / (2 * Np * int64_t(sizeof(float))) / 64 * 64);
  const int64_t n_seg = (L + seg - 1) / seg;
  const int64_t slab = p.n_groups * N * L;  // this task's slab of the variable dB / dC partials
  float* dB_slab = p.b_variable ? p.dB + task * slab : nullptr;
  float* dC_slab = p.c_variable ? p.dC + task * slab : nullptr;
  const bool variable = p.b_variable || p.c_variable;
  const int64_t W = 2 * Np;  // row of BC / dBC: {B_t, C_t}

  std::vector<float> BC(variable ? L * W : 0, 0.f), dBC(variable ? L * W : 0, 0.f);
  std::vector<float> ah((seg + 1) * W), hstart(n_seg * Np);
  std::vector<float> A(Np, 0.f), A2(Np, 0.f), Bc(Np, 0.f), Cc(Np, 0.f), dBc(Np), dCc(Np), h(Np), s(Np),
      dA(Np);
  std::vector<float> u(L), dt(L), dtu(L), draw(p.delta_softplus ? L : 0), dout(L), dy(L), z(p.z ? L : 0),
      row(L), sc(3 * seg), sumB(seg), sumT(seg), y(p.z ? seg : 0), o1(seg), o2(seg), o3(seg);

  int64_t cached_g = -1;
  // Adds the group's dB/dC accumulators into the slab (transposing back) and clears them.
  auto flush = [&]() {
    if (cached_g < 0) return;
    for (int part = 0; part < 2; ++part) {
      if (!(part == 0 ? p.b_variable : p.c_variable)) continue;
      float* slab_g = (part == 0 ? dB_slab : dC_slab) + cached_g * N * L;
      const float* acc = dBC.data() + part * Np;
      for (int64_t n = 0; n < N; ++n) {
        float* __restrict dst = slab_g + n * L;
        for (int64_t t = 0; t < L; ++t) dst[t] += acc[t * W + n];
      }
    }
    std::fill(dBC.begin(), dBC.end(), 0.f);
  };

  for (int64_t d = d_begin; d < d_end; ++d) {
    const int64_t bd = b * p.dim + d, g = d / per_group;
    if (variable && g != cached_g) {
      flush();
      const int64_t off = (b * p.n_groups + g) * N * L;
      if (p.b_variable) transpose_in(p.B, k.B, off, N, L, 0, L, W, row.data(), BC.data());
      if (p.c_variable) transpose_in(p.C, k.C, off, N, L, 0, L, W, row.data(), BC.data() + Np);
      cached_g = g;
    }
    for (int64_t n = 0; n < N; ++n) {
      A[n] = p.A[d * N + n];
      A2[n] = A[n] * kLog2e;
      if (!p.b_variable) Bc[n] = static_cast<const float*>(p.B)[d * N + n];
      if (!p.c_variable) Cc[n] = static_cast<const float*>(p.C)[d * N + n];
    }
    const float* Bp = p.b_variable ? BC.data() : Bc.data();
    const float* Cp = p.c_variable ? BC.data() + Np : Cc.data();
    float* dBp = p.b_variable ? dBC.data() : dBc.data();
    float* dCp = p.c_variable ? dBC.data() + Np : dCc.data();
    const int64_t Bs = p.b_variable ? W : 0, Cs = p.c_variable ? W : 0;
    const float Dd = p.D ? p.D[d] : 0.f;
    const float* ur = row_f32(p.u, k.u, bd * L, L, u.data());
    make_dt(row_f32(p.delta, k.delta, bd * L, L, row.data()), ur, L, p.delta_bias ? p.delta_bias[d] : 0.f,
            p.delta_softplus, dt.data(), p.delta_softplus ? draw.data() : nullptr, dtu.data());
    const float* doutr = row_f32(p.dout, k.dout, bd * L, L, dout.data());
    const float* zr = nullptr;
    const float* dyr = doutr;
    if (p.z) {
      zr = row_f32(p.z, k.z, bd * L, L, z.data());
      for (int64_t t = 0; t < L; ++t) dy[t] = doutr[t] * zr[t] * sigmoid(zr[t]);
      dyr = dy.data();
    }

    // Pass 1: the state entering every segment.
    std::fill(h.begin(), h.end(), 0.f);
    for (int64_t sg = 0; sg < n_seg; ++sg) {
      std::copy(h.begin(), h.end(), hstart.begin() + sg * Np);
      if (sg + 1 == n_seg) break;
      const int64_t t0 = sg * seg;
      fwd_steps<false, false>(seg, Np, dt.data() + t0, dtu.data() + t0, A2.data(), Bp + t0 * Bs, Bs,
                              Cp + t0 * Cs, Cs, h.data(), nullptr, nullptr, nullptr, 0);
    }

    // Pass 2: segments last to first.
    std::fill(s.begin(), s.end(), 0.f);
    if (p.dlast_state) std::copy(p.dlast_state + bd * N, p.dlast_state + bd * N + N, s.begin());
    std::fill(dA.begin(), dA.end(), 0.f);
    std::fill(dBc.begin(), dBc.end(), 0.f);
    std::fill(dCc.begin(), dCc.end(), 0.f);
    float dD_acc = 0.f, dbias_acc = 0.f;
    for (int64_t sg = n_seg - 1; sg >= 0; --sg) {
      const int64_t t0 = sg * seg, tn = std::min(seg, L - t0);
      std::copy(hstart.begin() + sg * Np, hstart.begin() + (sg + 1) * Np, h.begin());
      std::copy(h.begin(), h.end(), ah.begin() + Np);  // row 0: the state before the segment
      if (p.z)
        fwd_steps<true, true>(tn, Np, dt.data() + t0, dtu.data() + t0, A2.data(), Bp + t0 * Bs, Bs,
                              Cp + t0 * Cs, Cs, h.data(), y.data(), ah.data() + W, ah.data() + W + Np, W);
      else
        fwd_steps<false, true>(tn, Np, dt.data() + t0, dtu.data() + t0, A2.data(), Bp + t0 * Bs, Bs,
                               Cp + t0 * Cs, Cs, h.data(), nullptr, ah.data() + W, ah.data() + W + Np, W);
      const float* ut = ur + t0;
      const float* dtt = dt.data() + t0;
      const float* dyt = dyr + t0;
      float* scp = sc.data();
      interleave3(tn, dtt, dtu.data() + t0, dyt, scp);
      float* sB = sumB.data();
      float* sT = sumT.data();
      rev_steps(tn, Np, scp, A.data(), Bp + t0 * Bs, Bs, Cp + t0 * Cs, Cs, ah.data(), s.data(), dA.data(),
                dBp + t0 * Bs, dCp + t0 * Cs, sB, sT);
      float* du_r = o1.data();
      float* dd_r = o2.data();
      bwd_row_grads(tn, Dd, dyt, dtt, ut, sB, sT, du_r, dd_r);
      if (p.delta_softplus) {
        const float* dr = draw.data() + t0;
        for (int64_t j = 0; j < tn; ++j) dd_r[j] *= sigmoid(dr[j]);
      }
      dD_acc += dot(dyt, ut, tn);
      dbias_acc += sum(dd_r, tn);
      store_row(p.du, k.u, bd * L + t0, tn, du_r);
      store_row(p.ddelta, k.delta, bd * L + t0, tn, dd_r);
      if (p.dz) {
        float* dz_r = o3.data();
        const float* zt = zr + t0;
        const float* dot_ = doutr + t0;
        const float* yt = y.data();
        for (int64_t j = 0; j < tn; ++j) {
          const float sgm = sigmoid(zt[j]);
          dz_r[j] = dot_[j] * (yt[j] + Dd * ut[j]) * sgm * (1.f + zt[j] * (1.f - sgm));
        }
        store_row(p.dz, k.z, bd * L + t0, tn, dz_r);
      }
    }
    std::copy(dA.begin(), dA.begin() + N, p.dA_part + bd * N);
    if (!p.b_variable) std::copy(dBc.begin(), dBc.begin() + N, p.dB + bd * N);
    if (!p.c_variable) std::copy(dCc.begin(), dCc.begin() + N, p.dC + bd * N);
    p.dD_part[bd] = dD_acc;
    p.ddelta_bias_part[bd] = dbias_acc;
  }
  flush();
}

}  // namespace MAMBA_CPU_NS
}  // namespace mamba_ssm

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
