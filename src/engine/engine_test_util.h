// Shared by the engine's model-driven tests: the SmolLM2 test model, loaded once per test
// binary (nullptr when absent: tests GTEST_SKIP), and the short mode the sanitizer run uses.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "engine/engine_generate.h"
#include "gguf/test_models.h"
#include "model/model.h"

namespace sieve {

// A test model by file name, loaded (nullptr when absent or unloadable).
inline std::shared_ptr<const Model> load_test_model(const char* file) {
  const std::string path = test_model_path(file);
  if (path.empty()) return nullptr;
  auto r = load_model(path);
  return r.ok() ? std::shared_ptr<const Model>(std::move(r.value())) : nullptr;
}

inline std::shared_ptr<const Model> test_smollm2() {
  static std::shared_ptr<const Model> m = load_test_model("smollm2.gguf");
  return m;
}

inline std::shared_ptr<const Model> test_gemma3() {
  static std::shared_ptr<const Model> m = load_test_model("gemma3-270m.gguf");
  return m;
}

// A synthetic document of exactly n_tokens tokens (numbered records; deterministic).
inline std::vector<int32_t> test_long_prompt(const Model& m, int n_tokens) {
  std::string t = "Notes from the archive. ";
  const char* words[] = {"river",   "stone",  "lantern", "harbour",
                         "orchard", "engine", "letter",  "winter"};
  for (int i = 0; static_cast<int>(m.tokenizer->encode(t, true, false).size()) < n_tokens; ++i) {
    t += std::string("The ") + words[i % 8] + " number " + std::to_string(i * 7 % 97) +
         " was recorded. ";
  }
  auto ids = m.tokenizer->encode(t, true, false);
  ids.resize(n_tokens);
  return ids;
}

// Largest element-wise difference of two equally long vectors (logits).
inline float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
  return m;
}

// Under the sanitizers (SIEVE_TEST_SHORT) the model-driven tests run smaller workloads.
inline bool test_short_mode() {
  return std::getenv("SIEVE_TEST_SHORT") != nullptr;
}

// Greedy continuation of n tokens under a policy through `generate(options, on_token)` (a
// SequenceEngine's generate or generate_with_engine on an engine); `stats` gets the run's
// sparse counters.
template <class Generate>
Result<std::vector<int32_t>> greedy_tokens(Generate&& generate, int n, PolicyPtr policy,
                                           SparseStats* stats = nullptr) {
  GenerateOptions g;
  g.n_predict = n;
  g.sampling.temperature = 0;
  g.stop_at_eog = false;
  g.policy = std::move(policy);
  std::vector<int32_t> out;
  auto r = generate(g, [&](int32_t t) {
    out.push_back(t);
    return true;
  });
  if (!r) return r.error();
  if (stats) *stats = r->sparse;
  return out;
}

// The same on a GPU test's engine (the runner under test).
inline Result<std::vector<int32_t>> greedy_tokens_on(Engine& e, const std::vector<int32_t>& prompt,
                                                     int n, PolicyPtr policy,
                                                     SparseStats* stats = nullptr) {
  return greedy_tokens(
      [&](const GenerateOptions& g, const std::function<bool(int32_t)>& on_token) {
        return generate_with_engine(e, prompt, g, on_token);
      },
      n, std::move(policy), stats);
}

// Greedy continuation of n tokens on the CPU engine (one sequence, `threads` threads) under a
// policy (nullptr: the engine's default): the reference the GPU tests compare with.
inline Result<std::vector<int32_t>> cpu_greedy_tokens(const Model& m,
                                                      const std::vector<int32_t>& prompt, int n,
                                                      PolicyPtr policy, int threads = 2) {
  ThreadPool pool(threads);
  SequenceEngineConfig sc;
  sc.n_ctx = 4096;
  sc.pool = &pool;
  auto gen = SequenceEngine::create(std::shared_ptr<const Model>(&m, [](const Model*) {}), sc);
  if (!gen) return gen.error();
  return greedy_tokens(
      [&](const GenerateOptions& g, const std::function<bool(int32_t)>& on_token) {
        return (*gen)->generate(prompt, g, on_token);
      },
      n, std::move(policy));
}

}  // namespace sieve
