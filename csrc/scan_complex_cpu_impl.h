// CPU kernels of the selective scan with complex A (math, gradients and layouts: scan_complex.h): the
// implementation, compiled once per instruction set (scan_complex_cpu.cpp for the baseline ISA,
// scan_complex_cpu_avx2.cpp with AVX2+FMA, chosen as the real kernels' build is: scan_cpu_isa()) inside
// namespace MAMBA_CPU_NS. No torch header; the binding (binding_complex_ops.h) hands every per-sequence
// tensor over as fp32 and runs the tasks in parallel.
//
// The state is kept as separate real and imaginary arrays over d_state, padded to a multiple of kLanes
// with A = B = C = 0 (the padding stays at h = 0), so the loops over d_state vectorise: the decay
// exp(dt A) = e^(dt re A) (cos(dt im A), sin(dt im A)) uses the branch-free exp_approx (cpu_exp.h) and
// sincos_approx below; sums over d_state keep kLanes partial sums (no reassociation needed).
//
// Backward, per channel: pass 1 runs the recurrence to find the state entering each segment; then,
// segments last to first, the segment's decays and states are recomputed and kept, and the reverse
// recurrence of Gamma (scan_complex.h) gives every gradient. Variable B/C are transposed into (time,
// d_state) planes, a tile at a time in the forward and for the whole sequence of a group in the backward
// (shared by the group's channels, with the group's dB/dC accumulators).
#ifndef MAMBA_CPU_NS
#error "define MAMBA_CPU_NS before including scan_complex_cpu_impl.h"
#endif
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "scan_complex.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")  // the clamps and selects below (see scan_cpu_impl.h)
#endif

