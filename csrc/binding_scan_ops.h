// The selective-scan ops (CPU and CUDA/HIP), written once as templates over a tensor API `A` (see
// binding_common.h) and instantiated by each binding: binding.cpp / binding_cuda.cpp (classic ATen)
// and binding_stable.cpp / binding_stable_cuda.cpp (LibTorch stable ABI). Semantics: scan_params.h.
// Includes no torch header.
#pragma once
#include <algorithm>
#include <cstdint>

#include "binding_common.h"
#include "scan_cpu.h"
#include "scan_gpu.h"

namespace mamba_ssm {

inline ScalarKind kind_of(DType d) {
  switch (d) {
    case DType::kFloat16: return ScalarKind::kFloat16;
    case DType::kBFloat16: return ScalarKind::kBFloat16;
    default: return ScalarKind::kFloat32;
  }
}

// The storage dtypes of the prepared per-sequence tensors (prepare without a compute dtype keeps each
// one's own fp32 / fp16 / bf16; the CPU kernels convert a tile at a time).
template <class A>
CpuDtypes cpu_dtypes(const Prepared<A>& r, const typename A::Tensor* dout) {
  CpuDtypes k;
  k.u = kind_of(A::dtype(r.u));
  k.delta = kind_of(A::dtype(r.delta));
  if (r.z) k.z = kind_of(A::dtype(*r.z));
  if (r.b_variable) k.B = kind_of(A::dtype(r.B));
  if (r.c_variable) k.C = kind_of(A::dtype(r.C));
  if (dout) k.dout = kind_of(A::dtype(*dout));
  return k;
}

template <class A>
void check_dout(const typename A::Tensor& dout, const typename A::Tensor& u) {
  MAMBA_CHECK(A::shape(dout).v == A::shape(u).v, "mamba_ssm: dout must have u's shape ", A::shape(u), ", got ",
              A::shape(dout));
}

// ---------------------------------------------------------------------------------------------- CPU
template <class A>
FwdResult<A> selective_scan_fwd_cpu(const typename A::Tensor& u, const typename A::Tensor& delta,
                                    const typename A::Tensor& Am, const typename A::Tensor& B,
                                    const typename A::Tensor& C, const Opt<A>& D, const Opt<A>& z,
                                    const Opt<A>& delta_bias, bool delta_softplus) {
  const Prepared<A> r = prepare<A>(u, delta, Am, B, C, D, z, delta_bias, std::nullopt);
  ScanParams p;
  fill_params(r, delta_softplus, p);
  const CpuDtypes k = cpu_dtypes<A>(r, nullptr);
  scan_cpu_isa();  // a bad MAMBA_SSM_CPU_ISA raises here, before any work
  auto out = A::empty({r.batch, r.dim, r.seqlen}, A::dtype(r.u), r.u);
  auto last = A::zeros({r.batch, r.dim, r.dstate}, DType::kFloat32, r.u);
  p.out = A::template data<void>(out);
  p.last_state = A::template data<float>(last);
  A::parallel_tasks(r.batch * r.dim, A::cpu_threads(),
               [&](int64_t begin, int64_t end) { scan_fwd_cpu(p, k, begin, end); });
  return {out, last};
}

template <class A>
BwdResult<A> selective_scan_bwd_cpu(const typename A::Tensor& u, const typename A::Tensor& delta,
                                    const typename A::Tensor& Am, const typename A::Tensor& B,
                                    const typename A::Tensor& C, const Opt<A>& D, const Opt<A>& z,
                                    const Opt<A>& delta_bias, bool delta_softplus, const typename A::Tensor& dout,
                                    const Opt<A>& dlast_state) {
  const Prepared<A> r = prepare<A>(u, delta, Am, B, C, D, z, delta_bias, std::nullopt);
  check_dout<A>(dout, u);
  ScanBwdParams p;
  fill_params(r, delta_softplus, p);
  // dout in its own dtype when fp32 / fp16 / bf16 (else fp32), contiguous.
  const auto dout_c = as_contiguous<A>(dout, is_stream_dtype(A::dtype(dout)) ? A::dtype(dout) : DType::kFloat32);
  const CpuDtypes k = cpu_dtypes<A>(r, &dout_c);
  scan_cpu_isa();  // a bad MAMBA_SSM_CPU_ISA raises here, before any work
  const auto dlast = prepare_dlast_state<A>(r, dlast_state);
  const int64_t n_threads = A::cpu_threads();
  const int64_t n_split = cpu_bwd_split(r, n_threads);
  const DType f32 = DType::kFloat32;
  BwdBuffers<A> g;
  // du, ddelta, dz in the dtype of u, delta, z (the kernel rounds each row as it writes it).
  g.du = A::empty({r.batch, r.dim, r.seqlen}, A::dtype(r.u), r.u);
  g.ddelta = A::empty({r.batch, r.dim, r.seqlen}, A::dtype(r.delta), r.u);
  if (r.z) g.dz = A::empty({r.batch, r.dim, r.seqlen}, A::dtype(*r.z), r.u);
  g.dA = A::empty({r.batch, r.dim, r.dstate}, f32, r.u);
  g.dD = A::empty({r.batch, r.dim}, f32, r.u);
  g.dbias = A::empty({r.batch, r.dim}, f32, r.u);
  auto grad_bc = [&](bool var) {
    return var ? A::zeros({r.batch, n_split, r.groups, r.dstate, r.seqlen}, f32, r.u)
               : A::empty({r.batch, r.dim, r.dstate}, f32, r.u);
  };
  g.dB = grad_bc(r.b_variable);
  g.dC = grad_bc(r.c_variable);
  bind_bwd_buffers(g, dout_c, dlast, p);
  p.cpu_n_split = n_split;
  A::parallel_tasks(r.batch * n_split, n_threads, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) scan_bwd_cpu(p, k, task);
  });
  // Reduce the partials (over batch, or over the task split for variable B/C) and restore dtypes/shapes.
  return finish_bwd<A>(g, r, /*sum_variable_bc=*/true, u, delta, Am, B, C, D, z, delta_bias);
}

