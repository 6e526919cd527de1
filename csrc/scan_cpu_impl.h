// CPU selective-scan kernels: the implementation, compiled once per instruction set (scan_cpu.cpp for
// the baseline ISA, scan_cpu_avx2.cpp with AVX2+FMA, scan_cpu_avx512.cpp with AVX-512), inside namespace
// MAMBA_CPU_NS. Includes no torch header. Math: scan_params.h (forward); the gradients below.
//
// Vectorisation: the state (d_state, padded to a multiple of kLanes with A = B = C = 0, which keeps
// the padding at h = 0) is split into vectors of kLanes (MAMBA_CPU_LANES: 8 for AVX2 and the baseline
// build, 16 for AVX-512). The AVX2 and AVX-512 builds (MAMBA_CPU_AVX2 / MAMBA_CPU_AVX512) run
// hand-written loops for d_state up to 4 vectors (32 / 64): the state stays in registers, exp(dt A) is
// a vector exp2 of dt * A log2(e) across d_state, and the per-timestep sums over d_state are done
// kLanes timesteps at a time by one transpose-and-add tree. Other sizes and the baseline build use plain
// loops the compiler vectorises, with the branch-free exp2_approx. Per-timestep work (softplus, the
// silu gate and their derivatives) uses cpu_exp.h's branch-free functions, so no libm call is left in
// any loop. Sums use fixed orders (kLanes partial sums, folded in halves), so no reassociation (and no
// -ffast-math) is needed to vectorise them.
//
// Inputs in fp16/bf16 are converted a row (or a B/C tile) at a time into small fp32 buffers; results
// are rounded to their dtype (round to nearest even) as each row is written.
//
// Forward: timestep tiles of kTile outer, channels inner, so the transposed B/C tile of a group stays in
// cache while every channel of the group reads it; each channel's state is carried between tiles.
//
// Backward (per channel, the whole sequence): pass 1 runs the recurrence to find the state entering
// each segment (segment_len(): kSegBytes of kept values; 8192 timesteps at d_state 16, at least 64);
// then, segments last to first, the segment is recomputed once, keeping per step the decay a_t and
// q_t = a_t h_{t-1} (in cache), and the reverse recurrence
//   G_t = C_t dy_t + a_{t+1} G_{t+1}     (G = dL/dh_t; the step past the end is dlast_state)
// gives  dB_t += G_t dt_t u_t,  du_t = D dy_t + dt_t sum_n G_t B_t,
//        d dt_t = sum_n G_t q_t A + u_t sum_n G_t B_t (times sigmoid for softplus),
//        dA += G_t q_t dt_t,  dD += dy_t u_t,
// while dC_t += dy_t h_t and y_t (for dz, with the silu gate) are formed in the recompute itself, where
// h_t is at hand. Up to one segment long, pass 1 has nothing to do and the backward evaluates each decay
// once, as many exps as the forward (which keeps nothing for the backward: the op saves only its inputs).
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
#include <memory>
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

#include "cpu_exp.h"  // softplus_approx, sigmoid_approx

constexpr int kLanes = MAMBA_CPU_LANES;
constexpr int64_t kTile = 512;             // forward: timesteps per tile (B/C transposed per tile)
constexpr int64_t kSegBytes = 1 << 20;     // backward: bytes of the kept a_t, q_t of one segment
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

// Brings n elements of a per-sequence tensor, from element offset off, towards the cache (L2) ahead of
// use: the next channel's rows are read from memory while this channel computes. rw: for writing.
static inline void prefetch_row(const void* base, ScalarKind kind, int64_t off, int64_t n, bool rw) {
#if defined(__GNUC__) || defined(__clang__)
  if (!base) return;
  const int64_t size = kind == ScalarKind::kFloat32 ? 4 : 2;
  const char* c = static_cast<const char*>(base) + off * size;
  for (int64_t i = 0; i < n * size; i += 64) {
    if (rw)
      __builtin_prefetch(c + i, 1, 1);
    else
      __builtin_prefetch(c + i, 0, 1);
  }
#else
  (void)base, (void)kind, (void)off, (void)n, (void)rw;
#endif
}

