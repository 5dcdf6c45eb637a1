// A model on the GPU: one sequence at a time through the whole forward pass on the CUDA
// backend. Weights are dequantized once to bf16 (cuBLAS GEMMs with fp32 accumulation), the
// residual stream is fp32, K/V are bf16 in the paged layout of backend/cuda, attention runs
// on the backend's kernels: dense prefill chunks, dense decode, or TokenSelect decode
// (exact paged q.K, per-head soft vote, sort-free top-k, attention over sinks + selection +
// window) - the same stages the CPU pipeline runs (docs/gpu-engine.md).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"
#include "model/model.h"
#include "sparse/policy.h"

namespace sieve {

// What the GPU session runs for a policy.
struct GpuPolicy {
  bool sparse = false;       // TokenSelect decode (else dense)
  bool layer_vote = true;    // one selection per layer (soft votes of every head summed), else per KV head
  int32_t top_k = 2048;      // selected tokens besides sinks and window
  int32_t sinks = 128;       // first tokens, always read
  int32_t local = 512;       // most recent tokens before the query, always read
  bool chunk_prefill = true; // prefill chunks attend to one selection from the chunk's mean query
  int32_t prefill_tail = 0;  // chunks reaching into the prompt's last N tokens attend densely
  int32_t chunk_from = 0;    // prompts shorter than this prefill densely (auto: 65536)
  // positions=auto: the CPU renumbers selected tokens (compact positions) once a sequence passes
  // the model's trained context; the GPU path has no compact positions, so such a sequence is
  // an error there (positions=original runs on)
  bool compact_beyond_train = false;
  // TokenSelect's Selection Cache at decode: reuse a layer's selection while the query's
  // fingerprint keeps cosine >= theta with the one it was made for (scope=layer only)
  bool selection_cache = false;
  float theta = 0.9f;
  std::string name = "dense";
  bool operator==(const GpuPolicy&) const = default;
};

// The GPU form of a CPU policy, or an error naming what the CUDA backend cannot run.
Result<GpuPolicy> gpu_policy_from(const PolicyConfig& p);
// Whether a sequence of len tokens runs under pol on the GPU at all (TokenSelect's compact
// positions past the trained context do not): what GpuSession::fits() checks besides -c.
Status gpu_check_length(const GpuPolicy& pol, const ModelHParams& hp, int64_t len);

// Since the last reset(). The decode fields count decode steps only (a prefill chunk adds to
// steps and prefill_selections), so after a prefill they read as the decode's own figures.
struct GpuStats {
  int64_t steps = 0;               // forward steps (prefill chunks + decode tokens)
  int64_t sparse_layer_steps = 0;  // decode layer-steps that attended to a selection
  int64_t dense_layer_steps = 0;   // decode layer-steps that attended to every key
  int64_t prefill_selections = 0;  // (layer, prefill chunk) selections
  double keys_read = 0;            // decode: keys attended, summed over layer-steps
  double keys_total = 0;           // decode: keys held, summed over layer-steps
  double selected = 0;             // decode: selected tokens (besides sinks and window), summed
  int64_t cache_lookups = 0;       // decode: selection-cache probes (sparse layer-steps with the cache on)
  int64_t cache_hits = 0;          //   and the ones that reused the layer's selection
  double fraction_read() const { return keys_total > 0 ? keys_read / keys_total : 1.0; }
  double mean_selected() const { return sparse_layer_steps > 0 ? selected / sparse_layer_steps : 0; }
};

class GpuSession {
 public:
  // Uploads the model (weights to bf16) and sizes the KV for max_ctx tokens. Errors: no
  // device, an architecture or layer kind the GPU path lacks, not enough device memory.
  static Result<std::unique_ptr<GpuSession>> create(const Model& model, int32_t max_ctx,
                                                    const GpuPolicy& policy);
  ~GpuSession();
  GpuSession(const GpuSession&) = delete;
  GpuSession& operator=(const GpuSession&) = delete;

  // Starts a new sequence (the KV is emptied; nothing is freed).
  void reset();
  // Appends tokens (a prompt chunk of at most max_chunk() tokens, or one decode token) and
  // returns the logits of the last one ([n_vocab]). On error the sequence is left as it was
  // before the call only for argument errors; a device error leaves the session unusable.
  Status step(std::span<const int32_t> tokens, std::vector<float>& logits);
  // Prefill in chunks of max_chunk(): logits of the last prompt token; progress(done, total)
  // after each chunk.
  Status prefill(std::span<const int32_t> tokens, std::vector<float>& logits,
                 const std::function<void(int64_t, int64_t)>& progress = {});

  // Whether n_more tokens can still be appended: the context size, and TokenSelect's
  // positions=auto past the trained context (compact positions: CPU only). An error says why.
  Status fits(int64_t n_more) const;
  int32_t n_tokens() const;
  int32_t max_ctx() const;
  static constexpr int32_t max_chunk() { return 512; }
  int64_t kv_bytes() const;       // K/V held by the sequence now (sliding layers: their ring)
  int64_t kv_bytes_per_token() const;  // one more token: the layers that keep every token
  int64_t weight_bytes() const;   // device memory of the weights
  const GpuStats& stats() const;
  const GpuPolicy& policy() const;
  std::string device_name() const;
  // Which kernel runs dense prefill chunks and why: "cuDNN (...timings)" or "sieve (...)".
  const std::string& prefill_kernel() const;

  struct Impl;

 private:
  explicit GpuSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether a CUDA device is present (tests skip without one).
bool gpu_available();

}  // namespace sieve
