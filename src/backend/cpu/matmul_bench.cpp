// matmul throughput on the shapes of SmolLM2-135M (Q4_1) and Gemma 3 270M (Q4_K_M mix):
// decode (m = 1) and prefill (m = 512), 1 and 2 threads; the whole forward step's matmuls also
// on 4, 8 and 16 threads where the machine has them.
// Counters: GFLOP/s = 2*m*n_rows*n_cols per second; GB/s = weight bytes read per second
// (once per call: the GEMM streams each weight row once per 160 KiB of activations).
// Args: {n_cols, n_rows, m, threads}; the weight type is part of the benchmark name.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/quant_test_util.h"
#include "core/cpu_features.h"
#include "core/thread_pool.h"

namespace sieve {
namespace {

void run_matmul(benchmark::State& state, GgmlType t) {
  const int64_t n_cols = state.range(0), n_rows = state.range(1), m = state.range(2);
  const int threads = static_cast<int>(state.range(3));
  std::mt19937 rng(1234);
  const auto w = testutil::random_weights(t, n_rows * n_cols, rng);
  const auto x = testutil::random_activations(m * n_cols, rng, false);
  std::vector<float> y(static_cast<size_t>(m * n_rows));
  ThreadPool pool(threads);
  MatmulScratch scratch;
  const WeightView wv{t, w.data(), n_rows, n_cols};
  matmul(wv, x.data(), m, y.data(), pool, scratch);  // warm: scratch sized, pages touched
  for (auto _ : state) {
    matmul(wv, x.data(), m, y.data(), pool, scratch);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * static_cast<double>(m) * n_rows * n_cols;
  const double bytes = static_cast<double>(row_bytes(t, n_cols)) * n_rows;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(type_name(t)) + (use_avx2() ? " avx2" : " scalar"));
}

void shapes(benchmark::internal::Benchmark* b, std::initializer_list<std::pair<int64_t, int64_t>> s,
            std::initializer_list<int64_t> ms) {
  for (const auto& [n_cols, n_rows] : s)
    for (int64_t m : ms)
      for (int64_t th : {1, 2}) b->Args({n_cols, n_rows, m, th});
  b->ArgNames({"n_cols", "n_rows", "m", "threads"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

// SmolLM2-135M: every layer matmul is Q4_1; the tied Q8_0 embedding is the output head.
BENCHMARK_CAPTURE(run_matmul, smollm2_q4_1, GgmlType::Q4_1)->Apply([](auto* b) {
  shapes(b, {{576, 576}, {576, 192}, {576, 1536}, {1536, 576}}, {1, 512});
});
BENCHMARK_CAPTURE(run_matmul, smollm2_out_q8_0, GgmlType::Q8_0)->Apply([](auto* b) {
  shapes(b, {{576, 49152}}, {1});
});

// Gemma 3 270M Q4_K_M: q/k/v/gate/up Q5_0, attn_output Q4_K, ffn_down Q6_K (some layers), Q8_0
// head.
BENCHMARK_CAPTURE(run_matmul, gemma3_q5_0, GgmlType::Q5_0)->Apply([](auto* b) {
  shapes(b, {{640, 1024}, {640, 2048}}, {1, 512});
});
BENCHMARK_CAPTURE(run_matmul, gemma3_q4_k, GgmlType::Q4_K)->Apply([](auto* b) {
  shapes(b, {{1024, 640}, {2048, 640}}, {1, 512});
});
BENCHMARK_CAPTURE(run_matmul, gemma3_q6_k, GgmlType::Q6_K)->Apply([](auto* b) {
  shapes(b, {{2048, 640}}, {1, 512});
});
BENCHMARK_CAPTURE(run_matmul, gemma3_q8_0, GgmlType::Q8_0)->Apply([](auto* b) {
  shapes(b, {{640, 256}}, {1, 512});
  b->Args({640, 262144, 1, 1})->Args({640, 262144, 1, 2});
});

// Every matmul of a SmolLM2-135M forward step, as the engine should issue them: per layer
// matmul_multi{q, k, v}, o, matmul_multi{gate, up}, down (30 layers, 66 MB of Q4_1, more than
// L3 holds, so decode streams the weights from DRAM as it does for real), then the Q8_0
// output head for one row (llama.cpp also computes logits for the last prompt token only).
// Args: {m, threads}; tok/s counts m tokens per iteration.
void smollm2_forward_matmuls(benchmark::State& state) {
  const int64_t m = state.range(0);
  const int threads = static_cast<int>(state.range(1));
  constexpr int kLayers = 30;
  struct Shape {
    int64_t n_cols, n_rows;
  };
  const Shape shapes[7] = {{576, 576},  {576, 192},  {576, 192}, {576, 576},
                           {576, 1536}, {576, 1536}, {1536, 576}};
  std::mt19937 rng(99);
  std::vector<std::vector<uint8_t>> w;
  double flops = 0, bytes = 0;
  for (int l = 0; l < kLayers; ++l) {
    for (const Shape& s : shapes) {
      w.push_back(testutil::random_weights(GgmlType::Q4_1, s.n_rows * s.n_cols, rng));
      flops += 2.0 * m * s.n_rows * s.n_cols;
      bytes += static_cast<double>(row_bytes(GgmlType::Q4_1, s.n_cols)) * s.n_rows;
    }
  }
  const auto head = testutil::random_weights(GgmlType::Q8_0, 49152 * 576, rng);
  flops += 2.0 * 576 * 49152;
  bytes += static_cast<double>(head.size());
  std::vector<std::vector<float>> y;
  for (const Shape& s : shapes) y.emplace_back(static_cast<size_t>(m * s.n_rows));
  std::vector<float> logits(49152);
  const auto x576 = testutil::random_activations(m * 576, rng, false);
  const auto x1536 = testutil::random_activations(m * 1536, rng, false);
  ThreadPool pool(threads);
  MatmulScratch scratch;
  auto step = [&] {
    for (int l = 0; l < kLayers; ++l) {
      auto view = [&](int j) {
        return WeightView{GgmlType::Q4_1, w[l * 7 + j].data(), shapes[j].n_rows, shapes[j].n_cols};
      };
      const MatmulTarget qkv[3] = {
          {view(0), y[0].data()}, {view(1), y[1].data()}, {view(2), y[2].data()}};
      const MatmulTarget gate_up[2] = {{view(4), y[4].data()}, {view(5), y[5].data()}};
      matmul_multi(qkv, 3, x576.data(), m, pool, scratch);
      matmul(view(3), x576.data(), m, y[3].data(), pool, scratch);
      matmul_multi(gate_up, 2, x576.data(), m, pool, scratch);
      matmul(view(6), x1536.data(), m, y[6].data(), pool, scratch);
    }
    matmul({GgmlType::Q8_0, head.data(), 49152, 576}, x576.data(), 1, logits.data(), pool, scratch);
  };
  step();
  for (auto _ : state) {
    step();
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] =
      benchmark::Counter(bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(m), benchmark::Counter::kIsIterationInvariantRate);
}
// 1, 2, 4, ... threads up to the machine's.
std::vector<int64_t> thread_counts() {
  std::vector<int64_t> v;
  for (int64_t t = 1; t <= std::max(2, hardware_threads()); t *= 2) v.push_back(t);
  return v;
}

BENCHMARK(smollm2_forward_matmuls)
    ->ArgsProduct({{1, 2, 4, 8, 16, 32, 64, 512}, thread_counts()})
    ->ArgNames({"m", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// Float weights, for completeness (no model in scope uses them for matmuls).
BENCHMARK_CAPTURE(run_matmul, f16, GgmlType::F16)->Apply([](auto* b) {
  shapes(b, {{576, 576}}, {1, 512});
});

}  // namespace
}  // namespace sieve

BENCHMARK_MAIN();
