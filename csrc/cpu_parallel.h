// run_parallel: the CPU ops' parallel loop over independent kernel tasks (selective scan, causal
// conv1d). Includes no torch header: the caller passes torch's intra-op thread count (the tensor API's
// cpu_threads(), see binding_common.h).
#pragma once
#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace mamba_ssm {

// Runs fn(begin, end) over [0, n_tasks) split evenly across max_threads threads (torch's intra-op
// thread count; 1 inside a parallel region, where the classic binding can tell). Not at::parallel_for:
// with an OpenMP torch its body is an inline `#pragma omp parallel`, which runs serially unless the
// extension itself is built with -fopenmp (and linking a second OpenMP runtime next to torch's is worse).
template <typename F>
inline void run_parallel(int64_t n_tasks, int64_t max_threads, const F& fn) {
  const int64_t n_threads = std::min<int64_t>(max_threads, n_tasks);
  if (n_threads <= 1) {
    if (n_tasks > 0) fn(0, n_tasks);
    return;
  }
  std::exception_ptr error;
  std::mutex mutex;
  auto work = [&](int64_t i) {
    try {
      fn(n_tasks * i / n_threads, n_tasks * (i + 1) / n_threads);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(n_threads - 1);
  for (int64_t i = 1; i < n_threads; ++i) pool.emplace_back(work, i);
  work(0);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace mamba_ssm
