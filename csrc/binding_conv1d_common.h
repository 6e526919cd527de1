// The causal conv1d ops' argument checks, layout rule and kernel parameters, shared by both bindings
// (templates over a tensor API, see binding_common.h). Includes no torch header.
#pragma once
#include <cstdint>
#include <optional>

#include "binding_common.h"
#include "conv1d_params.h"

namespace mamba_ssm {

// The layout rule (mirrored by the fake implementations in mamba_ssm/ops/backends/compiled_conv1d.py):
// x (batch, dim, seqlen) is channel-last when its channel axis has stride 1 and its seqlen axis does not
// (a transposed (batch, seqlen, dim) tensor); out, dout and dx then have that layout, else they are
// contiguous (batch, dim, seqlen).
template <class A>
bool conv_channel_last(const typename A::Tensor& x) {
  return A::size(x, 2) > 1 && A::size(x, 1) > 1 && A::stride(x, 2) != 1 && A::stride(x, 1) == 1;
}

// t (batch, dim, seqlen) in dtype dt, dense in the layout: channel-last or contiguous.
template <class A>
typename A::Tensor conv_layout(const typename A::Tensor& t, bool channel_last, DType dt) {
  if (!channel_last) return as_contiguous<A>(t, dt);
  return A::transpose(A::contiguous(in_dtype<A>(A::transpose(t, 1, 2), dt)), 1, 2);
}

// (b, d, l) on like's device, channel-last ((b, l, d) in memory) or contiguous; a tensor of its own, not
// a view, so an op's output takes in-place updates under autograd.
template <class A>
typename A::Tensor conv_empty(int64_t b, int64_t d, int64_t l, bool channel_last, DType dt,
                              const typename A::Tensor& like) {
  return channel_last ? A::empty_strided({b, d, l}, {l * d, 1, d}, dt, like) : A::empty({b, d, l}, dt, like);
}

template <class A>
void check_conv_dtype(const typename A::Tensor& x, const char* name) {
  MAMBA_CHECK(is_stream_dtype(A::dtype(x)), "mamba_ssm causal_conv1d: ", name,
              " must be float32, float16 or bfloat16, got ", A::dtype_name(x));
}

template <class A>
Shape shape_or_none(const Opt<A>& t) {
  return has<A>(t) ? A::shape(*t) : Shape{};
}

// Checks weight (dim, width) and bias (dim,) against dim; returns the width.
template <class A>
int64_t check_conv_weight(const typename A::Tensor& weight, const Opt<A>& bias, int64_t dim) {
  MAMBA_CHECK(A::dim(weight) == 2 && A::size(weight, 0) == dim,
              "mamba_ssm causal_conv1d: weight must be (dim, width) = (", dim, ", width), got ", A::shape(weight));
  const int64_t w = A::size(weight, 1);
  MAMBA_CHECK(w >= kConvMinWidth && w <= kConvMaxWidth, "mamba_ssm causal_conv1d: width ", w,
              " is not supported by the compiled kernels (2, 3 or 4)");
  MAMBA_CHECK(!has<A>(bias) || (A::dim(*bias) == 1 && A::size(*bias, 0) == dim),
              "mamba_ssm causal_conv1d: bias must be (dim,) = (", dim, ",), got ", shape_or_none<A>(bias));
  return w;
}

// Inputs of the forward / backward after checks and conversion.
template <class A>
struct ConvPrepared {
  using T = typename A::Tensor;
  T x, weight;
  std::optional<T> bias, seq_idx, init;
  bool channel_last = false;
  int64_t batch = 0, dim = 0, seqlen = 0, width = 0;
};

// compute_dtype: the dtype x is read in (fp32 on the CPU, x's dtype on GPUs); force_contiguous: the
// CPU backward takes the seqlen-contiguous layout only.
template <class A>
ConvPrepared<A> conv_prepare(const typename A::Tensor& x, const typename A::Tensor& weight, const Opt<A>& bias,
                             const Opt<A>& seq_idx, const Opt<A>& initial_states, DType compute_dtype,
                             bool force_contiguous) {
  MAMBA_CHECK(A::dim(x) == 3, "mamba_ssm causal_conv1d: x must be (batch, dim, seqlen), got ", A::shape(x));
  check_conv_dtype<A>(x, "x");
  ConvPrepared<A> r;
  r.batch = A::size(x, 0);
  r.dim = A::size(x, 1);
  r.seqlen = A::size(x, 2);
  r.width = check_conv_weight<A>(weight, bias, r.dim);
  r.channel_last = conv_channel_last<A>(x) && !force_contiguous;
  r.x = conv_layout<A>(x, r.channel_last, compute_dtype);
  r.weight = as_contiguous<A>(weight, DType::kFloat32);
  if (has<A>(bias)) r.bias = as_contiguous<A>(*bias, DType::kFloat32);
  if (has<A>(seq_idx)) {
    MAMBA_CHECK(A::dim(*seq_idx) == 2 && A::size(*seq_idx, 0) == r.batch && A::size(*seq_idx, 1) == r.seqlen,
                "mamba_ssm causal_conv1d: seq_idx must be (batch, seqlen) = (", r.batch, ", ", r.seqlen, "), got ",
                A::shape(*seq_idx));
    MAMBA_CHECK(!is_floating(A::dtype(*seq_idx)), "mamba_ssm causal_conv1d: seq_idx must be an integer tensor, got ",
                A::dtype_name(*seq_idx));
    r.seq_idx = as_contiguous<A>(*seq_idx, DType::kInt32);
  }
  if (has<A>(initial_states)) {
    const auto& s = *initial_states;
    MAMBA_CHECK(A::dim(s) == 3 && A::size(s, 0) == r.batch && A::size(s, 1) == r.dim && A::size(s, 2) == r.width - 1,
                "mamba_ssm causal_conv1d: initial_states must be (batch, dim, width - 1) = (", r.batch, ", ", r.dim,
                ", ", r.width - 1, "), got ", A::shape(s));
    r.init = as_contiguous<A>(s, DType::kFloat32);
  }
  return r;
}

template <class A>
void conv_fill_params(const ConvPrepared<A>& r, bool silu, Conv1dParams& p) {
  p.batch = r.batch;
  p.dim = r.dim;
  p.seqlen = r.seqlen;
  p.width = r.width;
  p.x_sb = A::stride(r.x, 0);
  p.x_sd = A::stride(r.x, 1);
  p.x_sl = A::stride(r.x, 2);
  p.channel_last = r.channel_last;
  p.x = A::template data<void>(r.x);
  p.weight = A::template data<float>(r.weight);
  p.bias = fptr<A>(r.bias);
  p.seq_idx = r.seq_idx ? A::template data<int32_t>(*r.seq_idx) : nullptr;
  p.initial_states = fptr<A>(r.init);
  p.silu = silu;
}

template <class A>
using ConvFwdResult = std::tuple<typename A::Tensor, typename A::Tensor>;
template <class A>
using ConvBwdResult = std::tuple<typename A::Tensor, typename A::Tensor, typename A::Tensor, typename A::Tensor>;

// dfinal_states (batch, dim, width - 1) as contiguous fp32, or empty.
template <class A>
std::optional<typename A::Tensor> conv_prepare_dfinal(const ConvPrepared<A>& r, const Opt<A>& dfinal) {
  if (!has<A>(dfinal)) return std::nullopt;
  MAMBA_CHECK(A::numel(*dfinal) == r.batch * r.dim * (r.width - 1),
              "mamba_ssm causal_conv1d: dfinal_states must be (batch, dim, width - 1), got ", A::shape(*dfinal));
  return as_contiguous<A>(*dfinal, DType::kFloat32);
}

// x of causal_conv1d_update as (batch, dim, seqlen) with its strides: a 2-D x (one step, (batch, dim)) is
// seqlen 1, read without making a 3-D view (a dispatcher call, and the stable ABI's cost more).
struct UpdateX {
  int64_t batch = 0, dim = 0, seqlen = 0, sb = 0, sd = 0, sl = 1;
};

template <class A>
UpdateX update_x(const typename A::Tensor& x) {
  const int64_t nd = A::dim(x);
  MAMBA_CHECK(nd == 2 || nd == 3, "mamba_ssm causal_conv1d_update: x must be (batch, dim, seqlen) or (batch, dim), "
              "got ", A::shape(x));
  UpdateX g;
  g.batch = A::size(x, 0);
  g.dim = A::size(x, 1);
  g.seqlen = nd == 3 ? A::size(x, 2) : 1;
  g.sb = A::stride(x, 0);
  g.sd = A::stride(x, 1);
  g.sl = nd == 3 ? A::stride(x, 2) : 1;
  return g;
}

// Checks of causal_conv1d_update's arguments (x: see update_x); returns the width.
template <class A>
int64_t conv_check_update(const typename A::Tensor& x, const typename A::Tensor& conv_state,
                          const typename A::Tensor& weight, const Opt<A>& bias, const Opt<A>& cache_seqlens,
                          const Opt<A>& conv_state_indices) {
  const UpdateX g = update_x<A>(x);
  check_conv_dtype<A>(x, "x");
  check_conv_dtype<A>(conv_state, "conv_state");
  const int64_t batch = g.batch, dim = g.dim;
  const int64_t width = check_conv_weight<A>(weight, bias, dim);
  MAMBA_CHECK(A::dim(conv_state) == 3 && A::size(conv_state, 1) == dim && A::size(conv_state, 2) >= width - 1,
              "mamba_ssm causal_conv1d_update: conv_state must be (batch, dim, state_len >= width - 1) with dim = ",
              dim, " and width = ", width, ", got ", A::shape(conv_state));
  if (has<A>(conv_state_indices)) {
    MAMBA_CHECK(A::dim(*conv_state_indices) == 1 && A::size(*conv_state_indices, 0) == batch,
                "mamba_ssm causal_conv1d_update: conv_state_indices must be (batch,) = (", batch, ",), got ",
                A::shape(*conv_state_indices));
  } else {
    MAMBA_CHECK(A::size(conv_state, 0) >= batch, "mamba_ssm causal_conv1d_update: conv_state has ",
                A::size(conv_state, 0), " rows for a batch of ", batch,
                "; pass conv_state_indices or one row per batch element");
  }
  MAMBA_CHECK(!has<A>(cache_seqlens) || (A::dim(*cache_seqlens) == 1 && A::size(*cache_seqlens, 0) == batch),
              "mamba_ssm causal_conv1d_update: cache_seqlens must be (batch,) = (", batch, ",), got ",
              shape_or_none<A>(cache_seqlens));
  return width;
}

// x (contiguous; update_x's geometry), out sharing its strides.
template <class A>
void conv_fill_update(const typename A::Tensor& x, const typename A::Tensor& state, const typename A::Tensor& out,
                      const typename A::Tensor& weight, const std::optional<typename A::Tensor>& bias,
                      const std::optional<typename A::Tensor>& cache, const std::optional<typename A::Tensor>& indices,
                      bool silu, Conv1dUpdateParams& p) {
  const UpdateX g = update_x<A>(x);
  p.batch = g.batch;
  p.dim = g.dim;
  p.seqlen = g.seqlen;
  p.width = A::size(weight, 1);
  p.state_len = A::size(state, 2);
  p.n_states = A::size(state, 0);
  p.x_sb = g.sb;
  p.x_sd = g.sd;
  p.x_sl = g.sl;
  p.s_sb = A::stride(state, 0);
  p.s_sd = A::stride(state, 1);
  p.s_sl = A::stride(state, 2);
  p.x = A::template data<void>(x);
  p.out = A::template data<void>(out);
  p.state = A::template data<void>(state);
  p.weight = A::template data<float>(weight);
  p.bias = fptr<A>(bias);
  p.cache_seqlens = cache ? A::template data<int32_t>(*cache) : nullptr;
  p.state_indices = indices ? A::template data<int32_t>(*indices) : nullptr;
  p.silu = silu;
}

// Points the backward's parameters at dout, dfinal_states (may be absent) and the gradient buffers.
template <class A>
void conv_bind_bwd(const typename A::Tensor& dout_c, const std::optional<typename A::Tensor>& dfin,
                   const typename A::Tensor& dx, const typename A::Tensor& dw, const typename A::Tensor& db,
                   const std::optional<typename A::Tensor>& dinit, Conv1dBwdParams& p) {
  p.dout = A::template data<void>(dout_c);
  p.dfinal_states = fptr<A>(dfin);
  p.dx = A::template data<void>(dx);
  p.dweight = A::template data<float>(dw);
  p.dbias = A::template data<float>(db);
  p.dinitial_states = dinit ? A::template data<float>(*dinit) : nullptr;
}

// Checks of causal_conv1d_varlen_states's arguments.
template <class A>
void conv_check_varlen(const typename A::Tensor& x, const typename A::Tensor& cu_seqlens, int64_t state_len) {
  MAMBA_CHECK(A::dim(x) == 2, "mamba_ssm causal_conv1d_varlen_states: x must be (total_tokens, dim), got ",
              A::shape(x));
  MAMBA_CHECK(A::dim(cu_seqlens) == 1 && A::size(cu_seqlens, 0) >= 1,
              "mamba_ssm causal_conv1d_varlen_states: cu_seqlens must be (batch + 1,), got ", A::shape(cu_seqlens));
  MAMBA_CHECK(!is_floating(A::dtype(cu_seqlens)),
              "mamba_ssm causal_conv1d_varlen_states: cu_seqlens must be an integer tensor, got ",
              A::dtype_name(cu_seqlens));
  MAMBA_CHECK(state_len >= 1, "mamba_ssm causal_conv1d_varlen_states: state_len must be >= 1, got ", state_len);
  const int64_t es = static_cast<int64_t>(A::element_size(x));
  MAMBA_CHECK(es == 2 || es == 4 || es == 8, "mamba_ssm causal_conv1d_varlen_states: x's dtype ", A::dtype_name(x),
              " is not supported (2, 4 or 8 bytes per element)");
}

template <class A>
void conv_fill_varlen(const typename A::Tensor& x, const typename A::Tensor& cu, const typename A::Tensor& states,
                      int64_t state_len, Conv1dVarlenParams& p) {
  p.batch = A::size(cu, 0) - 1;
  p.dim = A::size(x, 1);
  p.state_len = state_len;
  p.total = A::size(x, 0);
  p.x_st = A::stride(x, 0);
  p.x_sd = A::stride(x, 1);
  p.x = A::template data<void>(x);
  p.states = A::template data<void>(states);
  p.cu_seqlens = A::template data<int32_t>(cu);
}

}  // namespace mamba_ssm
