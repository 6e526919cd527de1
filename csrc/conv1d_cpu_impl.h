// CPU causal conv1d kernels: the implementation, compiled once per instruction set (conv1d_cpu.cpp for
// the baseline ISA, conv1d_cpu_avx2.cpp with AVX2+FMA), inside namespace MAMBA_CPU_NS. No torch header.
// Math: conv1d_params.h. All data are fp32 here (the binding converts).
//
// Vectorisation: the loops the compiler turns into SIMD are the ones over positions t of a row
// (x with a contiguous seqlen axis) or over channels d (channel-last x), with the width W a template
// parameter so that the taps unroll; SiLU uses the branch-free exp_approx. Reductions (dweight, dbias)
// keep kLanes independent partial sums, so no -ffast-math is needed.
#ifndef MAMBA_CPU_NS
#error "define MAMBA_CPU_NS before including conv1d_cpu_impl.h"
#endif
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#include "conv1d_cpu.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-trapping-math")  // the clamps in exp_approx (see scan_cpu_impl.h)
#endif

namespace mamba_ssm {
namespace MAMBA_CPU_NS {
namespace conv {

#include "cpu_exp.h"  // exp_approx

constexpr int kLanes = 8;

// 1 / d for d >= 1 without a division (vector divisions dominated the SiLU): the exponent-flip guess
// (relative error < 12.5 %) and three Newton steps r <- r (2 - d r), each squaring the error (~1e-7).
static inline float recip_approx(float d) {
  int32_t bits;
  std::memcpy(&bits, &d, sizeof(bits));
  bits = 0x7EF311C3 - bits;
  float r;
  std::memcpy(&r, &bits, sizeof(r));
  r = r * (2.f - d * r);
  r = r * (2.f - d * r);
  r = r * (2.f - d * r);
  return r;
}

static inline float silu_of(float v) { return v * recip_approx(1.f + exp_approx(-v)); }

// v -> silu(v) over n values (vectorised).
static inline void silu_inplace(float* __restrict v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) v[i] = silu_of(v[i]);
}

// keep(s_j) of conv1d_params.h for the final states s_j = L - (W-1) + j: whether input s_j belongs to the
// row's last sequence (which is not padding). All 1 without seq_idx.
template <int W>
static inline void final_keep(const int32_t* sid, int64_t L, bool (&keep)[W > 1 ? W - 1 : 1]) {
  for (int j = 0; j < W - 1; ++j) {
    const int64_t s = L - (W - 1) + j;
    keep[j] = !sid || L == 0 || (sid[L - 1] >= 0 && sid[s > 0 ? s : 0] == sid[L - 1]);
  }
}

// Output 0 at padding positions (seq_idx < 0) of a seqlen-contiguous row.
static inline void zero_padding(const int32_t* sid, float* __restrict out, int64_t L) {
  if (!sid) return;
  for (int64_t t = 0; t < L; ++t) out[t] = sid[t] < 0 ? 0.f : out[t];
}

// The inputs of a row before position 0: initial_states or zeros.
template <int W>
static inline void load_init(const Conv1dParams& p, int64_t b, int64_t d, float* init) {
  for (int j = 0; j < W - 1; ++j)
    init[j] = p.initial_states ? p.initial_states[(b * p.dim + d) * (W - 1) + j] : 0.f;
}

// Forward of one row (batch b, channel d) of seqlen-contiguous x (x_sl == 1).
template <int W>
static void fwd_row(const Conv1dParams& p, int64_t b, int64_t d) {
  const int64_t L = p.seqlen;
  const float* __restrict x = static_cast<const float*>(p.x) + b * p.x_sb + d * p.x_sd;
  float* __restrict out = static_cast<float*>(p.out) + b * p.x_sb + d * p.x_sd;
  const int32_t* sid = p.seq_idx ? p.seq_idx + b * L : nullptr;
  float w[W];
  for (int k = 0; k < W; ++k) w[k] = p.weight[d * W + k];
  const float bias = p.bias ? p.bias[d] : 0.f;
  float init[W > 1 ? W - 1 : 1];
  load_init<W>(p, b, d, init);
  auto xs = [&](int64_t s) { return s >= 0 ? x[s] : init[s + W - 1]; };
  const int64_t head = std::min<int64_t>(W - 1, L);
  for (int64_t t = 0; t < head; ++t) {
    float acc = bias;
    for (int k = 0; k < W; ++k) {
      const int64_t s = t - (W - 1) + k;
      if (!sid || sid[s > 0 ? s : 0] == sid[t]) acc += w[k] * xs(s);
    }
    out[t] = acc;
  }
  if (!sid) {
    for (int64_t t = W - 1; t < L; ++t) {
      float acc = bias;
      for (int k = 0; k < W; ++k) acc += w[k] * x[t - (W - 1) + k];
      out[t] = acc;
    }
  } else {
    for (int64_t t = W - 1; t < L; ++t) {
      float acc = bias;
      for (int k = 0; k < W; ++k) acc += sid[t - (W - 1) + k] == sid[t] ? w[k] * x[t - (W - 1) + k] : 0.f;
      out[t] = acc;
    }
  }
  if (p.silu) silu_inplace(out, L);
  zero_padding(sid, out, L);
  if (p.final_states) {
    bool keep[W > 1 ? W - 1 : 1];
    final_keep<W>(sid, L, keep);
    float* fin = static_cast<float*>(p.final_states) + (b * p.dim + d) * (W - 1);
    for (int j = 0; j < W - 1; ++j) fin[j] = keep[j] ? xs(L - (W - 1) + j) : 0.f;
  }
}

// Forward of channels [d0, d1) of batch b for channel-last x (x_sd == 1): vectorised over channels.
template <int W>
static void fwd_channel_last(const Conv1dParams& p, int64_t b, int64_t d0, int64_t d1) {
  const int64_t n = d1 - d0, L = p.seqlen;
  float wT[W][kConvCpuBlock], bias[kConvCpuBlock], acc[kConvCpuBlock];
  float init[W > 1 ? W - 1 : 1][kConvCpuBlock];
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < W; ++k) wT[k][i] = p.weight[(d0 + i) * W + k];
    bias[i] = p.bias ? p.bias[d0 + i] : 0.f;
    for (int j = 0; j < W - 1; ++j)
      init[j][i] = p.initial_states ? p.initial_states[(b * p.dim + d0 + i) * (W - 1) + j] : 0.f;
  }
  const float* x = static_cast<const float*>(p.x) + b * p.x_sb + d0;
  float* out = static_cast<float*>(p.out) + b * p.x_sb + d0;
  const int32_t* sid = p.seq_idx ? p.seq_idx + b * L : nullptr;
  for (int64_t t = 0; t < L; ++t) {
    if (sid && sid[t] < 0) {  // padding: output 0
      float* __restrict o = out + t * p.x_sl;
      for (int64_t i = 0; i < n; ++i) o[i] = 0.f;
      continue;
    }
    for (int64_t i = 0; i < n; ++i) acc[i] = bias[i];
    for (int k = 0; k < W; ++k) {
      const int64_t s = t - (W - 1) + k;
      if (sid && sid[s > 0 ? s : 0] != sid[t]) continue;
      const float* __restrict src = s >= 0 ? x + s * p.x_sl : init[s + W - 1];
      const float* __restrict wk = wT[k];
      for (int64_t i = 0; i < n; ++i) acc[i] += wk[i] * src[i];
    }
    if (p.silu) silu_inplace(acc, n);
    float* __restrict o = out + t * p.x_sl;
    for (int64_t i = 0; i < n; ++i) o[i] = acc[i];
  }
  if (p.final_states) {
    bool keep[W > 1 ? W - 1 : 1];
    final_keep<W>(sid, L, keep);
    float* fin = static_cast<float*>(p.final_states);
    for (int j = 0; j < W - 1; ++j) {
      const int64_t s = L - (W - 1) + j;
      for (int64_t i = 0; i < n; ++i)
        fin[(b * p.dim + d0 + i) * (W - 1) + j] = !keep[j] ? 0.f : s >= 0 ? x[s * p.x_sl + i] : init[s + W - 1][i];
    }
  }
}

