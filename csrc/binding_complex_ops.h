// The complex-A selective-scan ops (CPU and CUDA/HIP), templates over a tensor API `A` (binding_common.h)
// instantiated by each binding through binding_registry.h, like the real ones (binding_scan_ops.h).
// Complex tensors reach the kernels as raw complex64 memory, i.e. interleaved (re, im) fp32 pairs; math
// and layouts: scan_complex.h. The checks, parameters and gradient reduction are binding_common.h's, with
// these differences: A and constant B / C are complex (dim, d_state); variable B / C are real (batch,
// [groups,] d_state, 2 * seqlen) with (re, im) interleaved along time; last_state, dlast_state, dA and
// constant dB / dC are complex. Includes no torch header.
#pragma once
#include <algorithm>
#include <cstdint>

#include "binding_common.h"
#include "binding_scan_ops.h"
#include "scan_complex.h"
#include "scan_gpu.h"

namespace mamba_ssm {

// t as contiguous complex64 memory (a complex128 t converted, a set conjugate bit resolved).
template <class A>
typename A::Tensor as_complex64(const typename A::Tensor& t) {
  return A::contiguous(A::resolve_conj(in_dtype<A>(t, DType::kComplex64)));
}

// Checks and converts the inputs of a complex-A call. compute_dtype: the dtype u, delta, z (and variable
// B/C, unless fp32) are read in: fp32 on the CPU (its kernel reads fp32 only), u's dtype on GPUs.
template <class A>
Prepared<A> prepare_complex(const typename A::Tensor& u, const typename A::Tensor& delta,
                            const typename A::Tensor& Am, const typename A::Tensor& B, const typename A::Tensor& C,
                            const Opt<A>& D, const Opt<A>& z, const Opt<A>& delta_bias, DType compute_dtype) {
  using T = typename A::Tensor;
  check_u_delta<A>(u, delta);
  const DType a_dtype = A::dtype(Am);
  MAMBA_CHECK((a_dtype == DType::kComplex64 || a_dtype == DType::kComplex128) && A::dim(Am) == 2 &&
                  A::size(Am, 0) == A::size(u, 1),
              "mamba_ssm: complex A must be complex64/complex128 (dim, d_state) = (", A::size(u, 1),
              ", d_state), got ", A::dtype_name(Am), " ", A::shape(Am));
  Prepared<A> r = prepared_sizes<A>(u, Am, B, C);
  auto check_bc = [&](const T& t, const char* name) -> int64_t {
    const DType d = A::dtype(t);
    if (!is_variable<A>(t)) {
      MAMBA_CHECK((d == DType::kComplex64 || d == DType::kComplex128) && A::dim(t) == 2 &&
                      A::size(t, 0) == r.dim && A::size(t, 1) == r.dstate,
                  "mamba_ssm: ", name, " must be complex (dim, d_state) = (", r.dim, ", ", r.dstate,
                  ") or variable with complex A, got ", A::dtype_name(t), " ", A::shape(t));
      return 0;
    }
    const std::vector<int64_t> g = grouped_sizes<A>(t);
    MAMBA_CHECK(is_stream_dtype(d) && g.size() == 4 && g[0] == r.batch && g[2] == r.dstate &&
                    g[3] == 2 * r.seqlen && g[1] >= 1 && r.dim % g[1] == 0,
                "mamba_ssm: variable ", name, " with complex A must be float32/float16/bfloat16 (batch, d_state, ",
                "2 * seqlen) or (batch, groups, d_state, 2 * seqlen) with groups dividing dim = ", r.dim,
                " (re, im interleaved along time), got ", A::dtype_name(t), " ", A::shape(t));
    return g[1];
  };
  const int64_t gb = check_bc(B, "B");  // B's error first when both are wrong
  set_groups(r, gb, check_bc(C, "C"));
  r.u = as_contiguous<A>(u, compute_dtype);
  r.delta = as_contiguous<A>(delta, compute_dtype);
  r.A_ = as_complex64<A>(Am);
  auto conv_bc = [&](const T& t) {
    if (!is_variable<A>(t)) return as_complex64<A>(t);
    return as_contiguous<A>(t, A::dtype(t) == compute_dtype ? compute_dtype : DType::kFloat32);
  };
  r.B = conv_bc(B);
  r.C = conv_bc(C);
  if (r.b_variable && r.c_variable && A::dtype(r.B) != A::dtype(r.C)) {
    r.B = A::to(r.B, DType::kFloat32);
    r.C = A::to(r.C, DType::kFloat32);
  }
  prepare_options<A>(r, u, D, z, delta_bias, compute_dtype);
  return r;
}

// dlast_state (batch, dim, d_state) complex as contiguous complex64, or empty when absent.
template <class A>
std::optional<typename A::Tensor> prepare_dlast_complex(const Prepared<A>& r, const Opt<A>& dlast_state) {
  if (!has<A>(dlast_state)) return std::nullopt;
  MAMBA_CHECK(is_complex(A::dtype(*dlast_state)) && A::numel(*dlast_state) == r.batch * r.dim * r.dstate,
              "mamba_ssm: dlast_state must be complex (batch, dim, d_state), got ", A::dtype_name(*dlast_state),
              " ", A::shape(*dlast_state));
  return as_complex64<A>(*dlast_state);
}

// ---------------------------------------------------------------------------------------------- CPU
// The CPU kernel reads and writes fp32 only: fp16/bf16 per-sequence tensors are converted whole.
template <class A>
FwdResult<A> selective_scan_complex_fwd_cpu(const typename A::Tensor& u, const typename A::Tensor& delta,
                                            const typename A::Tensor& Am, const typename A::Tensor& B,
                                            const typename A::Tensor& C, const Opt<A>& D, const Opt<A>& z,
                                            const Opt<A>& delta_bias, bool delta_softplus) {
  const DType f32 = DType::kFloat32;
  const Prepared<A> r = prepare_complex<A>(u, delta, Am, B, C, D, z, delta_bias, f32);
  ScanParams p;
  fill_params(r, delta_softplus, p);
  scan_cpu_isa();  // a bad MAMBA_SSM_CPU_ISA raises here, before any work
  auto out = A::empty({r.batch, r.dim, r.seqlen}, f32, r.u);
  auto last = A::zeros({r.batch, r.dim, r.dstate}, DType::kComplex64, r.u);
  p.out = A::template data<void>(out);
  p.last_state = f32_data<A>(last);
  A::parallel_tasks(r.batch * r.dim, A::cpu_threads(),
               [&](int64_t begin, int64_t end) { scan_complex_fwd_cpu(p, begin, end); });
  return {in_dtype<A>(out, A::dtype(u)), last};
}

template <class A>
BwdResult<A> selective_scan_complex_bwd_cpu(const typename A::Tensor& u, const typename A::Tensor& delta,
                                            const typename A::Tensor& Am, const typename A::Tensor& B,
                                            const typename A::Tensor& C, const Opt<A>& D, const Opt<A>& z,
                                            const Opt<A>& delta_bias, bool delta_softplus,
                                            const typename A::Tensor& dout, const Opt<A>& dlast_state) {
  const DType f32 = DType::kFloat32, c64 = DType::kComplex64;
  const Prepared<A> r = prepare_complex<A>(u, delta, Am, B, C, D, z, delta_bias, f32);
  check_dout<A>(dout, u);
  ScanBwdParams p;
  fill_params(r, delta_softplus, p);
  scan_cpu_isa();  // a bad MAMBA_SSM_CPU_ISA raises here, before any work
  const auto dout_c = as_contiguous<A>(dout, f32);
  const auto dlast = prepare_dlast_complex<A>(r, dlast_state);
  const int64_t n_threads = A::cpu_threads();
  const int64_t n_split = cpu_bwd_split(r, n_threads);
  BwdBuffers<A> g;
  g.du = A::empty({r.batch, r.dim, r.seqlen}, f32, r.u);
  g.ddelta = A::empty({r.batch, r.dim, r.seqlen}, f32, r.u);
  if (r.z) g.dz = A::empty({r.batch, r.dim, r.seqlen}, f32, r.u);
  g.dA = A::empty({r.batch, r.dim, r.dstate}, c64, r.u);
  g.dD = A::empty({r.batch, r.dim}, f32, r.u);
  g.dbias = A::empty({r.batch, r.dim}, f32, r.u);
  auto grad_bc = [&](bool var) {
    return var ? A::zeros({r.batch, n_split, r.groups, r.dstate, 2 * r.seqlen}, f32, r.u)
               : A::empty({r.batch, r.dim, r.dstate}, c64, r.u);
  };
  g.dB = grad_bc(r.b_variable);
  g.dC = grad_bc(r.c_variable);
  bind_bwd_buffers(g, dout_c, dlast, p);
  p.cpu_n_split = n_split;
  A::parallel_tasks(r.batch * n_split, n_threads, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) scan_complex_bwd_cpu(p, task);
  });
  return finish_bwd<A>(g, r, /*sum_variable_bc=*/true, u, delta, Am, B, C, D, z, delta_bias);
}

