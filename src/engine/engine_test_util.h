// Shared by the engine's model-driven tests: the SmolLM2 test model, loaded once per test
// binary (nullptr when absent: tests GTEST_SKIP), and the short mode the sanitizer run uses.
#pragma once

#include <cstdlib>
#include <memory>

#include "gguf/test_models.h"
#include "model/model.h"

namespace sieve {

inline std::shared_ptr<const Model> test_smollm2() {
  static std::shared_ptr<const Model> m = [] {
    const std::string path = test_model_path("smollm2.gguf");
    if (path.empty()) return std::shared_ptr<const Model>();
    auto r = load_model(path);
    return r.ok() ? std::shared_ptr<const Model>(std::move(r.value())) : nullptr;
  }();
  return m;
}

// Under the sanitizers (SIEVE_TEST_SHORT) the model-driven tests run smaller workloads.
inline bool test_short_mode() { return std::getenv("SIEVE_TEST_SHORT") != nullptr; }

}  // namespace sieve