template <int W>
static void fwd_tasks(const Conv1dParams& p, int64_t task_begin, int64_t task_end) {
  const int64_t nblk = conv_cpu_blocks(p.dim);
  for (int64_t task = task_begin; task < task_end; ++task) {
    const int64_t b = task / nblk, d0 = (task % nblk) * kConvCpuBlock;
    const int64_t d1 = std::min<int64_t>(p.dim, d0 + kConvCpuBlock);
    if (p.channel_last) {
      fwd_channel_last<W>(p, b, d0, d1);
    } else {
      for (int64_t d = d0; d < d1; ++d) fwd_row<W>(p, b, d);
    }
  }
}

// Backward of one row of seqlen-contiguous x; dweight/dbias go to this batch's partial rows.
template <int W>
static void bwd_row(const Conv1dBwdParams& p, int64_t b, int64_t d, std::vector<float>& buf) {
  const int64_t L = p.seqlen;
  const int64_t off = b * p.x_sb + d * p.x_sd;
  const float* __restrict x = static_cast<const float*>(p.x) + off;
  const float* __restrict dout = static_cast<const float*>(p.dout) + off;
  float* __restrict dx = static_cast<float*>(p.dx) + off;
  const int32_t* sid = p.seq_idx ? p.seq_idx + b * L : nullptr;
  float w[W];
  for (int k = 0; k < W; ++k) w[k] = p.weight[d * W + k];
  const float bias = p.bias ? p.bias[d] : 0.f;
  float init[W > 1 ? W - 1 : 1];
  load_init<W>(p, b, d, init);
  auto xs = [&](int64_t s) { return s >= 0 ? x[s] : init[s + W - 1]; };
  auto same = [&](int64_t s, int64_t t) { return !sid || sid[s > 0 ? s : 0] == sid[t]; };
  buf.resize(static_cast<size_t>(L));
  float* __restrict dpre = buf.data();
  // dpre = dout * silu'(pre), pre recomputed (as in the forward).
  const int64_t head = std::min<int64_t>(W - 1, L);
  for (int64_t t = 0; t < head; ++t) {
    float acc = bias;
    for (int k = 0; k < W; ++k)
      if (same(t - (W - 1) + k, t)) acc += w[k] * xs(t - (W - 1) + k);
    dpre[t] = acc;
  }
  for (int64_t t = W - 1; t < L; ++t) {
    float acc = bias;
    for (int k = 0; k < W; ++k) {
      const float v = w[k] * x[t - (W - 1) + k];
      acc += (!sid || sid[t - (W - 1) + k] == sid[t]) ? v : 0.f;
    }
    dpre[t] = acc;
  }
  if (p.silu) {
    for (int64_t t = 0; t < L; ++t) {
      const float v = dpre[t];
      const float sg = recip_approx(1.f + exp_approx(-v));
      dpre[t] = dout[t] * sg * (1.f + v * (1.f - sg));
    }
  } else {
    for (int64_t t = 0; t < L; ++t) dpre[t] = dout[t];
  }
  zero_padding(sid, dpre, L);  // a padding output is the constant 0
  // dbias, dweight: kLanes partial sums over t >= W - 1, the head and tail scalar.
  float pb[kLanes] = {0.f}, pw[W][kLanes];
  for (int k = 0; k < W; ++k)
    for (int l = 0; l < kLanes; ++l) pw[k][l] = 0.f;
  int64_t t = W - 1;
  for (; t + kLanes <= L; t += kLanes) {
    for (int l = 0; l < kLanes; ++l) pb[l] += dpre[t + l];
    for (int k = 0; k < W; ++k)
      for (int l = 0; l < kLanes; ++l) {
        const int64_t s = t + l - (W - 1) + k;
        const float v = dpre[t + l] * x[s];
        pw[k][l] += (!sid || sid[s] == sid[t + l]) ? v : 0.f;
      }
  }
  float db = 0.f, dw[W];
  for (int l = 0; l < kLanes; ++l) db += pb[l];
  for (int k = 0; k < W; ++k) {
    dw[k] = 0.f;
    for (int l = 0; l < kLanes; ++l) dw[k] += pw[k][l];
  }
  auto scalar_terms = [&](int64_t tt) {
    db += dpre[tt];
    for (int k = 0; k < W; ++k) {
      const int64_t s = tt - (W - 1) + k;
      if (same(s, tt)) dw[k] += dpre[tt] * xs(s);
    }
  };
  for (int64_t tt = 0; tt < head; ++tt) scalar_terms(tt);
  for (; t < L; ++t) scalar_terms(t);
  if (p.dbias) p.dbias[b * p.dim + d] = db;
  for (int k = 0; k < W; ++k) p.dweight[(b * p.dim + d) * W + k] = dw[k];
  // dx[s] = sum_k w[k] dpre[s + W-1-k] (same(s, ...)); the body s < L - (W-1) has every tap.
  const int64_t body = std::max<int64_t>(0, L - (W - 1));
  for (int64_t s = 0; s < body; ++s) {
    float acc = 0.f;
    for (int k = 0; k < W; ++k) {
      const int64_t tt = s + (W - 1) - k;
      const float v = w[k] * dpre[tt];
      acc += (!sid || sid[s] == sid[tt]) ? v : 0.f;
    }
    dx[s] = acc;
  }
  // The tail of x and the initial states (positions s in [-(W-1), 0)).
  float dinit[W > 1 ? W - 1 : 1];
  auto dxs = [&](int64_t s) {
    float acc = 0.f;
    for (int k = 0; k < W; ++k) {
      const int64_t tt = s + (W - 1) - k;
      if (tt >= 0 && tt < L && same(s, tt)) acc += w[k] * dpre[tt];
    }
    return acc;
  };
  for (int64_t s = body; s < L; ++s) dx[s] = dxs(s);
  for (int j = 0; j < W - 1; ++j) dinit[j] = dxs(j - (W - 1));
  if (p.dfinal_states) {
    bool keep[W > 1 ? W - 1 : 1];
    final_keep<W>(sid, L, keep);
    const float* dfin = p.dfinal_states + (b * p.dim + d) * (W - 1);
    for (int j = 0; j < W - 1; ++j) {
      const int64_t s = L - (W - 1) + j;
      if (!keep[j]) continue;
      if (s >= 0) dx[s] += dfin[j];
      else dinit[s + W - 1] += dfin[j];
    }
  }
  if (p.dinitial_states) {
    for (int j = 0; j < W - 1; ++j) p.dinitial_states[(b * p.dim + d) * (W - 1) + j] = dinit[j];
  }
}