// ------------------------------------------------------------------------------------------ CUDA/HIP
template <class A>
void check_same_device(const typename A::Tensor& u, const typename A::Tensor& t, const char* name) {
  MAMBA_CHECK(A::same_device(t, u), "mamba_ssm: ", name, " is on ", A::device_name(t), " but u is on ",
              A::device_name(u), "; move every input to one device");
}

template <class A>
void check_devices(const typename A::Tensor& u, const Prepared<A>& r) {
  check_same_device<A>(u, r.delta, "delta");
  check_same_device<A>(u, r.A_, "A");
  check_same_device<A>(u, r.B, "B");
  check_same_device<A>(u, r.C, "C");
  if (r.D) check_same_device<A>(u, *r.D, "D");
  if (r.z) check_same_device<A>(u, *r.z, "z");
  if (r.delta_bias) check_same_device<A>(u, *r.delta_bias, "delta_bias");
}

// The GPU backward's output buffers: du, ddelta, dz in dt; dA and constant dB / dC (batch, dim, d_state) in
// state_dtype (fp32; complex64 for complex A); variable dB / dC (batch, groups, d_state, bc_len) fp32 (the
// kernels accumulate them with atomics). All partials zero-filled.
template <class A>
BwdBuffers<A> gpu_bwd_buffers(const Prepared<A>& r, DType dt, DType state_dtype, int64_t bc_len) {
  const DType f32 = DType::kFloat32;
  BwdBuffers<A> g;
  g.du = A::empty({r.batch, r.dim, r.seqlen}, dt, r.u);
  g.ddelta = A::empty({r.batch, r.dim, r.seqlen}, dt, r.u);
  if (r.z) g.dz = A::empty({r.batch, r.dim, r.seqlen}, dt, r.u);
  g.dA = A::zeros({r.batch, r.dim, r.dstate}, state_dtype, r.u);
  g.dD = A::zeros({r.batch, r.dim}, f32, r.u);
  g.dbias = A::zeros({r.batch, r.dim}, f32, r.u);
  auto grad_bc = [&](bool var) {
    return var ? A::zeros({r.batch, r.groups, r.dstate, bc_len}, f32, r.u)
               : A::zeros({r.batch, r.dim, r.dstate}, state_dtype, r.u);
  };
  g.dB = grad_bc(r.b_variable);
  g.dC = grad_bc(r.c_variable);
  return g;
}

