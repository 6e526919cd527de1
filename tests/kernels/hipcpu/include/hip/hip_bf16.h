// TEST-ONLY (tests/kernels/hipcpu): the bf16 type HIP-CPU lacks, for running csrc's bf16 kernels on the
// CPU. HIP-CPU ships no <hip/hip_bf16.h>; csrc/portability.h finds this one through -I and so builds its
// bf16 kernels. bfloat16 is the top 16 bits of an IEEE binary32 (1 sign, 8 exponent, 7 fraction bits);
// float -> bf16 rounds to nearest, ties to even, and keeps NaN a (quiet) NaN.
#pragma once
#include <cstdint>
#include <cstring>

struct __hip_bfloat16 {
  std::uint16_t data;
};

inline float __bfloat162float(__hip_bfloat16 b) {
  const std::uint32_t bits = static_cast<std::uint32_t>(b.data) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

inline __hip_bfloat16 __float2bfloat16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return {static_cast<std::uint16_t>((bits >> 16) | 0x40u)};
  const std::uint32_t round = 0x7fffu + ((bits >> 16) & 1u);  // ties to even
  return {static_cast<std::uint16_t>((bits + round) >> 16)};
}