// A row of a per-sequence tensor as fp32: the tensor's own memory when it is fp32, else converted into buf.
static inline const float* row_f32(const void* base, ScalarKind kind, int64_t off, int64_t n, float* buf) {
  if (kind == ScalarKind::kFloat32) return static_cast<const float*>(base) + off;
  load_row(base, kind, off, n, buf);
  return buf;
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
// 2^f for |f| <= 1/2: the degree-6 Taylor polynomial of e^(f ln 2), coefficients (ln 2)^i / i!. Exact
// at f = 0 (decays near 1 carry no bias through the recurrence); relative error 2.2e-7 in float32.
constexpr int kExp2Deg = 6;
constexpr float kExp2P[kExp2Deg + 1] = {1.0f,
                                        6.9314718055994531e-1f,
                                        2.4022650695910071e-1f,
                                        5.5504108664821580e-2f,
                                        9.6181291076284772e-3f,
                                        1.3333558146428443e-3f,
                                        1.5403530393381606e-4f};

// 2^t for t in float range, relative error ~2e-7: 2^k * 2^f with k = round(t), |f| <= 1/2. Branch-free
// so that loops calling it vectorise. exp(x) = 2^(x log2 e): the callers pre-scale A by log2 e.
static inline float exp2_approx(float t) {
  t = t < -126.0f ? -126.0f : t;  // (no std::min/max: they would not inline across the pragmas)
  t = t > 127.0f ? 127.0f : t;
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float kf = (t + shifter) - shifter;
  const float f = t - kf;
  float poly = kExp2P[kExp2Deg];
  for (int i = kExp2Deg - 1; i >= 0; --i) poly = poly * f + kExp2P[i];
  const int32_t ki = static_cast<int32_t>(kf);
  return poly * bits_to_float(static_cast<uint32_t>(ki + 127) << 23);
}

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
static inline void make_dt(const float* __restrict delta, const float* __restrict u, int64_t n, float bias,
                           bool softplus_on, float* __restrict dt, float* __restrict draw,
                           float* __restrict dtu) {
  if (draw)
    for (int64_t j = 0; j < n; ++j) draw[j] = delta[j] + bias;
  if (softplus_on)
    for (int64_t j = 0; j < n; ++j) dt[j] = softplus_approx(delta[j] + bias);
  else
    for (int64_t j = 0; j < n; ++j) dt[j] = delta[j] + bias;
  for (int64_t j = 0; j < n; ++j) dtu[j] = dt[j] * u[j];
}

// ------------------------------------------------------------------------------------ plain steps
// The three step loops for any Np (a multiple of kLanes), written for the compiler's vectoriser; the
// AVX2 / AVX-512 builds replace them by the loops below for Np up to 4 vectors. In all of them B/C rows
// (and dB/dC rows) advance by Bs/Cs floats per step (0: constant, one row).

// Forward: tn steps from state h (updated in place): a = 2^(dt A2), h = a h + dtu B_j; y_j = sum_n C_j h
// when kY.
template <bool kY>
static inline void fwd_steps_plain(int64_t tn, int64_t Np, const float* __restrict dt,
                                   const float* __restrict dtu, const float* __restrict A2,
                                   const float* __restrict B, int64_t Bs, const float* __restrict C,
                                   int64_t Cs, float* __restrict h, float* __restrict y) {
  for (int64_t j = 0; j < tn; ++j) {
    const float dtj = dt[j], dtuj = dtu[j];
    const float* __restrict Bj = B + j * Bs;
    const float* __restrict Cj = C + j * Cs;
    float acc[kLanes] = {};
    for (int64_t nb = 0; nb < Np; nb += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const int64_t n = nb + l;
        const float hn = exp2_approx(dtj * A2[n]) * h[n] + dtuj * Bj[n];
        h[n] = hn;
        if (kY) acc[l] += Cj[n] * hn;
      }
    }
    if (kY) y[j] = fold(acc);
  }
}

// One channel's view of a backward segment, for rec_steps / rev_steps. Per-step arrays start at the
// segment's first step; B/C (and dB/dC) rows advance by Bs/Cs floats per step (0: constant, the channel's
// own row and accumulator). The lanes of one pass (rec_steps_v / rev_steps_v with K > 1) have variable B
// and C and share the B/C rows and the dB/dC accumulator rows of their group.
struct BwdLane {
  const float* dt;   // dt per step
  const float* dtu;  // dt u per step
  const float* dy;   // dL/dy per step (after the silu gate)
  const float* sc;   // {dt, dt u, dy} per step, interleaved (rev)
  const float* A;    // (Np) A and A log2 e
  const float* A2;
  const float* B;
  const float* C;
  float* dB;  // rev accumulates
  float* dC;  // rec accumulates
  float* h;   // rec: the state entering the segment, on exit the state after it
  float* y;   // rec: y per step when kY
  float* aq;  // rec writes, rev reads: row j = {a_j, q_j = a_j h_{j-1}} (2 Np floats)
  float* s;   // rev: a_{t+1} G_{t+1} on entry, a_t0 G_t0 on exit
  float* dA;  // rev accumulates
  float* sumB;  // rev writes sum_n G B per step
  float* sumT;  // rev writes sum_n G q A per step
};

// The backward's recompute of a segment: the forward steps keeping the aq rows, with dC_j += dy_j h_j and,
// when kY, y_j.
template <bool kY>
static inline void rec_steps_plain(int64_t tn, int64_t Np, const BwdLane& ln, int64_t Bs, int64_t Cs) {
  const float* __restrict dt = ln.dt;
  const float* __restrict dtu = ln.dtu;
  const float* __restrict dy = ln.dy;
  const float* __restrict A2 = ln.A2;
  float* __restrict h = ln.h;
  for (int64_t j = 0; j < tn; ++j) {
    const float dtj = dt[j], dtuj = dtu[j], dyj = dy[j];
    const float* __restrict Bj = ln.B + j * Bs;
    const float* __restrict Cj = ln.C + j * Cs;
    float* __restrict aj = ln.aq + j * 2 * Np;
    float* __restrict qj = aj + Np;
    float* __restrict dCj = ln.dC + j * Cs;
    float acc[kLanes] = {};
    for (int64_t nb = 0; nb < Np; nb += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const int64_t n = nb + l;
        const float a = exp2_approx(dtj * A2[n]);
        const float q = a * h[n];
        const float hn = q + dtuj * Bj[n];
        h[n] = hn;
        aj[n] = a;
        qj[n] = q;
        dCj[n] += dyj * hn;
        if (kY) acc[l] += Cj[n] * hn;
      }
    }
    if (kY) ln.y[j] = fold(acc);
  }
}

// The reverse steps j = tn-1 .. 0 of a segment (see the top of the file).
static inline void rev_steps_plain(int64_t tn, int64_t Np, const BwdLane& ln, int64_t Bs, int64_t Cs) {
  const float* __restrict sc = ln.sc;
  const float* __restrict A = ln.A;
  float* __restrict s = ln.s;
  float* __restrict dA = ln.dA;
  for (int64_t j = tn - 1; j >= 0; --j) {
    const float dtj = sc[3 * j], dtuj = sc[3 * j + 1], dyj = sc[3 * j + 2];
    const float* __restrict Bj = ln.B + j * Bs;
    const float* __restrict Cj = ln.C + j * Cs;
    const float* __restrict aj = ln.aq + j * 2 * Np;
    const float* __restrict qj = aj + Np;
    float* __restrict dBj = ln.dB + j * Bs;
    float accB[kLanes] = {}, accT[kLanes] = {};
    for (int64_t nb = 0; nb < Np; nb += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const int64_t n = nb + l;
        const float g = s[n] + Cj[n] * dyj;
        const float gq = g * qj[n];
        dBj[n] += g * dtuj;
        accB[l] += g * Bj[n];
        accT[l] += gq * A[n];
        dA[n] += gq * dtj;
        s[n] = aj[n] * g;
      }
    }
    ln.sumB[j] = fold(accB);
    ln.sumT[j] = fold(accT);
  }
}

