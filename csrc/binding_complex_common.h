// Shared by the CPU and CUDA bindings of the complex-A selective scan (binding_complex.cpp,
// binding_complex_cuda.cpp): argument checks and conversion into the layouts of scan_complex.h, and the
// gradients back from them. Reuses binding_common.h's Prepared / fill_params / bind_bwd_buffers.
#pragma once
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/view_as_complex.h>
#include <ATen/ops/view_as_real.h>
#include <ATen/ops/zeros.h>

#include <optional>

#include "binding_common.h"
#include "scan_complex.h"

namespace mamba_ssm {

// A complex tensor as contiguous interleaved (re, im) fp32: (..., 2).
inline at::Tensor complex_as_real(const at::Tensor& t) {
  return at::view_as_real(t.to(at::kComplexFloat).resolve_conj().contiguous()).contiguous();
}

// Checks and converts the inputs of a complex-A call. compute_dtype: the dtype u, delta, z (and variable
// B/C, unless fp32) are read in: at::kFloat on the CPU (its kernel reads fp32 only), u's dtype on GPUs.
// A and constant B/C: complex64 (dim, d_state) -> (dim, d_state, 2) fp32. Variable B/C: real (batch,
// d_state, 2L) or (batch, groups, d_state, 2L), interleaved (re, im) along time -> 4-D, contiguous.
inline Prepared prepare_complex(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A,
                                const at::Tensor& B, const at::Tensor& C, const std::optional<at::Tensor>& D,
                                const std::optional<at::Tensor>& z, const std::optional<at::Tensor>& delta_bias,
                                at::ScalarType compute_dtype) {
  TORCH_CHECK(u.dim() == 3, "mamba_ssm: u must be (batch, dim, seqlen), got ", u.sizes());
  const auto st = u.scalar_type();
  TORCH_CHECK(st == at::kFloat || st == at::kHalf || st == at::kBFloat16,
              "mamba_ssm: u must be float32, float16 or bfloat16, got ", st);
  TORCH_CHECK(delta.sizes() == u.sizes(), "mamba_ssm: delta must have u's shape ", u.sizes(), ", got ",
              delta.sizes());
  TORCH_CHECK(A.is_complex() && A.dim() == 2 && A.size(0) == u.size(1),
              "mamba_ssm: complex A must be complex (dim, d_state) = (", u.size(1), ", d_state), got ",
              A.scalar_type(), " ", A.sizes());
  Prepared r;
  r.batch = u.size(0);
  r.dim = u.size(1);
  r.seqlen = u.size(2);
  r.dstate = A.size(1);
  r.b_variable = is_variable(B);
  r.c_variable = is_variable(C);
  auto check_bc = [&](const at::Tensor& t, const char* name) -> int64_t {
    if (!is_variable(t)) {
      TORCH_CHECK(t.is_complex() && t.dim() == 2 && t.size(0) == r.dim && t.size(1) == r.dstate, "mamba_ssm: ",
                  name, " must be complex (dim, d_state) = (", r.dim, ", ", r.dstate,
                  ") or variable with complex A, got ", t.scalar_type(), " ", t.sizes());
      return 0;
    }
    const at::Tensor g = as_grouped(t);
    TORCH_CHECK(!t.is_complex() && g.dim() == 4 && g.size(0) == r.batch && g.size(2) == r.dstate &&
                    g.size(3) == 2 * r.seqlen && g.size(1) >= 1 && r.dim % g.size(1) == 0,
                "mamba_ssm: variable ", name, " with complex A must be real (batch, d_state, 2 * seqlen) or ",
                "(batch, groups, d_state, 2 * seqlen) with groups dividing dim = ", r.dim,
                " (re, im interleaved along time), got ", t.scalar_type(), " ", t.sizes());
    return g.size(1);
  };
  const int64_t gb = check_bc(B, "B"), gc = check_bc(C, "C");
  TORCH_CHECK(gb == 0 || gc == 0 || gb == gc, "mamba_ssm: B and C must have the same number of groups");
  r.groups = gb ? gb : (gc ? gc : 1);
  auto conv = [](const at::Tensor& t, at::ScalarType dt) { return t.to(dt).contiguous(); };
  r.u = conv(u, compute_dtype);
  r.delta = conv(delta, compute_dtype);
  r.A = complex_as_real(A);
  auto conv_bc = [&](const at::Tensor& t) {
    if (!is_variable(t)) return complex_as_real(t);
    const at::Tensor g = as_grouped(t);
    return conv(g, g.scalar_type() == compute_dtype ? compute_dtype : at::kFloat);
  };
  r.B = conv_bc(B);
  r.C = conv_bc(C);
  if (r.b_variable && r.c_variable && r.B.scalar_type() != r.C.scalar_type()) {
    r.B = r.B.to(at::kFloat);
    r.C = r.C.to(at::kFloat);
  }
  if (D.has_value() && D->defined()) {
    TORCH_CHECK(D->numel() == r.dim, "mamba_ssm: D must be (dim,) = (", r.dim, ",), got ", D->sizes());
    r.D = conv(*D, at::kFloat);
  }
  if (z.has_value() && z->defined()) {
    TORCH_CHECK(z->sizes() == u.sizes(), "mamba_ssm: z must have u's shape ", u.sizes(), ", got ", z->sizes());
    r.z = conv(*z, compute_dtype);
  }
  if (delta_bias.has_value() && delta_bias->defined()) {
    TORCH_CHECK(delta_bias->numel() == r.dim, "mamba_ssm: delta_bias must be (dim,) = (", r.dim,
                ",), got ", delta_bias->sizes());
    r.delta_bias = conv(*delta_bias, at::kFloat);
  }
  return r;
}

// dlast_state (batch, dim, d_state) complex -> (batch, dim, d_state, 2) fp32, or undefined when absent.
inline at::Tensor prepare_dlast_complex(const Prepared& r, const std::optional<at::Tensor>& dlast_state) {
  if (!dlast_state.has_value() || !dlast_state->defined()) return at::Tensor();
  TORCH_CHECK(dlast_state->numel() == r.batch * r.dim * r.dstate,
              "mamba_ssm: dlast_state must be (batch, dim, d_state), got ", dlast_state->sizes());
  return complex_as_real(dlast_state->reshape({r.batch, r.dim, r.dstate}));
}

// The eight gradients from the filled buffers (layouts: scan_complex.h): per-(batch, channel) partials
// summed over batch; dA and constant dB / dC back to complex; variable dB / dC summed over the CPU's
// task slabs (dim 1) when sum_variable_bc; each in its input's dtype and shape.
inline BwdResult finish_complex_bwd(const BwdBuffers& g, const Prepared& r, bool sum_variable_bc,
                                    const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A,
                                    const at::Tensor& B, const at::Tensor& C,
                                    const std::optional<at::Tensor>& D, const std::optional<at::Tensor>& z,
                                    const std::optional<at::Tensor>& delta_bias) {
  auto finish_bc = [&](const at::Tensor& grad, bool var, const at::Tensor& orig) {
    const at::Tensor s =
        var ? (sum_variable_bc ? grad.sum(1) : grad) : at::view_as_complex(grad.sum(0).contiguous());
    return s.to(orig.scalar_type()).view(orig.sizes()).contiguous();
  };
  return {g.du.to(u.scalar_type()),
          g.ddelta.to(delta.scalar_type()),
          at::view_as_complex(g.dA.sum(0).contiguous()).to(A.scalar_type()),
          finish_bc(g.dB, r.b_variable, B),
          finish_bc(g.dC, r.c_variable, C),
          grad_or_empty(D, g.dD.sum(0)),
          r.z.defined() ? g.dz.to(z->scalar_type()) : at::empty({0}, u.options()),
          grad_or_empty(delta_bias, g.dbias.sum(0))};
}

}  // namespace mamba_ssm
