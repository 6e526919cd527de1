// CUDA/HIP registrations of the complex-A selective-scan ops (compiled by the host compiler; the kernels
// are in scan_complex_{fwd,bwd}_*.cu). Empty unless MAMBA_SSM_WITH_CUDA is defined. Like
// binding_cuda.cpp: device guard, the current stream of the inputs' device. Layouts: scan_complex.h.
#ifdef MAMBA_SSM_WITH_CUDA
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/view_as_complex.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>

#include "binding_complex_common.h"
#include "scan_complex.h"
#include "scan_gpu.h"

namespace mamba_ssm {
namespace {

void check_devices_complex(const at::Tensor& u, const Prepared& r) {
  for (const at::Tensor* t : {&r.delta, &r.A, &r.B, &r.C, &r.D, &r.z, &r.delta_bias})
    TORCH_CHECK(!t->defined() || t->device() == u.device(), "mamba_ssm: an input is on ", t->device(),
                " but u is on ", u.device(), "; move every input to one device");
}

FwdResult complex_fwd_cuda(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& B,
                           const at::Tensor& C, const std::optional<at::Tensor>& D,
                           const std::optional<at::Tensor>& z, const std::optional<at::Tensor>& delta_bias,
                           bool delta_softplus) {
  const c10::cuda::CUDAGuard guard(u.device());
  const Prepared r = prepare_complex(u, delta, A, B, C, D, z, delta_bias, u.scalar_type());
  check_devices_complex(u, r);
  ScanParams p;
  fill_params(r, delta_softplus, p);
  TORCH_CHECK(gpu_unsupported_reason(p) == nullptr, "mamba_ssm: ", gpu_unsupported_reason(p));
  at::Tensor out = at::empty({r.batch, r.dim, r.seqlen}, r.u.options());
  at::Tensor last = at::zeros({r.batch, r.dim, r.dstate, 2}, r.u.options().dtype(at::kFloat));
  p.out = out.data_ptr();
  p.last_state = last.data_ptr<float>();
  void* stream = c10::cuda::getCurrentCUDAStream(u.device().index()).stream();
  const char* err = nullptr;
  switch (u.scalar_type()) {
    case at::kFloat: err = scan_complex_fwd_gpu_fp32(p, stream); break;
    case at::kHalf: err = scan_complex_fwd_gpu_fp16(p, stream); break;
    default: err = scan_complex_fwd_gpu_bf16(p, stream); break;
  }
  TORCH_CHECK(err == nullptr, "mamba_ssm: selective_scan_complex_fwd kernel failed: ", err);
  return {out, at::view_as_complex(last)};
}

BwdResult complex_bwd_cuda(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& B,
                           const at::Tensor& C, const std::optional<at::Tensor>& D,
                           const std::optional<at::Tensor>& z, const std::optional<at::Tensor>& delta_bias,
                           bool delta_softplus, const at::Tensor& dout,
                           const std::optional<at::Tensor>& dlast_state) {
  const c10::cuda::CUDAGuard guard(u.device());
  const Prepared r = prepare_complex(u, delta, A, B, C, D, z, delta_bias, u.scalar_type());
  check_devices_complex(u, r);
  TORCH_CHECK(dout.sizes() == u.sizes(), "mamba_ssm: dout must have u's shape ", u.sizes(), ", got ",
              dout.sizes());
  ScanBwdParams p;
  fill_params(r, delta_softplus, p);
  TORCH_CHECK(gpu_unsupported_reason(p) == nullptr, "mamba_ssm: ", gpu_unsupported_reason(p));
  const auto f32 = r.u.options().dtype(at::kFloat);
  const at::Tensor dout_c = dout.to(u.scalar_type()).contiguous();
  const at::Tensor dlast = prepare_dlast_complex(r, dlast_state);
  BwdBuffers g;
  g.du = at::empty({r.batch, r.dim, r.seqlen}, r.u.options());
  g.ddelta = at::empty({r.batch, r.dim, r.seqlen}, r.u.options());
  g.dz = r.z.defined() ? at::empty({r.batch, r.dim, r.seqlen}, r.u.options()) : at::Tensor();
  g.dA = at::zeros({r.batch, r.dim, r.dstate, 2}, f32);
  g.dD = at::zeros({r.batch, r.dim}, f32);
  g.dbias = at::zeros({r.batch, r.dim}, f32);
  auto grad_bc = [&](bool var) {
    return var ? at::zeros({r.batch, r.groups, r.dstate, 2 * r.seqlen}, f32)
               : at::zeros({r.batch, r.dim, r.dstate, 2}, f32);
  };
  g.dB = grad_bc(r.b_variable);
  g.dC = grad_bc(r.c_variable);
  at::Tensor ws =
      at::empty({std::max<int64_t>(1, 2 * r.batch * r.dim * gpu_num_chunks(r.seqlen) * r.dstate)}, f32);
  bind_bwd_buffers(g, dout_c, dlast, p);
  p.workspace = ws.data_ptr<float>();
  void* stream = c10::cuda::getCurrentCUDAStream(u.device().index()).stream();
  const char* err = nullptr;
  switch (u.scalar_type()) {
    case at::kFloat: err = scan_complex_bwd_gpu_fp32(p, stream); break;
    case at::kHalf: err = scan_complex_bwd_gpu_fp16(p, stream); break;
    default: err = scan_complex_bwd_gpu_bf16(p, stream); break;
  }
  TORCH_CHECK(err == nullptr, "mamba_ssm: selective_scan_complex_bwd kernel failed: ", err);
  return finish_complex_bwd(g, r, /*sum_variable_bc=*/false, u, delta, A, B, C, D, z, delta_bias);
}

}  // namespace
}  // namespace mamba_ssm

TORCH_LIBRARY_IMPL(mamba_ssm, CUDA, m) {
  m.impl("selective_scan_complex_fwd", &mamba_ssm::complex_fwd_cuda);
  m.impl("selective_scan_complex_bwd", &mamba_ssm::complex_bwd_cuda);
}
#endif  // MAMBA_SSM_WITH_CUDA