#if defined(MAMBA_CPU_AVX512) || defined(MAMBA_CPU_AVX2)
// ------------------------------------------------------------------------------------ SIMD loops
// The same three loops for Np = kLanes * NV (NV = 1..4), the state in registers. vf is one vector of
// kLanes floats; every helper is inlined (a call would make the compiler keep the loop-carried vectors in
// memory).
#define MAMBA_SIMD_INLINE inline __attribute__((always_inline))
constexpr int kMaxNV = 4;

#if defined(MAMBA_CPU_AVX512)
static_assert(kLanes == 16, "the AVX-512 build has 16 fp32 lanes");
using vf = __m512;
static MAMBA_SIMD_INLINE vf vload(const float* p) { return _mm512_loadu_ps(p); }
static MAMBA_SIMD_INLINE void vstore(float* p, vf v) { _mm512_storeu_ps(p, v); }
static MAMBA_SIMD_INLINE vf vset1(float x) { return _mm512_set1_ps(x); }
static MAMBA_SIMD_INLINE vf vzero() { return _mm512_setzero_ps(); }
static MAMBA_SIMD_INLINE vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static MAMBA_SIMD_INLINE vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
// The first n (< = 16) lanes of v to p.
static MAMBA_SIMD_INLINE void vstore_first(float* p, vf v, int64_t n) {
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1u), v);
}

// 2^t per lane (exp2_approx's polynomial): p(f) * 2^k by scalef, 0 / inf past the float range; NaN stays
// NaN (max returns its second operand when one is NaN).
static MAMBA_SIMD_INLINE vf vexp2(vf t) {
  t = _mm512_max_ps(_mm512_set1_ps(-150.0f), t);  // keeps -inf from turning f into NaN
  const __m512 k = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, k);
  __m512 p = _mm512_set1_ps(kExp2P[kExp2Deg]);
  for (int i = kExp2Deg - 1; i >= 0; --i) p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(kExp2P[i]));
  return _mm512_scalef_ps(p, k);
}

// rows[i] (i < 16, 16 floats each, 64-byte aligned) -> lane i = sum of rows[i]: a transpose-and-add tree
// (15 adds for 16 sums, against 4 per sum one at a time).
static MAMBA_SIMD_INLINE vf vsum_rows(const float* rows) {
  __m512 w[8];
  for (int i = 0; i < 8; ++i) {  // lanes 0-7: 8 partial sums of row 2i, lanes 8-15: of row 2i + 1
    const __m512 a = _mm512_load_ps(rows + 32 * i), b = _mm512_load_ps(rows + 32 * i + 16);
    w[i] = _mm512_add_ps(_mm512_mask_blend_ps(0xFF00, a, b), _mm512_shuffle_f32x4(a, b, 0x4E));
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
#else  // AVX2 + FMA
static_assert(kLanes == 8, "the AVX2 build has 8 fp32 lanes");
using vf = __m256;
static MAMBA_SIMD_INLINE vf vload(const float* p) { return _mm256_loadu_ps(p); }
static MAMBA_SIMD_INLINE void vstore(float* p, vf v) { _mm256_storeu_ps(p, v); }
static MAMBA_SIMD_INLINE vf vset1(float x) { return _mm256_set1_ps(x); }
static MAMBA_SIMD_INLINE vf vzero() { return _mm256_setzero_ps(); }
static MAMBA_SIMD_INLINE vf vmul(vf a, vf b) { return _mm256_mul_ps(a, b); }
static MAMBA_SIMD_INLINE vf vfma(vf a, vf b, vf c) { return _mm256_fmadd_ps(a, b, c); }
// The first n (<= 8) lanes of v to p.
static MAMBA_SIMD_INLINE void vstore_first(float* p, vf v, int64_t n) {
  static const int32_t kMask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  _mm256_maskstore_ps(p, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kMask + 8 - n)), v);
}

// 2^t per lane (exp2_approx's polynomial): adding 1.5 * 2^23 + 127 rounds t to k + 127 in the low
// mantissa bits, which shifted up by 23 are the exponent field of 2^k (t clamped to [-127, 128]: 0 below,
// inf above); NaN stays NaN (max/min return their second operand when one is NaN).
static MAMBA_SIMD_INLINE vf vexp2(vf t) {
  t = _mm256_max_ps(_mm256_set1_ps(-127.0f), t);
  t = _mm256_min_ps(_mm256_set1_ps(128.0f), t);
  const __m256 shifter = _mm256_set1_ps(12583039.0f);  // 1.5 * 2^23 + 127
  const __m256 s = _mm256_add_ps(t, shifter);
  const __m256 f = _mm256_sub_ps(t, _mm256_sub_ps(s, shifter));
  __m256 p = _mm256_set1_ps(kExp2P[kExp2Deg]);
  for (int i = kExp2Deg - 1; i >= 0; --i) p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(kExp2P[i]));
  return _mm256_mul_ps(p, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(s), 23)));
}

// rows[i] (i < 8, 8 floats each, 32-byte aligned) -> lane i = sum of rows[i]: two rounds of horizontal
// adds, then the two 128-bit halves added (7 adds for 8 sums).
static MAMBA_SIMD_INLINE vf vsum_rows(const float* rows) {
  __m256 t[4];
  for (int i = 0; i < 4; ++i) t[i] = _mm256_hadd_ps(_mm256_load_ps(rows + 16 * i), _mm256_load_ps(rows + 16 * i + 8));
  const __m256 u0 = _mm256_hadd_ps(t[0], t[1]), u1 = _mm256_hadd_ps(t[2], t[3]);
  // u0 lane i (i < 4) / 4 + i: half sums of row i (low / high 4 lanes); u1 likewise for rows 4-7.
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}
#endif

