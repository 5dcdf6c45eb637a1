// Sort-free top-p over softmax-shaped scores, as RTPurbo's decode budget runs it: masses
// exp(z) of Gaussian logits z (sd 1 and 2.5), p 0.95, min_keep 16, cap 4096.
// Args: {n, sd x 10}.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "sparse/topp.h"

namespace sieve {
namespace {

void BM_top_p_select(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const double sd = state.range(1) / 10.0;
  std::mt19937 rng(5);
  std::normal_distribution<double> nd(0, sd);
  std::vector<float> mass(n);
  for (auto& m : mass) m = static_cast<float>(std::exp(nd(rng)));
  const TopPParams tp{0.95f, 16, 4096};
  TopPScratch sc;
  std::vector<int32_t> out;
  for (auto _ : state) {
    top_p_select(mass.data(), n, tp, out, sc);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["selected"] = static_cast<double>(out.size());
  state.counters["scores/s"] = benchmark::Counter(n, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_top_p_select)
    ->Args({7600, 10})
    ->Args({7600, 25})
    ->Args({16000, 10})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sieve

BENCHMARK_MAIN();
