// The CPU kernels' vectorisable transcendental functions (selective scan, causal conv1d): exp_approx,
// and for the scan softplus_approx and sigmoid_approx. Includes no header (needs <cstring>, <cstdint>) and
// has no include guard on purpose: each *_cpu_impl.h includes it once inside its own ISA namespace
// (MAMBA_CPU_NS) and target pragmas, so each instruction-set build gets its own copy. Every function is
// branch-free (selects, no libm call), so that a loop calling it vectorises in each build.
// exp(x) for x in float range, relative error ~2e-7: 2^k * e^r with k = round(x / ln 2), |r| <= ln2/2,
// degree-6 Taylor polynomial for e^r.
static inline float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : x;  // (no std::min/max: they would not inline across the pragmas)
  x = x > 88.0f ? 88.0f : x;
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float kf = (x * 1.44269504088896341f + shifter) - shifter;
  const float r = (x - kf * 0.693145751953125f) - kf * 1.42860682030941723e-06f;
  float poly = 1.0f / 720.0f;
  poly = poly * r + 1.0f / 120.0f;
  poly = poly * r + 1.0f / 24.0f;
  poly = poly * r + 1.0f / 6.0f;
  poly = poly * r + 0.5f;
  poly = poly * r + 1.0f;
  poly = poly * r + 1.0f;
  const int32_t ki = static_cast<int32_t>(kf);
  const int32_t bits = (ki + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return poly * scale;
}

// log(1 + e) for e in [0, 1], relative error ~1e-7 (also for tiny e, where log(1 + e) ~ e):
// 2 atanh(s) with s = e / (2 + e) in [0, 1/3], the series s + s^3/3 + ... + s^13/13 (the rest is below
// (1/9)^7 / 15 of s).
static inline float log1p_unit_approx(float e) {
  const float s = e / (2.0f + e), s2 = s * s;
  float poly = 1.0f / 13.0f;
  poly = poly * s2 + 1.0f / 11.0f;
  poly = poly * s2 + 1.0f / 9.0f;
  poly = poly * s2 + 1.0f / 7.0f;
  poly = poly * s2 + 1.0f / 5.0f;
  poly = poly * s2 + 1.0f / 3.0f;
  poly = poly * s2 + 1.0f;
  return 2.0f * s * poly;
}

// softplus(x) = log(1 + e^x) = max(x, 0) + log(1 + e^-|x|): no overflow, and e^x's own relative accuracy
// for x << 0 (torch switches to x itself above 20, where the two agree in float).
static inline float softplus_approx(float x) {
  const float ax = x < 0.0f ? -x : x;
  return (x > 0.0f ? x : 0.0f) + log1p_unit_approx(exp_approx(-ax));
}

// sigmoid(x) = 1 / (1 + e^-x): 0 and 1 in the limits (exp_approx saturates, nothing overflows to NaN).
static inline float sigmoid_approx(float x) { return 1.0f / (1.0f + exp_approx(-x)); }