// Forward steps (fwd_steps_plain's contract).
template <int NV, bool kY>
static inline void fwd_steps_v(int64_t tn, const float* __restrict dt, const float* __restrict dtu,
                               const float* __restrict A2, const float* __restrict B, int64_t Bs,
                               const float* __restrict C, int64_t Cs, float* __restrict h,
                               float* __restrict y) {
  alignas(64) float prod[kLanes * kLanes];
  vf hv[NV], a2[NV];
  for (int v = 0; v < NV; ++v) {
    hv[v] = vload(h + kLanes * v);
    a2[v] = vload(A2 + kLanes * v);
  }
  for (int64_t j0 = 0; j0 < tn; j0 += kLanes) {
    const int64_t jn = std::min<int64_t>(kLanes, tn - j0);
    for (int64_t i = 0; i < jn; ++i) {
      const int64_t j = j0 + i;
      const vf dtj = vset1(dt[j]), dtuj = vset1(dtu[j]);
      vf acc = vzero();
      for (int v = 0; v < NV; ++v) {
        const vf a = vexp2(vmul(dtj, a2[v]));
        hv[v] = vfma(a, hv[v], vmul(dtuj, vload(B + j * Bs + kLanes * v)));
        if (kY) {
          const vf c = vload(C + j * Cs + kLanes * v);
          acc = v == 0 ? vmul(c, hv[v]) : vfma(c, hv[v], acc);
        }
      }
      if (kY) vstore(prod + kLanes * i, acc);
    }
    if (kY) {
      for (int64_t i = jn; i < kLanes; ++i) vstore(prod + kLanes * i, vzero());
      vstore_first(y + j0, vsum_rows(prod), jn);
    }
  }
  for (int v = 0; v < NV; ++v) vstore(h + kLanes * v, hv[v]);
}

// Recompute steps (rec_steps_plain's contract) of K lanes at once: the B/C rows are read once per step
// for all lanes and, when kVarC, the lanes' dy h terms are added into the shared dC row with one
// read-modify-write (K > 1 needs variable B and C). Constant C: each lane's dC in registers.
template <int NV, int K, bool kVarC, bool kY>
static inline void rec_steps_v(int64_t tn, const BwdLane* ln, int64_t Bs, int64_t Cs) {
  constexpr int64_t Np = kLanes * NV;
  alignas(64) float prod[K][kLanes * kLanes];
  // The lanes' pointers as locals: the vector stores may alias anything in memory, ln[] included, so
  // reading them from ln[] in the loop would reload them after every store.
  const float *dt[K], *dtu[K], *dy[K];
  float *aq[K], *y[K];
  const float* B = ln[0].B;
  const float* C = ln[0].C;
  float* dC = ln[0].dC;
  vf hv[K][NV], a2[K][NV], dCc[K][NV];
  for (int k = 0; k < K; ++k) {
    dt[k] = ln[k].dt;
    dtu[k] = ln[k].dtu;
    dy[k] = ln[k].dy;
    aq[k] = ln[k].aq;
    y[k] = ln[k].y;
    for (int v = 0; v < NV; ++v) {
      hv[k][v] = vload(ln[k].h + kLanes * v);
      a2[k][v] = vload(ln[k].A2 + kLanes * v);
      dCc[k][v] = kVarC ? vzero() : vload(ln[k].dC + kLanes * v);
    }
  }
  for (int64_t j0 = 0; j0 < tn; j0 += kLanes) {
    const int64_t jn = std::min<int64_t>(kLanes, tn - j0);
    for (int64_t i = 0; i < jn; ++i) {
      const int64_t j = j0 + i;
      vf dtj[K], dtuj[K], dyj[K], acc[K];
      for (int k = 0; k < K; ++k) {
        dtj[k] = vset1(dt[k][j]);
        dtuj[k] = vset1(dtu[k][j]);
        dyj[k] = vset1(dy[k][j]);
        acc[k] = vzero();
      }
      for (int v = 0; v < NV; ++v) {
        const vf b = vload(B + j * Bs + kLanes * v);
        float* dCj = dC + j * Cs + kLanes * v;
        vf dc = kVarC ? vload(dCj) : vzero();
        for (int k = 0; k < K; ++k) {
          const vf a = vexp2(vmul(dtj[k], a2[k][v]));
          const vf q = vmul(a, hv[k][v]);
          hv[k][v] = vfma(dtuj[k], b, q);
          float* aj = aq[k] + j * 2 * Np + kLanes * v;
          vstore(aj, a);
          vstore(aj + Np, q);
          if (kVarC)
            dc = vfma(dyj[k], hv[k][v], dc);
          else
            dCc[k][v] = vfma(dyj[k], hv[k][v], dCc[k][v]);
          if (kY) {
            const vf c = vload(C + j * Cs + kLanes * v);
            acc[k] = v == 0 ? vmul(c, hv[k][v]) : vfma(c, hv[k][v], acc[k]);
          }
        }
        if (kVarC) vstore(dCj, dc);
      }
      if (kY)
        for (int k = 0; k < K; ++k) vstore(prod[k] + kLanes * i, acc[k]);
    }
    if (kY)
      for (int k = 0; k < K; ++k) {
        for (int64_t i = jn; i < kLanes; ++i) vstore(prod[k] + kLanes * i, vzero());
        vstore_first(y[k] + j0, vsum_rows(prod[k]), jn);
      }
  }
  for (int k = 0; k < K; ++k)
    for (int v = 0; v < NV; ++v) {
      vstore(ln[k].h + kLanes * v, hv[k][v]);
      if (!kVarC) vstore(ln[k].dC + kLanes * v, dCc[k][v]);
    }
}

