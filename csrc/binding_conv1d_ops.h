// The causal conv1d ops (CPU and CUDA/HIP), written once as templates over a tensor API `A` (see
// binding_common.h) and instantiated by each binding. Math: conv1d_params.h. Includes no torch header.
// CPU kernels read fp32 (the op converts fp16/bf16 in and out); GPU kernels read x's dtype and
// accumulate in fp32.
#pragma once
#include <cstdint>

#include "binding_conv1d_common.h"
#include "conv1d_cpu.h"
#include "conv1d_gpu.h"

namespace mamba_ssm {

// Below this many elements a CPU call runs on the calling thread (starting threads costs more).
constexpr int64_t kConvSerialElems = 1 << 16;

template <class A, typename F>
void conv_run(int64_t n_tasks, int64_t elems, const F& fn) {
  if (elems < kConvSerialElems) {
    if (n_tasks > 0) fn(0, n_tasks);
  } else {
    A::parallel_tasks(n_tasks, A::cpu_threads(), fn);
  }
}

// ---------------------------------------------------------------------------------------------- CPU
template <class A>
ConvFwdResult<A> causal_conv1d_fwd_cpu(const typename A::Tensor& x, const typename A::Tensor& weight,
                                       const Opt<A>& bias, const Opt<A>& seq_idx, const Opt<A>& initial_states,
                                       bool silu) {
  const ConvPrepared<A> r = conv_prepare<A>(x, weight, bias, seq_idx, initial_states, DType::kFloat32, false);
  Conv1dParams p;
  conv_fill_params(r, silu, p);
  const DType f32 = DType::kFloat32;
  auto out = conv_empty<A>(r.batch, r.dim, r.seqlen, r.channel_last, f32, r.x);
  auto fin = A::empty({r.batch, r.dim, r.width - 1}, f32, r.x);
  p.out = A::template data<void>(out);
  p.final_states = A::template data<void>(fin);
  conv_run<A>(r.batch * conv_cpu_blocks(r.dim), r.batch * r.dim * r.seqlen,
              [&](int64_t begin, int64_t end) { conv1d_fwd_cpu(p, begin, end); });
  return {in_dtype<A>(out, A::dtype(x)), in_dtype<A>(fin, A::dtype(x))};
}

template <class A>
void check_conv_dout(const typename A::Tensor& dout, const typename A::Tensor& x) {
  MAMBA_CHECK(A::shape(dout).v == A::shape(x).v, "mamba_ssm causal_conv1d: dout must have x's shape ", A::shape(x),
              ", got ", A::shape(dout));
}

template <class A>
ConvBwdResult<A> causal_conv1d_bwd_cpu(const typename A::Tensor& x, const typename A::Tensor& weight,
                                       const Opt<A>& bias, const Opt<A>& seq_idx, const Opt<A>& initial_states,
                                       const typename A::Tensor& dout, const Opt<A>& dfinal_states, bool silu) {
  const ConvPrepared<A> r = conv_prepare<A>(x, weight, bias, seq_idx, initial_states, DType::kFloat32, true);
  check_conv_dout<A>(dout, x);
  Conv1dBwdParams p;
  conv_fill_params(r, silu, p);
  const DType f32 = DType::kFloat32;
  const auto dout_c = as_contiguous<A>(dout, f32);
  const auto dfin = conv_prepare_dfinal<A>(r, dfinal_states);
  auto dx = A::empty({r.batch, r.dim, r.seqlen}, f32, r.x);
  auto dw = A::empty({r.batch, r.dim, r.width}, f32, r.x);
  auto db = A::empty({r.batch, r.dim}, f32, r.x);
  std::optional<typename A::Tensor> dinit;
  if (r.init) dinit = A::empty({r.batch, r.dim, r.width - 1}, f32, r.x);
  conv_bind_bwd<A>(dout_c, dfin, dx, dw, db, dinit, p);
  conv_run<A>(r.batch * conv_cpu_blocks(r.dim), r.batch * r.dim * r.seqlen,
              [&](int64_t begin, int64_t end) { conv1d_bwd_cpu(p, begin, end); });
  const bool cl = conv_channel_last<A>(x);
  return {conv_layout<A>(dx, cl, A::dtype(x)),
          A::contiguous(A::view(in_dtype<A>(A::sum(dw, 0), A::dtype(weight)), A::shape(weight).v)),
          has<A>(bias) ? in_dtype<A>(A::sum(db, 0), A::dtype(*bias)) : A::empty({0}, f32, r.x),
          dinit ? in_dtype<A>(*dinit, A::dtype(*initial_states)) : A::empty({0}, f32, r.x)};
}

template <class A>
typename A::Tensor causal_conv1d_update_cpu(const typename A::Tensor& x_in, typename A::Tensor& conv_state,
                                            const typename A::Tensor& weight, const Opt<A>& bias, bool silu,
                                            const Opt<A>& cache_seqlens, const Opt<A>& conv_state_indices) {
  using T = typename A::Tensor;
  const T& x = x_in;  // (batch, dim, seqlen), or (batch, dim): one step
  conv_check_update<A>(x, conv_state, weight, bias, cache_seqlens, conv_state_indices);
  const DType f32 = DType::kFloat32;
  const T xf = as_contiguous<A>(x, f32);  // out (contiguous, x's shape) shares its strides
  const T w = as_contiguous<A>(weight, f32);
  std::optional<T> b, cache, idx;
  if (has<A>(bias)) b = as_contiguous<A>(*bias, f32);
  if (has<A>(cache_seqlens)) cache = as_contiguous<A>(*cache_seqlens, DType::kInt32);
  if (has<A>(conv_state_indices)) idx = as_contiguous<A>(*conv_state_indices, DType::kInt32);
  const int64_t n_states = A::size(conv_state, 0);
  if (idx) {
    const int32_t* v = A::template data<int32_t>(*idx);
    for (int64_t i = 0; i < A::numel(*idx); ++i)
      MAMBA_CHECK(v[i] < n_states, "mamba_ssm causal_conv1d_update: conv_state_indices[", i, "] = ", v[i],
                  " is not a row of conv_state (", n_states, " rows; a negative index marks a padded slot)");
  }
  if (cache) {
    const int32_t* v = A::template data<int32_t>(*cache);
    for (int64_t i = 0; i < A::numel(*cache); ++i)
      MAMBA_CHECK(v[i] >= 0, "mamba_ssm causal_conv1d_update: cache_seqlens[", i, "] = ", v[i], " is negative");
  }
  const bool in_place = A::dtype(conv_state) == f32;
  T state = in_place ? conv_state : A::to(conv_state, f32);
  T out = A::empty(A::shape(x_in).v, f32, xf);  // x's shape; contiguous like (batch, dim, seqlen)
  Conv1dUpdateParams p;
  conv_fill_update<A>(xf, state, out, w, b, cache, idx, silu, p);
  conv_run<A>(p.dim, p.batch * p.dim * (p.seqlen + p.state_len),
              [&](int64_t begin, int64_t end) { conv1d_update_cpu(p, begin, end); });
  if (!in_place) A::copy_(conv_state, state);
  return in_dtype<A>(out, A::dtype(x));
}

template <class A>
void check_cu_seqlens_values(const int32_t* v, int64_t n, int64_t total) {
  for (int64_t i = 0; i < n; ++i) {
    MAMBA_CHECK(v[i] >= 0 && v[i] <= total && (i == 0 || v[i] >= v[i - 1]),
                "mamba_ssm causal_conv1d_varlen_states: cu_seqlens must be non-decreasing within [0, total_tokens = ",
                total, "], got cu_seqlens[", i, "] = ", v[i]);
  }
}

template <class A>
typename A::Tensor causal_conv1d_varlen_states_cpu(const typename A::Tensor& x, const typename A::Tensor& cu_seqlens,
                                                   int64_t state_len) {
  conv_check_varlen<A>(x, cu_seqlens, state_len);
  const auto cu = as_contiguous<A>(cu_seqlens, DType::kInt32);
  check_cu_seqlens_values<A>(A::template data<int32_t>(cu), A::numel(cu), A::size(x, 0));
  // (batch, dim, state_len), (batch, state_len, dim) in memory: the layout causal_conv1d_update reads.
  auto states = conv_empty<A>(A::size(cu, 0) - 1, A::size(x, 1), state_len, true, A::dtype(x), x);
  Conv1dVarlenParams p;
  conv_fill_varlen<A>(x, cu, states, state_len, p);
  const char* err = conv1d_varlen_states_cpu(p, static_cast<int>(A::element_size(x)));
  MAMBA_CHECK(err == nullptr, "mamba_ssm: ", err);
  return states;
}

// ------------------------------------------------------------------------------------------ CUDA/HIP
template <class A>
void conv_same_device(const typename A::Tensor& x, const std::optional<typename A::Tensor>& t, const char* name) {
  MAMBA_CHECK(!t || A::same_device(*t, x), "mamba_ssm causal_conv1d: ", name, " is on ", A::device_name(*t),
              " but x is on ", A::device_name(x), "; move every input to one device");
}

template <class A>
void conv_check_devices(const typename A::Tensor& x, const ConvPrepared<A>& r) {
  conv_same_device<A>(x, r.weight, "weight");
  conv_same_device<A>(x, r.bias, "bias");
  conv_same_device<A>(x, r.seq_idx, "seq_idx");
  conv_same_device<A>(x, r.init, "initial_states");
}

template <class A>
ConvFwdResult<A> causal_conv1d_fwd_cuda(const typename A::Tensor& x, const typename A::Tensor& weight,
                                        const Opt<A>& bias, const Opt<A>& seq_idx, const Opt<A>& initial_states,
                                        bool silu) {
  const typename A::DeviceGuard guard(x);
  const DType dt = A::dtype(x);
  const ConvPrepared<A> r = conv_prepare<A>(x, weight, bias, seq_idx, initial_states, dt, false);
  conv_check_devices<A>(x, r);
  Conv1dParams p;
  conv_fill_params(r, silu, p);
  auto out = conv_empty<A>(r.batch, r.dim, r.seqlen, r.channel_last, dt, r.x);
  auto fin = A::empty({r.batch, r.dim, r.width - 1}, dt, r.x);
  p.out = A::template data<void>(out);
  p.final_states = A::template data<void>(fin);
  const char* err = gpu_launch(dt, conv1d_fwd_gpu_fp32, conv1d_fwd_gpu_fp16, conv1d_fwd_gpu_bf16, p, A::stream(x));
  MAMBA_CHECK(err == nullptr, "mamba_ssm: causal_conv1d_fwd kernel failed: ", err);
  if (r.seqlen == 0) {  // no thread ran: the final states are the initial ones (or zeros)
    if (r.init) A::copy_(fin, *r.init);
    else A::zero_(fin);
  }
  return {out, fin};
}

template <class A>
ConvBwdResult<A> causal_conv1d_bwd_cuda(const typename A::Tensor& x, const typename A::Tensor& weight,
                                        const Opt<A>& bias, const Opt<A>& seq_idx, const Opt<A>& initial_states,
                                        const typename A::Tensor& dout, const Opt<A>& dfinal_states, bool silu) {
  const typename A::DeviceGuard guard(x);
  const DType dt = A::dtype(x), f32 = DType::kFloat32;
  const ConvPrepared<A> r = conv_prepare<A>(x, weight, bias, seq_idx, initial_states, dt, false);
  conv_check_devices<A>(x, r);
  check_conv_dout<A>(dout, x);
  Conv1dBwdParams p;
  conv_fill_params(r, silu, p);
  const auto dout_c = conv_layout<A>(dout, r.channel_last, dt);
  const auto dfin = conv_prepare_dfinal<A>(r, dfinal_states);
  auto dx = conv_empty<A>(r.batch, r.dim, r.seqlen, r.channel_last, dt, r.x);
  auto ws = conv_empty<A>(r.batch, r.dim, r.seqlen, r.channel_last, f32, r.x);
  auto dw = A::zeros({r.dim, r.width}, f32, r.x);
  auto db = A::zeros({r.dim}, f32, r.x);
  std::optional<typename A::Tensor> dinit;
  if (r.init) dinit = A::zeros({r.batch, r.dim, r.width - 1}, f32, r.x);
  conv_bind_bwd<A>(dout_c, dfin, dx, dw, db, dinit, p);
  p.workspace = A::template data<float>(ws);
  const char* err = gpu_launch(dt, conv1d_bwd_gpu_fp32, conv1d_bwd_gpu_fp16, conv1d_bwd_gpu_bf16, p, A::stream(x));
  MAMBA_CHECK(err == nullptr, "mamba_ssm: causal_conv1d_bwd kernel failed: ", err);
  if (dinit && r.seqlen == 0 && dfin) A::copy_(*dinit, *dfin);
  return {dx, A::contiguous(A::view(in_dtype<A>(dw, A::dtype(weight)), A::shape(weight).v)),
          has<A>(bias) ? in_dtype<A>(db, A::dtype(*bias)) : A::empty({0}, f32, r.x),
          dinit ? in_dtype<A>(*dinit, A::dtype(*initial_states)) : A::empty({0}, f32, r.x)};
}

template <class A>
typename A::Tensor causal_conv1d_update_cuda(const typename A::Tensor& x_in, typename A::Tensor& conv_state,
                                             const typename A::Tensor& weight, const Opt<A>& bias, bool silu,
                                             const Opt<A>& cache_seqlens, const Opt<A>& conv_state_indices) {
  using T = typename A::Tensor;
  const typename A::DeviceGuard guard(x_in);
  const T& x = x_in;  // (batch, dim, seqlen), or (batch, dim): one step
  conv_check_update<A>(x, conv_state, weight, bias, cache_seqlens, conv_state_indices);
  MAMBA_CHECK(A::same_device(conv_state, x), "mamba_ssm causal_conv1d_update: conv_state is on ",
              A::device_name(conv_state), " but x is on ", A::device_name(x));
  const DType dt = A::dtype(x), f32 = DType::kFloat32;
  const T w = as_contiguous<A>(weight, f32);
  std::optional<T> b, cache, idx;
  if (has<A>(bias)) b = as_contiguous<A>(*bias, f32);
  if (has<A>(cache_seqlens)) cache = as_contiguous<A>(*cache_seqlens, DType::kInt32);
  if (has<A>(conv_state_indices)) idx = as_contiguous<A>(*conv_state_indices, DType::kInt32);
  // The kernel reads and writes the state in x's dtype; another dtype goes through a copy.
  const bool in_place = A::dtype(conv_state) == dt;
  T state = in_place ? conv_state : A::to(conv_state, dt);
  T out = A::empty(A::shape(x_in).v, dt, x);  // x's shape; contiguous like (batch, dim, seqlen)
  Conv1dUpdateParams p;
  const T xc = A::contiguous(x);  // out (contiguous) shares its strides
  conv_fill_update<A>(xc, state, out, w, b, cache, idx, silu, p);
  const char* err =
      gpu_launch(dt, conv1d_update_gpu_fp32, conv1d_update_gpu_fp16, conv1d_update_gpu_bf16, p, A::stream(x));
  MAMBA_CHECK(err == nullptr, "mamba_ssm: causal_conv1d_update kernel failed: ", err);
  if (!in_place) A::copy_(conv_state, state);
  return out;
}

template <class A>
typename A::Tensor causal_conv1d_varlen_states_cuda(const typename A::Tensor& x, const typename A::Tensor& cu_seqlens,
                                                    int64_t state_len) {
  const typename A::DeviceGuard guard(x);
  conv_check_varlen<A>(x, cu_seqlens, state_len);
  const auto cu = A::contiguous(A::to_device_of(cu_seqlens, DType::kInt32, x));
  // (batch, dim, state_len), (batch, state_len, dim) in memory: the layout causal_conv1d_update reads.
  auto states = conv_empty<A>(A::size(cu, 0) - 1, A::size(x, 1), state_len, true, A::dtype(x), x);
  Conv1dVarlenParams p;
  conv_fill_varlen<A>(x, cu, states, state_len, p);
  const char* err = conv1d_varlen_states_gpu(p, static_cast<int>(A::element_size(x)), A::stream(x));
  MAMBA_CHECK(err == nullptr, "mamba_ssm: causal_conv1d_varlen_states kernel failed: ", err);
  return states;
}

}  // namespace mamba_ssm
