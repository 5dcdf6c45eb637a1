#include "core/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#define SIEVE_PAUSE() _mm_pause()
#else
#define SIEVE_PAUSE() ((void)0)
#endif

namespace sieve {

int hardware_threads() {
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, n_threads)), done_(std::make_unique<Done[]>(n_threads_)) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin for a short while: jobs arrive back to back during a forward pass.
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < 20000; ++spin) {
      SIEVE_PAUSE();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      gen = generation_.load(std::memory_order_acquire);
    }
    seen = gen;
    if (stop_.load()) return;
    (*job_)(index, n_threads_);
    done_[index].gen.store(gen, std::memory_order_release);
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  uint64_t gen;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    gen = generation_.fetch_add(1, std::memory_order_acq_rel) + 1;
  }
  cv_.notify_all();
  fn(0, n_threads_);
  // Every worker sees every generation: run() returns only after all finished the last one.
  for (int i = 1; i < n_threads_; ++i) {
    while (done_[i].gen.load(std::memory_order_acquire) != gen) SIEVE_PAUSE();
  }
  job_ = nullptr;
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int n_use = static_cast<int>(std::min<int64_t>(n_threads_, max_chunks));
  if (n_use <= 1) {
    fn(0, n);
    return;
  }
  run([&](int t, int) {
    if (t >= n_use) return;
    const int64_t begin = n * t / n_use;
    const int64_t end = n * (t + 1) / n_use;
    if (begin < end) fn(begin, end);
  });
}

}  // namespace sieve