// Reverse steps (rev_steps_plain's contract) of K lanes at once: B/C rows read once per step, the lanes'
// G dt u terms added into the shared dB row with one read-modify-write when kVarB (K > 1 needs variable
// B and C). Constant B: each lane's dB in registers.
template <int NV, int K, bool kVarB>
static inline void rev_steps_v(int64_t tn, const BwdLane* ln, int64_t Bs, int64_t Cs) {
  constexpr int64_t Np = kLanes * NV;
  alignas(64) float pB[K][kLanes * kLanes], pT[K][kLanes * kLanes];  // per step: G B and G q A terms
  // The lanes' pointers as locals (see rec_steps_v).
  const float *sc[K], *aq[K];
  float *sumB[K], *sumT[K];
  const float* B = ln[0].B;
  const float* C = ln[0].C;
  float* dB = ln[0].dB;
  vf sv[K][NV], dAv[K][NV], Av[K][NV], dBc[K][NV];
  for (int k = 0; k < K; ++k) {
    sc[k] = ln[k].sc;
    aq[k] = ln[k].aq;
    sumB[k] = ln[k].sumB;
    sumT[k] = ln[k].sumT;
    for (int v = 0; v < NV; ++v) {
      sv[k][v] = vload(ln[k].s + kLanes * v);
      dAv[k][v] = vload(ln[k].dA + kLanes * v);
      Av[k][v] = vload(ln[k].A + kLanes * v);
      dBc[k][v] = kVarB ? vzero() : vload(ln[k].dB + kLanes * v);
    }
  }
  for (int64_t jhi = tn; jhi > 0; jhi -= kLanes) {
    const int64_t jlo = std::max<int64_t>(0, jhi - kLanes), jn = jhi - jlo;
    for (int64_t j = jhi - 1; j >= jlo; --j) {
      vf dtj[K], dtuj[K], dyj[K], accB[K], accT[K];
      for (int k = 0; k < K; ++k) {
        dtj[k] = vset1(sc[k][3 * j]);
        dtuj[k] = vset1(sc[k][3 * j + 1]);
        dyj[k] = vset1(sc[k][3 * j + 2]);
        accB[k] = accT[k] = vzero();
      }
      for (int v = 0; v < NV; ++v) {
        const vf c = vload(C + j * Cs + kLanes * v);
        const vf b = vload(B + j * Bs + kLanes * v);
        float* dBj = dB + j * Bs + kLanes * v;
        vf db = kVarB ? vload(dBj) : vzero();
        for (int k = 0; k < K; ++k) {
          const float* aj = aq[k] + j * 2 * Np + kLanes * v;
          const vf g = vfma(c, dyj[k], sv[k][v]);
          const vf gq = vmul(g, vload(aj + Np));
          if (kVarB)
            db = vfma(g, dtuj[k], db);
          else
            dBc[k][v] = vfma(g, dtuj[k], dBc[k][v]);
          accB[k] = v == 0 ? vmul(g, b) : vfma(g, b, accB[k]);
          accT[k] = v == 0 ? vmul(gq, Av[k][v]) : vfma(gq, Av[k][v], accT[k]);
          dAv[k][v] = vfma(gq, dtj[k], dAv[k][v]);
          sv[k][v] = vmul(vload(aj), g);
        }
        if (kVarB) vstore(dBj, db);
      }
      for (int k = 0; k < K; ++k) {
        vstore(pB[k] + kLanes * (j - jlo), accB[k]);
        vstore(pT[k] + kLanes * (j - jlo), accT[k]);
      }
    }
    for (int k = 0; k < K; ++k) {
      for (int64_t i = jn; i < kLanes; ++i) {
        vstore(pB[k] + kLanes * i, vzero());
        vstore(pT[k] + kLanes * i, vzero());
      }
      vstore_first(sumB[k] + jlo, vsum_rows(pB[k]), jn);
      vstore_first(sumT[k] + jlo, vsum_rows(pT[k]), jn);
    }
  }
  for (int k = 0; k < K; ++k)
    for (int v = 0; v < NV; ++v) {
      vstore(ln[k].s + kLanes * v, sv[k][v]);
      vstore(ln[k].dA + kLanes * v, dAv[k][v]);
      if (!kVarB) vstore(ln[k].dB + kLanes * v, dBc[k][v]);
    }
}

// Np -> NV, the number of vectors of the state, for the SIMD loops; 0 where the plain loops run.
static inline int simd_nv(int64_t Np) { return Np <= kLanes * kMaxNV ? static_cast<int>(Np / kLanes) : 0; }
#undef MAMBA_SIMD_INLINE
#endif  // MAMBA_CPU_AVX512 || MAMBA_CPU_AVX2

// ------------------------------------------------------------------------------------ dispatch on Np
template <bool kY>
static inline void fwd_steps(int64_t tn, int64_t Np, const float* dt, const float* dtu, const float* A2,
                             const float* B, int64_t Bs, const float* C, int64_t Cs, float* h, float* y) {
#if defined(MAMBA_CPU_AVX512) || defined(MAMBA_CPU_AVX2)
  switch (simd_nv(Np)) {
    case 1: return fwd_steps_v<1, kY>(tn, dt, dtu, A2, B, Bs, C, Cs, h, y);
    case 2: return fwd_steps_v<2, kY>(tn, dt, dtu, A2, B, Bs, C, Cs, h, y);
    case 3: return fwd_steps_v<3, kY>(tn, dt, dtu, A2, B, Bs, C, Cs, h, y);
    case 4: return fwd_steps_v<4, kY>(tn, dt, dtu, A2, B, Bs, C, Cs, h, y);
    default: break;
  }
#endif
  fwd_steps_plain<kY>(tn, Np, dt, dtu, A2, B, Bs, C, Cs, h, y);
}

// Lanes a backward pass takes at once (rec_steps / rev_steps' K): 2 where the SIMD loops run with
// variable B and C (the lanes share B/C and dB/dC traffic), else 1.
static inline int lanes_per_pass(int64_t Np, bool bc_variable) {
#if defined(MAMBA_CPU_AVX512) || defined(MAMBA_CPU_AVX2)
  return bc_variable && Np <= kLanes ? 2 : 1;
#else
  (void)Np, (void)bc_variable;
  return 1;
#endif
}

