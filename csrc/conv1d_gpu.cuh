// CUDA / HIP causal conv1d kernels (forward, backward, decode update, varlen states). Includes no torch
// header. Math: conv1d_params.h. Instantiated per dtype in conv1d_{fp32,fp16,bf16}.cu.
//
// Work split: one thread per (batch, channel, run of kConvItems positions). The thread index is laid out
// so that neighbouring threads touch neighbouring addresses: runs of one row for a seqlen-contiguous x,
// channels for a channel-last x. Inputs are read in T and accumulated in fp32. The backward runs two
// kernels: (1) dpre = dout * silu'(pre) into an fp32 workspace in x's layout, with dweight / dbias
// partial sums over the thread's positions added by atomics, (2) dx (and dinitial_states) from dpre.
#pragma once
#include "conv1d_gpu.h"
#include "portability.h"
#include "scan_common.cuh"  // Cvt<T>

#include <cstdint>


namespace mamba_ssm {
namespace gpu {
namespace conv {

constexpr int kThreads = 128;
constexpr int kItems = kConvGpuItems;

// The (batch, channel, run) of linear thread index `i` for n_runs runs per row.
struct Slot {
  int64_t b, d, t0;
};

MAMBA_SSM_DEVICE_INLINE bool slot_of(int64_t i, const Conv1dParams& p, int64_t n_runs, Slot& s) {
  if (i >= p.batch * p.dim * n_runs) return false;
  int64_t run;
  if (p.channel_last) {  // channel fastest
    s.d = i % p.dim;
    const int64_t r = i / p.dim;
    run = r % n_runs;
    s.b = r / n_runs;
  } else {               // run fastest
    run = i % n_runs;
    const int64_t r = i / n_runs;
    s.d = r % p.dim;
    s.b = r / p.dim;
  }
  s.t0 = run * kItems;
  return true;
}

MAMBA_SSM_DEVICE_INLINE int64_t thread_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

// xs(s) of conv1d_params.h for s in [t0 - (W-1), t0 + kItems), as fp32 (0 past seqlen).
template <typename T, int W>
__device__ __forceinline__ void load_window(const Conv1dParams& p, const Slot& s, float (&v)[kItems + W - 1]) {
  const T* x = static_cast<const T*>(p.x) + s.b * p.x_sb + s.d * p.x_sd;
#pragma unroll
  for (int i = 0; i < kItems + W - 1; ++i) {
    const int64_t pos = s.t0 - (W - 1) + i;
    float val = 0.f;
    if (pos >= 0 && pos < p.seqlen) val = Cvt<T>::load(x[pos * p.x_sl]);
    else if (pos < 0 && p.initial_states) val = p.initial_states[(s.b * p.dim + s.d) * (W - 1) + pos + W - 1];
    v[i] = val;
  }
}

// seq_idx of positions [t0 - (W-1), t0 + kItems) (clamped to >= 0), or all 0 without seq_idx.
template <int W>
__device__ __forceinline__ void load_seq(const Conv1dParams& p, const Slot& s, int32_t (&q)[kItems + W - 1]) {
#pragma unroll
  for (int i = 0; i < kItems + W - 1; ++i) {
    int64_t pos = s.t0 - (W - 1) + i;
    pos = pos < 0 ? 0 : (pos >= p.seqlen ? p.seqlen - 1 : pos);
    q[i] = p.seq_idx ? p.seq_idx[s.b * p.seqlen + pos] : 0;
  }
}

// pre[t0 + j] for j in [0, kItems) from the window.
template <int W>
__device__ __forceinline__ void pre_of(const float (&v)[kItems + W - 1], const int32_t (&q)[kItems + W - 1],
                                       const float (&w)[W], float bias, float (&pre)[kItems]) {
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    float acc = bias;
#pragma unroll
    for (int k = 0; k < W; ++k) acc += q[j + k] == q[j + W - 1] ? w[k] * v[j + k] : 0.f;
    pre[j] = acc;
  }
}

// keep(pos) of conv1d_params.h for a final-state input pos: it belongs to the row's last sequence, which
// is not padding (always true without seq_idx).
MAMBA_SSM_DEVICE_INLINE bool final_keep(const Conv1dParams& p, int64_t b, int64_t pos) {
  if (!p.seq_idx || p.seqlen == 0) return true;
  const int32_t* sid = p.seq_idx + b * p.seqlen;
  const int32_t last = sid[p.seqlen - 1];
  return last >= 0 && sid[pos > 0 ? pos : 0] == last;
}

template <typename T, int W>
__global__ void __launch_bounds__(kThreads) conv_fwd_kernel(Conv1dParams p, int64_t n_runs) {
  Slot s;
  if (!slot_of(thread_index(), p, n_runs, s)) return;
  float w[W];
#pragma unroll
  for (int k = 0; k < W; ++k) w[k] = p.weight[s.d * W + k];
  const float bias = p.bias ? p.bias[s.d] : 0.f;
  float v[kItems + W - 1];
  int32_t q[kItems + W - 1];
  load_window<T, W>(p, s, v);
  load_seq<W>(p, s, q);
  float pre[kItems];
  pre_of<W>(v, q, w, bias, pre);
  T* out = static_cast<T*>(p.out) + s.b * p.x_sb + s.d * p.x_sd;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (s.t0 + j >= p.seqlen) break;
    float y = p.silu ? pre[j] / (1.f + __expf(-pre[j])) : pre[j];
    if (q[j + W - 1] < 0) y = 0.f;  // padding
    out[(s.t0 + j) * p.x_sl] = Cvt<T>::store(y);
  }
  if (p.final_states && s.t0 + kItems >= p.seqlen) {  // the last run of the row
    const T* x = static_cast<const T*>(p.x) + s.b * p.x_sb + s.d * p.x_sd;
    T* fin = static_cast<T*>(p.final_states) + (s.b * p.dim + s.d) * (W - 1);
#pragma unroll
    for (int j = 0; j < W - 1; ++j) {
      const int64_t pos = p.seqlen - (W - 1) + j;
      float val = 0.f;
      if (!final_keep(p, s.b, pos)) val = 0.f;
      else if (pos >= 0) val = Cvt<T>::load(x[pos * p.x_sl]);
      else if (p.initial_states) val = p.initial_states[(s.b * p.dim + s.d) * (W - 1) + pos + W - 1];
      fin[j] = Cvt<T>::store(val);
    }
  }
}

// Backward pass 1: dpre into the workspace (x's strides), dweight / dbias partials by atomics.
template <typename T, int W>
__global__ void __launch_bounds__(kThreads) conv_bwd_dpre_kernel(Conv1dBwdParams p, int64_t n_runs) {
  Slot s;
  if (!slot_of(thread_index(), p, n_runs, s)) return;
  float w[W];
#pragma unroll
  for (int k = 0; k < W; ++k) w[k] = p.weight[s.d * W + k];
  const float bias = p.bias ? p.bias[s.d] : 0.f;
  float v[kItems + W - 1];
  int32_t q[kItems + W - 1];
  load_window<T, W>(p, s, v);
  load_seq<W>(p, s, q);
  float pre[kItems];
  pre_of<W>(v, q, w, bias, pre);
  const int64_t off = s.b * p.x_sb + s.d * p.x_sd;
  const T* dout = static_cast<const T*>(p.dout) + off;
  float* dpre = p.workspace + off;
  float db = 0.f, dw[W];
#pragma unroll
  for (int k = 0; k < W; ++k) dw[k] = 0.f;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (s.t0 + j >= p.seqlen) break;
    float g = Cvt<T>::load(dout[(s.t0 + j) * p.x_sl]);
    if (p.silu) {
      const float sg = 1.f / (1.f + __expf(-pre[j]));
      g *= sg * (1.f + pre[j] * (1.f - sg));
    }
    if (q[j + W - 1] < 0) g = 0.f;  // a padding output is the constant 0
    dpre[(s.t0 + j) * p.x_sl] = g;
    db += g;
#pragma unroll
    for (int k = 0; k < W; ++k) dw[k] += q[j + k] == q[j + W - 1] ? g * v[j + k] : 0.f;
  }
  if (p.dbias) atomicAdd(p.dbias + s.d, db);
#pragma unroll
  for (int k = 0; k < W; ++k) atomicAdd(p.dweight + s.d * W + k, dw[k]);
}

