// Classic binding: the CUDA/HIP kernels of the ops in binding_registry.h (compiled by the host compiler;
// the kernels are in the *.cu translation units). Empty unless MAMBA_SSM_WITH_CUDA is defined (a
// CPU-only build compiles every csrc/*.cpp unchanged) and in a stable-ABI build. The ops honour the
// inputs' device (device guard) and the current stream of that device.
#if defined(MAMBA_SSM_WITH_CUDA) && !defined(MAMBA_SSM_STABLE_ABI)
#include "binding_api_classic.h"
#include "binding_registry.h"

TORCH_LIBRARY_IMPL(mamba_ssm, CUDA, m) {
  mamba_ssm::ClassicRegistrar r{m};
  mamba_ssm::register_cuda_kernels<mamba_ssm::ClassicApi>(r);
}
#endif  // MAMBA_SSM_WITH_CUDA && !MAMBA_SSM_STABLE_ABI
