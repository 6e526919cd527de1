// Device helpers shared by the forward and backward GPU kernels. Includes no torch header.
#pragma once
#include "portability.h"
#include "scan_gpu.h"

#include <cstdint>

namespace mamba_ssm {
namespace gpu {

constexpr int kThreads = kGpuThreads;
constexpr int kItems = kGpuItems;
constexpr int kChunk = kGpuChunk;
constexpr int kWarps = kThreads / kWarpSize;   // warps of this target
constexpr int kMaxWarps = kThreads / 32;       // buffer size good for every target
static_assert(kThreads % 64 == 0, "block must be whole warps on wave32 and wave64 targets");

template <typename T> struct Cvt;
template <> struct Cvt<float> {
  __device__ __forceinline__ static float load(float v) { return v; }
  __device__ __forceinline__ static float store(float v) { return v; }
};
template <> struct Cvt<mamba_fp16_t> {
  __device__ __forceinline__ static float load(mamba_fp16_t v) { return __half2float(v); }
  __device__ __forceinline__ static mamba_fp16_t store(float v) { return __float2half_rn(v); }
};
#if MAMBA_SSM_HAS_BF16
template <> struct Cvt<mamba_bf16_t> {
  __device__ __forceinline__ static float load(mamba_bf16_t v) { return __bfloat162float(v); }
  __device__ __forceinline__ static mamba_bf16_t store(float v) { return __float2bfloat16(v); }
};
#endif

MAMBA_SSM_DEVICE_INLINE float softplus(float x) { return x > 20.f ? x : log1pf(expf(x)); }
MAMBA_SSM_DEVICE_INLINE float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

// Variable B/C element (stored fp32 or in the input dtype T).
template <typename T>
__device__ __forceinline__ float load_bc(const void* base, bool is_fp32, int64_t i) {
  return is_fp32 ? static_cast<const float*>(base)[i] : Cvt<T>::load(static_cast<const T*>(base)[i]);
}

// Loads kItems consecutive elements starting at base[t0] as fp32; zero past seqlen L. Full, 16-byte
// aligned runs use 16-byte vector loads (4 fp32 or 8 fp16/bf16 per load), the rest scalar loads.
// The bytes move with memcpy (ISO C++'s way to reinterpret storage: no object is read through a
// pointer to another type, which GCC's strict aliasing would otherwise be free to break) from an
// address promised 16-byte aligned, which nvcc and hipcc compile to one 16-byte load/store.
template <typename T>
__device__ __forceinline__ void load_items(const T* base, int64_t t0, int64_t L, float (&v)[kItems]) {
  constexpr int kPerVec = 16 / sizeof(T);
  static_assert(kItems % kPerVec == 0, "whole vectors per thread");
  const T* p = base + t0;
  if (t0 + kItems <= L && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
#pragma unroll
    for (int k = 0; k < kItems / kPerVec; ++k) {
      T e[kPerVec];
      const T* q = static_cast<const T*>(__builtin_assume_aligned(p + k * kPerVec, 16));
      __builtin_memcpy(e, q, 16);
#pragma unroll
      for (int j = 0; j < kPerVec; ++j) v[k * kPerVec + j] = Cvt<T>::load(e[j]);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kItems; ++i) v[i] = t0 + i < L ? Cvt<T>::load(p[i]) : 0.f;
  }
}

// Stores kItems values to base[t0...] in T, skipping positions past seqlen L (vector stores when full
// and aligned, as load_items).
template <typename T>
__device__ __forceinline__ void store_items(T* base, int64_t t0, int64_t L, const float (&v)[kItems]) {
  constexpr int kPerVec = 16 / sizeof(T);
  T* p = base + t0;
  if (t0 + kItems <= L && (reinterpret_cast<uintptr_t>(p) & 15) == 0) {
#pragma unroll
    for (int k = 0; k < kItems / kPerVec; ++k) {
      T e[kPerVec];
#pragma unroll
      for (int j = 0; j < kPerVec; ++j) e[j] = Cvt<T>::store(v[k * kPerVec + j]);
      T* q = static_cast<T*>(__builtin_assume_aligned(p + k * kPerVec, 16));
      __builtin_memcpy(q, e, 16);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kItems; ++i)
      if (t0 + i < L) p[i] = Cvt<T>::store(v[i]);
  }
}

// Variable B or C of state n for this thread's timesteps (stored fp32 or in T).
template <typename T>
__device__ __forceinline__ void load_bc_items(const void* base, bool is_fp32, int64_t off, int64_t t0,
                                              int64_t L, float (&v)[kItems]) {
  if (is_fp32) load_items<float>(static_cast<const float*>(base) + off, t0, L, v);
  else load_items<T>(static_cast<const T*>(base) + off, t0, L, v);
}

// One affine map x -> a*x + b of block_scan, as a warp leader hands it to the other warps (shared
// memory). V is float (real A) or the complex scan's Complex; aligned like float2 / float4.
template <typename V>
struct alignas(2 * sizeof(V)) AffinePair {
  V a, b;
};

// Block-wide exclusive scan of affine maps x -> a*x + b (one per thread, composed in scan order:
// thread order, or reversed when kReverse) applied to `carry`. Returns the value entering this
// thread's first element; `total` gets the value after the whole block (the same in every thread).
// `buf` is shared memory of kMaxWarps entries; successive calls must alternate between two buffers
// (each call has one barrier, so a buffer is rewritten only after every thread finished reading it).
// V needs *, +, V(1.f), V(0.f) and the shfl_up / shfl_down overloads (found by argument-dependent
// lookup, so the complex scan's own header provides them for its Complex).
template <bool kReverse, typename V>
__device__ __forceinline__ V block_scan(V a, V b, V carry, AffinePair<V>* buf, V& total) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
#pragma unroll
  for (int off = 1; off < kWarpSize; off *= 2) {
    const V pa = kReverse ? shfl_down(a, off) : shfl_up(a, off);
    const V pb = kReverse ? shfl_down(b, off) : shfl_up(b, off);
    const bool take = kReverse ? (lane + off < kWarpSize) : (lane >= off);
    if (take) { b = a * pb + b; a = a * pa; }
  }
  // Inclusive (a, b) now covers this lane and every lane before it in scan order.
  if (lane == (kReverse ? 0 : kWarpSize - 1)) buf[warp] = AffinePair<V>{a, b};
  V ea = kReverse ? shfl_down(a, 1) : shfl_up(a, 1);
  V eb = kReverse ? shfl_down(b, 1) : shfl_up(b, 1);
  if (lane == (kReverse ? kWarpSize - 1 : 0)) { ea = V(1.f); eb = V(0.f); }
  __syncthreads();
  V x = carry;
  if (!kReverse) {
    for (int w = 0; w < warp; ++w) x = buf[w].a * x + buf[w].b;
  } else {
    for (int w = kWarps - 1; w > warp; --w) x = buf[w].a * x + buf[w].b;
  }
  const V entering = ea * x + eb;
  V t = x;
  if (!kReverse) {
    for (int w = warp; w < kWarps; ++w) t = buf[w].a * t + buf[w].b;
  } else {
    for (int w = warp; w >= 0; --w) t = buf[w].a * t + buf[w].b;
  }
  total = t;
  return entering;
}

// Block-wide sum of three values; the result is valid in thread 0 only. One barrier; same buffer
// alternation rule as block_scan.
MAMBA_SSM_DEVICE_INLINE float3 block_sum3(float3 v, float4* buf) {
#pragma unroll
  for (int off = kWarpSize / 2; off > 0; off /= 2) {
    v.x += shfl_down(v.x, off);
    v.y += shfl_down(v.y, off);
    v.z += shfl_down(v.z, off);
  }
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  if (lane == 0) buf[warp] = make_float4(v.x, v.y, v.z, 0.f);
  __syncthreads();
  float3 s = make_float3(0.f, 0.f, 0.f);
  if (threadIdx.x == 0) {
    for (int w = 0; w < kWarps; ++w) { s.x += buf[w].x; s.y += buf[w].y; s.z += buf[w].z; }
  }
  return s;
}

// Per-block view of the inputs of channel (b, d).
struct Channel {
  int64_t bd, b, d, g;
  int64_t seq_off;  // offset of (b, d, 0) in (batch, dim, seqlen) tensors
  int64_t bc_off;   // offset of (b, g, 0, 0) in variable B/C
};

MAMBA_SSM_DEVICE_INLINE Channel channel_of(const ScanParams& p) {
  Channel c;
  c.bd = static_cast<int64_t>(blockIdx.x);
  c.b = c.bd / p.dim;
  c.d = c.bd % p.dim;
  c.g = c.d / (p.dim / p.n_groups);
  c.seq_off = c.bd * p.seqlen;
  c.bc_off = (c.b * p.n_groups + c.g) * p.dstate * p.seqlen;
  return c;
}

}  // namespace gpu
}  // namespace mamba_ssm
