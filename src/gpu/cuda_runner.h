// The CUDA runner: the model on an NVIDIA GPU behind the engine's runner seam
// (engine/model_runner.h). One step runs a scheduled mixed batch - decode tokens and prefill
// chunks of many sequences - through the whole forward pass: bf16 weights and cuBLAS GEMMs
// over every token of the step, K/V in device pages whose tables the host KvStore keeps (the
// same page ids as the store's), dense attention batched over the step's sequences, and
// TokenSelect's decode selection (exact paged q.K, head soft vote, top-k, per-sequence
// selection cache) for the sequences whose policy selects. Decode-only steps replay a CUDA
// graph captured per batch composition. docs/gpu.md.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "engine/model_runner.h"
#include "gpu/gpu_policy.h"
#include "model/model.h"

namespace sieve {

// Since the runner was created, over every sequence.
struct CudaRunnerStats {
  int64_t steps = 0;
  int64_t graph_steps = 0;  // decode steps replayed from a captured graph
  int64_t decode_tokens = 0;
  int64_t prefill_tokens = 0;
  int64_t sparse_layer_steps = 0;  // decode (layer, sequence) attentions over a selection
  int64_t dense_layer_steps = 0;   // decode (layer, sequence) attentions over every key
};

class CudaRunner final : public ModelRunner {
 public:
  struct Options {
    // Share of the device's memory the process may use: weights, workspaces and KV pages
    // (vLLM's gpu_memory_utilization). The KV pool gets what is left.
    double mem_fraction = 0.9;
    // A row's arithmetic does not depend on the rows beside it in a step (fixed GEMM
    // algorithms, decode splits and unsplit prefill attention), so a greedy request returns the
    // same text alone and among others (cuda_runner_matmul.cpp). SIEVE_GPU_BATCH_INVARIANT=0
    // turns it off.
    bool batch_invariant = true;
  };
  // Uploads the weights and sizes the workspaces for lim. Errors: no device, an architecture or
  // shape the kernels lack, not enough device memory.
  static Result<std::unique_ptr<CudaRunner>> create(const Model& model, const RunnerLimits& lim,
                                                    const Options& opt);
  ~CudaRunner() override;
  CudaRunner(const CudaRunner&) = delete;
  CudaRunner& operator=(const CudaRunner&) = delete;

  std::string_view backend() const override { return "cuda"; }
  Status supports(const PolicyConfig& p) const override;
  Status run(std::span<const BatchEntry> batch, std::vector<float>& logits) override;
  int64_t kv_capacity_bytes() const override;
  bool host_rows() const override { return false; }
  Status attach(KvStore& kv) override;

  std::string device_name() const;
  int64_t weight_bytes() const;   // device memory of the weights
  int64_t kv_pool_bytes() const;  // device memory of the KV pages (after attach)
  const CudaRunnerStats& stats() const;

  struct Impl;

 private:
  explicit CudaRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The engine's factory for the CUDA backend.
RunnerFactory cuda_runner_factory(const CudaRunner::Options& opt);

// Whether a CUDA device is present (tests skip without one).
bool gpu_available();

}  // namespace sieve