#if defined(MAMBA_CPU_AVX512) || defined(MAMBA_CPU_AVX2)
// (K == 2 comes with NV <= 2 and variable B and C: lanes_per_pass().)
template <int NV, bool kY>
static inline void rec_steps_nv(int64_t tn, int K, const BwdLane* ln, int64_t Bs, int64_t Cs) {
  if (NV <= 2 && K == 2) return rec_steps_v<(NV <= 2 ? NV : 1), 2, true, kY>(tn, ln, Bs, Cs);
  if (Cs) return rec_steps_v<NV, 1, true, kY>(tn, ln, Bs, Cs);
  rec_steps_v<NV, 1, false, kY>(tn, ln, Bs, Cs);
}
template <int NV>
static inline void rev_steps_nv(int64_t tn, int K, const BwdLane* ln, int64_t Bs, int64_t Cs) {
  if (NV <= 2 && K == 2) return rev_steps_v<(NV <= 2 ? NV : 1), 2, true>(tn, ln, Bs, Cs);
  if (Bs) return rev_steps_v<NV, 1, true>(tn, ln, Bs, Cs);
  rev_steps_v<NV, 1, false>(tn, ln, Bs, Cs);
}
#endif

// The recompute / reverse steps of K lanes (K = lanes_per_pass()).
template <bool kY>
static inline void rec_steps(int64_t tn, int64_t Np, int K, const BwdLane* ln, int64_t Bs, int64_t Cs) {
#if defined(MAMBA_CPU_AVX512) || defined(MAMBA_CPU_AVX2)
  switch (simd_nv(Np)) {
    case 1: return rec_steps_nv<1, kY>(tn, K, ln, Bs, Cs);
    case 2: return rec_steps_nv<2, kY>(tn, K, ln, Bs, Cs);
    case 3: return rec_steps_nv<3, kY>(tn, K, ln, Bs, Cs);
    case 4: return rec_steps_nv<4, kY>(tn, K, ln, Bs, Cs);
    default: break;
  }
#endif
  for (int k = 0; k < K; ++k) rec_steps_plain<kY>(tn, Np, ln[k], Bs, Cs);
}

static inline void rev_steps(int64_t tn, int64_t Np, int K, const BwdLane* ln, int64_t Bs, int64_t Cs) {
#if defined(MAMBA_CPU_AVX512) || defined(MAMBA_CPU_AVX2)
  switch (simd_nv(Np)) {
    case 1: return rev_steps_nv<1>(tn, K, ln, Bs, Cs);
    case 2: return rev_steps_nv<2>(tn, K, ln, Bs, Cs);
    case 3: return rev_steps_nv<3>(tn, K, ln, Bs, Cs);
    case 4: return rev_steps_nv<4>(tn, K, ln, Bs, Cs);
    default: break;
  }
#endif
  for (int k = 0; k < K; ++k) rev_steps_plain(tn, Np, ln[k], Bs, Cs);
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
      const int64_t off = bd * L + t0;
      if (bd + 1 < bd_end) {
        prefetch_row(p.u, k.u, off + L, tn, false);
        prefetch_row(p.delta, k.delta, off + L, tn, false);
        prefetch_row(p.z, k.z, off + L, tn, false);
        prefetch_row(p.out, k.u, off + L, tn, true);
      }
      const float* __restrict uu = row_f32(p.u, k.u, off, tn, ut.data());
      make_dt(row_f32(p.delta, k.delta, off, tn, row.data()), uu, tn, p.delta_bias ? p.delta_bias[d] : 0.f,
              p.delta_softplus, dt.data(), nullptr, dtu.data());
      // fp32 output: written in place; else a row buffer rounded to the output dtype below.
      const bool out_f32 = k.u == ScalarKind::kFloat32;
      float* __restrict y = out_f32 ? static_cast<float*>(p.out) + off : yt.data();
      fwd_steps<true>(tn, Np, dt.data(), dtu.data(), A2.data() + c * Np,
                      p.b_variable ? Bt.data() : Bc.data() + c * Np, p.b_variable ? Np : 0,
                      p.c_variable ? Ct.data() : Cc.data() + c * Np, p.c_variable ? Np : 0,
                      states.data() + c * Np, y);
      const float Dd = p.D ? p.D[d] : 0.f;
      if (p.z) {
        const float* __restrict zz = row_f32(p.z, k.z, off, tn, zt.data());
        for (int64_t j = 0; j < tn; ++j) y[j] = (y[j] + Dd * uu[j]) * (zz[j] * sigmoid_approx(zz[j]));
      } else if (p.D) {
        for (int64_t j = 0; j < tn; ++j) y[j] += Dd * uu[j];
      }
      if (!out_f32) store_row(p.out, k.u, off, tn, y);
    }
  }
  if (p.last_state)
    for (int64_t bd = bd_begin; bd < bd_end; ++bd)
      std::copy(states.begin() + (bd - bd_begin) * Np, states.begin() + (bd - bd_begin) * Np + N,
                p.last_state + bd * N);
}

// ------------------------------------------------------------------------------------ backward
// Timesteps per backward segment: kSegBytes of kept {a, q} rows (2 Np floats each), a multiple of 64, at
// least 64.
static inline int64_t segment_len(int64_t Np) {
  return std::max<int64_t>(64, kSegBytes / (2 * Np * int64_t(sizeof(float))) / 64 * 64);
}

// du = D dy + dt sumB and ddelta = sumT + u sumB (times sigmoid(draw) for softplus), per step.
static inline void bwd_row_grads(int64_t n, float Dd, const float* __restrict dy, const float* __restrict dt,
                                 const float* __restrict u, const float* __restrict sumB,
                                 const float* __restrict sumT, const float* __restrict draw,
                                 float* __restrict du, float* __restrict dd) {
  for (int64_t j = 0; j < n; ++j) du[j] = Dd * dy[j] + dt[j] * sumB[j];
  if (draw)
    for (int64_t j = 0; j < n; ++j) dd[j] = (sumT[j] + u[j] * sumB[j]) * sigmoid_approx(draw[j]);
  else
    for (int64_t j = 0; j < n; ++j) dd[j] = sumT[j] + u[j] * sumB[j];
}

static inline void interleave3(int64_t n, const float* __restrict x, const float* __restrict y,
                               const float* __restrict z, float* __restrict out) {
  for (int64_t j = 0; j < n; ++j) {
    out[3 * j] = x[j];
    out[3 * j + 1] = y[j];
    out[3 * j + 2] = z[j];
  }
}