// Backward pass 2: dx[s] = sum_k w[k] dpre[s + W-1-k] (same sequence), dfinal_states, dinitial_states.
template <typename T, int W>
__global__ void __launch_bounds__(kThreads) conv_bwd_dx_kernel(Conv1dBwdParams p, int64_t n_runs) {
  Slot s;
  if (!slot_of(thread_index(), p, n_runs, s)) return;
  float w[W];
#pragma unroll
  for (int k = 0; k < W; ++k) w[k] = p.weight[s.d * W + k];
  const int64_t L = p.seqlen;
  const int64_t off = s.b * p.x_sb + s.d * p.x_sd;
  const float* dpre = p.workspace + off;
  const int32_t* sid = p.seq_idx ? p.seq_idx + s.b * L : nullptr;
  const float* dfin = p.dfinal_states ? p.dfinal_states + (s.b * p.dim + s.d) * (W - 1) : nullptr;
  // dxs at position pos (may be negative: an initial state).
  auto dxs = [&](int64_t pos) {
    float acc = 0.f;
    const int32_t mine = sid ? sid[pos > 0 ? pos : 0] : 0;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const int64_t t = pos + (W - 1) - k;
      if (t >= 0 && t < L && (!sid || sid[t] == mine)) acc += w[k] * dpre[t * p.x_sl];
    }
    const int64_t j = pos - (L - (W - 1));
    if (dfin && j >= 0 && final_keep(p, s.b, pos)) acc += dfin[j];
    return acc;
  };
  T* dx = static_cast<T*>(p.dx) + off;