namespace mamba_ssm {
namespace MAMBA_CPU_NS {
namespace complex_scan {


#include "cpu_exp.h"  // exp_approx

constexpr int kLanes = 8;
constexpr int64_t kTile = 256;            // forward: timesteps per tile
constexpr int64_t kSegBytes = 256 << 10;  // backward: bytes of one segment's kept rows
// |x| up to which sincos_approx's reduction is accurate (about 1e-7 absolute); a tile with a larger
// phase |dt im A| uses std::sin / std::cos.
constexpr float kSinCosMax = 8192.f;

static inline float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }
static inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }
static inline int64_t padded(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

static inline float flip_sign(float v, uint32_t sign_bit) {
  uint32_t b;
  std::memcpy(&b, &v, sizeof(b));
  b ^= sign_bit;
  std::memcpy(&v, &b, sizeof(v));
  return v;
}

// sin(x) and cos(x) for |x| <= kSinCosMax, branch-free: k = round(x 2/pi), r = x - k pi/2 (pi/2 in three
// parts, Cody and Waite), minimax polynomials of sin and cos on |r| <= pi/4 (Moshier's Cephes sinf /
// cosf coefficients), the quadrant k mod 4 swapping and negating them.
static inline void sincos_approx(float x, float& s, float& c) {
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float kf = (x * 0.636619772367581343f + shifter) - shifter;
  float r = x - kf * 1.5703125f;
  r = r - kf * 4.837512969970703125e-4f;
  r = r - kf * 7.54978995489188216e-8f;
  const float r2 = r * r;
  float ps = -1.9515295891e-4f;
  ps = ps * r2 + 8.3321608736e-3f;
  ps = ps * r2 - 1.6666654611e-1f;
  const float sr = r + r * r2 * ps;
  float pc = 2.443315711809948e-5f;
  pc = pc * r2 - 1.388731625493765e-3f;
  pc = pc * r2 + 4.166664568298827e-2f;
  const float cr = 1.f - 0.5f * r2 + r2 * r2 * pc;
  const uint32_t k = static_cast<uint32_t>(static_cast<int32_t>(kf));
  const bool odd = (k & 1u) != 0;
  s = flip_sign(odd ? cr : sr, (k & 2u) << 30);         // quadrants 2, 3: sin < 0
  c = flip_sign(odd ? sr : cr, ((k + 1u) & 2u) << 30);  // quadrants 1, 2: cos < 0
}

// Sum of kLanes partial sums, folded in halves (vectorises; the order is fixed).
static inline float fold(float* acc) {
  for (int w = kLanes / 2; w > 0; w /= 2)
    for (int l = 0; l < w; ++l) acc[l] += acc[l + w];
  return acc[0];
}

// A channel's complex constants, padded to Np: A and constant B / C (zeros when variable).
struct Weights {
  std::vector<float> Ar, Ai, Br, Bi, Cr, Ci;
  float max_abs_ai = 0.f;
  explicit Weights(int64_t Np) : Ar(Np, 0.f), Ai(Np, 0.f), Br(Np, 0.f), Bi(Np, 0.f), Cr(Np, 0.f), Ci(Np, 0.f) {}
  void load(const ScanParams& p, int64_t d) {
    const int64_t N = p.dstate;
    max_abs_ai = 0.f;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t i = 2 * (d * N + n);
      Ar[n] = p.A[i];
      Ai[n] = p.A[i + 1];
      max_abs_ai = std::max(max_abs_ai, std::fabs(Ai[n]));
      if (!p.b_variable) {
        Br[n] = static_cast<const float*>(p.B)[i];
        Bi[n] = static_cast<const float*>(p.B)[i + 1];
      }
      if (!p.c_variable) {
        Cr[n] = static_cast<const float*>(p.C)[i];
        Ci[n] = static_cast<const float*>(p.C)[i + 1];
      }
    }
  }
};

// Steps [t0, t0 + tn) of an interleaved variable B or C row block (d_state rows of 2L at `base`) ->
// (tn, Np) real and imaginary arrays; padding lanes are left as they are (0).
static void transpose_in(const float* base, int64_t N, int64_t L, int64_t t0, int64_t tn, int64_t Np, float* re,
                         float* im) {
  for (int64_t n = 0; n < N; ++n) {
    const float* row = base + n * 2 * L + 2 * t0;
    for (int64_t j = 0; j < tn; ++j) {
      re[j * Np + n] = row[2 * j];
      im[j * Np + n] = row[2 * j + 1];
    }
  }
}

// The reverse of transpose_in, added into the slab rows.
static void transpose_add(const float* re, const float* im, int64_t N, int64_t L, int64_t t0, int64_t tn,
                          int64_t Np, float* base) {
  for (int64_t n = 0; n < N; ++n) {
    float* row = base + n * 2 * L + 2 * t0;
    for (int64_t j = 0; j < tn; ++j) {
      row[2 * j] += re[j * Np + n];
      row[2 * j + 1] += im[j * Np + n];
    }
  }
}

// The decays a = exp(dt A) of one step over the Np states.
static inline void decays(int64_t Np, float dt, const Weights& w, bool exact, float* __restrict ar,
                          float* __restrict ai) {
  if (exact) {
    for (int64_t n = 0; n < Np; ++n) {
      const float m = std::exp(dt * w.Ar[n]);
      ar[n] = m * std::cos(dt * w.Ai[n]);
      ai[n] = m * std::sin(dt * w.Ai[n]);
    }
    return;
  }
  const float* __restrict Ar = w.Ar.data();
  const float* __restrict Ai = w.Ai.data();
  for (int64_t n = 0; n < Np; ++n) {
    float s, c;
    sincos_approx(dt * Ai[n], s, c);
    const float m = exp_approx(dt * Ar[n]);
    ar[n] = m * c;
    ai[n] = m * s;
  }
}

// One step h <- a h + dtu B over the Np states (B row: Br/Bi), returning Re(sum_n C h) when C is given.
static inline float step(int64_t Np, const float* __restrict ar, const float* __restrict ai, float dtu,
                         const float* __restrict Br, const float* __restrict Bi, const float* __restrict Cr,
                         const float* __restrict Ci, float* __restrict hr, float* __restrict hi) {
  float acc[kLanes] = {};
  for (int64_t nb = 0; nb < Np; nb += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const int64_t n = nb + l;
      const float r = ar[n] * hr[n] - ai[n] * hi[n] + dtu * Br[n];
      const float i = ar[n] * hi[n] + ai[n] * hr[n] + dtu * Bi[n];
      hr[n] = r;
      hi[n] = i;
      if (Cr) acc[l] += Cr[n] * r - Ci[n] * i;
    }
  }
  return Cr ? fold(acc) : 0.f;
}

