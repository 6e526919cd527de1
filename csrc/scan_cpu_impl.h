// CPU selective-scan kernels: the implementation, compiled once per instruction set (scan_cpu.cpp for
// the baseline ISA, scan_cpu_avx2.cpp with AVX2+FMA enabled), inside namespace MAMBA_CPU_NS.
// Includes no torch header. Math: see scan_params.h (forward) and scan_bwd.cuh (gradients).
//
// Vectorisation: plain loops over d_state in groups of kLanes that the compiler turns into SIMD (the
// state is padded to a multiple of kLanes with A = B = C = 0, which keeps the padding at h = 0), with a
// branch-free exp. Sums over d_state use kLanes independent partial sums, so no reassociation (and no
// -ffast-math) is needed for the compiler to vectorise them. Variable B/C are transposed per tile of
// kTile timesteps from their (d_state, seqlen) layout to (timestep, d_state).
#ifndef MAMBA_CPU_NS
#error "define MAMBA_CPU_NS before including scan_cpu_impl.h"
#endif
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#include "scan_params.h"

#if defined(__GNUC__) && !defined(__clang__)
// The clamps in exp_approx are float compares; with GCC's default -ftrapping-math they count as
// control flow that may trap and block vectorisation. Nothing here relies on FP exception flags.
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")
#endif

namespace mamba_ssm {
namespace MAMBA_CPU_NS {

constexpr int kLanes = 8;
constexpr int64_t kTile = 64;

#include "cpu_exp.h"  // exp_approx

static inline float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }
static inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }
static inline int64_t padded(int64_t n) { return (n + kLanes - 1) / kLanes * kLanes; }

// Per-channel constants padded to Np lanes.
struct ChannelConsts {
  std::vector<float> A, Bc, Cc;
};

static inline void load_consts(const ScanParams& p, int64_t d, int64_t Np, ChannelConsts& cc) {
  const int64_t N = p.dstate;
  cc.A.assign(Np, 0.f);
  std::copy(p.A + d * N, p.A + d * N + N, cc.A.begin());
  if (!p.b_variable) {
    cc.Bc.assign(Np, 0.f);
    const float* B = static_cast<const float*>(p.B) + d * N;
    std::copy(B, B + N, cc.Bc.begin());
  }
  if (!p.c_variable) {
    cc.Cc.assign(Np, 0.f);
    const float* C = static_cast<const float*>(p.C) + d * N;
    std::copy(C, C + N, cc.Cc.begin());
  }
}

// (d_state, seqlen) rows [t0, t0 + tn) -> tile (tn, Np); the padding lanes stay 0.
static inline void transpose_tile(const float* src, int64_t N, int64_t L, int64_t t0, int64_t tn,
                                  int64_t Np, float* tile) {
  for (int64_t n = 0; n < N; ++n) {
    const float* row = src + n * L + t0;
    for (int64_t j = 0; j < tn; ++j) tile[j * Np + n] = row[j];
  }
}

// The reverse of transpose_tile, accumulating: tile (tn, Np) is added into (d_state, seqlen) rows
// [t0, t0 + tn) of dst, and the tile is cleared.
static inline void scatter_add_tile(std::vector<float>& tile, int64_t N, int64_t L, int64_t t0, int64_t tn,
                                    int64_t Np, float* dst) {
  for (int64_t n = 0; n < N; ++n) {
    float* row = dst + n * L + t0;
    for (int64_t j = 0; j < tn; ++j) row[j] += tile[j * Np + n];
  }
  std::fill(tile.begin(), tile.end(), 0.f);
}

