// Device helpers of the complex-A selective-scan GPU kernels (layouts and math: scan_complex.h).
// Includes no torch header. The block scan, loads, conversions and the channel mapping are the real
// kernels' (scan_common.cuh); this adds the complex element type they are instantiated with.
#pragma once
#include "scan_common.cuh"
#include "scan_complex.h"

namespace mamba_ssm {
namespace gpu {

// A complex number in fp32. Trivially default-constructible (it lives in __shared__ arrays).
struct alignas(8) Complex {
  float re, im;
  Complex() = default;
  __host__ __device__ constexpr Complex(float r, float i = 0.f) : re(r), im(i) {}
};

MAMBA_SSM_DEVICE_INLINE Complex operator+(Complex x, Complex y) { return Complex(x.re + y.re, x.im + y.im); }
MAMBA_SSM_DEVICE_INLINE Complex operator*(Complex x, Complex y) {
  return Complex(x.re * y.re - x.im * y.im, x.re * y.im + x.im * y.re);
}
MAMBA_SSM_DEVICE_INLINE Complex operator*(float s, Complex x) { return Complex(s * x.re, s * x.im); }
MAMBA_SSM_DEVICE_INLINE Complex conj(Complex x) { return Complex(x.re, -x.im); }
// Re(x * y) without forming the imaginary part.
MAMBA_SSM_DEVICE_INLINE float re_mul(Complex x, Complex y) { return x.re * y.re - x.im * y.im; }
// The shuffles block_scan uses, one per part.
MAMBA_SSM_DEVICE_INLINE Complex shfl_up(Complex v, int delta) {
  return Complex(shfl_up(v.re, delta), shfl_up(v.im, delta));
}
MAMBA_SSM_DEVICE_INLINE Complex shfl_down(Complex v, int delta) {
  return Complex(shfl_down(v.re, delta), shfl_down(v.im, delta));
}

// exp(dt * A) for real dt: e^(dt re A) (cos(dt im A), sin(dt im A)).
MAMBA_SSM_DEVICE_INLINE Complex exp_dt(float dt, Complex A) {
  const float m = __expf(dt * A.re);
  float s, c;
  sincosf(dt * A.im, &s, &c);
  return Complex(m * c, m * s);
}

// Element i of an interleaved (re, im) fp32 array.
MAMBA_SSM_DEVICE_INLINE Complex load_complex(const float* base, int64_t i) {
  return Complex(base[2 * i], base[2 * i + 1]);
}
MAMBA_SSM_DEVICE_INLINE void store_complex(float* base, int64_t i, Complex v) {
  base[2 * i] = v.re;
  base[2 * i + 1] = v.im;
}

// A complex B or C of state n for this thread's kItems timesteps from t0: the variable one from its
// interleaved row (2 * seqlen values of T or fp32 at row offset `off`; zero past seqlen), else the
// constant one of (dim, d_state, 2) at `cst` (already offset to the channel).
template <typename T>
__device__ __forceinline__ void load_bc_complex(bool variable, const void* base, bool is_fp32, int64_t off,
                                                const float* cst, int n, int64_t t0, int64_t L,
                                                Complex (&v)[kItems]) {
  if (!variable) {
    const Complex c = load_complex(cst, n);
#pragma unroll
    for (int i = 0; i < kItems; ++i) v[i] = c;
    return;
  }
  float lo[kItems], hi[kItems];  // (re, im) of items 0..kItems/2-1, then kItems/2..kItems-1
  load_bc_items<T>(base, is_fp32, off, 2 * t0, 2 * L, lo);
  load_bc_items<T>(base, is_fp32, off, 2 * t0 + kItems, 2 * L, hi);
#pragma unroll
  for (int i = 0; i < kItems / 2; ++i) {
    v[i] = Complex(lo[2 * i], lo[2 * i + 1]);
    v[i + kItems / 2] = Complex(hi[2 * i], hi[2 * i + 1]);
  }
}

}  // namespace gpu
}  // namespace mamba_ssm
