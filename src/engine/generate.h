// Single-sequence generation: chunked prefill, then decode with a sampler, streaming tokens
// through a callback. `sieve run` and `sieve bench` use it; the scheduler drives Forward
// directly for many sequences at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "engine/forward.h"
#include "engine/sampler.h"
#include "kv/kv_store.h"
#include "sparse/policy.h"
#include "sparse/stats.h"

namespace sieve {

struct GenerateOptions {
  int32_t n_predict = 256;  // max tokens to generate (0: prefill only)
  int32_t n_batch = 512;    // prefill chunk size
  SamplerParams sampling;
  bool stop_at_eog = true;
  PolicyPtr policy;  // sparse attention policy; nullptr: dense
  // Called once per prefill chunk with (tokens done, total).
  std::function<void(int64_t, int64_t)> on_prefill_progress;
};

struct GenerateStats {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  double prefill_ms = 0;
  double decode_ms = 0;
  int64_t kv_bytes = 0;
  int64_t cached_tokens = 0;            // prompt tokens served by the prefix cache
  int64_t kv_bytes_per_token_full = 0;  // one more token of context, all full-attention layers
  int64_t kv_bytes_window_max = 0;      // bound on what the sliding-window layers hold
  int32_t n_layers_full = 0;            // layers that keep every token in some KV stream
  int32_t n_layers_window = 0;          // layers whose every KV stream keeps only a window
  int32_t n_streams_window = 0;  // KV streams (a layer, or one KV head of it) holding a window
  bool stopped_by_eog = false;
  std::string policy;  // the policy that ran (auto resolved)
  SparseStats sparse;
  double prefill_tok_s() const { return prefill_ms > 0 ? prompt_tokens * 1000.0 / prefill_ms : 0; }
  double decode_tok_s() const { return decode_ms > 0 ? completion_tokens * 1000.0 / decode_ms : 0; }
};

class Generator {
 public:
  // Owns a paged KV store sized for one sequence of n_ctx tokens; it persists across
  // generate() calls, so a repeated prompt prefix is served from the prefix cache.
  // sketch: the sketch keys the store keeps from the start (a policy that needs others
  // rebuilds the store, dropping the prefix cache).
  Generator(const Model& model, ThreadPool& pool, int32_t n_ctx, const SketchSpec& sketch = {});
  int32_t n_ctx() const { return n_ctx_; }
  // on_token(id) returns false to stop. The prompt must fit: prompt + n_predict <= n_ctx is
  // not required (generation stops at the context end), but the prompt alone must fit.
  Result<GenerateStats> generate(std::span<const int32_t> prompt, const GenerateOptions& opt,
                                 const std::function<bool(int32_t)>& on_token);
  // The logits of every prompt position (tests, fixtures): [n_prompt, n_vocab].
  Result<std::vector<float>> prompt_logits(std::span<const int32_t> prompt, int32_t n_batch);

 private:
  // Prefills prompt[n_cached..] of a new sequence in chunks; logits of the last token.
  Status prefill(KvSeqId seq, std::span<const int32_t> prompt, int32_t n_batch, bool all_logits,
                 const std::function<void(int64_t, int64_t)>& progress, std::vector<float>& logits,
                 std::vector<float>* all, class SparseSeq* sparse);
  // The store holds one sequence of n_ctx tokens, appended in chunks of up to max_chunk.
  // layout: per-stream capacities (kv_layout_for; empty = the model's).
  void make_store(const SketchSpec& sketch, int64_t max_chunk,
                  const std::vector<KvCapacity>& layout = {});

  const Model& model_;
  ThreadPool& pool_;
  int32_t n_ctx_;
  int64_t max_chunk_ = 512;
  std::unique_ptr<SketchProjection> sketch_;
  std::vector<KvCapacity> layout_;  // the store's per-layer capacities
  std::unique_ptr<KvStore> kv_;
  std::unique_ptr<Forward> fwd_;
};

}  // namespace sieve
