// `sieve bench --backend cuda`: prefill and decode throughput of the model on the GPU
// (src/gpu), per prompt length and policy, in the same JSON rows as the CPU bench
// (threads = 0), so the ratios to dense come out side by side.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "model/model.h"
#include "sparse/policy.h"

namespace sieve::cli {

struct GpuBenchOptions {
  std::vector<int32_t> lengths;
  int32_t n_decode = 128;
  int32_t reps = 3;
  int32_t warmup = 1;
};

// Rows appended to `results`; a UserError when the GPU path cannot run.
void run_gpu_bench(const Model& model, const std::vector<int32_t>& prompt,
                   const std::vector<PolicyPtr>& policies, const GpuBenchOptions& o,
                   nlohmann::json& results, std::string& device);

}  // namespace sieve::cli
