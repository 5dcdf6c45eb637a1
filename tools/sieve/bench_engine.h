// `sieve bench --engine`: what the engine core adds on top of one forward loop - a repeated
// long prompt served from the prefix cache, and aggregate decode throughput of N concurrent
// sequences through the continuous-batching engine. JSON on stdout.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sieve::cli {

struct EngineBenchOptions {
  std::string model_path;
  int32_t threads = 2;
  int32_t prefix_len = 4096;  // repeated-prompt length
  std::vector<int32_t> concurrency = {1, 8};
  int32_t prompt_len = 512;  // per-sequence prompt in the concurrency test
  int32_t n_decode = 64;
  std::string file;  // prompt text (default: synthetic ids)
};

int run_engine_bench(const EngineBenchOptions& o);

}  // namespace sieve::cli
