// The CPU ops' parallel loop over independent kernel tasks (selective scan, causal conv1d): run_parallel,
// which the tensor API's parallel_tasks (binding_common.h) calls with its launcher of worker threads.
// Includes no torch header.
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

// Starts work() on n_workers threads: the calling one and n_workers - 1 of its own, joined before it
// returns (the classic binding's launcher). Not at::parallel_for there: with an OpenMP torch its body is
// an inline `#pragma omp parallel`, which runs serially unless the extension itself is built with
// -fopenmp (and linking a second OpenMP runtime next to torch's is worse).
struct OwnThreads {
  template <typename W>
  void operator()(int64_t n_workers, const W& work) const {
    std::vector<std::thread> pool;
    pool.reserve(n_workers - 1);
    for (int64_t i = 1; i < n_workers; ++i) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
  }
};

// Runs fn(begin, end) over [0, n_tasks) in TaskBlocks on min(max_threads, n_tasks) workers that
// launch(n_workers, work) starts (OwnThreads in the classic binding, torch's intra-op pool in the stable
// one, binding_api_stable.h); on the calling thread alone when that is one. max_threads: torch's intra-op
// thread count, 1 inside a parallel region where the binding can tell. A task's exception is rethrown
// here, after every task has ended.
template <typename F, typename Launch = OwnThreads>
inline void run_parallel(int64_t n_tasks, int64_t max_threads, const F& fn, const Launch& launch = {}) {
  const int64_t n_workers = std::min<int64_t>(max_threads, n_tasks);
  if (n_workers <= 1) {
    if (n_tasks > 0) fn(0, n_tasks);
    return;
  }
  TaskBlocks blocks(n_tasks, n_workers);
  FirstError errors;
  launch(n_workers, [&] { errors.run([&] { blocks.drain(fn); }); });
  errors.rethrow();
}

}  // namespace mamba_ssm
