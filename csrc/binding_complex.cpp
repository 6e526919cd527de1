// mamba_ssm._C: the complex-A selective-scan ops (schemas and CPU kernels). Like binding.cpp: no Python
// C API, per-op ATen headers; fake implementations and autograd are registered from Python
// (mamba_ssm/ops/backends/compiled_complex.py). The CUDA/HIP kernels are registered in
// binding_complex_cuda.cpp. Math and layouts: scan_complex.h.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/view_as_complex.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>

#include "binding_complex_common.h"
#include "cpu_parallel.h"
#include "scan_complex.h"

namespace mamba_ssm {
namespace {

// The CPU kernel reads and writes fp32 only: fp16/bf16 per-sequence tensors are converted whole.
FwdResult complex_fwd_cpu(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& B,
                          const at::Tensor& C, const std::optional<at::Tensor>& D,
                          const std::optional<at::Tensor>& z, const std::optional<at::Tensor>& delta_bias,
                          bool delta_softplus) {
  const Prepared r = prepare_complex(u, delta, A, B, C, D, z, delta_bias, at::kFloat);
  ScanParams p;
  fill_params(r, delta_softplus, p);
  const auto f32 = r.u.options();
  at::Tensor out = at::empty({r.batch, r.dim, r.seqlen}, f32);
  at::Tensor last = at::zeros({r.batch, r.dim, r.dstate, 2}, f32);
  p.out = out.data_ptr();
  p.last_state = last.data_ptr<float>();
  run_parallel(r.batch * r.dim, [&](int64_t begin, int64_t end) { scan_complex_fwd_cpu(p, begin, end); });
  return {out.to(u.scalar_type()), at::view_as_complex(last)};
}

BwdResult complex_bwd_cpu(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A, const at::Tensor& B,
                          const at::Tensor& C, const std::optional<at::Tensor>& D,
                          const std::optional<at::Tensor>& z, const std::optional<at::Tensor>& delta_bias,
                          bool delta_softplus, const at::Tensor& dout,
                          const std::optional<at::Tensor>& dlast_state) {
  const Prepared r = prepare_complex(u, delta, A, B, C, D, z, delta_bias, at::kFloat);
  TORCH_CHECK(dout.sizes() == u.sizes(), "mamba_ssm: dout must have u's shape ", u.sizes(), ", got ",
              dout.sizes());
  ScanBwdParams p;
  fill_params(r, delta_softplus, p);
  const auto f32 = r.u.options();
  const at::Tensor dout_c = dout.to(at::kFloat).contiguous();
  const at::Tensor dlast = prepare_dlast_complex(r, dlast_state);
  const bool variable = r.b_variable || r.c_variable;
  const int64_t n_threads = at::get_num_threads();
  // Variable B/C: a few channel ranges per batch, each with its own dB/dC slab; else one per channel.
  const int64_t n_split =
      variable ? std::max<int64_t>(1, std::min<int64_t>(r.dim, (n_threads + r.batch - 1) / r.batch)) : r.dim;
  BwdBuffers g;
  g.du = at::empty({r.batch, r.dim, r.seqlen}, f32);
  g.ddelta = at::empty({r.batch, r.dim, r.seqlen}, f32);
  g.dz = r.z.defined() ? at::empty({r.batch, r.dim, r.seqlen}, f32) : at::Tensor();
  g.dA = at::empty({r.batch, r.dim, r.dstate, 2}, f32);
  g.dD = at::empty({r.batch, r.dim}, f32);
  g.dbias = at::empty({r.batch, r.dim}, f32);
  auto grad_bc = [&](bool var) {
    return var ? at::zeros({r.batch, n_split, r.groups, r.dstate, 2 * r.seqlen}, f32)
               : at::empty({r.batch, r.dim, r.dstate, 2}, f32);
  };
  g.dB = grad_bc(r.b_variable);
  g.dC = grad_bc(r.c_variable);
  bind_bwd_buffers(g, dout_c, dlast, p);
  p.cpu_n_split = n_split;
  run_parallel(r.batch * n_split, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) scan_complex_bwd_cpu(p, task);
  });
  return finish_complex_bwd(g, r, /*sum_variable_bc=*/true, u, delta, A, B, C, D, z, delta_bias);
}

}  // namespace
}  // namespace mamba_ssm

TORCH_LIBRARY_FRAGMENT(mamba_ssm, m) {
  // out (u's dtype), last_state (batch, dim, d_state) complex64. Semantics: csrc/scan_complex.h.
  m.def(
      "selective_scan_complex_fwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
      "Tensor? delta_bias, bool delta_softplus) -> (Tensor, Tensor)");
  // du, ddelta, dA (complex), dB, dC (each like its input), dD, dz, ddelta_bias; dD / ddelta_bias / dz are
  // empty when that input is None. dlast_state: complex (batch, dim, d_state).
  m.def(
      "selective_scan_complex_bwd(Tensor u, Tensor delta, Tensor A, Tensor B, Tensor C, Tensor? D, Tensor? z, "
      "Tensor? delta_bias, bool delta_softplus, Tensor dout, Tensor? dlast_state) -> "
      "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(mamba_ssm, CPU, m) {
  m.impl("selective_scan_complex_fwd", &mamba_ssm::complex_fwd_cpu);
  m.impl("selective_scan_complex_bwd", &mamba_ssm::complex_bwd_cpu);
}