// ------------------------------------------------------------------------------------------ CUDA/HIP
template <class A>
FwdResult<A> selective_scan_complex_fwd_cuda(const typename A::Tensor& u, const typename A::Tensor& delta,
                                             const typename A::Tensor& Am, const typename A::Tensor& B,
                                             const typename A::Tensor& C, const Opt<A>& D, const Opt<A>& z,
                                             const Opt<A>& delta_bias, bool delta_softplus) {
  const typename A::DeviceGuard guard(u);
  const DType dt = A::dtype(u);
  const Prepared<A> r = prepare_complex<A>(u, delta, Am, B, C, D, z, delta_bias, dt);
  check_devices<A>(u, r);
  ScanParams p;
  fill_params(r, delta_softplus, p);
  const char* why = gpu_unsupported_reason(p);
  MAMBA_CHECK(why == nullptr, "mamba_ssm: ", why);
  auto out = A::empty({r.batch, r.dim, r.seqlen}, dt, r.u);
  auto last = A::zeros({r.batch, r.dim, r.dstate}, DType::kComplex64, r.u);
  p.out = A::template data<void>(out);
  p.last_state = f32_data<A>(last);
  const char* err = gpu_launch(dt, scan_complex_fwd_gpu_fp32, scan_complex_fwd_gpu_fp16,
                               scan_complex_fwd_gpu_bf16, p, A::stream(u));
  MAMBA_CHECK(err == nullptr, "mamba_ssm: selective_scan_complex_fwd kernel failed: ", err);
  return {out, last};
}

