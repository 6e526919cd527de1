// The shared layer of both bindings (classic ATen for torch < floor, LibTorch stable ABI for torch >=
// floor): dtypes, error messages and the selective scan's argument checks and kernel parameters. Every
// function here is a template over a tensor API `A` (binding_api_classic.h / binding_api_stable.h), so
// the checks exist once; this header includes no torch header.
//
// A tensor API provides (all static): `Tensor`; metadata `defined, dim, size, stride, numel,
// element_size, is_contiguous, dtype (-> DType), dtype_name, shape (-> Shape), device_name,
// same_device, data<T>`; dispatcher calls `to (dtype), contiguous, resolve_conj, empty, empty_strided,
// zeros (on a tensor's device), sum (over one dim), view, transpose, zero_, copy_, to_device_of`;
// `cpu_threads()` (the intra-op thread count, 1 inside a parallel region where torch says so),
// `parallel_tasks(n_tasks, n_threads, fn)` (fn(begin, end) over blocks of independent tasks). GPU
// bindings also use `DeviceGuard` (constructed from a tensor) and `stream(t)` (the current cudaStream_t / hipStream_t of
// t's device).
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "scan_params.h"

namespace mamba_ssm {

// The dtypes the checks tell apart (torch's ScalarType is a different type in each binding).
// kComplex64 / kComplex128: complex float / double; kComplex: any other complex dtype (complex32).
enum class DType {
  kFloat32,
  kFloat16,
  kBFloat16,
  kFloat64,
  kInt32,
  kInt64,
  kOtherFloat,
  kComplex64,
  kComplex128,
  kComplex,
  kOther
};

inline bool is_stream_dtype(DType d) { return d == DType::kFloat32 || d == DType::kFloat16 || d == DType::kBFloat16; }
inline bool is_floating(DType d) { return is_stream_dtype(d) || d == DType::kFloat64 || d == DType::kOtherFloat; }
inline bool is_complex(DType d) { return d == DType::kComplex64 || d == DType::kComplex128 || d == DType::kComplex; }

// Tensor sizes for messages, printed as torch prints them: [2, 16, 64].
struct Shape {
  std::vector<int64_t> v;
};

inline std::ostream& operator<<(std::ostream& os, const Shape& s) {
  os << "[";
  for (size_t i = 0; i < s.v.size(); ++i) os << (i ? ", " : "") << s.v[i];
  return os << "]";
}

template <class... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  ((os << args), ...);
  return os.str();
}

// Throws std::runtime_error with the concatenated message; torch turns it into a Python RuntimeError in
// both bindings (the stable ABI's own STD_TORCH_CHECK throws the same type).
template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  throw std::runtime_error(cat(args...));
}

// The message is built only when the check fails.
#define MAMBA_CHECK(cond, ...)                             \
  do {                                                     \
    if (!(cond)) ::mamba_ssm::fail(__VA_ARGS__);           \
  } while (0)

template <class A>
using Opt = std::optional<typename A::Tensor>;

template <class A>
inline bool has(const Opt<A>& t) {
  return t.has_value() && A::defined(*t);
}

// t in dtype dt and contiguous, without a dispatcher call when it already is (decode steps are
// dominated by such fixed costs; the kernels only read inputs, so an alias is as good as a copy).
template <class A>
typename A::Tensor as_contiguous(const typename A::Tensor& t, DType dt) {
  if (A::dtype(t) == dt && A::is_contiguous(t)) return t;
  return A::contiguous(A::dtype(t) == dt ? t : A::to(t, dt));
}

template <class A>
typename A::Tensor in_dtype(const typename A::Tensor& t, DType dt) {
  return A::dtype(t) == dt ? t : A::to(t, dt);
}

// Calls the GPU entry point for dtype dt (fp32, fp16, else bf16) with (p, stream); returns its error text
// or nullptr.
template <class P>
const char* gpu_launch(DType dt, const char* (*fp32)(const P&, void*), const char* (*fp16)(const P&, void*),
                       const char* (*bf16)(const P&, void*), const P& p, void* stream) {
  return dt == DType::kFloat32 ? fp32(p, stream) : dt == DType::kFloat16 ? fp16(p, stream) : bf16(p, stream);
}

// ------------------------------------------------------------------------------- selective scan
// Inputs after checks and conversion: contiguous, in the dtypes the kernels read.
template <class A>
struct Prepared {
  using T = typename A::Tensor;
  T u, delta, A_, B, C;
  std::optional<T> D, z, delta_bias;  // absent inputs stay empty
  bool b_variable = false, c_variable = false;
  int64_t batch = 0, dim = 0, seqlen = 0, dstate = 0, groups = 1;
};

template <class A>
bool is_variable(const typename A::Tensor& t) {
  return A::dim(t) >= 3;
}

// The (batch, groups, d_state, seqlen) sizes of a variable B/C: a (batch, d_state, seqlen) one is 1 group.
// No 4-D view is made (a dispatcher call): the kernels read the same memory either way.
template <class A>
std::vector<int64_t> grouped_sizes(const typename A::Tensor& t) {
  std::vector<int64_t> s = A::shape(t).v;
  if (s.size() == 3) s.insert(s.begin() + 1, 1);
  return s;
}

// The sizes of a checked (u, A) and whether B / C are variable (3-D or 4-D); tensors still unset.
template <class A>
Prepared<A> prepared_sizes(const typename A::Tensor& u, const typename A::Tensor& Am,
                           const typename A::Tensor& B, const typename A::Tensor& C) {
  Prepared<A> r;
  r.batch = A::size(u, 0);
  r.dim = A::size(u, 1);
  r.seqlen = A::size(u, 2);
  r.dstate = A::size(Am, 1);
  r.b_variable = is_variable<A>(B);
  r.c_variable = is_variable<A>(C);
  return r;
}

// groups from the group counts of variable B and C (0 for a constant one); they must agree.
template <class A>
void set_groups(Prepared<A>& r, int64_t gb, int64_t gc) {
  MAMBA_CHECK(gb == 0 || gc == 0 || gb == gc, "mamba_ssm: B and C must have the same number of groups");
  r.groups = gb ? gb : (gc ? gc : 1);
}

// u (batch, dim, seqlen) fp32 / fp16 / bf16, delta of u's shape.
template <class A>
void check_u_delta(const typename A::Tensor& u, const typename A::Tensor& delta) {
  MAMBA_CHECK(A::dim(u) == 3, "mamba_ssm: u must be (batch, dim, seqlen), got ", A::shape(u));
  const DType st = A::dtype(u);
  MAMBA_CHECK(is_stream_dtype(st), "mamba_ssm: u must be float32, float16 or bfloat16, got ", A::dtype_name(u));
  MAMBA_CHECK(A::shape(delta).v == A::shape(u).v, "mamba_ssm: delta must have u's shape ", A::shape(u), ", got ",
              A::shape(delta));
}

// Checks D, z, delta_bias against the sizes in r and stores them: D and delta_bias (dim,) fp32, z (u's
// shape) in z_dtype; absent ones stay empty.
template <class A>
void prepare_options(Prepared<A>& r, const typename A::Tensor& u, const Opt<A>& D, const Opt<A>& z,
                     const Opt<A>& delta_bias, DType z_dtype) {
  if (has<A>(D)) {
    MAMBA_CHECK(A::numel(*D) == r.dim, "mamba_ssm: D must be (dim,) = (", r.dim, ",), got ", A::shape(*D));
    r.D = as_contiguous<A>(*D, DType::kFloat32);
  }
  if (has<A>(z)) {
    MAMBA_CHECK(A::shape(*z).v == A::shape(u).v, "mamba_ssm: z must have u's shape ", A::shape(u), ", got ",
                A::shape(*z));
    r.z = as_contiguous<A>(*z, z_dtype);
  }
  if (has<A>(delta_bias)) {
    MAMBA_CHECK(A::numel(*delta_bias) == r.dim, "mamba_ssm: delta_bias must be (dim,) = (", r.dim, ",), got ",
                A::shape(*delta_bias));
    r.delta_bias = as_contiguous<A>(*delta_bias, DType::kFloat32);
  }
}

// The CPU backward's task split: with variable B/C, a few channel ranges per batch (about one task per
// thread), each writing its own dB/dC slab; else one task per channel.
template <class A>
int64_t cpu_bwd_split(const Prepared<A>& r, int64_t n_threads) {
  if (!(r.b_variable || r.c_variable)) return r.dim;
  return std::max<int64_t>(1, std::min<int64_t>(r.dim, (n_threads + r.batch - 1) / r.batch));
}

// compute_dtype: the dtype u, delta, z are read in (u's dtype on GPUs). std::nullopt (the CPU) keeps u,
// delta, z and variable B/C each in its own dtype when that is fp32, fp16 or bf16 (else fp32): the CPU
// kernels convert them a tile at a time. Variable B/C are kept when already fp32 or compute_dtype, else
// converted to fp32.
template <class A>
Prepared<A> prepare(const typename A::Tensor& u, const typename A::Tensor& delta, const typename A::Tensor& Am,
                    const typename A::Tensor& B, const typename A::Tensor& C, const Opt<A>& D, const Opt<A>& z,
                    const Opt<A>& delta_bias, std::optional<DType> compute_dtype) {
  using T = typename A::Tensor;
  check_u_delta<A>(u, delta);
  MAMBA_CHECK(A::dim(Am) == 2 && A::size(Am, 0) == A::size(u, 1), "mamba_ssm: A must be (dim, d_state) = (",
              A::size(u, 1), ", d_state), got ", A::shape(Am));
  MAMBA_CHECK(!is_complex(A::dtype(Am)), "mamba_ssm: selective_scan_fwd/bwd take real A; complex A goes to ",
              "selective_scan_complex_fwd/bwd (selective_scan_fn routes it there)");
  Prepared<A> r = prepared_sizes<A>(u, Am, B, C);
  auto check_bc = [&](const T& t, const char* name) -> int64_t {
    if (!is_variable<A>(t)) {
      MAMBA_CHECK(A::dim(t) == 2 && A::size(t, 0) == r.dim && A::size(t, 1) == r.dstate, "mamba_ssm: ", name,
                  " must be (dim, d_state) = (", r.dim, ", ", r.dstate, ") or variable, got ", A::shape(t));
      return 0;
    }
    const std::vector<int64_t> g = grouped_sizes<A>(t);
    MAMBA_CHECK(g.size() == 4 && g[0] == r.batch && g[2] == r.dstate && g[3] == r.seqlen && g[1] >= 1 &&
                    r.dim % g[1] == 0,
                "mamba_ssm: ", name, " must be (batch, d_state, seqlen) or (batch, groups, d_state, seqlen)"
                " with groups dividing dim = ", r.dim, ", got ", A::shape(t));
    return g[1];
  };
  const int64_t gb = check_bc(B, "B");  // B's error first when both are wrong
  set_groups(r, gb, check_bc(C, "C"));
  const bool keep = !compute_dtype.has_value();
  auto stream_dtype = [&](const T& t) {
    return !keep ? *compute_dtype : (is_stream_dtype(A::dtype(t)) ? A::dtype(t) : DType::kFloat32);
  };
  r.u = as_contiguous<A>(u, stream_dtype(u));
  r.delta = as_contiguous<A>(delta, stream_dtype(delta));
  r.A_ = as_contiguous<A>(Am, DType::kFloat32);
  auto conv_bc = [&](const T& t) {  // variable: contiguous (batch, [groups,] d_state, seqlen)
    if (!is_variable<A>(t)) return as_contiguous<A>(t, DType::kFloat32);
    const DType dt = A::dtype(t);
    const bool ok = dt == DType::kFloat32 || (!keep && dt == *compute_dtype) || (keep && is_stream_dtype(dt));
    return as_contiguous<A>(t, ok ? dt : DType::kFloat32);
  };
  r.B = conv_bc(B);
  r.C = conv_bc(C);
  if (!keep && r.b_variable && r.c_variable && A::dtype(r.B) != A::dtype(r.C)) {
    r.B = A::to(r.B, DType::kFloat32);
    r.C = A::to(r.C, DType::kFloat32);
  }
  prepare_options<A>(r, u, D, z, delta_bias, has<A>(z) ? stream_dtype(*z) : DType::kFloat32);
  return r;
}

// The fp32 storage of t: a float32 tensor, or a complex64 one as interleaved (re, im) pairs (the layout of
// the complex-A kernels, csrc/scan_complex.h).
template <class A>
float* f32_data(const typename A::Tensor& t) {
  const DType d = A::dtype(t);
  MAMBA_CHECK(d == DType::kFloat32 || d == DType::kComplex64, "mamba_ssm: internal: expected a float32 or ",
              "complex64 buffer, got ", A::dtype_name(t));
  return static_cast<float*>(A::template data<void>(t));
}

template <class A>
const float* fptr(const std::optional<typename A::Tensor>& t) {
  return t ? A::template data<float>(*t) : nullptr;
}

template <class A>
void fill_params(const Prepared<A>& r, bool delta_softplus, ScanParams& p) {
  p.batch = r.batch;
  p.dim = r.dim;
  p.seqlen = r.seqlen;
  p.dstate = r.dstate;
  p.n_groups = r.groups;
  p.b_variable = r.b_variable;
  p.c_variable = r.c_variable;
  const auto& var = r.b_variable ? r.B : r.C;
  p.bc_fp32 = !(r.b_variable || r.c_variable) || A::dtype(var) == DType::kFloat32;
  p.delta_softplus = delta_softplus;
  p.u = A::template data<void>(r.u);
  p.delta = A::template data<void>(r.delta);
  p.A = f32_data<A>(r.A_);
  p.B = A::template data<void>(r.B);
  p.C = A::template data<void>(r.C);
  p.D = fptr<A>(r.D);
  p.z = r.z ? A::template data<void>(*r.z) : nullptr;
  p.delta_bias = fptr<A>(r.delta_bias);
}

// Gradient of an optional input: reduced partial sums cast to the input's dtype, or an empty fp32
// tensor when the input was absent (the Python autograd formula turns that into None).
template <class A>
typename A::Tensor grad_or_empty(const Opt<A>& x, const typename A::Tensor& g) {
  if (!has<A>(x)) return A::empty({0}, DType::kFloat32, g);
  return A::contiguous(A::view(in_dtype<A>(g, A::dtype(*x)), A::shape(*x).v));
}

template <class A>
using FwdResult = std::tuple<typename A::Tensor, typename A::Tensor>;
template <class A>
using BwdResult = std::tuple<typename A::Tensor, typename A::Tensor, typename A::Tensor, typename A::Tensor,
                             typename A::Tensor, typename A::Tensor, typename A::Tensor, typename A::Tensor>;

// dlast_state (batch, dim, d_state) as contiguous fp32, or empty when absent.
template <class A>
std::optional<typename A::Tensor> prepare_dlast_state(const Prepared<A>& r, const Opt<A>& dlast_state) {
  if (!has<A>(dlast_state)) return std::nullopt;
  MAMBA_CHECK(A::numel(*dlast_state) == r.batch * r.dim * r.dstate,
              "mamba_ssm: dlast_state must be (batch, dim, d_state), got ", A::shape(*dlast_state));
  return as_contiguous<A>(*dlast_state, DType::kFloat32);
}

// The backward's output buffers, allocated by each kernel's op (dtypes, zero-filling and the variable
// dB/dC layout differ between CPU and GPU; see ScanBwdParams). dz is empty when z is absent.
template <class A>
struct BwdBuffers {
  using T = typename A::Tensor;
  T du, ddelta, dA, dD, dbias, dB, dC;
  std::optional<T> dz;
};

// Points the kernel parameters at dout, dlast_state (may be absent) and the output buffers.
template <class A>
void bind_bwd_buffers(const BwdBuffers<A>& g, const typename A::Tensor& dout_c,
                      const std::optional<typename A::Tensor>& dlast, ScanBwdParams& p) {
  p.dout = A::template data<void>(dout_c);
  p.dlast_state = dlast ? f32_data<A>(*dlast) : nullptr;
  p.du = A::template data<void>(g.du);
  p.ddelta = A::template data<void>(g.ddelta);
  p.dz = g.dz ? A::template data<void>(*g.dz) : nullptr;
  p.dA_part = f32_data<A>(g.dA);
  p.dD_part = A::template data<float>(g.dD);
  p.ddelta_bias_part = A::template data<float>(g.dbias);
  p.dB = f32_data<A>(g.dB);
  p.dC = f32_data<A>(g.dC);
}

// The eight gradients (du, ddelta, dA, dB, dC, dD, dz, ddelta_bias) from the filled buffers: the
// per-(batch, channel) partials reduced over batch, each cast to its input's dtype and shape.
// Variable dB/dC are summed over dim 1 when sum_variable_bc (the CPU's per-task slabs) and taken as
// they are otherwise (the GPU accumulates them in place).
template <class A>
BwdResult<A> finish_bwd(const BwdBuffers<A>& g, const Prepared<A>& r, bool sum_variable_bc,
                        const typename A::Tensor& u, const typename A::Tensor& delta, const typename A::Tensor& Am,
                        const typename A::Tensor& B, const typename A::Tensor& C, const Opt<A>& D, const Opt<A>& z,
                        const Opt<A>& delta_bias) {
  using T = typename A::Tensor;
  auto finish_bc = [&](const T& grad, bool var, const T& orig) {
    const T s = var ? (sum_variable_bc ? A::sum(grad, 1) : grad) : A::sum(grad, 0);
    return A::contiguous(A::view(in_dtype<A>(s, A::dtype(orig)), A::shape(orig).v));
  };
  return {in_dtype<A>(g.du, A::dtype(u)),
          in_dtype<A>(g.ddelta, A::dtype(delta)),
          in_dtype<A>(A::sum(g.dA, 0), A::dtype(Am)),
          finish_bc(g.dB, r.b_variable, B),
          finish_bc(g.dC, r.c_variable, C),
          grad_or_empty<A>(D, A::sum(g.dD, 0)),
          r.z ? in_dtype<A>(*g.dz, A::dtype(*z)) : A::empty({0}, A::dtype(u), u),
          grad_or_empty<A>(delta_bias, A::sum(g.dbias, 0))};
}

}  // namespace mamba_ssm