template <class A>
FwdResult<A> selective_scan_fwd_cuda(const typename A::Tensor& u, const typename A::Tensor& delta,
                                     const typename A::Tensor& Am, const typename A::Tensor& B,
                                     const typename A::Tensor& C, const Opt<A>& D, const Opt<A>& z,
                                     const Opt<A>& delta_bias, bool delta_softplus) {
  const typename A::DeviceGuard guard(u);
  const Prepared<A> r = prepare<A>(u, delta, Am, B, C, D, z, delta_bias, A::dtype(u));
  check_devices<A>(u, r);
  ScanParams p;
  fill_params(r, delta_softplus, p);
  const char* why = gpu_unsupported_reason(p);
  MAMBA_CHECK(why == nullptr, "mamba_ssm: ", why);
  auto out = A::empty({r.batch, r.dim, r.seqlen}, A::dtype(r.u), r.u);
  auto last = A::empty({r.batch, r.dim, r.dstate}, DType::kFloat32, r.u);
  p.out = A::template data<void>(out);
  p.last_state = A::template data<float>(last);
  const char* err =
      gpu_launch(A::dtype(u), scan_fwd_gpu_fp32, scan_fwd_gpu_fp16, scan_fwd_gpu_bf16, p, A::stream(u));
  MAMBA_CHECK(err == nullptr, "mamba_ssm: selective_scan_fwd kernel failed: ", err);
  if (r.batch * r.dim == 0) A::zero_(last);
  return {out, last};
}

template <class A>
BwdResult<A> selective_scan_bwd_cuda(const typename A::Tensor& u, const typename A::Tensor& delta,
                                     const typename A::Tensor& Am, const typename A::Tensor& B,
                                     const typename A::Tensor& C, const Opt<A>& D, const Opt<A>& z,
                                     const Opt<A>& delta_bias, bool delta_softplus, const typename A::Tensor& dout,
                                     const Opt<A>& dlast_state) {
  const typename A::DeviceGuard guard(u);
  const Prepared<A> r = prepare<A>(u, delta, Am, B, C, D, z, delta_bias, A::dtype(u));
  check_devices<A>(u, r);
  check_dout<A>(dout, u);
  ScanBwdParams p;
  fill_params(r, delta_softplus, p);
  const char* why = gpu_unsupported_reason(p);
  MAMBA_CHECK(why == nullptr, "mamba_ssm: ", why);
  const DType f32 = DType::kFloat32, dt = A::dtype(u);
  const auto dout_c = as_contiguous<A>(dout, dt);
  const auto dlast = prepare_dlast_state<A>(r, dlast_state);
  BwdBuffers<A> g = gpu_bwd_buffers<A>(r, dt, f32, r.seqlen);
  auto ws = A::empty({std::max<int64_t>(1, r.batch * r.dim * gpu_num_chunks(r.seqlen) * r.dstate)}, f32, r.u);
  bind_bwd_buffers(g, dout_c, dlast, p);
  p.workspace = A::template data<float>(ws);
  const char* err = gpu_launch(dt, scan_bwd_gpu_fp32, scan_bwd_gpu_fp16, scan_bwd_gpu_bf16, p, A::stream(u));
  MAMBA_CHECK(err == nullptr, "mamba_ssm: selective_scan_bwd kernel failed: ", err);
  // Variable dB/dC were accumulated in place (no task split to sum over).
  return finish_bwd<A>(g, r, /*sum_variable_bc=*/false, u, delta, Am, B, C, D, z, delta_bias);
}

}  // namespace mamba_ssm
