// exp_approx: the CPU kernels' vectorisable exp (selective scan, causal conv1d). Includes no header (needs
// <cstring>, <cstdint>) and
// has no include guard on purpose: each *_cpu_impl.h includes it once inside its own ISA namespace
// (MAMBA_CPU_NS) and target pragmas, so each instruction-set build gets its own copy.
// exp(x) for x in float range, relative error ~2e-7: 2^k * e^r with k = round(x / ln 2), |r| <= ln2/2,
// degree-6 Taylor polynomial for e^r. Branch-free so that loops calling it vectorise.
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