static inline void make_dt(const ScanParams& p, int64_t d, const float* delta, const float* u, int64_t n,
                           float* dt, float* dtu, float* draw) {
  const float bias = p.delta_bias ? p.delta_bias[d] : 0.f;
  for (int64_t j = 0; j < n; ++j) {
    const float v = delta[j] + bias;
    if (draw) draw[j] = v;
    dt[j] = p.delta_softplus ? softplus(v) : v;
    dtu[j] = dt[j] * u[j];
  }
}

// Whether the phases dt im A of these steps exceed sincos_approx's range.
static inline bool needs_exact(const float* dt, int64_t n, float max_abs_ai) {
  float m = 0.f;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, std::fabs(dt[j]));
  return m * max_abs_ai > kSinCosMax;
}

// A complex (time, Np) array as separate real and imaginary planes of (time, Np) floats.
struct Planes {
  std::vector<float> v;
  int64_t rows = 0, Np = 0;
  void resize(int64_t rows_, int64_t Np_) {
    rows = rows_;
    Np = Np_;
    v.assign(2 * rows * Np, 0.f);
  }
  float* re(int64_t j) { return v.data() + j * Np; }
  float* im(int64_t j) { return v.data() + (rows + j) * Np; }
};

// The reverse step of time t over the Np states (see the top of the file and scan_complex.h):
// Gamma = s + 2 dy C; dC += 2 dy conj(h_t); dB += dt u conj(Gamma); q = Gamma a h_{t-1};
// dA += dt conj(q); s <- a Gamma. Returns Re(sum_n Gamma B) and Re(sum_n q A) in sums[0], sums[1].
static inline void reverse_step(int64_t Np, float dt, float dtu, float dy2, const float* __restrict Ar,
                                const float* __restrict Ai, const float* __restrict ar,
                                const float* __restrict ai, const float* __restrict hpr,
                                const float* __restrict hpi, const float* __restrict hr,
                                const float* __restrict hi, const float* __restrict Br,
                                const float* __restrict Bi, const float* __restrict Cr,
                                const float* __restrict Ci, float* __restrict sr, float* __restrict si,
                                float* __restrict dAr, float* __restrict dAi, float* __restrict dBr,
                                float* __restrict dBi, float* __restrict dCr, float* __restrict dCi,
                                float* sums) {
  float accB[kLanes] = {}, accT[kLanes] = {};
  for (int64_t nb = 0; nb < Np; nb += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const int64_t n = nb + l;
      const float gr = sr[n] + dy2 * Cr[n], gi = si[n] + dy2 * Ci[n];
      dCr[n] += dy2 * hr[n];
      dCi[n] -= dy2 * hi[n];
      dBr[n] += dtu * gr;
      dBi[n] -= dtu * gi;
      accB[l] += gr * Br[n] - gi * Bi[n];
      const float ahr = ar[n] * hpr[n] - ai[n] * hpi[n], ahi = ar[n] * hpi[n] + ai[n] * hpr[n];
      const float qr = gr * ahr - gi * ahi, qi = gr * ahi + gi * ahr;
      accT[l] += qr * Ar[n] - qi * Ai[n];
      dAr[n] += dt * qr;
      dAi[n] -= dt * qi;
      sr[n] = ar[n] * gr - ai[n] * gi;
      si[n] = ar[n] * gi + ai[n] * gr;
    }
  }
  sums[0] = fold(accB);
  sums[1] = fold(accT);
}

}  // namespace complex_scan

using namespace complex_scan;

