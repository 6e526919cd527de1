// Shared by the CPU and CUDA bindings of the causal conv1d ops: argument checks, the layout rule and
// the kernel parameters filled from ATen tensors. (The kernel headers include no torch header.)
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>

#include <optional>
#include "conv1d_params.h"

namespace mamba_ssm {

inline bool has(const std::optional<at::Tensor>& t) { return t.has_value() && t->defined(); }

// t in dtype dt and contiguous, without a dispatcher call when it already is (decode steps are
// dominated by such fixed costs).
inline at::Tensor as_contiguous(const at::Tensor& t, at::ScalarType dt) {
  if (t.scalar_type() == dt && t.is_contiguous()) return t;
  return t.to(dt).contiguous();
}

inline at::Tensor in_dtype(const at::Tensor& t, at::ScalarType dt) { return t.scalar_type() == dt ? t : t.to(dt); }

// The layout rule (mirrored by the fake implementations in mamba_ssm/ops/backends/compiled_conv1d.py):
// x (batch, dim, seqlen) is channel-last when its channel axis has stride 1 and its seqlen axis does not
// (a transposed (batch, seqlen, dim) tensor); out, dout and dx then have that layout, else they are
// contiguous (batch, dim, seqlen).
inline bool conv_channel_last(const at::Tensor& x) {
  return x.size(2) > 1 && x.size(1) > 1 && x.stride(2) != 1 && x.stride(1) == 1;
}

// t (batch, dim, seqlen) in dtype dt, dense in the layout: channel-last or contiguous.
inline at::Tensor conv_layout(const at::Tensor& t, bool channel_last, at::ScalarType dt) {
  if (!channel_last) return as_contiguous(t, dt);
  return t.transpose(1, 2).to(dt).contiguous().transpose(1, 2);
}

// A plain tensor (not a view), so an op's output takes in-place updates under autograd.
inline at::Tensor conv_empty(int64_t b, int64_t d, int64_t l, bool channel_last, const at::TensorOptions& o) {
  return channel_last ? at::empty_strided({b, d, l}, {l * d, 1, d}, o) : at::empty({b, d, l}, o);
}

inline void check_conv_dtype(const at::Tensor& x, const char* name) {
  const auto st = x.scalar_type();
  TORCH_CHECK(st == at::kFloat || st == at::kHalf || st == at::kBFloat16, "mamba_ssm causal_conv1d: ", name,
              " must be float32, float16 or bfloat16, got ", st);
}

// Checks weight (dim, width) and bias (dim,) against dim; returns the width.
inline int64_t check_conv_weight(const at::Tensor& weight, const std::optional<at::Tensor>& bias, int64_t dim) {
  TORCH_CHECK(weight.dim() == 2 && weight.size(0) == dim, "mamba_ssm causal_conv1d: weight must be (dim, width) "
              "= (", dim, ", width), got ", weight.sizes());
  const int64_t w = weight.size(1);
  TORCH_CHECK(w >= kConvMinWidth && w <= kConvMaxWidth, "mamba_ssm causal_conv1d: width ", w,
              " is not supported by the compiled kernels (2, 3 or 4)");
  TORCH_CHECK(!has(bias) || (bias->dim() == 1 && bias->size(0) == dim), "mamba_ssm causal_conv1d: bias must be "
              "(dim,) = (", dim, ",), got ", has(bias) ? bias->sizes() : at::IntArrayRef{});
  return w;
}

// Inputs of the forward / backward after checks and conversion.
struct ConvPrepared {
  at::Tensor x, weight, bias, seq_idx, init;
  bool channel_last = false;
  int64_t batch = 0, dim = 0, seqlen = 0, width = 0;
};

// compute_dtype: the dtype x is read in (fp32 on the CPU, x's dtype on GPUs); force_contiguous: the
// CPU backward takes the seqlen-contiguous layout only.
inline ConvPrepared conv_prepare(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                                 const std::optional<at::Tensor>& seq_idx,
                                 const std::optional<at::Tensor>& initial_states, at::ScalarType compute_dtype,
                                 bool force_contiguous) {
  TORCH_CHECK(x.dim() == 3, "mamba_ssm causal_conv1d: x must be (batch, dim, seqlen), got ", x.sizes());
  check_conv_dtype(x, "x");
  ConvPrepared r;
  r.batch = x.size(0);
  r.dim = x.size(1);
  r.seqlen = x.size(2);
  r.width = check_conv_weight(weight, bias, r.dim);
  r.channel_last = conv_channel_last(x) && !force_contiguous;
  r.x = conv_layout(x, r.channel_last, compute_dtype);
  r.weight = as_contiguous(weight, at::kFloat);
  if (has(bias)) r.bias = as_contiguous(*bias, at::kFloat);
  if (has(seq_idx)) {
    TORCH_CHECK(seq_idx->dim() == 2 && seq_idx->size(0) == r.batch && seq_idx->size(1) == r.seqlen,
                "mamba_ssm causal_conv1d: seq_idx must be (batch, seqlen) = (", r.batch, ", ", r.seqlen, "), got ",
                seq_idx->sizes());
    TORCH_CHECK(!at::isFloatingType(seq_idx->scalar_type()), "mamba_ssm causal_conv1d: seq_idx must be an integer "
                "tensor, got ", seq_idx->scalar_type());
    r.seq_idx = as_contiguous(*seq_idx, at::kInt);
  }
  if (has(initial_states)) {
    TORCH_CHECK(initial_states->dim() == 3 && initial_states->size(0) == r.batch && initial_states->size(1) == r.dim &&
                    initial_states->size(2) == r.width - 1,
                "mamba_ssm causal_conv1d: initial_states must be (batch, dim, width - 1) = (", r.batch, ", ", r.dim,
                ", ", r.width - 1, "), got ", initial_states->sizes());
    r.init = as_contiguous(*initial_states, at::kFloat);
  }
  return r;
}

inline void conv_fill_params(const ConvPrepared& r, bool silu, Conv1dParams& p) {
  p.batch = r.batch;
  p.dim = r.dim;
  p.seqlen = r.seqlen;
  p.width = r.width;
  p.x_sb = r.x.stride(0);
  p.x_sd = r.x.stride(1);
  p.x_sl = r.x.stride(2);
  p.channel_last = r.channel_last;
  p.x = r.x.data_ptr();
  p.weight = r.weight.data_ptr<float>();
  p.bias = r.bias.defined() ? r.bias.data_ptr<float>() : nullptr;
  p.seq_idx = r.seq_idx.defined() ? r.seq_idx.data_ptr<int32_t>() : nullptr;
  p.initial_states = r.init.defined() ? r.init.data_ptr<float>() : nullptr;
  p.silu = silu;
}

using ConvFwdResult = std::tuple<at::Tensor, at::Tensor>;
using ConvBwdResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

// dfinal_states (batch, dim, width - 1) as contiguous fp32, or undefined.
inline at::Tensor conv_prepare_dfinal(const ConvPrepared& r, const std::optional<at::Tensor>& dfinal) {
  if (!has(dfinal)) return at::Tensor();
  TORCH_CHECK(dfinal->numel() == r.batch * r.dim * (r.width - 1), "mamba_ssm causal_conv1d: dfinal_states must be "
              "(batch, dim, width - 1), got ", dfinal->sizes());
  return as_contiguous(*dfinal, at::kFloat);
}

// Checks of causal_conv1d_update's arguments (x is (batch, dim, seqlen); the bindings view a 2-D x,
// one step, as seqlen 1); returns the width.
inline int64_t conv_check_update(const at::Tensor& x, const at::Tensor& conv_state, const at::Tensor& weight,
                                 const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& cache_seqlens,
                                 const std::optional<at::Tensor>& conv_state_indices) {
  TORCH_CHECK(x.dim() == 3, "mamba_ssm causal_conv1d_update: x must be (batch, dim, seqlen), got ", x.sizes());
  check_conv_dtype(x, "x");
  check_conv_dtype(conv_state, "conv_state");
  const int64_t width = check_conv_weight(weight, bias, x.size(1));
  TORCH_CHECK(conv_state.dim() == 3 && conv_state.size(1) == x.size(1) && conv_state.size(2) >= width - 1,
              "mamba_ssm causal_conv1d_update: conv_state must be (batch, dim, state_len >= width - 1) with dim = ",
              x.size(1), " and width = ", width, ", got ", conv_state.sizes());
  if (has(conv_state_indices)) {
    TORCH_CHECK(conv_state_indices->dim() == 1 && conv_state_indices->size(0) == x.size(0),
                "mamba_ssm causal_conv1d_update: conv_state_indices must be (batch,) = (", x.size(0), ",), got ",
                conv_state_indices->sizes());
  } else {
    TORCH_CHECK(conv_state.size(0) >= x.size(0), "mamba_ssm causal_conv1d_update: conv_state has ",
                conv_state.size(0), " rows for a batch of ", x.size(0), "; pass conv_state_indices or one row per "
                "batch element");
  }
  TORCH_CHECK(!has(cache_seqlens) || (cache_seqlens->dim() == 1 && cache_seqlens->size(0) == x.size(0)),
              "mamba_ssm causal_conv1d_update: cache_seqlens must be (batch,) = (", x.size(0), ",), got ",
              has(cache_seqlens) ? cache_seqlens->sizes() : at::IntArrayRef{});
  return width;
}

inline void conv_fill_update(const at::Tensor& x, const at::Tensor& state, const at::Tensor& out,
                             const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& cache,
                             const at::Tensor& indices, bool silu, Conv1dUpdateParams& p) {
  p.batch = x.size(0);
  p.dim = x.size(1);
  p.seqlen = x.size(2);
  p.width = weight.size(1);
  p.state_len = state.size(2);
  p.n_states = state.size(0);
  p.x_sb = x.stride(0);
  p.x_sd = x.stride(1);
  p.x_sl = x.stride(2);
  p.s_sb = state.stride(0);
  p.s_sd = state.stride(1);
  p.s_sl = state.stride(2);
  p.x = x.data_ptr();
  p.out = out.data_ptr();
  p.state = state.data_ptr();
  p.weight = weight.data_ptr<float>();
  p.bias = bias.defined() ? bias.data_ptr<float>() : nullptr;
  p.cache_seqlens = cache.defined() ? cache.data_ptr<int32_t>() : nullptr;
  p.state_indices = indices.defined() ? indices.data_ptr<int32_t>() : nullptr;
  p.silu = silu;
}

// Checks of causal_conv1d_varlen_states's arguments.
inline void conv_check_varlen(const at::Tensor& x, const at::Tensor& cu_seqlens, int64_t state_len) {
  TORCH_CHECK(x.dim() == 2, "mamba_ssm causal_conv1d_varlen_states: x must be (total_tokens, dim), got ", x.sizes());
  TORCH_CHECK(cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 1, "mamba_ssm causal_conv1d_varlen_states: cu_seqlens "
              "must be (batch + 1,), got ", cu_seqlens.sizes());
  TORCH_CHECK(!at::isFloatingType(cu_seqlens.scalar_type()), "mamba_ssm causal_conv1d_varlen_states: cu_seqlens "
              "must be an integer tensor, got ", cu_seqlens.scalar_type());
  TORCH_CHECK(state_len >= 1, "mamba_ssm causal_conv1d_varlen_states: state_len must be >= 1, got ", state_len);
  const int64_t es = x.element_size();
  TORCH_CHECK(es == 2 || es == 4 || es == 8, "mamba_ssm causal_conv1d_varlen_states: x's dtype ", x.scalar_type(),
              " is not supported (2, 4 or 8 bytes per element)");
}

inline void conv_fill_varlen(const at::Tensor& x, const at::Tensor& cu, const at::Tensor& states, int64_t state_len,
                             Conv1dVarlenParams& p) {
  p.batch = cu.size(0) - 1;
  p.dim = x.size(1);
  p.state_len = state_len;
  p.total = x.size(0);
  p.x_st = x.stride(0);
  p.x_sd = x.stride(1);
  p.x = x.data_ptr();
  p.states = states.data_ptr();
  p.cu_seqlens = cu.data_ptr<int32_t>();
}

}  // namespace mamba_ssm
