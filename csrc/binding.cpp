// mamba_ssm._C, classic binding (torch < the stable-ABI floor, or MAMBA_TORCH_STABLE_ABI=0): registers
// the ops of binding_registry.h with TORCH_LIBRARY and their CPU kernels, over ATen tensors
// (binding_api_classic.h). No Python C API (the module is built against the limited API, abi3) and no
// <torch/extension.h>. The CUDA/HIP kernels are registered in binding_cuda.cpp; the stable-ABI binding
// is binding_stable.cpp. Empty in a stable-ABI build.
#ifndef MAMBA_SSM_STABLE_ABI
#include "binding_api_classic.h"
#include "binding_registry.h"

TORCH_LIBRARY(mamba_ssm, m) {
  for (const char* schema : mamba_ssm::kSchemas) m.def(schema);
}

TORCH_LIBRARY_IMPL(mamba_ssm, CPU, m) {
  mamba_ssm::ClassicRegistrar r{m};
  mamba_ssm::register_cpu_kernels<mamba_ssm::ClassicApi>(r);
}

TORCH_LIBRARY_IMPL(mamba_ssm, CompositeExplicitAutograd, m) {
  mamba_ssm::ClassicRegistrar r{m};
  mamba_ssm::register_info_ops(r);
}
#endif  // MAMBA_SSM_STABLE_ABI
