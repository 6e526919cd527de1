// Stable-ABI binding: the CUDA kernels of the ops in binding_registry.h (compiled by the host compiler;
// the kernels are in the *.cu translation units). Empty unless MAMBA_SSM_WITH_CUDA and
// MAMBA_SSM_STABLE_ABI are both defined. The ops honour the inputs' device (stable DeviceGuard) and the
// current CUDA stream of that device.
#if defined(MAMBA_SSM_WITH_CUDA) && defined(MAMBA_SSM_STABLE_ABI)
// aoti_torch_get_current_cuda_stream is declared by the C shim only under USE_CUDA (it lives in
// libtorch_cuda, which CUDA builds link).
#ifndef USE_CUDA
#define USE_CUDA
#endif
#include "binding_api_stable.h"
#include "binding_registry.h"

namespace mamba_ssm {

// The cudaStream_t of the current stream of t's device. From 2.13 the stable Stream gives its native
// handle; before, the C shim's aoti_torch_get_current_cuda_stream does (Stream::id() is a stream id,
// not a cudaStream_t: using it as one launches on the wrong stream).
void* StableApi::stream(const Tensor& t) {
  const int32_t index = t.get_device_index();
#if TORCH_TARGET_VERSION >= TORCH_VERSION_2_13_0
  return torch::stable::accelerator::getCurrentStream(index).nativeHandle();
#else
  void* stream = nullptr;
  STABLE_TORCH_ERROR_CODE_CHECK(aoti_torch_get_current_cuda_stream(index, &stream));
  return stream;
#endif
}

}  // namespace mamba_ssm

STABLE_TORCH_LIBRARY_IMPL(mamba_ssm, CUDA, m) {
  mamba_ssm::StableRegistrar r{m};
  mamba_ssm::register_cuda_kernels<mamba_ssm::StableApi>(r);
}
#endif  // MAMBA_SSM_WITH_CUDA && MAMBA_SSM_STABLE_ABI