static inline float hsum(const float* acc) {
  float s = 0.f;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

// One tile of the forward recurrence: advances h over tn timesteps, writes y_t (before D and z).
static inline void fwd_tile(const float* __restrict u, const float* __restrict dt, int64_t tn,
                            int64_t Np, const float* __restrict A, const float* __restrict Bsrc,
                            int64_t Bstride, const float* __restrict Csrc, int64_t Cstride,
                            float* __restrict h, float* __restrict y) {
  for (int64_t j = 0; j < tn; ++j) {
    const float dtj = dt[j];
    const float dtu = dtj * u[j];
    const float* Bj = Bsrc + j * Bstride;
    const float* Cj = Csrc + j * Cstride;
    float acc[kLanes] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int64_t nb = 0; nb < Np; nb += kLanes) {
      for (int l = 0; l < kLanes; ++l) {
        const int64_t n = nb + l;
        const float hn = exp_approx(dtj * A[n]) * h[n] + dtu * Bj[n];
        h[n] = hn;
        acc[l] += Cj[n] * hn;
      }
    }
    y[j] = hsum(acc);
  }
}

// One timestep of the backward recurrence over all (padded) states: g = s_{t+1} + C dy, and
// the per-state gradient terms (added into dBj / dCj); returns sum_n g B (sumB) and sum_n g (B u + A a h_{t-1}) (sumT).
static inline void bwd_step(int64_t Np, const float* __restrict aj, const float* __restrict hpj,
                            const float* __restrict Bj, const float* __restrict Cj,
                            const float* __restrict A, float dy, float dtj, float uj,
                            float* __restrict s, float* __restrict dA, float* __restrict dBj,
                            float* __restrict dCj, float& sumB, float& sumT) {
  const float dtu = dtj * uj;
  float accB[kLanes] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  float accT[kLanes] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  for (int64_t nb = 0; nb < Np; nb += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const int64_t n = nb + l;
      const float a = aj[n], hp = hpj[n], Bn = Bj[n];
      const float g = s[n] + Cj[n] * dy;
      const float ga = g * a * hp;
      dCj[n] += dy * (a * hp + dtu * Bn);  // accumulated: a group's channels share a tile
      dBj[n] += g * dtu;
      accB[l] += g * Bn;
      accT[l] += g * Bn * uj + ga * A[n];
      dA[n] += ga * dtj;
      s[n] = a * g;
    }
  }
  sumB = hsum(accB);
  sumT = hsum(accT);
}

struct Tiles {
  std::vector<float> Bt, Ct, dt, draw, y;
  void init(int64_t Np) {
    Bt.assign(kTile * Np, 0.f);
    Ct.assign(kTile * Np, 0.f);
    dt.assign(kTile, 0.f);
    draw.assign(kTile, 0.f);
    y.assign(kTile, 0.f);
  }
  // The variable B / C of one (batch, group), at element offset bc_off, timesteps [t0, t0 + tn) -> Bt / Ct.
  void load_bc(const ScanParams& p, int64_t bc_off, int64_t t0, int64_t tn, int64_t Np) {
    const int64_t N = p.dstate, L = p.seqlen;
    if (p.b_variable) transpose_tile(static_cast<const float*>(p.B) + bc_off, N, L, t0, tn, Np, Bt.data());
    if (p.c_variable) transpose_tile(static_cast<const float*>(p.C) + bc_off, N, L, t0, tn, Np, Ct.data());
  }
};

static inline void load_dt(const ScanParams& p, const float* delta, float bias, int64_t t0, int64_t tn,
                           float* draw, float* dt) {
  for (int64_t j = 0; j < tn; ++j) {
    draw[j] = delta[t0 + j] + bias;
    dt[j] = p.delta_softplus ? softplus(draw[j]) : draw[j];
  }
}

