// CUDA/HIP registrations of the causal conv1d ops (compiled by the host compiler; the kernels are in
// conv1d_{fp32,fp16,bf16}.cu). Empty unless MAMBA_SSM_WITH_CUDA is defined. Device guard + the current
// stream of the inputs' device, as binding_cuda.cpp. Inputs are read in x's dtype, accumulated in fp32.
#ifdef MAMBA_SSM_WITH_CUDA
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "binding_conv1d_common.h"
#include "conv1d_gpu.h"

namespace mamba_ssm {
namespace {

void conv_same_device(const at::Tensor& x, const at::Tensor& t, const char* name) {
  TORCH_CHECK(!t.defined() || t.device() == x.device(), "mamba_ssm causal_conv1d: ", name, " is on ", t.device(),
              " but x is on ", x.device(), "; move every input to one device");
}

void conv_check_devices(const at::Tensor& x, const ConvPrepared& r) {
  conv_same_device(x, r.weight, "weight");
  conv_same_device(x, r.bias, "bias");
  conv_same_device(x, r.seq_idx, "seq_idx");
  conv_same_device(x, r.init, "initial_states");
}

void* stream_of(const at::Tensor& x) { return c10::cuda::getCurrentCUDAStream(x.device().index()).stream(); }

ConvFwdResult conv_fwd_cuda(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            const std::optional<at::Tensor>& seq_idx, const std::optional<at::Tensor>& initial_states,
                            bool silu) {
  const c10::cuda::CUDAGuard guard(x.device());
  const ConvPrepared r = conv_prepare(x, weight, bias, seq_idx, initial_states, x.scalar_type(), false);
  conv_check_devices(x, r);
  Conv1dParams p;
  conv_fill_params(r, silu, p);
  at::Tensor out = conv_empty(r.batch, r.dim, r.seqlen, r.channel_last, r.x.options());
  at::Tensor fin = at::empty({r.batch, r.dim, r.width - 1}, r.x.options());
  p.out = out.data_ptr();
  p.final_states = fin.data_ptr();
  const char* err = nullptr;
  switch (x.scalar_type()) {
    case at::kFloat: err = conv1d_fwd_gpu_fp32(p, stream_of(x)); break;
    case at::kHalf: err = conv1d_fwd_gpu_fp16(p, stream_of(x)); break;
    default: err = conv1d_fwd_gpu_bf16(p, stream_of(x)); break;
  }
  TORCH_CHECK(err == nullptr, "mamba_ssm: causal_conv1d_fwd kernel failed: ", err);
  if (r.seqlen == 0) {  // no thread ran: the final states are the initial ones (or zeros)
    if (r.init.defined()) fin.copy_(r.init);
    else fin.zero_();
  }
  return {out, fin};
}

ConvBwdResult conv_bwd_cuda(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            const std::optional<at::Tensor>& seq_idx, const std::optional<at::Tensor>& initial_states,
                            const at::Tensor& dout, const std::optional<at::Tensor>& dfinal_states, bool silu) {
  const c10::cuda::CUDAGuard guard(x.device());
  const ConvPrepared r = conv_prepare(x, weight, bias, seq_idx, initial_states, x.scalar_type(), false);
  conv_check_devices(x, r);
  TORCH_CHECK(dout.sizes() == x.sizes(), "mamba_ssm causal_conv1d: dout must have x's shape ", x.sizes(), ", got ",
              dout.sizes());
  Conv1dBwdParams p;
  conv_fill_params(r, silu, p);
  const auto f32 = r.x.options().dtype(at::kFloat);
  const at::Tensor dout_c = conv_layout(dout, r.channel_last, x.scalar_type());
  const at::Tensor dfin = conv_prepare_dfinal(r, dfinal_states);
  at::Tensor dx = conv_empty(r.batch, r.dim, r.seqlen, r.channel_last, r.x.options());
  at::Tensor ws = conv_empty(r.batch, r.dim, r.seqlen, r.channel_last, f32);
  at::Tensor dw = at::zeros({r.dim, r.width}, f32);
  at::Tensor db = at::zeros({r.dim}, f32);
  at::Tensor dinit = r.init.defined() ? at::zeros({r.batch, r.dim, r.width - 1}, f32) : at::Tensor();
  p.dout = dout_c.data_ptr();
  p.dfinal_states = dfin.defined() ? dfin.data_ptr<float>() : nullptr;
  p.dx = dx.data_ptr();
  p.dweight = dw.data_ptr<float>();
  p.dbias = db.data_ptr<float>();
  p.dinitial_states = dinit.defined() ? dinit.data_ptr<float>() : nullptr;
  p.workspace = ws.data_ptr<float>();
  const char* err = nullptr;
  switch (x.scalar_type()) {
    case at::kFloat: err = conv1d_bwd_gpu_fp32(p, stream_of(x)); break;
    case at::kHalf: err = conv1d_bwd_gpu_fp16(p, stream_of(x)); break;
    default: err = conv1d_bwd_gpu_bf16(p, stream_of(x)); break;
  }
  TORCH_CHECK(err == nullptr, "mamba_ssm: causal_conv1d_bwd kernel failed: ", err);
  if (dinit.defined() && r.seqlen == 0 && dfin.defined()) dinit.copy_(dfin);
  return {dx, dw.to(weight.scalar_type()).view(weight.sizes()).contiguous(),
          has(bias) ? db.to(bias->scalar_type()) : at::empty({0}, f32),
          dinit.defined() ? dinit.to(initial_states->scalar_type()) : at::empty({0}, f32)};
}

at::Tensor conv_update_cuda(const at::Tensor& x_in, at::Tensor& conv_state, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, bool silu,
                            const std::optional<at::Tensor>& cache_seqlens,
                            const std::optional<at::Tensor>& conv_state_indices) {
  const c10::cuda::CUDAGuard guard(x_in.device());
  const at::Tensor x = x_in.dim() == 2 ? x_in.unsqueeze(-1) : x_in;  // one step: (batch, dim)
  conv_check_update(x, conv_state, weight, bias, cache_seqlens, conv_state_indices);
  TORCH_CHECK(conv_state.device() == x.device(), "mamba_ssm causal_conv1d_update: conv_state is on ",
              conv_state.device(), " but x is on ", x.device());
  const at::Tensor w = as_contiguous(weight, at::kFloat);
  const at::Tensor b = has(bias) ? as_contiguous(*bias, at::kFloat) : at::Tensor();
  const at::Tensor cache = has(cache_seqlens) ? as_contiguous(*cache_seqlens, at::kInt) : at::Tensor();
  const at::Tensor idx = has(conv_state_indices) ? as_contiguous(*conv_state_indices, at::kInt) : at::Tensor();
  // The kernel reads and writes the state in x's dtype; another dtype goes through a copy.
  const bool in_place = conv_state.scalar_type() == x.scalar_type();
  at::Tensor state = in_place ? conv_state : conv_state.to(x.scalar_type());
  at::Tensor out = at::empty(x_in.sizes(), x.options());  // x's shape; contiguous like (batch, dim, seqlen)
  Conv1dUpdateParams p;
  const at::Tensor xc = x.contiguous();  // out (contiguous) shares its strides
  conv_fill_update(xc, state, out, w, b, cache, idx, silu, p);
  const char* err = nullptr;
  switch (x.scalar_type()) {
    case at::kFloat: err = conv1d_update_gpu_fp32(p, stream_of(x)); break;
    case at::kHalf: err = conv1d_update_gpu_fp16(p, stream_of(x)); break;
    default: err = conv1d_update_gpu_bf16(p, stream_of(x)); break;
  }
  TORCH_CHECK(err == nullptr, "mamba_ssm: causal_conv1d_update kernel failed: ", err);
  if (!in_place) conv_state.copy_(state);
  return out;
}

at::Tensor conv_varlen_states_cuda(const at::Tensor& x, const at::Tensor& cu_seqlens, int64_t state_len) {
  const c10::cuda::CUDAGuard guard(x.device());
  conv_check_varlen(x, cu_seqlens, state_len);
  const at::Tensor cu = cu_seqlens.to(x.device(), at::kInt).contiguous();
  at::Tensor states = conv_empty(cu.size(0) - 1, x.size(1), state_len, true, x.options());  // (batch, state_len, dim) in memory
  Conv1dVarlenParams p;
  conv_fill_varlen(x, cu, states, state_len, p);
  const char* err = conv1d_varlen_states_gpu(p, static_cast<int>(x.element_size()), stream_of(x));
  TORCH_CHECK(err == nullptr, "mamba_ssm: causal_conv1d_varlen_states kernel failed: ", err);
  return states;
}

}  // namespace
}  // namespace mamba_ssm

TORCH_LIBRARY_IMPL(mamba_ssm, CUDA, m) {
  m.impl("causal_conv1d_fwd", &mamba_ssm::conv_fwd_cuda);
  m.impl("causal_conv1d_bwd", &mamba_ssm::conv_bwd_cuda);
  m.impl("causal_conv1d_update", &mamba_ssm::conv_update_cuda);
  m.impl("causal_conv1d_varlen_states", &mamba_ssm::conv_varlen_states_cuda);
}
#endif  // MAMBA_SSM_WITH_CUDA
