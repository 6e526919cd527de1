// mamba_ssm._C: the causal conv1d ops (schemas and CPU kernels). Like binding.cpp: no Python C API,
// per-op ATen headers; fake implementations and autograd are registered from Python
// (mamba_ssm/ops/backends/compiled_conv1d.py). The CUDA/HIP kernels are registered in
// binding_conv1d_cuda.cpp. Math: conv1d_params.h.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include "binding_conv1d_common.h"
#include "conv1d_cpu.h"
#include "cpu_parallel.h"

namespace mamba_ssm {
namespace {

// Below this many elements a call runs on the calling thread (starting threads costs more).
constexpr int64_t kConvSerialElems = 1 << 16;

template <typename F>
void conv_run(int64_t n_tasks, int64_t elems, const F& fn) {
  if (elems < kConvSerialElems) {
    if (n_tasks > 0) fn(0, n_tasks);
  } else {
    run_parallel(n_tasks, fn);
  }
}

ConvFwdResult conv_fwd_cpu(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           const std::optional<at::Tensor>& seq_idx, const std::optional<at::Tensor>& initial_states,
                           bool silu) {
  const ConvPrepared r = conv_prepare(x, weight, bias, seq_idx, initial_states, at::kFloat, false);
  Conv1dParams p;
  conv_fill_params(r, silu, p);
  const auto f32 = r.x.options().dtype(at::kFloat);
  at::Tensor out = conv_empty(r.batch, r.dim, r.seqlen, r.channel_last, f32);
  at::Tensor fin = at::empty({r.batch, r.dim, r.width - 1}, f32);
  p.out = out.data_ptr();
  p.final_states = fin.data_ptr();
  conv_run(r.batch * conv_cpu_blocks(r.dim), r.batch * r.dim * r.seqlen,
           [&](int64_t begin, int64_t end) { conv1d_fwd_cpu(p, begin, end); });
  return {in_dtype(out, x.scalar_type()), in_dtype(fin, x.scalar_type())};
}

ConvBwdResult conv_bwd_cpu(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                           const std::optional<at::Tensor>& seq_idx, const std::optional<at::Tensor>& initial_states,
                           const at::Tensor& dout, const std::optional<at::Tensor>& dfinal_states, bool silu) {
  const ConvPrepared r = conv_prepare(x, weight, bias, seq_idx, initial_states, at::kFloat, true);
  TORCH_CHECK(dout.sizes() == x.sizes(), "mamba_ssm causal_conv1d: dout must have x's shape ", x.sizes(), ", got ",
              dout.sizes());
  Conv1dBwdParams p;
  conv_fill_params(r, silu, p);
  const auto f32 = r.x.options().dtype(at::kFloat);
  const at::Tensor dout_c = as_contiguous(dout, at::kFloat);
  const at::Tensor dfin = conv_prepare_dfinal(r, dfinal_states);
  at::Tensor dx = at::empty({r.batch, r.dim, r.seqlen}, f32);
  at::Tensor dw = at::empty({r.batch, r.dim, r.width}, f32);
  at::Tensor db = at::empty({r.batch, r.dim}, f32);
  at::Tensor dinit = r.init.defined() ? at::empty({r.batch, r.dim, r.width - 1}, f32) : at::Tensor();
  p.dout = dout_c.data_ptr();
  p.dfinal_states = dfin.defined() ? dfin.data_ptr<float>() : nullptr;
  p.dx = dx.data_ptr();
  p.dweight = dw.data_ptr<float>();
  p.dbias = db.data_ptr<float>();
  p.dinitial_states = dinit.defined() ? dinit.data_ptr<float>() : nullptr;
  conv_run(r.batch * conv_cpu_blocks(r.dim), r.batch * r.dim * r.seqlen,
           [&](int64_t begin, int64_t end) { conv1d_bwd_cpu(p, begin, end); });
  const bool cl = conv_channel_last(x);
  return {conv_layout(dx, cl, x.scalar_type()), dw.sum(0).to(weight.scalar_type()).view(weight.sizes()).contiguous(),
          has(bias) ? db.sum(0).to(bias->scalar_type()) : at::empty({0}, f32),
          dinit.defined() ? dinit.to(initial_states->scalar_type()) : at::empty({0}, f32)};
}

at::Tensor conv_update_cpu(const at::Tensor& x_in, at::Tensor& conv_state, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias, bool silu,
                           const std::optional<at::Tensor>& cache_seqlens,
                           const std::optional<at::Tensor>& conv_state_indices) {
  const at::Tensor x = x_in.dim() == 2 ? x_in.unsqueeze(-1) : x_in;  // one step: (batch, dim)
  conv_check_update(x, conv_state, weight, bias, cache_seqlens, conv_state_indices);
  const at::Tensor xf = as_contiguous(x, at::kFloat);  // out (contiguous) shares its strides
  const at::Tensor w = as_contiguous(weight, at::kFloat);
  const at::Tensor b = has(bias) ? as_contiguous(*bias, at::kFloat) : at::Tensor();
  const at::Tensor cache = has(cache_seqlens) ? as_contiguous(*cache_seqlens, at::kInt) : at::Tensor();
  const at::Tensor idx = has(conv_state_indices) ? as_contiguous(*conv_state_indices, at::kInt) : at::Tensor();
  if (idx.defined()) {
    const int32_t* v = idx.data_ptr<int32_t>();
    for (int64_t i = 0; i < idx.numel(); ++i)
      TORCH_CHECK(v[i] < conv_state.size(0), "mamba_ssm causal_conv1d_update: conv_state_indices[", i, "] = ", v[i],
                  " is not a row of conv_state (", conv_state.size(0), " rows; a negative index marks a padded slot)");
  }
  if (cache.defined()) {
    const int32_t* v = cache.data_ptr<int32_t>();
    for (int64_t i = 0; i < cache.numel(); ++i)
      TORCH_CHECK(v[i] >= 0, "mamba_ssm causal_conv1d_update: cache_seqlens[", i, "] = ", v[i], " is negative");
  }
  const bool in_place = conv_state.scalar_type() == at::kFloat;
  at::Tensor state = in_place ? conv_state : conv_state.to(at::kFloat);
  at::Tensor out = at::empty(x_in.sizes(), xf.options());  // x's shape; contiguous like (batch, dim, seqlen)
  Conv1dUpdateParams p;
  conv_fill_update(xf, state, out, w, b, cache, idx, silu, p);
  conv_run(p.dim, p.batch * p.dim * (p.seqlen + p.state_len),
           [&](int64_t begin, int64_t end) { conv1d_update_cpu(p, begin, end); });
  if (!in_place) conv_state.copy_(state);
  return in_dtype(out, x.scalar_type());
}

at::Tensor conv_varlen_states_cpu(const at::Tensor& x, const at::Tensor& cu_seqlens, int64_t state_len) {
  conv_check_varlen(x, cu_seqlens, state_len);
  const at::Tensor cu = as_contiguous(cu_seqlens, at::kInt);
  const int32_t* v = cu.data_ptr<int32_t>();
  for (int64_t i = 0; i < cu.numel(); ++i) {
    TORCH_CHECK(v[i] >= 0 && v[i] <= x.size(0) && (i == 0 || v[i] >= v[i - 1]),
                "mamba_ssm causal_conv1d_varlen_states: cu_seqlens must be non-decreasing within [0, total_tokens = ",
                x.size(0), "], got cu_seqlens[", i, "] = ", v[i]);
  }
  at::Tensor states = conv_empty(cu.size(0) - 1, x.size(1), state_len, true, x.options());  // (batch, state_len, dim) in memory
  Conv1dVarlenParams p;
  conv_fill_varlen(x, cu, states, state_len, p);
  const char* err = conv1d_varlen_states_cpu(p, static_cast<int>(x.element_size()));
  TORCH_CHECK(err == nullptr, "mamba_ssm: ", err);
  return states;
}

}  // namespace
}  // namespace mamba_ssm