// Tiles outer, channels inner: the transposed B/C tile of a (batch, group) is made once per tile and
// shared by every channel of that group in this range (the transposes cost as much as the scan).
void scan_fwd(const ScanParams& p, int64_t bd_begin, int64_t bd_end) {
  const int64_t L = p.seqlen, N = p.dstate, Np = padded(N);
  const int64_t per_group = p.dim / p.n_groups;
  const int64_t n_ch = bd_end - bd_begin;
  if (n_ch <= 0) return;
  ChannelConsts cc;
  Tiles tiles;
  tiles.init(Np);
  std::vector<float> states(n_ch * Np, 0.f);
  for (int64_t t0 = 0; t0 < L; t0 += kTile) {
    const int64_t tn = std::min(kTile, L - t0);
    int64_t cached_bg = -1;
    for (int64_t bd = bd_begin; bd < bd_end; ++bd) {
      const int64_t b = bd / p.dim, d = bd % p.dim, g = d / per_group;
      const int64_t bg = b * p.n_groups + g;
      const int64_t bc_off = bg * N * L;
      if ((p.b_variable || p.c_variable) && bg != cached_bg) {
        tiles.load_bc(p, bc_off, t0, tn, Np);
        cached_bg = bg;
      }
      load_consts(p, d, Np, cc);
      const float* u = static_cast<const float*>(p.u) + bd * L;
      const float* delta = static_cast<const float*>(p.delta) + bd * L;
      const float* z = p.z ? static_cast<const float*>(p.z) + bd * L : nullptr;
      float* out = static_cast<float*>(p.out) + bd * L;
      const float Dd = p.D ? p.D[d] : 0.f;
      const float bias = p.delta_bias ? p.delta_bias[d] : 0.f;
      load_dt(p, delta, bias, t0, tn, tiles.draw.data(), tiles.dt.data());
      fwd_tile(u + t0, tiles.dt.data(), tn, Np, cc.A.data(),
               p.b_variable ? tiles.Bt.data() : cc.Bc.data(), p.b_variable ? Np : 0,
               p.c_variable ? tiles.Ct.data() : cc.Cc.data(), p.c_variable ? Np : 0,
               states.data() + (bd - bd_begin) * Np, tiles.y.data());
      for (int64_t j = 0; j < tn; ++j) {
        float v = tiles.y[j] + Dd * u[t0 + j];
        if (z) {
          const float zv = z[t0 + j];
          v *= zv * sigmoid(zv);
        }
        out[t0 + j] = v;
      }
    }
  }
  if (p.last_state)
    for (int64_t bd = bd_begin; bd < bd_end; ++bd)
      std::copy(states.begin() + (bd - bd_begin) * Np, states.begin() + (bd - bd_begin) * Np + N,
                p.last_state + bd * N);
}

// Channels of one task are processed in blocks of kBwdBlock, tiles outer, channels inner (as the
// forward): a (batch, group)'s transposed B/C tile and its dB/dC tile accumulators are shared by the
// channels of that group, so the transposes and scatters happen once per group and tile.
constexpr int64_t kBwdBlock = 64;