// fp32 scratch without value-initialisation (std::vector<float>(n) writes n zeros, a measurable share of a
// short scan's backward): every Buf below is written before it is read.
struct Buf {
  std::unique_ptr<float[]> mem;
  explicit Buf(int64_t n) : mem(n > 0 ? new float[n] : nullptr) {}
  float* data() const { return mem.get(); }
};

// One channel's buffers in scan_bwd: its rows over the whole sequence (fp32), the segment buffers (segL =
// min(segment, seqlen) steps) and its accumulators.
struct BwdChannel {
  Buf u, dt, dtu, draw, dout, dy, z, delta, sc, sumB, sumT, y, o1, o2, o3, aq;
  std::vector<float> hstart, A, A2, Bc, Cc, dBc, dCc, h, s, dA;
  const float *ur = nullptr, *doutr = nullptr, *dyr = nullptr, *zr = nullptr;
  int64_t d = 0, bd = 0;
  float Dd = 0.f, dD_acc = 0.f, dbias_acc = 0.f;

  BwdChannel(const ScanBwdParams& p, int64_t L, int64_t Np, int64_t segL, int64_t n_seg)
      : u(L), dt(L), dtu(L), draw(p.delta_softplus ? L : 0), dout(L), dy(L), z(p.z ? L : 0), delta(L),
        sc(3 * segL), sumB(segL), sumT(segL), y(p.z ? segL : 0), o1(segL), o2(segL), o3(segL), aq(segL * 2 * Np),
        hstart(n_seg * Np), A(Np, 0.f), A2(Np, 0.f), Bc(Np, 0.f), Cc(Np, 0.f), dBc(Np), dCc(Np), h(Np), s(Np),
        dA(Np) {}
};

// Prefetches channel bd's rows (inputs and the du / ddelta it writes).
static inline void prefetch_bwd_rows(const ScanBwdParams& p, const CpuDtypes& k, int64_t bd, int64_t L) {
  prefetch_row(p.u, k.u, bd * L, L, false);
  prefetch_row(p.delta, k.delta, bd * L, L, false);
  prefetch_row(p.dout, k.dout, bd * L, L, false);
  prefetch_row(p.z, k.z, bd * L, L, false);
  prefetch_row(p.du, k.u, bd * L, L, true);
  prefetch_row(p.ddelta, k.delta, bd * L, L, true);
}

