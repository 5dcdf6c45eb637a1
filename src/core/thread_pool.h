// A persistent pool of worker threads for data-parallel kernels.
// run(fn) calls fn(thread_index, n_threads) on every thread (the caller is thread 0) and
// returns when all are done. Workers spin briefly between jobs (decode issues hundreds of
// small jobs per token), then sleep on a condition variable. Each worker reports a finished
// job in its own cache line, which the caller polls: one shared counter would make the
// workers' decrements queue for the line, about a microsecond a job at 16 threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace sieve {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // fn(thread_index, n_threads). Not reentrant: a job must not call run() on the same pool.
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into contiguous ranges of at least `grain` items: fn(begin, end).
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker(int index);

  int n_threads_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  alignas(64) std::atomic<uint64_t> generation_{0};
  // done_[i]: the last generation worker i finished, alone in its cache line.
  struct alignas(64) Done {
    std::atomic<uint64_t> gen{0};
  };
  std::unique_ptr<Done[]> done_;
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable cv_;
};

// Number of hardware threads, at least 1.
int hardware_threads();

}  // namespace sieve
