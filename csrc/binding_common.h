// Shared by the CPU and CUDA bindings: argument checks and the ScanParams filled from ATen tensors.
// (The kernel headers themselves include no torch header; only the bindings do.)
#pragma once
// Per-op ATen headers instead of <ATen/ATen.h>: half the compile time of this file.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Optional.h>
#include <optional>
#include "scan_params.h"

namespace mamba_ssm {

// Inputs after checks and conversion: contiguous, in the dtypes the kernels read.
struct Prepared {
  at::Tensor u, delta, A, B, C, D, z, delta_bias;
  bool b_variable = false, c_variable = false;
  int64_t batch = 0, dim = 0, seqlen = 0, dstate = 0, groups = 1;
};

inline bool is_variable(const at::Tensor& t) { return t.dim() >= 3; }

// (batch, d_state, seqlen) is (batch, 1, d_state, seqlen).
inline at::Tensor as_grouped(const at::Tensor& t) { return t.dim() == 3 ? t.unsqueeze(1) : t; }

// compute_dtype: the dtype u, delta, z are read in (u's dtype on GPUs). at::ScalarType::Undefined (the
// CPU) keeps u, delta, z and variable B/C each in its own dtype when that is fp32, fp16 or bf16 (else
// fp32): the CPU kernels convert them a tile at a time.
// Variable B/C are kept when already fp32 or compute_dtype, else converted to fp32.
inline Prepared prepare(const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A,
                        const at::Tensor& B, const at::Tensor& C, const std::optional<at::Tensor>& D,
                        const std::optional<at::Tensor>& z, const std::optional<at::Tensor>& delta_bias,
                        at::ScalarType compute_dtype) {
  TORCH_CHECK(u.dim() == 3, "mamba_ssm: u must be (batch, dim, seqlen), got ", u.sizes());
  const auto st = u.scalar_type();
  TORCH_CHECK(st == at::kFloat || st == at::kHalf || st == at::kBFloat16,
              "mamba_ssm: u must be float32, float16 or bfloat16, got ", st);
  TORCH_CHECK(delta.sizes() == u.sizes(), "mamba_ssm: delta must have u's shape ", u.sizes(), ", got ",
              delta.sizes());
  TORCH_CHECK(A.dim() == 2 && A.size(0) == u.size(1), "mamba_ssm: A must be (dim, d_state) = (",
              u.size(1), ", d_state), got ", A.sizes());
  TORCH_CHECK(!A.is_complex(), "mamba_ssm: complex A is not supported by the compiled kernels");
  Prepared r;
  r.batch = u.size(0);
  r.dim = u.size(1);
  r.seqlen = u.size(2);
  r.dstate = A.size(1);
  r.b_variable = is_variable(B);
  r.c_variable = is_variable(C);
  auto check_bc = [&](const at::Tensor& t, const char* name) -> int64_t {
    if (!is_variable(t)) {
      TORCH_CHECK(t.dim() == 2 && t.size(0) == r.dim && t.size(1) == r.dstate, "mamba_ssm: ", name,
                  " must be (dim, d_state) = (", r.dim, ", ", r.dstate, ") or variable, got ", t.sizes());
      return 0;
    }
    const at::Tensor g = as_grouped(t);
    TORCH_CHECK(g.dim() == 4 && g.size(0) == r.batch && g.size(2) == r.dstate && g.size(3) == r.seqlen &&
                    g.size(1) >= 1 && r.dim % g.size(1) == 0,
                "mamba_ssm: ", name, " must be (batch, d_state, seqlen) or (batch, groups, d_state, seqlen)"
                " with groups dividing dim = ", r.dim, ", got ", t.sizes());
    return g.size(1);
  };
  const int64_t gb = check_bc(B, "B"), gc = check_bc(C, "C");
  TORCH_CHECK(gb == 0 || gc == 0 || gb == gc, "mamba_ssm: B and C must have the same number of groups");
  r.groups = gb ? gb : (gc ? gc : 1);
  auto conv = [](const at::Tensor& t, at::ScalarType dt) { return t.to(dt).contiguous(); };
  const bool keep = compute_dtype == at::ScalarType::Undefined;
  auto is_stream_dtype = [](at::ScalarType dt) {
    return dt == at::kFloat || dt == at::kHalf || dt == at::kBFloat16;
  };
  auto stream_dtype = [&](const at::Tensor& t) {
    return !keep ? compute_dtype : (is_stream_dtype(t.scalar_type()) ? t.scalar_type() : at::kFloat);
  };
  r.u = conv(u, stream_dtype(u));
  r.delta = conv(delta, stream_dtype(delta));
  r.A = conv(A, at::kFloat);
  auto conv_bc = [&](const at::Tensor& t) {
    if (!is_variable(t)) return conv(t, at::kFloat);
    const at::Tensor g = as_grouped(t);
    const auto dt = g.scalar_type();
    return conv(g, (dt == at::kFloat || dt == compute_dtype || (keep && is_stream_dtype(dt))) ? dt : at::kFloat);
  };
  r.B = conv_bc(B);
  r.C = conv_bc(C);
  if (!keep && r.b_variable && r.c_variable && r.B.scalar_type() != r.C.scalar_type()) {
    r.B = r.B.to(at::kFloat);
    r.C = r.C.to(at::kFloat);
  }
  if (D.has_value() && D->defined()) {
    TORCH_CHECK(D->numel() == r.dim, "mamba_ssm: D must be (dim,) = (", r.dim, ",), got ", D->sizes());
    r.D = conv(*D, at::kFloat);
  }
  if (z.has_value() && z->defined()) {
    TORCH_CHECK(z->sizes() == u.sizes(), "mamba_ssm: z must have u's shape ", u.sizes(), ", got ", z->sizes());
    r.z = conv(*z, stream_dtype(*z));
  }
  if (delta_bias.has_value() && delta_bias->defined()) {
    TORCH_CHECK(delta_bias->numel() == r.dim, "mamba_ssm: delta_bias must be (dim,) = (", r.dim,
                ",), got ", delta_bias->sizes());
    r.delta_bias = conv(*delta_bias, at::kFloat);
  }
  return r;
}

inline const float* fptr(const at::Tensor& t) { return t.defined() ? t.data_ptr<float>() : nullptr; }
inline const void* vptr(const at::Tensor& t) { return t.defined() ? t.data_ptr() : nullptr; }

inline void fill_params(const Prepared& r, bool delta_softplus, ScanParams& p) {
  p.batch = r.batch;
  p.dim = r.dim;
  p.seqlen = r.seqlen;
  p.dstate = r.dstate;
  p.n_groups = r.groups;
  p.b_variable = r.b_variable;
  p.c_variable = r.c_variable;
  const at::Tensor& var = r.b_variable ? r.B : r.C;
  p.bc_fp32 = !(r.b_variable || r.c_variable) || var.scalar_type() == at::kFloat;
  p.delta_softplus = delta_softplus;
  p.u = r.u.data_ptr();
  p.delta = r.delta.data_ptr();
  p.A = r.A.data_ptr<float>();
  p.B = r.B.data_ptr();
  p.C = r.C.data_ptr();
  p.D = fptr(r.D);
  p.z = vptr(r.z);
  p.delta_bias = fptr(r.delta_bias);
}

// Gradient of an optional input: reduced partial sums cast to the input's dtype, or an empty fp32
// tensor when the input was absent (the Python autograd formula turns that into None).
inline at::Tensor grad_or_empty(const std::optional<at::Tensor>& x, const at::Tensor& g) {
  if (!x.has_value() || !x->defined()) return at::empty({0}, g.options().dtype(at::kFloat));
  return g.to(x->scalar_type()).view(x->sizes()).contiguous();
}

using FwdResult = std::tuple<at::Tensor, at::Tensor>;
using BwdResult = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor,
                             at::Tensor, at::Tensor>;

// dlast_state (batch, dim, d_state) as contiguous fp32, or an undefined tensor when absent.
inline at::Tensor prepare_dlast_state(const Prepared& r, const std::optional<at::Tensor>& dlast_state) {
  if (!dlast_state.has_value() || !dlast_state->defined()) return at::Tensor();
  TORCH_CHECK(dlast_state->numel() == r.batch * r.dim * r.dstate,
              "mamba_ssm: dlast_state must be (batch, dim, d_state), got ", dlast_state->sizes());
  return dlast_state->to(at::kFloat).contiguous();
}

// The backward's output buffers, allocated by each binding (dtypes, zero-filling and the variable
// dB/dC layout differ between CPU and GPU; see ScanBwdParams). dz is undefined when z is absent.
struct BwdBuffers {
  at::Tensor du, ddelta, dz, dA, dD, dbias, dB, dC;
};

// Points the kernel parameters at dout, dlast_state (may be undefined) and the output buffers.
inline void bind_bwd_buffers(const BwdBuffers& g, const at::Tensor& dout_c, const at::Tensor& dlast,
                             ScanBwdParams& p) {
  p.dout = dout_c.data_ptr();
  p.dlast_state = fptr(dlast);
  p.du = g.du.data_ptr();
  p.ddelta = g.ddelta.data_ptr();
  p.dz = g.dz.defined() ? g.dz.data_ptr() : nullptr;
  p.dA_part = g.dA.data_ptr<float>();
  p.dD_part = g.dD.data_ptr<float>();
  p.ddelta_bias_part = g.dbias.data_ptr<float>();
  p.dB = g.dB.data_ptr<float>();
  p.dC = g.dC.data_ptr<float>();
}

// The eight gradients (du, ddelta, dA, dB, dC, dD, dz, ddelta_bias) from the filled buffers: the
// per-(batch, channel) partials reduced over batch, each cast to its input's dtype and shape.
// Variable dB/dC are summed over dim 1 when sum_variable_bc (the CPU's per-task slabs) and taken as
// they are otherwise (the GPU accumulates them in place).
inline BwdResult finish_bwd(const BwdBuffers& g, const Prepared& r, bool sum_variable_bc,
                            const at::Tensor& u, const at::Tensor& delta, const at::Tensor& A,
                            const at::Tensor& B, const at::Tensor& C, const std::optional<at::Tensor>& D,
                            const std::optional<at::Tensor>& z,
                            const std::optional<at::Tensor>& delta_bias) {
  auto finish_bc = [&](const at::Tensor& grad, bool var, const at::Tensor& orig) {
    const at::Tensor s = var ? (sum_variable_bc ? grad.sum(1) : grad) : grad.sum(0);
    return s.to(orig.scalar_type()).view(orig.sizes()).contiguous();
  };
  return {g.du.to(u.scalar_type()),
          g.ddelta.to(delta.scalar_type()),
          g.dA.sum(0).to(A.scalar_type()),
          finish_bc(g.dB, r.b_variable, B),
          finish_bc(g.dC, r.c_variable, C),
          grad_or_empty(D, g.dD.sum(0)),
          r.z.defined() ? g.dz.to(z->scalar_type()) : at::empty({0}, u.options()),
          grad_or_empty(delta_bias, g.dbias.sum(0))};
}

}  // namespace mamba_ssm
