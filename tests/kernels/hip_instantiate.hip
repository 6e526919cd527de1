// Compiled by tests/kernels/test_hip_compile.py with hipcc (HIP_PLATFORM=amd) for one wave64 and one
// wave32 target: instantiates the torch-free GPU kernels (real and complex A) for the dtype MAMBA_TEST_DTYPE
// and checks that the device pass sees the target's wavefront width (MAMBA_EXPECT_WAVE).
#include "scan_bwd.cuh"
#include "scan_complex_bwd.cuh"
#include "scan_complex_fwd.cuh"
#include "scan_fwd.cuh"

#if defined(__HIP_DEVICE_COMPILE__)
static_assert(mamba_ssm::gpu::kWarpSize == MAMBA_EXPECT_WAVE, "wavefront width of the offload target");
static_assert(mamba_ssm::gpu::kWarps * mamba_ssm::gpu::kWarpSize == mamba_ssm::gpu::kThreads,
              "a block is whole wavefronts");
#endif

template const char* mamba_ssm::gpu::scan_fwd_launch<MAMBA_TEST_DTYPE>(const mamba_ssm::ScanParams&, void*);
template const char* mamba_ssm::gpu::scan_bwd_launch<MAMBA_TEST_DTYPE>(const mamba_ssm::ScanBwdParams&, void*);
template const char* mamba_ssm::gpu::scan_complex_fwd_launch<MAMBA_TEST_DTYPE>(const mamba_ssm::ScanParams&, void*);
template const char* mamba_ssm::gpu::scan_complex_bwd_launch<MAMBA_TEST_DTYPE>(const mamba_ssm::ScanBwdParams&,
                                                                              void*);
