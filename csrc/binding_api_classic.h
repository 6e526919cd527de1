// The tensor API of the classic binding (ATen, one build per torch minor and C++ ABI): the calls the
// shared checks and ops (binding_common.h) make, mapped onto at::Tensor. Per-op ATen headers instead
// of <ATen/ATen.h>: half the compile time.
#pragma once
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Optional.h>
#include <torch/library.h>
#ifdef MAMBA_SSM_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <string>
#include <vector>

#include "binding_common.h"
#include "cpu_parallel.h"

namespace mamba_ssm {

struct ClassicApi {
  using Tensor = at::Tensor;

  static at::ScalarType scalar(DType d) {
    switch (d) {
      case DType::kFloat32: return at::kFloat;
      case DType::kFloat16: return at::kHalf;
      case DType::kBFloat16: return at::kBFloat16;
      case DType::kFloat64: return at::kDouble;
      case DType::kComplex64: return at::kComplexFloat;
      case DType::kComplex128: return at::kComplexDouble;
      case DType::kInt32: return at::kInt;
      case DType::kInt64: return at::kLong;
      default: fail("mamba_ssm: no conversion to this dtype");
    }
  }

  static DType dtype(const Tensor& t) {
    switch (t.scalar_type()) {
      case at::kFloat: return DType::kFloat32;
      case at::kHalf: return DType::kFloat16;
      case at::kBFloat16: return DType::kBFloat16;
      case at::kDouble: return DType::kFloat64;
      case at::kComplexFloat: return DType::kComplex64;
      case at::kComplexDouble: return DType::kComplex128;
      case at::kInt: return DType::kInt32;
      case at::kLong: return DType::kInt64;
      default:
        if (at::isComplexType(t.scalar_type())) return DType::kComplex;
        return at::isFloatingType(t.scalar_type()) ? DType::kOtherFloat : DType::kOther;
    }
  }

  static std::string dtype_name(const Tensor& t) { return c10::toString(t.scalar_type()); }
  static bool defined(const Tensor& t) { return t.defined(); }
  static int64_t dim(const Tensor& t) { return t.dim(); }
  static int64_t size(const Tensor& t, int64_t i) { return t.size(i); }
  static int64_t stride(const Tensor& t, int64_t i) { return t.stride(i); }
  static int64_t numel(const Tensor& t) { return t.numel(); }
  static size_t element_size(const Tensor& t) { return t.element_size(); }
  static bool is_contiguous(const Tensor& t) { return t.is_contiguous(); }
  static Shape shape(const Tensor& t) { return Shape{t.sizes().vec()}; }
  static std::string device_name(const Tensor& t) { return t.device().str(); }
  static bool same_device(const Tensor& a, const Tensor& b) { return a.device() == b.device(); }

  template <class T>
  static T* data(const Tensor& t) {
    if constexpr (std::is_void_v<T>) return t.data_ptr();
    else return t.data_ptr<T>();
  }

  static Tensor to(const Tensor& t, DType d) { return t.to(scalar(d)); }
  static Tensor contiguous(const Tensor& t) { return t.contiguous(); }
  // t with a set conjugate bit materialised (kernels read the raw memory); t itself when unset.
  static Tensor resolve_conj(const Tensor& t) { return t.resolve_conj(); }
  static Tensor empty(const std::vector<int64_t>& sizes, DType d, const Tensor& like) {
    return at::empty(sizes, like.options().dtype(scalar(d)));
  }
  static Tensor empty_strided(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides, DType d,
                              const Tensor& like) {
    return at::empty_strided(sizes, strides, like.options().dtype(scalar(d)));
  }
  static Tensor zeros(const std::vector<int64_t>& sizes, DType d, const Tensor& like) {
    return at::zeros(sizes, like.options().dtype(scalar(d)));
  }
  static Tensor sum(const Tensor& t, int64_t d) { return t.sum(d); }
  static Tensor view(const Tensor& t, const std::vector<int64_t>& sizes) { return t.view(sizes); }
  static Tensor transpose(const Tensor& t, int64_t a, int64_t b) { return t.transpose(a, b); }
  static void zero_(Tensor& t) { t.zero_(); }
  static void copy_(Tensor& dst, const Tensor& src) { dst.copy_(src); }
  // t in dtype d on like's device.
  static Tensor to_device_of(const Tensor& t, DType d, const Tensor& like) { return t.to(like.device(), scalar(d)); }

  // torch's intra-op thread count; 1 inside a parallel region (no nested threads).
  static int64_t cpu_threads() { return at::in_parallel_region() ? 1 : at::get_num_threads(); }

  // fn(begin, end) over [0, n_tasks) in TaskBlocks on at most n_threads threads of its own
  // (run_parallel with OwnThreads, cpu_parallel.h).
  template <typename F>
  static void parallel_tasks(int64_t n_tasks, int64_t n_threads, const F& fn) {
    run_parallel(n_tasks, n_threads, fn);
  }

#ifdef MAMBA_SSM_WITH_CUDA
  // The inputs' device for the op's duration (CUDA, or HIP through torch's hipified c10/cuda names).
  struct DeviceGuard {
    explicit DeviceGuard(const Tensor& t) : guard(t.device()) {}
    c10::cuda::CUDAGuard guard;
  };
  // The current stream of t's device, as a cudaStream_t / hipStream_t.
  static void* stream(const Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }
#endif
};

// Registers fn for the dispatch key of the TORCH_LIBRARY_IMPL block it is handed.
struct ClassicRegistrar {
  torch::Library& m;
  template <auto fn>
  void impl(const char* name) {
    m.impl(name, fn);
  }
};

}  // namespace mamba_ssm