#pragma unroll
  for (int j = 0; j < kItems; ++j) {
    if (s.t0 + j >= L) break;
    dx[(s.t0 + j) * p.x_sl] = Cvt<T>::store(dxs(s.t0 + j));
  }
  if (p.dinitial_states && s.t0 == 0) {
    for (int j = 0; j < W - 1; ++j) p.dinitial_states[(s.b * p.dim + s.d) * (W - 1) + j] = dxs(j - (W - 1));
  }
}

// Decode steps: one thread per (batch, channel), channel fastest. State in T, updated in place.
template <typename T, int W>
__global__ void __launch_bounds__(kThreads) conv_update_kernel(Conv1dUpdateParams p) {
  const int64_t i = thread_index();
  if (i >= p.batch * p.dim) return;
  const int64_t d = i % p.dim, b = i / p.dim;
  const int64_t L = p.seqlen, S = p.state_len;
  const T* x = static_cast<const T*>(p.x) + b * p.x_sb + d * p.x_sd;
  T* out = static_cast<T*>(p.out) + b * p.x_sb + d * p.x_sd;
  const int64_t row = p.state_indices ? p.state_indices[b] : b;
  if (row < 0 || row >= p.n_states) {  // a padded slot (or an index out of range): output 0, no state
    for (int64_t t = 0; t < L; ++t) out[t * p.x_sl] = Cvt<T>::store(0.f);
    return;
  }
  T* st = static_cast<T*>(p.state) + row * p.s_sb + d * p.s_sd;
  const int64_t c = p.cache_seqlens ? p.cache_seqlens[b] : 0;
  float prev[W - 1], w[W];
#pragma unroll
  for (int j = 0; j < W - 1; ++j) {
    int64_t k = p.cache_seqlens ? (c - (W - 1) + j) % S : S - (W - 1) + j;
    if (k < 0) k += S;
    prev[j] = Cvt<T>::load(st[k * p.s_sl]);
  }
#pragma unroll
  for (int k = 0; k < W; ++k) w[k] = p.weight[d * W + k];
  const float bias = p.bias ? p.bias[d] : 0.f;
  // A sliding window of the last W-1 inputs.
  float win[W - 1];
#pragma unroll
  for (int j = 0; j < W - 1; ++j) win[j] = prev[j];
  for (int64_t t = 0; t < L; ++t) {
    const float xt = Cvt<T>::load(x[t * p.x_sl]);
    float acc = bias + w[W - 1] * xt;
#pragma unroll
    for (int k = 0; k < W - 1; ++k) acc += w[k] * win[k];
#pragma unroll
    for (int k = 0; k < W - 2; ++k) win[k] = win[k + 1];
    win[W - 2] = xt;
    out[t * p.x_sl] = Cvt<T>::store(p.silu ? acc / (1.f + __expf(-acc)) : acc);
  }
  if (p.cache_seqlens) {
    for (int64_t t = L > S ? L - S : 0; t < L; ++t) st[((c + t) % S) * p.s_sl] = x[t * p.x_sl];
  } else if (L >= S) {
    for (int64_t k = 0; k < S; ++k) st[k * p.s_sl] = x[(L - S + k) * p.x_sl];
  } else {
    for (int64_t k = 0; k < S - L; ++k) st[k * p.s_sl] = st[(k + L) * p.s_sl];
    for (int64_t t = 0; t < L; ++t) st[(S - L + t) * p.s_sl] = x[t * p.x_sl];
  }
}