// Tiles outer, channels inner: the transposed B/C tile of a (batch, group) is made once per tile and
// shared by the group's channels in this range.
void scan_complex_fwd(const ScanParams& p, int64_t bd_begin, int64_t bd_end) {
  const int64_t L = p.seqlen, N = p.dstate, Np = padded(N);
  const int64_t per_group = p.dim / p.n_groups;
  const int64_t n_ch = bd_end - bd_begin;
  if (n_ch <= 0) return;
  const float* u = static_cast<const float*>(p.u);
  const float* delta = static_cast<const float*>(p.delta);
  const float* z = static_cast<const float*>(p.z);
  float* out = static_cast<float*>(p.out);
  std::vector<float> Bt(p.b_variable ? 2 * kTile * Np : 0, 0.f), Ct(p.c_variable ? 2 * kTile * Np : 0, 0.f);
  std::vector<float> dt(kTile), dtu(kTile), ar(Np), ai(Np);
  std::vector<float> states(2 * n_ch * Np, 0.f);  // per channel: Np real, then Np imaginary parts
  Weights w(Np);
  for (int64_t t0 = 0; t0 < L; t0 += kTile) {
    const int64_t tn = std::min(kTile, L - t0);
    int64_t cached_bg = -1;
    for (int64_t bd = bd_begin; bd < bd_end; ++bd) {
      const int64_t c = bd - bd_begin, b = bd / p.dim, d = bd % p.dim;
      const int64_t bg = b * p.n_groups + d / per_group;
      if ((p.b_variable || p.c_variable) && bg != cached_bg) {
        if (p.b_variable)
          transpose_in(static_cast<const float*>(p.B) + bg * N * 2 * L, N, L, t0, tn, Np, Bt.data(),
                       Bt.data() + kTile * Np);
        if (p.c_variable)
          transpose_in(static_cast<const float*>(p.C) + bg * N * 2 * L, N, L, t0, tn, Np, Ct.data(),
                       Ct.data() + kTile * Np);
        cached_bg = bg;
      }
      w.load(p, d);
      const float* ur = u + bd * L + t0;
      make_dt(p, d, delta + bd * L + t0, ur, tn, dt.data(), dtu.data(), nullptr);
      const bool exact = needs_exact(dt.data(), tn, w.max_abs_ai);
      float* hr = states.data() + 2 * c * Np;
      float* hi = hr + Np;
      float* y = out + bd * L + t0;
      const float Dd = p.D ? p.D[d] : 0.f;
      for (int64_t j = 0; j < tn; ++j) {
        decays(Np, dt[j], w, exact, ar.data(), ai.data());
        const float* Br = p.b_variable ? Bt.data() + j * Np : w.Br.data();
        const float* Bi = p.b_variable ? Bt.data() + (kTile + j) * Np : w.Bi.data();
        const float* Cr = p.c_variable ? Ct.data() + j * Np : w.Cr.data();
        const float* Ci = p.c_variable ? Ct.data() + (kTile + j) * Np : w.Ci.data();
        float yj = 2.f * step(Np, ar.data(), ai.data(), dtu[j], Br, Bi, Cr, Ci, hr, hi) + Dd * ur[j];
        if (z) {
          const float zj = z[bd * L + t0 + j];
          yj *= zj * sigmoid(zj);
        }
        y[j] = yj;
      }
    }
  }
  if (p.last_state)
    for (int64_t c = 0; c < n_ch; ++c)
      for (int64_t n = 0; n < N; ++n) {
        p.last_state[2 * ((bd_begin + c) * N + n)] = states[2 * c * Np + n];
        p.last_state[2 * ((bd_begin + c) * N + n) + 1] = states[(2 * c + 1) * Np + n];
      }
}