template <int W>
static void bwd_tasks(const Conv1dBwdParams& p, int64_t task_begin, int64_t task_end) {
  const int64_t nblk = conv_cpu_blocks(p.dim);
  std::vector<float> buf;
  for (int64_t task = task_begin; task < task_end; ++task) {
    const int64_t b = task / nblk, d0 = (task % nblk) * kConvCpuBlock;
    const int64_t d1 = std::min<int64_t>(p.dim, d0 + kConvCpuBlock);
    for (int64_t d = d0; d < d1; ++d) bwd_row<W>(p, b, d, buf);
  }
}

// Decode steps for channels [d0, d1) of every batch row (math: Conv1dUpdateParams); x and out are
// contiguous (batch, dim, seqlen). Per block of kConvCpuBlock channels: the window of the last W-1
// inputs is gathered from the (strided) state, the outputs are computed across channels (vectorised),
// then the state rows are written back.
// One decode step with a shift-register state whose rows are contiguous (s_sl == 1, s_sd == S, as
// Mamba's (batch, dim, d_conv) conv_state): the new row is the old one shifted left by one with x
// appended, and the output is the dot product of the weights with its last W entries. Both loops run
// over contiguous memory.
template <int W>
static void update_step_rows(const Conv1dUpdateParams& p, int64_t d0, int64_t d1) {
  const int64_t S = p.state_len, n = d1 - d0;
  for (int64_t b = 0; b < p.batch; ++b) {
    const int64_t row = p.state_indices ? p.state_indices[b] : b;
    const float* __restrict x = static_cast<const float*>(p.x) + b * p.x_sb + d0;  // x_sd == 1 (seqlen 1)
    float* __restrict out = static_cast<float*>(p.out) + b * p.x_sb + d0;
    if (row < 0) {
      std::memset(out, 0, sizeof(float) * n);
      continue;
    }
    float* st = static_cast<float*>(p.state) + row * p.s_sb + d0 * S;
    const float* __restrict w = p.weight + d0 * W;
    if (S == W) {  // Mamba's d_conv-long state: one pass, rows of W read and written as groups
      float* __restrict sr = st;
      for (int64_t i = 0; i < n; ++i) {
        float a = 0.f;  // (bias added below)
        for (int k = 0; k < W - 1; ++k) {
          const float v = sr[i * W + k + 1];
          a += w[i * W + k] * v;
          sr[i * W + k] = v;
        }
        a += w[i * W + W - 1] * x[i];
        sr[i * W + W - 1] = x[i];
        out[i] = a;
      }
    } else {
      for (int64_t j = 0; j + 1 < n * S; ++j) st[j] = st[j + 1];  // every row shifted left by one ...
      for (int64_t i = 0; i < n; ++i) st[i * S + S - 1] = x[i];     // ... and x appended
      for (int64_t i = 0; i < n; ++i) {
        const float* r = st + i * S + S - W;
        float a = 0.f;
        for (int k = 0; k < W; ++k) a += w[i * W + k] * r[k];
        out[i] = a;
      }
    }
    if (p.bias) {
      for (int64_t i = 0; i < n; ++i) out[i] += p.bias[d0 + i];
    }
    if (p.silu) silu_inplace(out, n);
  }
}

