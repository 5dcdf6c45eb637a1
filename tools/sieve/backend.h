// --backend cpu|cuda for the commands that generate (run, bench): the CUDA path runs the
// whole model on the GPU (src/gpu); a binary built without CUDA says so.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>

#include "engine/generate.h"
#include "eval/runner.h"
#include "run_common.h"

namespace sieve {
class GpuSession;
struct GpuPolicy;
}  // namespace sieve

namespace sieve::cli {

void add_backend_flag(CLI::App& app, std::string& backend);

// What --backend cuda says in a binary built without nvcc.
inline constexpr const char* k_no_cuda_error =
    "--backend cuda: this sieve was built without CUDA (nvcc was not found at build time); use --backend cpu";

// One model on the GPU, reused across requests of the same policy.
class GpuRunner {
 public:
  GpuRunner(const Model& model, int32_t n_ctx);
  ~GpuRunner();
  // Generates on the GPU; errors (no device, a policy the GPU path lacks) are UserErrors.
  GenerateStats generate(std::span<const int32_t> prompt, const GenerateOptions& g,
                         const std::function<bool(int32_t)>& on_token);
  std::string device() const;  // "NVIDIA H200, 0.27 GiB of weights"
  // The session for a GPU policy: the last one when the policy is the same, else a new one
  // (the old one freed first; the weights are uploaded again).
  GpuSession& session(const GpuPolicy& p);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// sieve eval --backend cuda: greedy completions on the GPU, one sample at a time (no prefix
// cache: every sample prefills its whole prompt).
std::unique_ptr<eval::Runner_i> make_gpu_eval_runner(const Model& model, int32_t n_ctx);

}  // namespace sieve::cli