// One task: batch b and a range of channels, each over the whole sequence (see the top of the file).
// The transposed variable B / C of the current group (seqlen, Np planes) and its dB / dC accumulators
// are shared by the group's channels; the accumulators are added into the task's slab when the group
// changes.
void scan_complex_bwd(const ScanBwdParams& p, int64_t task) {
  const int64_t L = p.seqlen, N = p.dstate, Np = padded(N);
  const int64_t per_group = p.dim / p.n_groups;
  const int64_t b = task / p.cpu_n_split, split = task % p.cpu_n_split;
  const int64_t d_begin = p.dim * split / p.cpu_n_split;
  const int64_t d_end = p.dim * (split + 1) / p.cpu_n_split;
  const int64_t slab = p.n_groups * N * 2 * L;  // this task's slab of the variable dB / dC partials
  // Rows kept per step of a segment: a and h (re, im).
  const int64_t seg = std::max<int64_t>(64, kSegBytes / (4 * Np * int64_t(sizeof(float))) / 64 * 64);
  const int64_t n_seg = (L + seg - 1) / seg;
  const float* u_all = static_cast<const float*>(p.u);
  const float* delta_all = static_cast<const float*>(p.delta);
  const float* z_all = static_cast<const float*>(p.z);
  const float* dout_all = static_cast<const float*>(p.dout);

  std::vector<float> dt(L), dtu(L), draw(L), dy(L), hstart(2 * n_seg * Np), y(seg);
  Planes sa, sh;  // segment: a for steps 0..tn-1; h before step 0 (row 0) and after step j (row j + 1)
  sa.resize(seg, Np);
  sh.resize(seg + 1, Np);
  Planes Bt, Ct, dBt, dCt;  // the group's transposed variable B / C and their gradient accumulators
  if (p.b_variable) {
    Bt.resize(L, Np);
    dBt.resize(L, Np);
  }
  if (p.c_variable) {
    Ct.resize(L, Np);
    dCt.resize(L, Np);
  }
  std::vector<float> sr(Np), si(Np), dAr(Np), dAi(Np), dBr(Np), dBi(Np), dCr(Np), dCi(Np), hr(Np), hi(Np);
  Weights w(Np);

  int64_t cached_g = -1;
  auto flush = [&]() {  // the group's dB / dC accumulators into the slab, then cleared
    if (cached_g < 0) return;
    const int64_t off = task * slab + cached_g * N * 2 * L;
    if (p.b_variable) transpose_add(dBt.re(0), dBt.im(0), N, L, 0, L, Np, p.dB + off);
    if (p.c_variable) transpose_add(dCt.re(0), dCt.im(0), N, L, 0, L, Np, p.dC + off);
    std::fill(dBt.v.begin(), dBt.v.end(), 0.f);
    std::fill(dCt.v.begin(), dCt.v.end(), 0.f);
  };

  for (int64_t d = d_begin; d < d_end; ++d) {
    const int64_t bd = b * p.dim + d, g = d / per_group;
    if ((p.b_variable || p.c_variable) && g != cached_g) {
      flush();
      const int64_t off = (b * p.n_groups + g) * N * 2 * L;
      if (p.b_variable) transpose_in(static_cast<const float*>(p.B) + off, N, L, 0, L, Np, Bt.re(0), Bt.im(0));
      if (p.c_variable) transpose_in(static_cast<const float*>(p.C) + off, N, L, 0, L, Np, Ct.re(0), Ct.im(0));
      cached_g = g;
    }
    w.load(p, d);
    const float Dd = p.D ? p.D[d] : 0.f;
    const float* u = u_all + bd * L;
    const float* dout = dout_all + bd * L;
    const float* z = z_all ? z_all + bd * L : nullptr;
    make_dt(p, d, delta_all + bd * L, u, L, dt.data(), dtu.data(), draw.data());
    for (int64_t t = 0; t < L; ++t) dy[t] = z ? dout[t] * z[t] * sigmoid(z[t]) : dout[t];
    const bool exact = needs_exact(dt.data(), L, w.max_abs_ai);
    // Rows of B, C and their gradient accumulators at time t (variable) or the channel's (constant).
    auto B_re = [&](int64_t t) { return p.b_variable ? Bt.re(t) : w.Br.data(); };
    auto B_im = [&](int64_t t) { return p.b_variable ? Bt.im(t) : w.Bi.data(); };
    auto C_re = [&](int64_t t) { return p.c_variable ? Ct.re(t) : w.Cr.data(); };
    auto C_im = [&](int64_t t) { return p.c_variable ? Ct.im(t) : w.Ci.data(); };

    // Pass 1: the state entering every segment.
    std::fill(hr.begin(), hr.end(), 0.f);
    std::fill(hi.begin(), hi.end(), 0.f);
    for (int64_t sg = 0; sg < n_seg; ++sg) {
      std::copy(hr.begin(), hr.end(), hstart.begin() + 2 * sg * Np);
      std::copy(hi.begin(), hi.end(), hstart.begin() + (2 * sg + 1) * Np);
      if (sg + 1 == n_seg) break;
      for (int64_t t = sg * seg; t < (sg + 1) * seg; ++t) {
        decays(Np, dt[t], w, exact, sa.re(0), sa.im(0));
        step(Np, sa.re(0), sa.im(0), dtu[t], B_re(t), B_im(t), nullptr, nullptr, hr.data(), hi.data());
      }
    }

    // Pass 2: segments last to first.
    for (int64_t n = 0; n < Np; ++n) {  // s past the end = conj(dlast)
      const bool given = n < N && p.dlast_state;
      sr[n] = given ? p.dlast_state[2 * (bd * N + n)] : 0.f;
      si[n] = given ? -p.dlast_state[2 * (bd * N + n) + 1] : 0.f;
    }
    for (auto* v : {&dAr, &dAi, &dBr, &dBi, &dCr, &dCi}) std::fill(v->begin(), v->end(), 0.f);
    float dD_acc = 0.f, dbias_acc = 0.f;
    for (int64_t sg = n_seg - 1; sg >= 0; --sg) {
      const int64_t t0 = sg * seg, tn = std::min(seg, L - t0);
      std::copy(hstart.begin() + 2 * sg * Np, hstart.begin() + (2 * sg + 1) * Np, sh.re(0));
      std::copy(hstart.begin() + (2 * sg + 1) * Np, hstart.begin() + (2 * sg + 2) * Np, sh.im(0));
      for (int64_t j = 0; j < tn; ++j) {
        const int64_t t = t0 + j;
        decays(Np, dt[t], w, exact, sa.re(j), sa.im(j));
        std::copy(sh.re(j), sh.re(j) + Np, sh.re(j + 1));
        std::copy(sh.im(j), sh.im(j) + Np, sh.im(j + 1));
        y[j] = step(Np, sa.re(j), sa.im(j), dtu[t], B_re(t), B_im(t), C_re(t), C_im(t), sh.re(j + 1),
                    sh.im(j + 1));
      }
      for (int64_t j = tn - 1; j >= 0; --j) {
        const int64_t t = t0 + j;
        float sums[2];
        reverse_step(Np, dt[t], dtu[t], 2.f * dy[t], w.Ar.data(), w.Ai.data(), sa.re(j), sa.im(j), sh.re(j),
                     sh.im(j), sh.re(j + 1), sh.im(j + 1), B_re(t), B_im(t), C_re(t), C_im(t), sr.data(),
                     si.data(), dAr.data(), dAi.data(), p.b_variable ? dBt.re(t) : dBr.data(),
                     p.b_variable ? dBt.im(t) : dBi.data(), p.c_variable ? dCt.re(t) : dCr.data(),
                     p.c_variable ? dCt.im(t) : dCi.data(), sums);
        float dd = sums[1] + u[t] * sums[0];
        if (p.delta_softplus) dd *= sigmoid(draw[t]);
        static_cast<float*>(p.du)[bd * L + t] = Dd * dy[t] + dt[t] * sums[0];
        static_cast<float*>(p.ddelta)[bd * L + t] = dd;
        dD_acc += dy[t] * u[t];
        dbias_acc += dd;
        if (p.dz) {
          const float sgm = sigmoid(z[t]);
          static_cast<float*>(p.dz)[bd * L + t] = dout[t] * (2.f * y[j] + Dd * u[t]) * sgm * (1.f + z[t] * (1.f - sgm));
        }
      }
    }
    for (int64_t n = 0; n < N; ++n) {
      const int64_t i = 2 * (bd * N + n);
      p.dA_part[i] = dAr[n];
      p.dA_part[i + 1] = dAi[n];
      if (!p.b_variable) {
        p.dB[i] = dBr[n];
        p.dB[i + 1] = dBi[n];
      }
      if (!p.c_variable) {
        p.dC[i] = dCr[n];
        p.dC[i + 1] = dCi[n];
      }
    }
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
