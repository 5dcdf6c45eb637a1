// CPU attention throughput on the KV shapes of SmolLM2-135M (3 KV heads x 3 query heads,
// d 64) and Gemma 3 270M's global layers (1 KV head x 4 query heads, d 256), one thread, one
// KV head: decode (one query) and a prefill block (64 queries at the end of the keys).
// Counter: keys/s = visible keys read per second (K and V rows, each once per call).
// Args: {head_dim, n_group, n_keys, n_queries}.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/attention_test_util.h"

namespace sieve {
namespace {

void BM_attend(benchmark::State& state) {
  const int d = static_cast<int>(state.range(0)), G = static_cast<int>(state.range(1));
  const int n = static_cast<int>(state.range(2)), n_q = static_cast<int>(state.range(3));
  std::mt19937 rng(7);
  PagedHead h(d, 16, n, rng, 1, 0);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> q(static_cast<size_t>(n_q) * G * d), o(q.size());
  for (auto& x : q) x = nd(rng);
  std::vector<int32_t> qpos(n_q);
  for (int i = 0; i < n_q; ++i) qpos[i] = n - n_q + i;
  const AttnQuery aq{q.data(), qpos.data(), n_q, G, d, 1.0f / 8};
  const KeySet ks{nullptr, 0, 0, n};
  const KvHeadView kv = h.view();
  for (auto _ : state) {
    attend(aq, kv, ks, o.data());
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
  state.counters["keys/s"] = benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_attend)
    ->Args({64, 3, 4096, 1})
    ->Args({64, 3, 32768, 1})
    ->Args({256, 4, 4096, 1})
    ->Args({64, 3, 4096, 64})
    ->Args({256, 4, 4096, 64})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sieve

BENCHMARK_MAIN();