template <class A>
BwdResult<A> selective_scan_complex_bwd_cuda(const typename A::Tensor& u, const typename A::Tensor& delta,
                                             const typename A::Tensor& Am, const typename A::Tensor& B,
                                             const typename A::Tensor& C, const Opt<A>& D, const Opt<A>& z,
                                             const Opt<A>& delta_bias, bool delta_softplus,
                                             const typename A::Tensor& dout, const Opt<A>& dlast_state) {
  const typename A::DeviceGuard guard(u);
  const DType dt = A::dtype(u), c64 = DType::kComplex64;
  const Prepared<A> r = prepare_complex<A>(u, delta, Am, B, C, D, z, delta_bias, dt);
  check_devices<A>(u, r);
  check_dout<A>(dout, u);
  ScanBwdParams p;
  fill_params(r, delta_softplus, p);
  const char* why = gpu_unsupported_reason(p);
  MAMBA_CHECK(why == nullptr, "mamba_ssm: ", why);
  const auto dout_c = as_contiguous<A>(dout, dt);
  const auto dlast = prepare_dlast_complex<A>(r, dlast_state);
  BwdBuffers<A> g = gpu_bwd_buffers<A>(r, dt, c64, 2 * r.seqlen);
  // Chunk-start states, (batch * dim, n_chunks, d_state) complex.
  auto ws = A::empty({std::max<int64_t>(1, r.batch * r.dim * gpu_num_chunks(r.seqlen) * r.dstate)}, c64, r.u);
  bind_bwd_buffers(g, dout_c, dlast, p);
  p.workspace = f32_data<A>(ws);
  const char* err = gpu_launch(dt, scan_complex_bwd_gpu_fp32, scan_complex_bwd_gpu_fp16,
                               scan_complex_bwd_gpu_bf16, p, A::stream(u));
  MAMBA_CHECK(err == nullptr, "mamba_ssm: selective_scan_complex_bwd kernel failed: ", err);
  return finish_bwd<A>(g, r, /*sum_variable_bc=*/false, u, delta, Am, B, C, D, z, delta_bias);
}

}  // namespace mamba_ssm
