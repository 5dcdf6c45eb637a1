// CPU attention throughput on the KV shapes of SmolLM2-135M (3 KV heads x 3 query heads,
// d 64) and Gemma 3 270M's global layers (1 KV head x 4 query heads, d 256), one thread, one
// KV head: decode (one query) and a prefill block (64 queries at the end of the keys).
// Counter: keys/s = visible keys read per second (K and V rows, each once per call).
// Args: {head_dim, n_group, n_keys, n_queries}.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/attention_test_util.h"
#include "backend/cpu/ops.h"

namespace sieve {
namespace {

void BM_attend(benchmark::State& state) {
  const int d = static_cast<int>(state.range(0)), G = static_cast<int>(state.range(1));
  const int n = static_cast<int>(state.range(2)), n_q = static_cast<int>(state.range(3));
  std::mt19937 rng(7);
  PagedHead h(d, 16, n, rng, 1, 0, state.range(4) ? 3 : 1);
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
  state.counters["keys/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

// Decode over TokenSelect's key set: 128 sinks, n_pick random picks (sorted) and a 512-token
// window of the n keys, in the KV store's layout (3 KV heads interleaved per token row, pages
// of 16), optionally with compact positions (keys re-rotated while they are read) and with the
// sinks and picks read from kept rows (keep_rows: a contiguous copy, already rotated), or the
// selecting step that writes them.
// Args: {n_keys, n_pick, compact, kept}.
void BM_attend_sparse(benchmark::State& state) {
  const int d = 64, G = 3, sinks = 128, window = 512;
  const int n = static_cast<int>(state.range(0)), n_pick = static_cast<int>(state.range(1));
  const bool compact = state.range(2) != 0;
  std::mt19937 rng(7);
  PagedHead h(d, 16, n, rng, 1, 0, 3);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> q(static_cast<size_t>(G) * d), o(q.size());
  for (auto& x : q) x = nd(rng);
  std::vector<int32_t> mid(n - window - sinks), idx;
  for (size_t i = 0; i < mid.size(); ++i) mid[i] = sinks + static_cast<int32_t>(i);
  std::shuffle(mid.begin(), mid.end(), rng);
  mid.resize(std::min<size_t>(mid.size(), n_pick));
  std::sort(mid.begin(), mid.end());
  for (int j = 0; j < sinks; ++j) idx.push_back(j);
  idx.insert(idx.end(), mid.begin(), mid.end());
  for (int j = n - window; j < n; ++j) idx.push_back(j);
  const int n_sel = static_cast<int>(idx.size());
  const int32_t qpos = compact ? n_sel - 1 : n - 1;
  const AttnQuery aq{q.data(), &qpos, 1, G, d, 1.0f / 8};
  RopeRotator rot(d, d, 10000.0f, RopeMode::norm);
  rot.reserve(n + n_sel);
  KeySet ks{idx.data(), n_sel, 0, 0};
  if (compact) ks.rot = &rot;
  const KvHeadView kv = h.view();
  // kept 1: the sinks' and picks' rows read from a contiguous copy (keep_rows); 2: written to it.
  std::vector<uint16_t> kk, kv_rows;
  if (state.range(3) != 0) {
    const int n_kept = n_sel - window;
    kk.resize(static_cast<size_t>(n_kept) * d);
    kv_rows.resize(kk.size());
    ks.kept_k = kk.data();
    ks.kept_v = kv_rows.data();
    ks.fill = true;
    ks.n_kept = n_kept;
    attend(aq, kv, ks, o.data());              // the selecting step's attention fills the copy
    if (state.range(3) == 1) ks.fill = false;  // 2: time the filling step
  }
  for (auto _ : state) {
    attend(aq, kv, ks, o.data());
    benchmark::DoNotOptimize(o.data());
    benchmark::ClobberMemory();
  }
  state.counters["keys/s"] =
      benchmark::Counter(static_cast<double>(n_sel), benchmark::Counter::kIsIterationInvariantRate);
}

// Selection scores of G query rows against n keys of one KV head (the KV store's layout: 3 KV
// heads per token row, pages of 16), as a TokenSelect miss scores them; pre_rope turns every
// key back to position 0 first (score_positions=none). Args: {n_keys, pre_rope}.
void BM_key_scores(benchmark::State& state) {
  const int d = 64, G = 3;
  const int n = static_cast<int>(state.range(0));
  const bool pre_rope = state.range(1) != 0;
  std::mt19937 rng(7);
  PagedHead h(d, 16, n, rng, 1, 0, 3);
  std::normal_distribution<float> nd(0, 1);
  std::vector<float> q(static_cast<size_t>(G) * d), s(static_cast<size_t>(G) * n);
  for (auto& x : q) x = nd(rng);
  RopeRotator rot(d, d, 10000.0f, RopeMode::norm);
  rot.reserve(n + 1);
  const KeySet ks{nullptr, 0, 0, n, pre_rope ? &rot : nullptr, 0, true};
  const KvHeadView kv = h.view();
  for (auto _ : state) {
    key_scores(q.data(), G, d, 0.125f, kv, ks, s.data(), n);
    benchmark::DoNotOptimize(s.data());
    benchmark::ClobberMemory();
  }
  state.counters["keys/s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_key_scores)->Args({32768, 0})->Args({32768, 1})->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_attend_sparse)
    ->Args({32768, 2048, 0, 0})
    ->Args({32768, 2048, 1, 0})
    ->Args({32768, 2048, 1, 1})
    ->Args({32768, 2048, 1, 2})
    ->Args({32768, 32768, 0, 0})
    ->Unit(benchmark::kMicrosecond);

BENCHMARK(BM_attend)
    ->Args({64, 3, 4096, 1, 0})
    ->Args({64, 3, 32768, 1, 0})
    ->Args({64, 3, 32768, 1, 1})
    ->Args({256, 4, 4096, 1, 0})
    ->Args({64, 3, 4096, 64, 0})
    ->Args({256, 4, 4096, 64, 0})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace sieve

BENCHMARK_MAIN();
