// mamba_ssm._C, stable-ABI binding (torch >= the floor, MAMBA_TORCH_STABLE_ABI; the default for torch >=
// 2.10): registers the ops of binding_registry.h with STABLE_TORCH_LIBRARY and their CPU kernels, over
// torch::stable::Tensor (binding_api_stable.h). The library imports only libtorch's C shim (aoti_torch_*,
// torch_*), so one build loads into every torch from the floor on. The CUDA kernels are registered in
// binding_stable_cuda.cpp; the classic binding is binding.cpp. Empty in a classic build.
#ifdef MAMBA_SSM_STABLE_ABI
#include "binding_api_stable.h"
#include "binding_registry.h"

STABLE_TORCH_LIBRARY(mamba_ssm, m) {
  for (const char* schema : mamba_ssm::kSchemas) m.def(schema);
}

STABLE_TORCH_LIBRARY_IMPL(mamba_ssm, CPU, m) {
  mamba_ssm::StableRegistrar r{m};
  mamba_ssm::register_cpu_kernels<mamba_ssm::StableApi>(r);
}

STABLE_TORCH_LIBRARY_IMPL(mamba_ssm, CompositeExplicitAutograd, m) {
  mamba_ssm::StableRegistrar r{m};
  mamba_ssm::register_info_ops(r);
}
#endif  // MAMBA_SSM_STABLE_ABI
