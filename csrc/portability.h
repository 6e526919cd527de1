// CUDA / HIP portability for the selective-scan GPU kernels. Includes no torch header.
//
// The kernels are written against the CUDA names below; when compiled for AMD GPUs (hipcc, or torch's
// hipified build, which defines __HIP_PLATFORM_AMD__ / MAMBA_SSM_HIP) the same names map to HIP.
// The warp (wavefront) width comes from the compilation target: 64 on gfx9 CDNA (gfx90a, gfx942),
// 32 on RDNA (gfx10xx/gfx11xx) and on every NVIDIA GPU. No code hard-codes 32 lanes.
#pragma once

#if defined(__HIP_PLATFORM_AMD__) || defined(MAMBA_SSM_HIP) || defined(__HIPCC__)
#define MAMBA_SSM_IS_HIP 1
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#if __has_include(<hip/hip_bf16.h>)
#include <hip/hip_bf16.h>
#define MAMBA_SSM_HAS_BF16 1
typedef __hip_bfloat16 mamba_bf16_t;
#else
// ROCm < 5.7 ships no hip_bf16.h (only the older hip_bfloat16 class): bf16 kernels are left out.
#define MAMBA_SSM_HAS_BF16 0
#endif
typedef __half mamba_fp16_t;
typedef hipStream_t mamba_stream_t;
typedef hipError_t mamba_error_t;
#define MAMBA_GPU_SUCCESS hipSuccess
#define mambaGetLastError hipGetLastError
#define mambaGetErrorString hipGetErrorString
#else
#define MAMBA_SSM_IS_HIP 0
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#define MAMBA_SSM_HAS_BF16 1
typedef __half mamba_fp16_t;
typedef __nv_bfloat16 mamba_bf16_t;
typedef cudaStream_t mamba_stream_t;
typedef cudaError_t mamba_error_t;
#define MAMBA_GPU_SUCCESS cudaSuccess
#define mambaGetLastError cudaGetLastError
#define mambaGetErrorString cudaGetErrorString
#endif

// Non-template __device__ functions defined in headers are spelled `inline`: each translation unit
// that includes them emits a copy, and only `inline` lets the linker merge them (__forceinline__ is
// not `inline` everywhere: HIP-CPU without NDEBUG defines it empty). always_inline keeps the
// __forceinline__ request; `__forceinline__ inline` would repeat `inline`, which is an error.
#define MAMBA_SSM_DEVICE_INLINE __device__ inline __attribute__((always_inline))

// Kernel launch on `stream` (a mamba_stream_t) with no dynamic shared memory: hipLaunchKernelGGL under
// HIP (the one spelling every HIP compiler and runtime accepts, HIP-CPU's host compiler included),
// the triple-chevron syntax under CUDA. Arguments after `stream` go to the kernel.
#if MAMBA_SSM_IS_HIP
#define MAMBA_SSM_LAUNCH(kernel, blocks, threads, stream, ...) \
  hipLaunchKernelGGL(kernel, dim3(blocks), dim3(threads), 0, stream, __VA_ARGS__)
#else
#define MAMBA_SSM_LAUNCH(kernel, blocks, threads, stream, ...) \
  kernel<<<dim3(blocks), dim3(threads), 0, stream>>>(__VA_ARGS__)
#endif

namespace mamba_ssm {
namespace gpu {

// Lanes per warp/wavefront of the device code being compiled. Host code never needs it (block sizes are
// fixed multiples of 64 threads), so the host pass may see any value.
#if MAMBA_SSM_IS_HIP
#if defined(__AMDGCN_WAVEFRONT_SIZE)
constexpr int kWarpSize = __AMDGCN_WAVEFRONT_SIZE;
#else
constexpr int kWarpSize = 64;
#endif
#else
constexpr int kWarpSize = 32;
#endif

// Shuffles: HIP's non-_sync forms exist on every ROCm; CUDA needs the _sync forms with a mask of
// every lane of the warp (all lanes of a block's warps take part, blocks are full warps).
#if MAMBA_SSM_IS_HIP
MAMBA_SSM_DEVICE_INLINE float shfl_up(float v, int delta) { return __shfl_up(v, delta, kWarpSize); }
MAMBA_SSM_DEVICE_INLINE float shfl_down(float v, int delta) { return __shfl_down(v, delta, kWarpSize); }
MAMBA_SSM_DEVICE_INLINE float shfl_xor(float v, int m) { return __shfl_xor(v, m, kWarpSize); }
#else
constexpr unsigned kFullMask = 0xffffffffu;  // every lane of a 32-lane NVIDIA warp
MAMBA_SSM_DEVICE_INLINE float shfl_up(float v, int delta) { return __shfl_up_sync(kFullMask, v, delta); }
MAMBA_SSM_DEVICE_INLINE float shfl_down(float v, int delta) { return __shfl_down_sync(kFullMask, v, delta); }
MAMBA_SSM_DEVICE_INLINE float shfl_xor(float v, int m) { return __shfl_xor_sync(kFullMask, v, m); }
#endif

}  // namespace gpu
}  // namespace mamba_ssm