// Channels of one task, K = lanes_per_pass() at a time (neighbours in one group), each over the whole
// sequence (see the top of the file). The transposed B/C of the current (batch, group), (seqlen, {B, C} x
// Np), and its dB/dC accumulators of the same layout are shared by the group's channels; the
// accumulators are added into the task's slab when the group changes.
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
  const int64_t seg = segment_len(Np);
  const int64_t n_seg = (L + seg - 1) / seg;
  const int64_t slab = p.n_groups * N * L;  // this task's slab of the variable dB / dC partials
  float* dB_slab = p.b_variable ? p.dB + task * slab : nullptr;
  float* dC_slab = p.c_variable ? p.dC + task * slab : nullptr;
  const bool variable = p.b_variable || p.c_variable;
  const int64_t W = 2 * Np;  // row of BC / dBC: {B_t, C_t}
  const int K = lanes_per_pass(Np, p.b_variable && p.c_variable);

  std::vector<float> BC(variable ? L * W : 0, 0.f), dBC(variable ? L * W : 0, 0.f), row(L);
  std::vector<BwdChannel> chans;
  for (int i = 0; i < K; ++i) chans.emplace_back(p, L, Np, std::min(seg, L), n_seg);

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
  const int64_t Bs = p.b_variable ? W : 0, Cs = p.c_variable ? W : 0;

  // Loads channel d into c: constants, rows, the state entering every segment (pass 1), zeroed sums.
  auto setup = [&](BwdChannel& c, int64_t d) {
    c.d = d;
    c.bd = b * p.dim + d;
    const int64_t off = c.bd * L;
    for (int64_t n = 0; n < N; ++n) {
      c.A[n] = p.A[d * N + n];
      c.A2[n] = c.A[n] * kLog2e;
      if (!p.b_variable) c.Bc[n] = static_cast<const float*>(p.B)[d * N + n];
      if (!p.c_variable) c.Cc[n] = static_cast<const float*>(p.C)[d * N + n];
    }
    c.Dd = p.D ? p.D[d] : 0.f;
    c.ur = row_f32(p.u, k.u, off, L, c.u.data());
    make_dt(row_f32(p.delta, k.delta, off, L, c.delta.data()), c.ur, L, p.delta_bias ? p.delta_bias[d] : 0.f,
            p.delta_softplus, c.dt.data(), p.delta_softplus ? c.draw.data() : nullptr, c.dtu.data());
    c.doutr = row_f32(p.dout, k.dout, off, L, c.dout.data());
    c.dyr = c.doutr;
    if (p.z) {
      c.zr = row_f32(p.z, k.z, off, L, c.z.data());
      const float* __restrict zr = c.zr;
      const float* __restrict doutr = c.doutr;
      float* __restrict dyw = c.dy.data();
      for (int64_t t = 0; t < L; ++t) dyw[t] = doutr[t] * zr[t] * sigmoid_approx(zr[t]);
      c.dyr = c.dy.data();
    }
    const float* Bp = p.b_variable ? BC.data() : c.Bc.data();
    const float* Cp = p.c_variable ? BC.data() + Np : c.Cc.data();
    std::fill(c.h.begin(), c.h.end(), 0.f);
    for (int64_t sg = 0; sg < n_seg; ++sg) {
      std::copy(c.h.begin(), c.h.end(), c.hstart.begin() + sg * Np);
      if (sg + 1 == n_seg) break;
      const int64_t t0 = sg * seg;
      fwd_steps<false>(seg, Np, c.dt.data() + t0, c.dtu.data() + t0, c.A2.data(), Bp + t0 * Bs, Bs, Cp + t0 * Cs,
                       Cs, c.h.data(), nullptr);
    }
    std::fill(c.s.begin(), c.s.end(), 0.f);
    if (p.dlast_state) std::copy(p.dlast_state + c.bd * N, p.dlast_state + c.bd * N + N, c.s.begin());
    std::fill(c.dA.begin(), c.dA.end(), 0.f);
    std::fill(c.dBc.begin(), c.dBc.end(), 0.f);
    std::fill(c.dCc.begin(), c.dCc.end(), 0.f);
    c.dD_acc = c.dbias_acc = 0.f;
  };

  // The gradients of steps [t0, t0 + tn) of channel c from its reverse pass: du, ddelta, dz, dD, dbias.
  auto row_grads = [&](BwdChannel& c, int64_t t0, int64_t tn) {
    const float* ut = c.ur + t0;
    const float* dtt = c.dt.data() + t0;
    const float* dyt = c.dyr + t0;
    // fp32 du / ddelta: written in place; else row buffers rounded to the dtype below.
    const int64_t off = c.bd * L + t0;
    float* du_r = k.u == ScalarKind::kFloat32 ? static_cast<float*>(p.du) + off : c.o1.data();
    float* dd_r = k.delta == ScalarKind::kFloat32 ? static_cast<float*>(p.ddelta) + off : c.o2.data();
    bwd_row_grads(tn, c.Dd, dyt, dtt, ut, c.sumB.data(), c.sumT.data(),
                  p.delta_softplus ? c.draw.data() + t0 : nullptr, du_r, dd_r);
    c.dD_acc += dot(dyt, ut, tn);
    c.dbias_acc += sum(dd_r, tn);
    if (k.u != ScalarKind::kFloat32) store_row(p.du, k.u, off, tn, du_r);
    if (k.delta != ScalarKind::kFloat32) store_row(p.ddelta, k.delta, off, tn, dd_r);
    if (p.dz) {
      float* __restrict dz_r = c.o3.data();
      const float* __restrict zt = c.zr + t0;
      const float* __restrict dot_ = c.doutr + t0;
      const float* __restrict yt = c.y.data();
      const float* __restrict uu = ut;
      const float Dd = c.Dd;
      for (int64_t j = 0; j < tn; ++j) {
        const float sgm = sigmoid_approx(zt[j]);
        dz_r[j] = dot_[j] * (yt[j] + Dd * uu[j]) * sgm * (1.f + zt[j] * (1.f - sgm));
      }
      store_row(p.dz, k.z, off, tn, dz_r);
    }
  };

  for (int64_t d0 = d_begin; d0 < d_end;) {
    const int64_t g = d0 / per_group;
    // K lanes when the next K - 1 channels are in this task and group.
    const int nk = (K > 1 && d0 + K <= d_end && (d0 + K - 1) / per_group == g) ? K : 1;
    if (variable && g != cached_g) {
      flush();
      const int64_t off = (b * p.n_groups + g) * N * L;
      if (p.b_variable) transpose_in(p.B, k.B, off, N, L, 0, L, W, row.data(), BC.data());
      if (p.c_variable) transpose_in(p.C, k.C, off, N, L, 0, L, W, row.data(), BC.data() + Np);
      cached_g = g;
    }
    for (int i = 0; i < nk; ++i) setup(chans[i], d0 + i);
    for (int64_t d = d0 + nk; d < std::min(d_end, d0 + nk + K); ++d) prefetch_bwd_rows(p, k, b * p.dim + d, L);

    // Segments last to first: recompute (keeping a, q), reverse, row gradients.
    BwdLane lanes[2];
    for (int64_t sg = n_seg - 1; sg >= 0; --sg) {
      const int64_t t0 = sg * seg, tn = std::min(seg, L - t0);
      for (int i = 0; i < nk; ++i) {
        BwdChannel& c = chans[i];
        std::copy(c.hstart.begin() + sg * Np, c.hstart.begin() + (sg + 1) * Np, c.h.begin());
        interleave3(tn, c.dt.data() + t0, c.dtu.data() + t0, c.dyr + t0, c.sc.data());
        BwdLane& ln = lanes[i];
        ln.dt = c.dt.data() + t0;
        ln.dtu = c.dtu.data() + t0;
        ln.dy = c.dyr + t0;
        ln.sc = c.sc.data();
        ln.A = c.A.data();
        ln.A2 = c.A2.data();
        ln.B = (p.b_variable ? BC.data() : c.Bc.data()) + t0 * Bs;
        ln.C = (p.c_variable ? BC.data() + Np : c.Cc.data()) + t0 * Cs;
        ln.dB = (p.b_variable ? dBC.data() : c.dBc.data()) + t0 * Bs;
        ln.dC = (p.c_variable ? dBC.data() + Np : c.dCc.data()) + t0 * Cs;
        ln.h = c.h.data();
        ln.y = p.z ? c.y.data() : nullptr;
        ln.aq = c.aq.data();
        ln.s = c.s.data();
        ln.dA = c.dA.data();
        ln.sumB = c.sumB.data();
        ln.sumT = c.sumT.data();
      }
      if (p.z)
        rec_steps<true>(tn, Np, nk, lanes, Bs, Cs);
      else
        rec_steps<false>(tn, Np, nk, lanes, Bs, Cs);
      rev_steps(tn, Np, nk, lanes, Bs, Cs);
      for (int i = 0; i < nk; ++i) row_grads(chans[i], t0, tn);
    }
    for (int i = 0; i < nk; ++i) {
      const BwdChannel& c = chans[i];
      std::copy(c.dA.begin(), c.dA.begin() + N, p.dA_part + c.bd * N);
      if (!p.b_variable) std::copy(c.dBc.begin(), c.dBc.begin() + N, p.dB + c.bd * N);
      if (!p.c_variable) std::copy(c.dCc.begin(), c.dCc.begin() + N, p.dC + c.bd * N);
      p.dD_part[c.bd] = c.dD_acc;
      p.ddelta_bias_part[c.bd] = c.dbias_acc;
    }
    d0 += nk;
  }
  flush();
}

}  // namespace MAMBA_CPU_NS
}  // namespace mamba_ssm

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
