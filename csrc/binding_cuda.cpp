// CUDA/HIP registrations of the selective-scan ops (compiled by the host compiler; the kernels are in
// the scan_{fwd,bwd}_*.cu translation units). Empty unless MAMBA_SSM_WITH_CUDA is defined, so a
// CPU-only build compiles every csrc/*.cpp unchanged. The binding honours the inputs' device (device
// guard) and the current stream of that device.
#ifdef MAMBA_SSM_WITH_CUDA
// Per-op ATen headers instead of <ATen/ATen.h>: half the compile time of this file.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "binding_common.h"
#include "scan_gpu.h"

namespace mamba_ssm {
namespace {

void check_same_device(const at::Tensor& u, const at::Tensor& t, const char* name) {
  TORCH_CHECK(!t.defined() || t.device() == u.device(), "mamba_ssm: ", name, " is on ", t.device(),
              " but u is on ", u.device(), "; move every input to one device");
}

void check_devices(const at::Tensor& u, const Prepared& r) {
  check_same_device(u, r.delta, "delta");
  check_same_device(u, r.A, "A");
  check_same_device(u, r.B, "B");
  check_same_device(u, r.C, "C");
  check_same_device(u, r.D, "D");
  check_same_device(u, r.z, "z");
  check_same_device(u, r.delta_bias, "delta_bias");
}

FwdResult fwd_cuda(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& B,
                   const at::Tensor& C, const std::optional<at::Tensor>& D,
                   const std::optional<at::Tensor>& z, const std::optional<at::Tensor>& delta_bias,
                   bool delta_softplus) {
  const c10::cuda::CUDAGuard guard(u.device());
  const Prepared r = prepare(u, delta, A, B, C, D, z, delta_bias, u.scalar_type());
  check_devices(u, r);
  ScanParams p;
  fill_params(r, delta_softplus, p);
  TORCH_CHECK(gpu_unsupported_reason(p) == nullptr, "mamba_ssm: ", gpu_unsupported_reason(p));
  at::Tensor out = at::empty({r.batch, r.dim, r.seqlen}, r.u.options());
  at::Tensor last = at::empty({r.batch, r.dim, r.dstate}, r.u.options().dtype(at::kFloat));
  p.out = out.data_ptr();
  p.last_state = last.data_ptr<float>();
  void* stream = c10::cuda::getCurrentCUDAStream(u.device().index()).stream();
  const char* err = nullptr;
  switch (u.scalar_type()) {
    case at::kFloat: err = scan_fwd_gpu_fp32(p, stream); break;
    case at::kHalf: err = scan_fwd_gpu_fp16(p, stream); break;
    default: err = scan_fwd_gpu_bf16(p, stream); break;
  }
  TORCH_CHECK(err == nullptr, "mamba_ssm: selective_scan_fwd kernel failed: ", err);
  if (r.batch * r.dim == 0) last.zero_();
  return {out, last};
}

BwdResult bwd_cuda(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& B,
                   const at::Tensor& C, const std::optional<at::Tensor>& D,
                   const std::optional<at::Tensor>& z, const std::optional<at::Tensor>& delta_bias,
                   bool delta_softplus, const at::Tensor& dout,
                   const std::optional<at::Tensor>& dlast_state) {
  const c10::cuda::CUDAGuard guard(u.device());
  const Prepared r = prepare(u, delta, A, B, C, D, z, delta_bias, u.scalar_type());
  check_devices(u, r);
  TORCH_CHECK(dout.sizes() == u.sizes(), "mamba_ssm: dout must have u's shape ", u.sizes(), ", got ",
              dout.sizes());
  ScanBwdParams p;
  fill_params(r, delta_softplus, p);
  TORCH_CHECK(gpu_unsupported_reason(p) == nullptr, "mamba_ssm: ", gpu_unsupported_reason(p));
  const auto f32 = r.u.options().dtype(at::kFloat);
  const at::Tensor dout_c = dout.to(u.scalar_type()).contiguous();
  const at::Tensor dlast = prepare_dlast_state(r, dlast_state);
  BwdBuffers g;
  g.du = at::empty({r.batch, r.dim, r.seqlen}, r.u.options());
  g.ddelta = at::empty({r.batch, r.dim, r.seqlen}, r.u.options());
  g.dz = r.z.defined() ? at::empty({r.batch, r.dim, r.seqlen}, r.u.options()) : at::Tensor();
  g.dA = at::zeros({r.batch, r.dim, r.dstate}, f32);
  g.dD = at::zeros({r.batch, r.dim}, f32);
  g.dbias = at::zeros({r.batch, r.dim}, f32);
  auto grad_bc = [&](bool var) {
    return var ? at::zeros({r.batch, r.groups, r.dstate, r.seqlen}, f32) : at::zeros({r.batch, r.dim, r.dstate}, f32);
  };
  g.dB = grad_bc(r.b_variable);
  g.dC = grad_bc(r.c_variable);
  at::Tensor ws = at::empty({std::max<int64_t>(1, r.batch * r.dim * gpu_num_chunks(r.seqlen) * r.dstate)}, f32);
  bind_bwd_buffers(g, dout_c, dlast, p);
  p.workspace = ws.data_ptr<float>();
  void* stream = c10::cuda::getCurrentCUDAStream(u.device().index()).stream();
  const char* err = nullptr;
  switch (u.scalar_type()) {
    case at::kFloat: err = scan_bwd_gpu_fp32(p, stream); break;
    case at::kHalf: err = scan_bwd_gpu_fp16(p, stream); break;
    default: err = scan_bwd_gpu_bf16(p, stream); break;
  }
  TORCH_CHECK(err == nullptr, "mamba_ssm: selective_scan_bwd kernel failed: ", err);
  // Variable dB/dC were accumulated in place (no task split to sum over).
  return finish_bwd(g, r, /*sum_variable_bc=*/false, u, delta, A, B, C, D, z, delta_bias);
}

}  // namespace
}  // namespace mamba_ssm

TORCH_LIBRARY_IMPL(mamba_ssm, CUDA, m) {
  m.impl("selective_scan_fwd", &mamba_ssm::fwd_cuda);
  m.impl("selective_scan_bwd", &mamba_ssm::bwd_cuda);
}
#endif  // MAMBA_SSM_WITH_CUDA
