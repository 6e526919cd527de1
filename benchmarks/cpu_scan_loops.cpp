// The CPU selective scan's inner step loops, timed one by one (benchmarks/bench_cpu_scan_loops.py builds
// and runs this; torch-free). Compiled once per instruction set with -DLOOPS_AVX512=1 or -DLOOPS_AVX2=1: it
// includes csrc/scan_cpu_impl.h exactly as csrc/scan_cpu_avx512.cpp / scan_cpu_avx2.cpp do, so the loops
// timed are the library's own.
//
// For one segment of `seqlen` timesteps of four channels sharing variable B and C (d_state 16), in cache:
//   fwd  the forward's steps (fwd_steps_v with y), one channel after the other, as scan_fwd runs them;
//   rec  the backward's recompute of the segment (rec_steps, lanes_per_pass() channels a pass);
//   rev  the backward's reverse pass over it (rev_steps_v);
//   exp  the decays alone: 2^(dt A log2 e) for every (timestep, state) of each channel (vexp2), stored
//        to a buffer of the segment's size (the part of fwd and rec that no other loop shares).
// Prints one JSON line: nanoseconds per unit (one timestep of one channel, all d_state) of each loop, the
// minimum over `rounds` interleaved rounds (process CPU time), and the loop mix.
#include <time.h>

#include <immintrin.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

// The target attributes as the library's ISA files set them (GCC: a target pragma; Clang: an attribute
// on every function).
#if defined(LOOPS_AVX512)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c,prefer-vector-width=512")
#endif
#define MAMBA_CPU_NS loops_avx512
#define MAMBA_CPU_LANES 16
#define MAMBA_CPU_AVX512 1
#elif defined(LOOPS_AVX2)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC target("avx2,fma,f16c")
#endif
#define MAMBA_CPU_NS loops_avx2
#define MAMBA_CPU_LANES 8
#define MAMBA_CPU_AVX2 1
#else
#error "build with -DLOOPS_AVX512=1 or -DLOOPS_AVX2=1"
#endif
#include "scan_cpu_impl.h"

namespace ns = mamba_ssm::MAMBA_CPU_NS;

static double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  const int64_t L = argc > 1 ? std::atoll(argv[1]) : 2048;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 7;
  constexpr int64_t N = 16, Np = N, W = 2 * Np, NV = Np / ns::kLanes;
  constexpr int kChannels = 4;  // a multiple of every lanes_per_pass()
  static_assert(NV >= 1 && NV <= ns::kMaxNV, "d_state 16 runs the SIMD loops");
  const int K = ns::lanes_per_pass(Np, true);
  const int reps = static_cast<int>(std::max<int64_t>(1, (1 << 20) / L));  // ~4M units per loop and round

  // Inputs in Mamba's ranges (bench_cpu_scan.py's): dt in [0, 0.1), A in [-1.5, -0.5), B, C, u, dy O(1).
  unsigned seed = 12345;
  auto uniform = [&seed]() {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<float>(seed >> 8) / 16777216.0f;
  };
  std::vector<float> BC(L * W), dBC(L * W, 0.f), y(L), abuf(L * kChannels * Np);
  for (float& x : BC) x = 2.f * uniform() - 1.f;
  struct Chan {
    std::vector<float> dt, dtu, dy, sc, A, A2, h, s, dA, sumB, sumT, aq;
  };
  std::vector<Chan> ch(kChannels);
  std::vector<ns::BwdLane> lanes(kChannels);
  for (int k = 0; k < kChannels; ++k) {
    Chan& c = ch[k];
    c.dt.resize(L), c.dtu.resize(L), c.dy.resize(L), c.sc.resize(3 * L), c.sumB.resize(L), c.sumT.resize(L);
    c.A.resize(Np), c.A2.resize(Np), c.h.assign(Np, 0.f), c.s.assign(Np, 0.f), c.dA.assign(Np, 0.f);
    c.aq.resize(L * 2 * Np);
    for (int64_t t = 0; t < L; ++t) {
      c.dt[t] = 0.1f * uniform();
      c.dtu[t] = c.dt[t] * (2.f * uniform() - 1.f);
      c.dy[t] = 2.f * uniform() - 1.f;
      c.sc[3 * t] = c.dt[t], c.sc[3 * t + 1] = c.dtu[t], c.sc[3 * t + 2] = c.dy[t];
    }
    for (int64_t n = 0; n < Np; ++n) c.A[n] = -0.5f - uniform(), c.A2[n] = c.A[n] * ns::kLog2e;
    lanes[k] = ns::BwdLane{c.dt.data(), c.dtu.data(), c.dy.data(), c.sc.data(), c.A.data(), c.A2.data(),
                           BC.data(),   BC.data() + Np, dBC.data(), dBC.data() + Np, c.h.data(), nullptr,
                           c.aq.data(), c.s.data(),   c.dA.data(),  c.sumB.data(), c.sumT.data()};
  }

  auto run_fwd = [&]() {
    for (int k = 0; k < kChannels; ++k)
      ns::fwd_steps<true>(L, Np, ch[k].dt.data(), ch[k].dtu.data(), ch[k].A2.data(), BC.data(), W,
                          BC.data() + Np, W, ch[k].h.data(), y.data());
  };
  auto run_rec = [&]() {
    for (int k = 0; k < kChannels; k += K) ns::rec_steps<false>(L, Np, K, lanes.data() + k, W, W);
  };
  auto run_rev = [&]() {
    for (int k = 0; k < kChannels; k += K) ns::rev_steps(L, Np, K, lanes.data() + k, W, W);
  };
  auto run_exp = [&]() {
    for (int k = 0; k < kChannels; ++k) {
      const float* dt = ch[k].dt.data();
      ns::vf a2[NV];
      for (int v = 0; v < NV; ++v) a2[v] = ns::vload(ch[k].A2.data() + ns::kLanes * v);
      for (int64_t t = 0; t < L; ++t) {
        const ns::vf d = ns::vset1(dt[t]);
        for (int v = 0; v < NV; ++v)
          ns::vstore(abuf.data() + t * kChannels * Np + k * Np + ns::kLanes * v, ns::vexp2(ns::vmul(d, a2[v])));
      }
    }
  };
  struct Loop {
    const char* name;
    std::function<void()> fn;
    double best;
  };
  std::vector<Loop> loops = {{"fwd", run_fwd, 1e30}, {"rec", run_rec, 1e30}, {"rev", run_rev, 1e30},
                             {"exp", run_exp, 1e30}};
  for (int r = -1; r < rounds; ++r)
    for (Loop& lp : loops) {
      const double t0 = cpu_seconds();
      for (int i = 0; i < reps; ++i) lp.fn();
      const double dt = cpu_seconds() - t0;
      if (r >= 0) lp.best = std::min(lp.best, dt);
    }
  const double units = double(kChannels) * L * reps;
  // Keep the results observable so that no loop is optimised away.
  double sink = y[L - 1] + abuf[L * Np] + ch[0].dA[0] + ch[1].sumB[0] + dBC[W];
  std::printf("{\"isa\": \"%s\", \"seqlen\": %lld, \"d_state\": %lld, \"lanes_per_pass\": %d",
              ns::kLanes == 16 ? "avx512" : "avx2", static_cast<long long>(L), static_cast<long long>(N), K);
  for (const Loop& lp : loops) std::printf(", \"%s_ns\": %.4f", lp.name, lp.best / units * 1e9);
  std::printf(", \"sink\": %.3g}\n", sink);
  return 0;
}
#if defined(__clang__)
#pragma clang attribute pop
#endif