// Varlen states: one thread per output element (batch, j, channel), channel fastest; raw bits E.
template <typename E>
__global__ void __launch_bounds__(kThreads) conv_varlen_kernel(Conv1dVarlenParams p) {
  const int64_t i = thread_index();
  if (i >= p.batch * p.state_len * p.dim) return;
  const int64_t d = i % p.dim, r = i / p.dim, j = r % p.state_len, b = r / p.state_len;
  const int64_t begin = p.cu_seqlens[b], end = p.cu_seqlens[b + 1];
  const int64_t row = end - p.state_len + j;
  E val = 0;
  if (row >= begin && row >= 0 && row < p.total) val = static_cast<const E*>(p.x)[row * p.x_st + d * p.x_sd];
  static_cast<E*>(p.states)[i] = val;
}

inline unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

inline const char* last_error() {
  const mamba_error_t err = mambaGetLastError();
  return err == MAMBA_GPU_SUCCESS ? nullptr : mambaGetErrorString(err);
}

template <typename T, int W>
const char* fwd_launch_w(const Conv1dParams& p, mamba_stream_t stream) {
  const int64_t n_runs = (p.seqlen + kItems - 1) / kItems;
  MAMBA_SSM_LAUNCH((conv_fwd_kernel<T, W>), blocks_for(p.batch * p.dim * n_runs), kThreads, stream, p, n_runs);
  return last_error();
}

template <typename T, int W>
const char* bwd_launch_w(const Conv1dBwdParams& p, mamba_stream_t stream) {
  const int64_t n_runs = (p.seqlen + kItems - 1) / kItems;
  const unsigned blocks = blocks_for(p.batch * p.dim * n_runs);
  MAMBA_SSM_LAUNCH((conv_bwd_dpre_kernel<T, W>), blocks, kThreads, stream, p, n_runs);
  if (const char* err = last_error()) return err;
  MAMBA_SSM_LAUNCH((conv_bwd_dx_kernel<T, W>), blocks, kThreads, stream, p, n_runs);
  return last_error();
}

template <typename T, int W>
const char* update_launch_w(const Conv1dUpdateParams& p, mamba_stream_t stream) {
  MAMBA_SSM_LAUNCH((conv_update_kernel<T, W>), blocks_for(p.batch * p.dim), kThreads, stream, p);
  return last_error();
}

template <typename T>
const char* fwd_launch(const Conv1dParams& p, void* stream) {
  if (const char* why = conv_gpu_unsupported_reason(p.batch, p.dim, p.seqlen, p.width)) return why;
  if (p.batch * p.dim * p.seqlen == 0) return nullptr;
  const auto s = static_cast<mamba_stream_t>(stream);
  switch (p.width) {
    case 2: return fwd_launch_w<T, 2>(p, s);
    case 3: return fwd_launch_w<T, 3>(p, s);
    default: return fwd_launch_w<T, 4>(p, s);
  }
}

template <typename T>
const char* bwd_launch(const Conv1dBwdParams& p, void* stream) {
  if (const char* why = conv_gpu_unsupported_reason(p.batch, p.dim, p.seqlen, p.width)) return why;
  if (p.batch * p.dim * p.seqlen == 0) return nullptr;
  const auto s = static_cast<mamba_stream_t>(stream);
  switch (p.width) {
    case 2: return bwd_launch_w<T, 2>(p, s);
    case 3: return bwd_launch_w<T, 3>(p, s);
    default: return bwd_launch_w<T, 4>(p, s);
  }
}

template <typename T>
const char* update_launch(const Conv1dUpdateParams& p, void* stream) {
  if (const char* why = conv_gpu_unsupported_reason(p.batch, p.dim, 1, p.width)) return why;
  if (p.batch * p.dim == 0) return nullptr;
  const auto s = static_cast<mamba_stream_t>(stream);
  switch (p.width) {
    case 2: return update_launch_w<T, 2>(p, s);
    case 3: return update_launch_w<T, 3>(p, s);
    default: return update_launch_w<T, 4>(p, s);
  }
}

template <typename E>
const char* varlen_launch(const Conv1dVarlenParams& p, void* stream) {
  const int64_t n = p.batch * p.state_len * p.dim;
  if (n == 0) return nullptr;
  MAMBA_SSM_LAUNCH(conv_varlen_kernel<E>, blocks_for(n), kThreads, static_cast<mamba_stream_t>(stream), p);
  return last_error();
}

}  // namespace conv
}  // namespace gpu
}  // namespace mamba_ssm