template <int W>
static void update_channels(const Conv1dUpdateParams& p, int64_t d0_all, int64_t d1_all) {
  const int64_t L = p.seqlen, S = p.state_len;
  if (!p.cache_seqlens && L == 1 && p.s_sl == 1 && p.s_sd == S) {
    update_step_rows<W>(p, d0_all, d1_all);
    return;
  }
  float win[W - 1][kConvCpuBlock], wT[W][kConvCpuBlock], bias[kConvCpuBlock], acc[kConvCpuBlock];
  for (int64_t d0 = d0_all; d0 < d1_all; d0 += kConvCpuBlock) {
    const int64_t n = std::min<int64_t>(kConvCpuBlock, d1_all - d0);
    for (int64_t i = 0; i < n; ++i) {
      for (int k = 0; k < W; ++k) wT[k][i] = p.weight[(d0 + i) * W + k];
      bias[i] = p.bias ? p.bias[d0 + i] : 0.f;
    }
    for (int64_t b = 0; b < p.batch; ++b) {
      const int64_t row = p.state_indices ? p.state_indices[b] : b;
      const float* x = static_cast<const float*>(p.x) + b * p.x_sb + d0 * p.x_sd;
      float* out = static_cast<float*>(p.out) + b * p.x_sb + d0 * p.x_sd;
      if (row < 0) {  // a padded slot: output 0, no state touched
        std::memset(out, 0, sizeof(float) * n * L);
        continue;
      }
      float* st = static_cast<float*>(p.state) + row * p.s_sb + d0 * p.s_sd;
      const int64_t c = p.cache_seqlens ? p.cache_seqlens[b] : 0;
      // The W-1 inputs before x[0], oldest first, as the state holds them before this call.
      for (int j = 0; j < W - 1; ++j) {
        int64_t k = p.cache_seqlens ? (c - (W - 1) + j) % S : S - (W - 1) + j;
        if (k < 0) k += S;
        const float* src = st + k * p.s_sl;
        for (int64_t i = 0; i < n; ++i) win[j][i] = src[i * p.s_sd];
      }
      for (int64_t t = 0; t < L; ++t) {
        // x[b, d0 + i, t] is x[i * L + t] (contiguous x).
        for (int64_t i = 0; i < n; ++i) {
          const float xt = x[i * L + t];
          float a = bias[i] + wT[W - 1][i] * xt;
          for (int k = 0; k < W - 1; ++k) a += wT[k][i] * win[k][i];
          acc[i] = a;
          for (int k = 0; k < W - 2; ++k) win[k][i] = win[k + 1][i];
          win[W - 2][i] = xt;
        }
        if (p.silu) silu_inplace(acc, n);
        for (int64_t i = 0; i < n; ++i) out[i * L + t] = acc[i];
      }
      // The state after the call.
      if (p.cache_seqlens) {
        for (int64_t t = std::max<int64_t>(0, L - S); t < L; ++t) {
          float* dst = st + ((c + t) % S) * p.s_sl;
          for (int64_t i = 0; i < n; ++i) dst[i * p.s_sd] = x[i * L + t];
        }
      } else {
        for (int64_t i = 0; i < n; ++i) {
          float* r = st + i * p.s_sd;
          if (L >= S) {
            for (int64_t k = 0; k < S; ++k) r[k * p.s_sl] = x[i * L + L - S + k];
          } else {
            for (int64_t k = 0; k < S - L; ++k) r[k * p.s_sl] = r[(k + L) * p.s_sl];
            for (int64_t t = 0; t < L; ++t) r[(S - L + t) * p.s_sl] = x[i * L + t];
          }
        }
      }
    }
  }
}

void conv1d_fwd(const Conv1dParams& p, int64_t task_begin, int64_t task_end) {
  switch (p.width) {
    case 2: fwd_tasks<2>(p, task_begin, task_end); break;
    case 3: fwd_tasks<3>(p, task_begin, task_end); break;
    default: fwd_tasks<4>(p, task_begin, task_end); break;
  }
}

void conv1d_bwd(const Conv1dBwdParams& p, int64_t task_begin, int64_t task_end) {
  switch (p.width) {
    case 2: bwd_tasks<2>(p, task_begin, task_end); break;
    case 3: bwd_tasks<3>(p, task_begin, task_end); break;
    default: bwd_tasks<4>(p, task_begin, task_end); break;
  }
}

void conv1d_update(const Conv1dUpdateParams& p, int64_t d_begin, int64_t d_end) {
  switch (p.width) {
    case 2: update_channels<2>(p, d_begin, d_end); break;
    case 3: update_channels<3>(p, d_begin, d_end); break;
    default: update_channels<4>(p, d_begin, d_end); break;
  }
}

}  // namespace conv
}  // namespace MAMBA_CPU_NS
}  // namespace mamba_ssm

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif
