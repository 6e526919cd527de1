// The tensor API of the stable-ABI binding (LibTorch stable ABI, one build for every torch from the
// floor on): the calls the shared checks and ops (binding_common.h) make, mapped onto
// torch::stable::Tensor. Compiled with -DTORCH_TARGET_VERSION=<floor>: a header or function newer than
// the floor, or any non-stable torch header, fails the build. What each call needs (torch 2.14 headers):
// Tensor metadata, transpose, zero_, copy_, DeviceGuard: 2.9; to, contiguous, view, sum, typed data
// pointers, get_num_threads, parallel_for: 2.10; the C shim's aoti_torch_empty_strided / aoti_torch_zero_ (allocation
// without a boxed dispatcher call) are exported by every torch from 2.10 (the audit checks the floor's).
#pragma once
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <array>
#include <string>
#include <vector>

#include "binding_common.h"
#include "cpu_parallel.h"

#if !defined(TORCH_TARGET_VERSION) || TORCH_TARGET_VERSION < TORCH_VERSION_2_10_0
#error "the stable-ABI binding needs -DTORCH_TARGET_VERSION >= 2.10 (setup.py passes the floor)"
#endif

namespace mamba_ssm {

struct StableApi {
  using Tensor = torch::stable::Tensor;
  using ScalarType = torch::headeronly::ScalarType;

  static ScalarType scalar(DType d) {
    switch (d) {
      case DType::kFloat32: return ScalarType::Float;
      case DType::kFloat16: return ScalarType::Half;
      case DType::kBFloat16: return ScalarType::BFloat16;
      case DType::kFloat64: return ScalarType::Double;
      case DType::kComplex64: return ScalarType::ComplexFloat;
      case DType::kComplex128: return ScalarType::ComplexDouble;
      case DType::kInt32: return ScalarType::Int;
      case DType::kInt64: return ScalarType::Long;
      default: fail("mamba_ssm: no conversion to this dtype");
    }
  }

  static DType dtype(const Tensor& t) {
    switch (t.scalar_type()) {
      case ScalarType::Float: return DType::kFloat32;
      case ScalarType::Half: return DType::kFloat16;
      case ScalarType::BFloat16: return DType::kBFloat16;
      case ScalarType::Double: return DType::kFloat64;
      case ScalarType::Int: return DType::kInt32;
      case ScalarType::Long: return DType::kInt64;
      case ScalarType::ComplexFloat: return DType::kComplex64;
      case ScalarType::ComplexDouble: return DType::kComplex128;
      case ScalarType::ComplexHalf: return DType::kComplex;
      case ScalarType::Float8_e5m2:
      case ScalarType::Float8_e4m3fn:
      case ScalarType::Float8_e5m2fnuz:
      case ScalarType::Float8_e4m3fnuz:
      case ScalarType::Float8_e8m0fnu: return DType::kOtherFloat;
      default: return DType::kOther;
    }
  }

  static std::string dtype_name(const Tensor& t) { return torch::headeronly::toString(t.scalar_type()); }
  static bool defined(const Tensor& t) { return t.defined(); }
  static int64_t dim(const Tensor& t) { return t.dim(); }
  static int64_t size(const Tensor& t, int64_t i) { return t.size(i < 0 ? i + t.dim() : i); }
  static int64_t stride(const Tensor& t, int64_t i) { return t.stride(i < 0 ? i + t.dim() : i); }
  static int64_t numel(const Tensor& t) { return t.numel(); }
  static size_t element_size(const Tensor& t) { return t.element_size(); }
  static bool is_contiguous(const Tensor& t) { return t.is_contiguous(); }
  static Shape shape(const Tensor& t) {
    const auto s = t.sizes();
    return Shape{std::vector<int64_t>(s.begin(), s.end())};
  }
  static std::string device_name(const Tensor& t) {
    if (t.is_cpu()) return "cpu";
    return cat(t.is_cuda() ? "cuda:" : "device:", t.get_device_index());
  }
  static bool same_device(const Tensor& a, const Tensor& b) {
    return a.is_cpu() == b.is_cpu() && a.is_cuda() == b.is_cuda() && a.get_device_index() == b.get_device_index();
  }

  template <class T>
  static T* data(const Tensor& t) {
    if constexpr (std::is_void_v<T>) return t.mutable_data_ptr();
    else return t.mutable_data_ptr<T>();
  }

  static Tensor to(const Tensor& t, DType d) { return torch::stable::to(t, scalar(d)); }
  static Tensor contiguous(const Tensor& t) { return t.is_contiguous() ? t : torch::stable::contiguous(t); }
  // t with a set conjugate bit materialised (kernels read the raw memory); t itself when unset. The stable
  // Tensor cannot read the bit, so aten::resolve_conj is called through the C shim's dispatcher (2.10).
  static Tensor resolve_conj(const Tensor& t) {
    std::array<StableIValue, 1> stack{torch::stable::detail::from(t)};
    STABLE_TORCH_ERROR_CODE_CHECK(torch_call_dispatcher("aten::resolve_conj", "", stack.data(), TORCH_ABI_VERSION));
    return torch::stable::detail::to<Tensor>(stack[0]);
  }
  // A tensor of the given sizes and strides on like's device through the C shim's aoti_torch_empty_strided
  // (torch 2.10 exports it): a direct call, not a boxed dispatcher call (new_empty's), which costs about a
  // microsecond more.
  static Tensor empty_strided(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, DType d,
                              const Tensor& like) {
    int32_t device_type = 0, device_index = 0;
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_type(like.get(), &device_type));
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_device_index(like.get(), &device_index));
    const int32_t dtype = torch::stable::detail::to<int32_t>(torch::stable::detail::from(scalar(d)));
    AtenTensorHandle handle = nullptr;
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_empty_strided(static_cast<int64_t>(sizes.size()), sizes.data(),
                                                           strides.data(), dtype, device_type, device_index,
                                                           &handle));
    return Tensor(handle);
  }
  // A contiguous tensor on like's device.
  static Tensor empty(const std::vector<int64_t>& sizes, DType d, const Tensor& like) {
    std::vector<int64_t> strides(sizes.size());
    int64_t stride = 1;
    for (size_t i = sizes.size(); i-- > 0;) {
      strides[i] = stride;
      stride *= sizes[i] > 1 ? sizes[i] : 1;
    }
    return empty_strided(sizes, strides, d, like);
  }
  static Tensor zeros(const std::vector<int64_t>& sizes, DType d, const Tensor& like) {
    Tensor t = empty(sizes, d, like);
    STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_zero_(t.get()));
    return t;
  }
  static Tensor sum(const Tensor& t, int64_t d) {
    const std::vector<int64_t> dims{d};
    return torch::stable::sum(t, torch::headeronly::IntHeaderOnlyArrayRef(dims));
  }
  static Tensor view(const Tensor& t, const std::vector<int64_t>& sizes) { return torch::stable::view(t, sizes); }
  static Tensor transpose(const Tensor& t, int64_t a, int64_t b) { return torch::stable::transpose(t, a, b); }
  static void zero_(Tensor& t) { torch::stable::zero_(t); }
  static void copy_(Tensor& dst, const Tensor& src) { torch::stable::copy_(dst, src); }
  // t in dtype d on like's device.
  static Tensor to_device_of(const Tensor& t, DType d, const Tensor& like) {
    return torch::stable::to(t, scalar(d), std::nullopt, like.device());
  }

  // torch's intra-op thread count (the stable ABI cannot tell whether the caller is inside a parallel
  // region; parallel_tasks runs serially there).
  static int64_t cpu_threads() { return static_cast<int64_t>(torch::stable::get_num_threads()); }

  // fn(begin, end) over [0, n_tasks) in TaskBlocks on at most n_threads threads of torch's own intra-op
  // pool (run_parallel in cpu_parallel.h, launched by at::parallel_for through the C shim): the threads
  // torch's CPU ops use, so none is started per call and none competes with torch's waiting workers;
  // serial inside a parallel region (at::parallel_for's rule). Exceptions never cross the shim.
  template <typename F>
  static void parallel_tasks(int64_t n_tasks, int64_t n_threads, const F& fn) {
    run_parallel(n_tasks, n_threads, fn, [](int64_t n_workers, const auto& work) {
      torch::stable::parallel_for(0, n_workers, 1, [&](int64_t begin, int64_t end) {
        for (int64_t w = begin; w < end; ++w) work();
      });
    });
  }

#ifdef MAMBA_SSM_WITH_CUDA
  // The inputs' device for the op's duration.
  struct DeviceGuard {
    explicit DeviceGuard(const Tensor& t) : guard(t.get_device_index()) {}
    torch::stable::accelerator::DeviceGuard guard;
  };
  // The current stream of t's device, as a cudaStream_t (defined in binding_stable_cuda.cpp: the call
  // differs by floor).
  static void* stream(const Tensor& t);
#endif
};

// Registers fn, boxed for the stable ABI, for the dispatch key of the STABLE_TORCH_LIBRARY_IMPL block it
// is handed.
struct StableRegistrar {
  torch::stable::detail::StableLibrary& m;
  template <auto fn>
  void impl(const char* name) {
    m.impl(name, TORCH_BOX(fn));
  }
};

}  // namespace mamba_ssm