void scan_bwd(const ScanBwdParams& p, int64_t task) {
  const int64_t L = p.seqlen, N = p.dstate, Np = padded(N);
  const int64_t per_group = p.dim / p.n_groups;
  const int64_t b = task / p.cpu_n_split, split = task % p.cpu_n_split;
  const int64_t d_begin = p.dim * split / p.cpu_n_split;
  const int64_t d_end = p.dim * (split + 1) / p.cpu_n_split;
  const int64_t n_tiles = (L + kTile - 1) / kTile;
  // This task's slab of the variable dB / dC partials: (groups, d_state, seqlen).
  const int64_t slab = p.n_groups * N * L;
  float* dB_slab = p.b_variable ? p.dB + task * slab : nullptr;
  float* dC_slab = p.c_variable ? p.dC + task * slab : nullptr;

  ChannelConsts cc;
  Tiles tiles;
  tiles.init(Np);
  std::vector<float> a_tile(kTile * Np), hp_tile(kTile * Np), dBt(kTile * Np), dCt(kTile * Np);
  const int64_t max_ch = std::min<int64_t>(kBwdBlock, std::max<int64_t>(d_end - d_begin, 0));
  std::vector<float> hbuf(max_ch * Np), sbuf(max_ch * Np), dAbuf(max_ch * Np), dBcbuf(max_ch * Np),
      dCcbuf(max_ch * Np), states(max_ch * n_tiles * Np), dDbuf(max_ch), dbiasbuf(max_ch);
  std::vector<float> ybuf(p.z ? max_ch * L : 0);

  // Scatter-adds the accumulated dB/dC tile of group g into the slab, and clears the accumulators.
  auto flush = [&](int64_t g, int64_t t0, int64_t tn) {
    if (g < 0) return;
    if (p.b_variable) scatter_add_tile(dBt, N, L, t0, tn, Np, dB_slab + g * N * L);
    if (p.c_variable) scatter_add_tile(dCt, N, L, t0, tn, Np, dC_slab + g * N * L);
  };

  for (int64_t blk = d_begin; blk < d_end; blk += kBwdBlock) {
    const int64_t blk_end = std::min(d_end, blk + kBwdBlock);
    std::fill(hbuf.begin(), hbuf.end(), 0.f);

    // Pass 1: state entering every tile of every channel, and y (for dz).
    for (int64_t c = 0; c < n_tiles; ++c) {
      const int64_t t0 = c * kTile, tn = std::min(kTile, L - t0);
      int64_t cached_g = -1;
      for (int64_t d = blk; d < blk_end; ++d) {
        const int64_t k = d - blk, bd = b * p.dim + d, g = d / per_group;
        const int64_t bc_off = (b * p.n_groups + g) * N * L;
        if (g != cached_g) {
          tiles.load_bc(p, bc_off, t0, tn, Np);
          cached_g = g;
        }
        load_consts(p, d, Np, cc);
        const float* u = static_cast<const float*>(p.u) + bd * L;
        const float* delta = static_cast<const float*>(p.delta) + bd * L;
        const float bias = p.delta_bias ? p.delta_bias[d] : 0.f;
        float* h = hbuf.data() + k * Np;
        std::copy(h, h + Np, states.begin() + (k * n_tiles + c) * Np);
        load_dt(p, delta, bias, t0, tn, tiles.draw.data(), tiles.dt.data());
        fwd_tile(u + t0, tiles.dt.data(), tn, Np, cc.A.data(), p.b_variable ? tiles.Bt.data() : cc.Bc.data(),
                 p.b_variable ? Np : 0, p.c_variable ? tiles.Ct.data() : cc.Cc.data(), p.c_variable ? Np : 0,
                 h, tiles.y.data());
        if (p.z) std::copy(tiles.y.begin(), tiles.y.begin() + tn, ybuf.begin() + k * L + t0);
      }
    }

    // Pass 2: tiles backwards; s holds s_{t+1} = a_{t+1} g_{t+1} per channel.
    std::fill(sbuf.begin(), sbuf.end(), 0.f);
    std::fill(dAbuf.begin(), dAbuf.end(), 0.f);
    std::fill(dBcbuf.begin(), dBcbuf.end(), 0.f);
    std::fill(dCcbuf.begin(), dCcbuf.end(), 0.f);
    std::fill(dDbuf.begin(), dDbuf.end(), 0.f);
    std::fill(dbiasbuf.begin(), dbiasbuf.end(), 0.f);
    if (p.dlast_state)
      for (int64_t d = blk; d < blk_end; ++d)
        std::copy(p.dlast_state + (b * p.dim + d) * N, p.dlast_state + (b * p.dim + d) * N + N,
                  sbuf.begin() + (d - blk) * Np);
    std::fill(dBt.begin(), dBt.end(), 0.f);
    std::fill(dCt.begin(), dCt.end(), 0.f);
    for (int64_t c = n_tiles - 1; c >= 0; --c) {
      const int64_t t0 = c * kTile, tn = std::min(kTile, L - t0);
      int64_t cached_g = -1;
      for (int64_t d = blk; d < blk_end; ++d) {
        const int64_t k = d - blk, bd = b * p.dim + d, g = d / per_group;
        const int64_t bc_off = (b * p.n_groups + g) * N * L;
        if (g != cached_g) {
          flush(cached_g, t0, tn);
          tiles.load_bc(p, bc_off, t0, tn, Np);
          cached_g = g;
        }
        load_consts(p, d, Np, cc);
        const float* A = cc.A.data();
        const float* u = static_cast<const float*>(p.u) + bd * L;
        const float* delta = static_cast<const float*>(p.delta) + bd * L;
        const float* z = p.z ? static_cast<const float*>(p.z) + bd * L : nullptr;
        const float* dout = static_cast<const float*>(p.dout) + bd * L;
        float* du = static_cast<float*>(p.du) + bd * L;
        float* ddelta = static_cast<float*>(p.ddelta) + bd * L;
        float* dz = p.dz ? static_cast<float*>(p.dz) + bd * L : nullptr;
        const float Dd = p.D ? p.D[d] : 0.f;
        const float bias = p.delta_bias ? p.delta_bias[d] : 0.f;
        const float* yb = p.z ? ybuf.data() + k * L : nullptr;
        float* __restrict hv = hbuf.data() + k * Np;
        float* __restrict sv = sbuf.data() + k * Np;
        float* __restrict dAv = dAbuf.data() + k * Np;
        float* __restrict dBcv = dBcbuf.data() + k * Np;
        float* __restrict dCcv = dCcbuf.data() + k * Np;
        load_dt(p, delta, bias, t0, tn, tiles.draw.data(), tiles.dt.data());
        // Recompute a_t and h_{t-1} inside the tile.
        std::copy(states.begin() + (k * n_tiles + c) * Np, states.begin() + (k * n_tiles + c + 1) * Np, hv);
        for (int64_t j = 0; j < tn; ++j) {
          const float dtj = tiles.dt[j], dtu = dtj * u[t0 + j];
          const float* Bj = p.b_variable ? tiles.Bt.data() + j * Np : cc.Bc.data();
          float* __restrict aj = a_tile.data() + j * Np;
          float* __restrict hpj = hp_tile.data() + j * Np;
          for (int64_t n = 0; n < Np; ++n) {
            const float a = exp_approx(dtj * A[n]);
            aj[n] = a;
            hpj[n] = hv[n];
            hv[n] = a * hv[n] + dtu * Bj[n];
          }
        }
        float dD_acc = 0.f, dbias_acc = 0.f;
        for (int64_t j = tn - 1; j >= 0; --j) {
          const int64_t t = t0 + j;
          const float dtj = tiles.dt[j], uj = u[t];
          const float dov = dout[t];
          float sg = 0.f, zv = 0.f, dy = dov;
          if (z) {
            zv = z[t];
            sg = sigmoid(zv);
            dy = dov * zv * sg;
          }
          const float* Bj = p.b_variable ? tiles.Bt.data() + j * Np : cc.Bc.data();
          const float* Cj = p.c_variable ? tiles.Ct.data() + j * Np : cc.Cc.data();
          const float* __restrict aj = a_tile.data() + j * Np;
          const float* __restrict hpj = hp_tile.data() + j * Np;
          float* dBj = p.b_variable ? dBt.data() + j * Np : dBcv;
          float* dCj = p.c_variable ? dCt.data() + j * Np : dCcv;
          float sumB, sumT;
          bwd_step(Np, aj, hpj, Bj, Cj, A, dy, dtj, uj, sv, dAv, dBj, dCj, sumB, sumT);
          float ddt = sumT;
          if (p.delta_softplus) ddt *= sigmoid(tiles.draw[j]);
          du[t] = Dd * dy + dtj * sumB;
          ddelta[t] = ddt;
          dD_acc += dy * uj;
          dbias_acc += ddt;
          if (dz) dz[t] = dov * (yb[t] + Dd * uj) * sg * (1.f + zv * (1.f - sg));
        }
        dDbuf[k] += dD_acc;
        dbiasbuf[k] += dbias_acc;
      }
      flush(cached_g, t0, tn);
    }
    for (int64_t d = blk; d < blk_end; ++d) {
      const int64_t k = d - blk, bd = b * p.dim + d;
      std::copy(dAbuf.begin() + k * Np, dAbuf.begin() + k * Np + N, p.dA_part + bd * N);
      if (!p.b_variable) std::copy(dBcbuf.begin() + k * Np, dBcbuf.begin() + k * Np + N, p.dB + bd * N);
      if (!p.c_variable) std::copy(dCcbuf.begin() + k * Np, dCcbuf.begin() + k * Np + N, p.dC + bd * N);
      p.dD_part[bd] = dDbuf[k];
      p.ddelta_bias_part[bd] = dbiasbuf[k];
    }
  }
}

}  // namespace MAMBA_CPU_NS
}  // namespace mamba_ssm

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
