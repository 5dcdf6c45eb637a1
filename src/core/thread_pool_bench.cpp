// ThreadPool::run's fork/join cost. A decode step of a small model issues ~180 pool jobs a
// token (five or more a layer, SmolLM2's 30 layers, the output), each a few microseconds of
// work, so the join is part of every token.
//   empty: the bare fork/join (every thread runs an empty job).
//   stream/<KiB>: every thread sums its share of a buffer that lives in L2/L3 (a small gemv's
//   share of the weights), so the figure is work + join.
#include <benchmark/benchmark.h>

#include <numeric>
#include <vector>

#include "core/thread_pool.h"

namespace {

void BM_PoolEmpty(benchmark::State& state) {
  sieve::ThreadPool pool(static_cast<int>(state.range(0)));
  const std::function<void(int, int)> job = [](int, int) {};
  for (auto _ : state) pool.run(job);
}
BENCHMARK(BM_PoolEmpty)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->UseRealTime();

void BM_PoolStream(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const size_t n = static_cast<size_t>(state.range(1)) * 1024 / sizeof(float);
  std::vector<float> buf(n, 1.0f);
  std::vector<float> out(threads * 16, 0.0f);
  sieve::ThreadPool pool(threads);
  const std::function<void(int, int)> job = [&](int t, int nt) {
    const size_t b = n * t / nt, e = n * (t + 1) / nt;
    out[t * 16] += std::accumulate(buf.begin() + b, buf.begin() + e, 0.0f);
  };
  for (auto _ : state) pool.run(job);
  benchmark::DoNotOptimize(out.data());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(n * 4));
}
BENCHMARK(BM_PoolStream)->ArgsProduct({{2, 16}, {256, 2048}})->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
