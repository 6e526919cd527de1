// Parameters of the causal depthwise conv1d kernels (CPU and CUDA/HIP). Includes no torch header.
//
// Math (the short convolution of Mamba, arXiv:2312.00752 Figure 3, and Mamba-2, arXiv:2405.21060):
// for batch b, channel d, position t in [0, seqlen), width W in [2, 4],
//
//   pre[t] = bias[d] + sum_{k=0}^{W-1} weight[d, k] * xs(t - (W-1) + k) * same(t - (W-1) + k, t)
//   out[t] = real(t) ? (silu(pre[t]) if silu else pre[t]) : 0        silu(v) = v / (1 + exp(-v))
//
// where xs(s) = x[b, d, s] for s >= 0 and initial_states[b, d, s + W - 1] (or 0) for s < 0, and, with
// q(s) = seq_idx[b, max(s, 0)] (positions before the start belong to the row's first token's sequence),
// same(s, t) = 1 without seq_idx, else q(s) == q(t); real(t) = 1 without seq_idx, else q(t) >= 0.
// A negative seq_idx marks a padding token: its output is 0 and, belonging to no sequence, it is read by
// no other position and by no state.
// final_states[b, d, j] = xs(s_j) * keep(s_j), s_j = seqlen - (W-1) + j, j in [0, W-1): the inputs
// causal_conv1d_update continues the row's last sequence from, where keep(s) = 1 without seq_idx, else
// same(s, seqlen - 1) && real(seqlen - 1) (inputs of an earlier sequence read 0; a row ending in padding
// has zero final states).
//
// Gradients (dpre = real(t) ? dout * silu'(pre) (or dout) : 0):
//   dxs(s) = sum_k weight[d, k] * dpre[s + (W-1) - k] * same(s, s + (W-1) - k)  (+ keep(s) dfinal_states)
//   dweight[d, k] = sum_{b,t} dpre[t] * xs(t - (W-1) + k) * same(...),  dbias[d] = sum_{b,t} dpre[t]
//   dinitial_states[b, d, j] = dxs(j - (W-1)).
#pragma once
#include <cstdint>

namespace mamba_ssm {

constexpr int kConvMinWidth = 2;
constexpr int kConvMaxWidth = 4;

struct Conv1dParams {
  int64_t batch = 0, dim = 0, seqlen = 0, width = 0;
  // Element strides of x (batch, dim, seqlen); out (and dout / dx in the backward) share them.
  int64_t x_sb = 0, x_sd = 0, x_sl = 0;
  const void* x = nullptr;               // compute dtype (fp32 on the CPU, the input dtype on GPUs)
  void* out = nullptr;
  const float* weight = nullptr;         // (dim, width) contiguous
  const float* bias = nullptr;           // (dim,) or null
  const int32_t* seq_idx = nullptr;      // (batch, seqlen) contiguous or null
  const float* initial_states = nullptr; // (batch, dim, width - 1) contiguous or null
  void* final_states = nullptr;          // (batch, dim, width - 1) contiguous, x's dtype; or null
  bool silu = false;
  bool channel_last = false;             // x_sd == 1 (x is a transposed (batch, seqlen, dim) tensor)
};

struct Conv1dBwdParams : Conv1dParams {
  const void* dout = nullptr;            // x's dtype and strides
  const float* dfinal_states = nullptr;  // (batch, dim, width - 1) contiguous, or null
  void* dx = nullptr;                    // x's dtype and strides
  float* dweight = nullptr;              // (dim, width), accumulated (zero-filled by the caller)
  float* dbias = nullptr;                // (dim,), accumulated (zero-filled by the caller), or null
  float* dinitial_states = nullptr;      // (batch, dim, width - 1), or null
  float* workspace = nullptr;            // GPU: dpre (batch, dim, seqlen) fp32 in x's layout
};

// causal_conv1d_update: decode steps from a rolling (or, with cache_seqlens, circular) state.
//   Without cache_seqlens: window = [state[state_len - (W-1):], x[0:seqlen]]; out[t] = conv of the W
//   entries ending at x[t]; the new state is the last state_len entries of [state, x].
//   With cache_seqlens (circular): x[t] sits at position p = cache_seqlens[b] + t and is written to
//   state[p % state_len]; an input at position q < cache_seqlens[b] is read from the state as it was
//   before the call, state[q % state_len], and one at q >= cache_seqlens[b] from x itself.
//   state_len >= W - 1 in both modes.
//   conv_state_indices[b] picks the state row; a negative index marks a padded slot: out = 0, no state
//   is touched (the GPU kernel also treats an index >= n_states so; the CPU binding rejects it).
struct Conv1dUpdateParams {
  int64_t batch = 0, dim = 0, seqlen = 0, width = 0, state_len = 0;
  int64_t x_sb = 0, x_sd = 0, x_sl = 0;          // x (batch, dim, seqlen) contiguous; out shares them
  int64_t s_sb = 0, s_sd = 0, s_sl = 0;          // conv_state (n_states, dim, state_len)
  int64_t n_states = 0;
  const void* x = nullptr;
  void* out = nullptr;
  void* state = nullptr;                          // updated in place (the compute dtype)
  const float* weight = nullptr;
  const float* bias = nullptr;
  const int32_t* cache_seqlens = nullptr;         // (batch,) or null
  const int32_t* state_indices = nullptr;         // (batch,) or null
  bool silu = false;
};

// causal_conv1d_varlen_states: for sequence b of packed x (total, dim) spanning rows
// [cu_seqlens[b], cu_seqlens[b+1]), states[b, d, j] = x[cu_seqlens[b+1] - state_len + j, d], or 0 when
// that row lies before the sequence's start (an empty sequence has zero states). cu_seqlens is
// non-decreasing from 0 to at most total: rows from cu_seqlens[batch] on (padding) are read by no state.
// A pure copy: elements are moved as raw bits.
struct Conv1dVarlenParams {
  int64_t batch = 0, dim = 0, state_len = 0, total = 0;
  int64_t x_st = 0, x_sd = 0;                     // x (total, dim)
  const void* x = nullptr;
  void* states = nullptr;                          // (batch, state_len, dim) contiguous
  const int32_t* cu_seqlens = nullptr;             // (batch + 1,)
};

}  // namespace mamba_ssm
