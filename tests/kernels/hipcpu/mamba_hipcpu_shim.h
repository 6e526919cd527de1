// TEST-ONLY (tests/kernels/hipcpu): what HIP-CPU lacks to run csrc's GPU kernels unchanged on the CPU.
// Force-included (g++ -include) before every csrc translation unit of the emulated build; nothing in
// csrc/ includes it or knows of it.
//  - __expf: a HIP/CUDA fast-math intrinsic HIP-CPU does not provide (computed here with expf).
//  - __shfl_up / __shfl_down / __shfl_xor with a width below HIP-CPU's 64-lane warp: HIP-CPU compares
//    the source lane against `width` instead of the end of the caller's sub-warp, so lanes >= width read
//    their own value. These non-template overloads are chosen over HIP-CPU's templates for float (the
//    only type the kernels shuffle) and implement HIP's rule: a source lane outside the caller's
//    `width`-lane segment returns the caller's own value. Like HIP-CPU's own shuffles, each is a store to
//    the warp's scratchpad, a block barrier, a load and another barrier.
#pragma once
#include <hip/hip_runtime.h>

#include <cmath>
#include <cstdint>

inline float __expf(float x) { return std::exp(x); }

namespace mamba_hipcpu {
// Reads lane (lane of the caller within its segment) + offset of the caller's segment, or `own`.
inline float segment_shuffle(float own, std::int32_t offset, std::int32_t width, bool is_xor) {
  using hip::detail::Fiber;
  using hip::detail::Tile;
  const auto lane = static_cast<std::int32_t>(id(Fiber::this_fiber()) % warpSize);
  auto& pad = Tile::scratchpad<float>();
  pad[lane] = own;
  Tile::this_tile().barrier();
  const std::int32_t base = lane / width * width;
  const std::int32_t src = is_xor ? ((lane - base) ^ offset) : (lane - base + offset);
  const float r = (src < 0 || src >= width) ? own : pad[base + src];
  Tile::this_tile().barrier();
  return r;
}
}  // namespace mamba_hipcpu

inline float __shfl_up(float var, std::uint32_t delta, std::int32_t width) {
  return mamba_hipcpu::segment_shuffle(var, -static_cast<std::int32_t>(delta), width, false);
}
inline float __shfl_down(float var, std::uint32_t delta, std::int32_t width) {
  return mamba_hipcpu::segment_shuffle(var, static_cast<std::int32_t>(delta), width, false);
}
inline float __shfl_xor(float var, std::int32_t lane_mask, std::int32_t width) {
  return mamba_hipcpu::segment_shuffle(var, lane_mask, width, true);
}
