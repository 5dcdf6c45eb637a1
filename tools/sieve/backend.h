// --backend cpu|cuda for the commands that generate (run, bench, eval): the same engine on the
// CPU runner or the CUDA one, which runs the whole model on the GPU (src/gpu); a binary built
// without CUDA says so.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>

#include "engine/engine.h"
#include "engine/engine_generate.h"
#include "engine/model_runner.h"
#include "eval/runner.h"
#include "run_common.h"

namespace sieve::cli {

void add_backend_flag(CLI::App& app, std::string& backend);

// The engine's runner for --backend: empty (the CPU runner) for "cpu", the CUDA runner's
// factory for "cuda" (a UserError in a binary built without CUDA or on a machine without a
// device). mem_fraction: --gpu-mem-fraction.
RunnerFactory runner_factory_for(const std::string& backend, double mem_fraction);

// What --backend cuda says in a binary built without nvcc.
inline constexpr const char* k_no_cuda_error =
    "--backend cuda: this sieve was built without CUDA (nvcc was not found at build time); use "
    "--backend cpu";

// The engine that runs one request at a time (run, bench, analyze, eval) on --backend: the
// CPU runner over `pool` (borrowed), or the model on the GPU (its weights uploaded once here).
// n_ctx: the KV's tokens (SequenceEngineConfig). Errors (no device, a bad size) are UserErrors.
struct SequenceEngineOptions {
  int32_t n_ctx = 0;
  ThreadPool* pool = nullptr;  // --backend cpu
  bool prefix_cache = true;    // false: every request prefills its whole prompt (benchmarks)
  double mem_fraction = 0.9;   // --backend cuda
};
std::unique_ptr<SequenceEngine> make_sequence_engine(const Model& model, const std::string& backend,
                                                     const SequenceEngineOptions& opt);
// Generates, the errors as UserErrors.
GenerateStats generate_or_throw(SequenceEngine& se, std::span<const int32_t> prompt,
                                const GenerateOptions& g,
                                const std::function<bool(int32_t)>& on_token);
// What runs it: "cpu", or "NVIDIA H200, 0.27 GiB of bf16 weights, ..." for the CUDA runner.
std::string device_of(SequenceEngine& se);

// The model on the GPU behind the one engine (the CUDA runner under the scheduler) for the
// commands that run several requests at once through it (eval --concurrency, bench
// --batch-seqs); the weights are uploaded once.
class GpuRunner {
 public:
  struct Options {
    bool prefix_cache = true;  // false: every request prefills its whole prompt (benchmarks)
    double mem_fraction = 0.9;
    int32_t max_running = 1;  // sequences the engine runs together (generate() from threads)
  };
  GpuRunner(const Model& model, int32_t n_ctx, const Options& opt);
  ~GpuRunner();
  // Generates on the GPU; errors (no device, a policy the GPU lacks) are UserErrors.
  GenerateStats generate(std::span<const int32_t> prompt, const GenerateOptions& g,
                         const std::function<bool(int32_t)>& on_token);
  std::string device() const;  // "NVIDIA H200, 0.27 GiB of bf16 weights, ..."
  // How many sequences of n_tokens each the KV pool holds at once (at least 1).
  int32_t kv_fits(int32_t n_tokens) const;
  // The engine itself, for callers that run several requests at once (bench_gpu_depth.cpp).
  Engine& engine();
  int64_t kv_pool_bytes() const;  // device memory of the KV pages

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// sieve eval --backend cuda: greedy completions on the GPU; up to `concurrency` samples run at
// once through the engine (batched steps), fewer when that many n_ctx-token sequences do not
// fit the KV pool (max_parallel()).
std::unique_ptr<eval::Runner_i> make_gpu_eval_runner(const Model& model, int32_t n_ctx,
                                                     int32_t concurrency);

}  // namespace sieve::cli
