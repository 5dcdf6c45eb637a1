// The decode step's top-k pick (pick_tokens, token granularity) over TokenSelect-shaped
// scores: the head soft vote of 9 heads over n keys (summed softmaxes of Gaussian logits, sd
// 2.5), top 2048 of them, returned in ascending index order as the key set needs them.
// Args: {n}.
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "sparse/select.h"

namespace sieve {
namespace {

std::vector<float> soft_vote_scores(int n, int heads, double sd) {
  std::mt19937 rng(11);
  std::normal_distribution<double> nd(0, sd);
  std::vector<float> score(n, 0.0f);
  std::vector<double> row(n);
  for (int h = 0; h < heads; ++h) {
    double sum = 0;
    for (double& x : row) sum += (x = std::exp(nd(rng)));
    for (int j = 0; j < n; ++j) score[j] += static_cast<float>(row[j] / sum);
  }
  return score;
}

void BM_pick_top_k(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const std::vector<float> score = soft_vote_scores(n, 9, 2.5);
  std::vector<int32_t> out;
  for (auto _ : state) {
    out = pick_tokens(score.data(), n, 2048, 0.0f, 0, 1);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["scores/s"] = benchmark::Counter(n, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_pick_top_k)->Arg(4096)->Arg(16384)->Arg(32768)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sieve

BENCHMARK_MAIN();
