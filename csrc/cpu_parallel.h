// The CPU ops' parallel loop over independent kernel tasks (selective scan, causal conv1d): the tensor
// API's parallel_tasks (binding_common.h), which is run_parallel below in the classic binding and torch's
// own intra-op pool in the stable one. Includes no torch header.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace mamba_ssm {

// The first exception thrown by any task, kept so that it crosses no thread (or C shim) boundary and is
// rethrown on the calling thread once every task has ended.
class FirstError {
 public:
  template <typename G>
  void run(const G& g) noexcept {
    try {
      g();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
  void rethrow() const {
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::mutex mutex_;
  std::exception_ptr error_;
};

// [0, n_tasks) handed out in contiguous blocks, first come first served: a thread that gets less of a core
// (another process on it) takes fewer blocks instead of holding back the call's end. kBlocksPerWorker
// blocks a worker on average: few enough that a block keeps the kernels' per-call setup (B/C tiles shared
// by a block's channels) small against its work. Any thread may run any block: tasks must be independent.
class TaskBlocks {
 public:
  static constexpr int64_t kBlocksPerWorker = 2;
  TaskBlocks(int64_t n_tasks, int64_t n_workers)
      : n_tasks_(n_tasks), block_(std::max<int64_t>(1, (n_tasks + n_workers * kBlocksPerWorker - 1) /
                                                           (n_workers * kBlocksPerWorker))) {}
  // Runs fn(begin, end) on blocks until none is left.
  template <typename F>
  void drain(const F& fn) {
    for (int64_t b = next_.fetch_add(block_); b < n_tasks_; b = next_.fetch_add(block_)) {
      fn(b, std::min(n_tasks_, b + block_));
    }
  }

 private:
  const int64_t n_tasks_;
  const int64_t block_;
  std::atomic<int64_t> next_{0};
};

// Runs fn(begin, end) over [0, n_tasks) in TaskBlocks on min(max_threads, n_tasks) threads: the calling
// one and threads of its own (the classic binding's loop; the stable binding runs TaskBlocks on torch's
// intra-op pool, binding_api_stable.h). max_threads: torch's intra-op thread count, 1 inside a parallel
// region where the binding can tell. Not at::parallel_for in the classic binding: with an OpenMP torch
// its body is an inline `#pragma omp parallel`, which runs serially unless the extension itself is built
// with -fopenmp (and linking a second OpenMP runtime next to torch's is worse).
template <typename F>
inline void run_parallel(int64_t n_tasks, int64_t max_threads, const F& fn) {
  const int64_t n_threads = std::min<int64_t>(max_threads, n_tasks);
  if (n_threads <= 1) {
    if (n_tasks > 0) fn(0, n_tasks);
    return;
  }
  TaskBlocks blocks(n_tasks, n_threads);
  FirstError errors;
  auto work = [&] { errors.run([&] { blocks.drain(fn); }); };
  std::vector<std::thread> pool;
  pool.reserve(n_threads - 1);
  for (int64_t i = 1; i < n_threads; ++i) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  errors.rethrow();
}

}  // namespace mamba_ssm