TORCH_LIBRARY_FRAGMENT(mamba_ssm, m) {
  // out (x's layout: channel-last or contiguous, see binding_conv1d_common.h), final_states (batch, dim, width - 1).
  m.def(
      "causal_conv1d_fwd(Tensor x, Tensor weight, Tensor? bias, Tensor? seq_idx, Tensor? initial_states, "
      "bool silu) -> (Tensor, Tensor)");
  // dx (x's layout), dweight, dbias, dinitial_states; dbias / dinitial_states are empty when absent.
  m.def(
      "causal_conv1d_bwd(Tensor x, Tensor weight, Tensor? bias, Tensor? seq_idx, Tensor? initial_states, "
      "Tensor dout, Tensor? dfinal_states, bool silu) -> (Tensor, Tensor, Tensor, Tensor)");
  // out with x's shape ((batch, dim) or (batch, dim, seqlen)), contiguous; conv_state updated in place.
  m.def(
      "causal_conv1d_update(Tensor x, Tensor(a!) conv_state, Tensor weight, Tensor? bias, bool silu, "
      "Tensor? cache_seqlens, Tensor? conv_state_indices) -> Tensor");
  // states (batch, dim, state_len), strided as a (batch, state_len, dim) tensor in memory.
  m.def("causal_conv1d_varlen_states(Tensor x, Tensor cu_seqlens, int state_len) -> Tensor");
}

TORCH_LIBRARY_IMPL(mamba_ssm, CPU, m) {
  m.impl("causal_conv1d_fwd", &mamba_ssm::conv_fwd_cpu);
  m.impl("causal_conv1d_bwd", &mamba_ssm::conv_bwd_cpu);
  m.impl("causal_conv1d_update", &mamba_ssm::conv_update_cpu);
  m.impl("causal_conv1d_varlen_states", &mamba_ssm::conv_varlen_states_cpu);
}
