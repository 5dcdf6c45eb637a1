// One request at a time through the engine, synchronously: the one generation loop of `sieve
// run`, `sieve bench`, `sieve analyze` and local eval, on either backend (the CPU runner,
// Forward, or the CUDA runner), over the same scheduler that serves many sequences.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "sparse/policy.h"
#include "sparse/stats.h"

namespace sieve {

struct GenerateOptions {
  int32_t n_predict = 256;  // max tokens to generate (0: prefill only)
  int32_t n_batch = 512;    // prefill chunk size
  SamplerParams sampling;
  bool stop_at_eog = true;
  PolicyPtr policy;  // sparse attention policy; nullptr: dense
  // Called once per prefill chunk with (tokens done, total), on the engine's thread.
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

// Submits the prompt, streams each generated token to on_token (return false to stop: the
// request is cancelled, and no later token counts) and waits for the end. n_predict 0
// prefills and generates nothing. Timings: prefill_ms is submit -> first token, decode_ms the
// rest; the sparse statistics and cached tokens are the request's own; the KV figures are the
// engine's store's. opt.n_batch is the engine's (EngineConfig::max_batch_tokens).
Result<GenerateStats> generate_with_engine(Engine& engine, std::span<const int32_t> prompt,
                                           const GenerateOptions& opt,
                                           const std::function<bool(int32_t)>& on_token);

struct SequenceEngineConfig {
  // The KV holds up to n_ctx tokens of one sequence: the prompt alone must fit; generation
  // stops once the KV is full (its last token, never written to the KV, is the n_ctx+1-th).
  int32_t n_ctx = 0;
  int32_t n_batch = 512;       // prefill chunk of the first engine (GenerateOptions::n_batch)
  bool prefix_cache = true;    // false: every request prefills its whole prompt (benchmarks)
  ThreadPool* pool = nullptr;  // the CPU runner's threads (borrowed); nullptr: `threads`
  int32_t threads = 0;
  RunnerFactory runner_factory;  // empty: the CPU runner (Forward); else the CUDA runner's
};

// An engine that runs one sequence at a time (max_running 1, steps sized by tokens). Its KV
// store persists across generate() calls, so a repeated prompt prefix is served from the
// prefix cache; a request whose policy needs another store (sketch keys, a per-layer layout,
// a longer prefill chunk, another --batch) gets a fresh engine, the cache dropped.
class SequenceEngine {
 public:
  // Builds the first engine (dense; the CUDA runner uploads the weights here).
  static Result<std::unique_ptr<SequenceEngine>> create(std::shared_ptr<const Model> model,
                                                        const SequenceEngineConfig& cfg);
  ~SequenceEngine();
  // Checks the prompt (empty, over the context, token ids) and the options with errors that
  // say what to change, then generate_with_engine() on an engine fit for the policy.
  Result<GenerateStats> generate(std::span<const int32_t> prompt, const GenerateOptions& opt,
                                 const std::function<bool(int32_t)>& on_token);
  int32_t n_ctx() const { return cfg_.n_ctx; }
  // The current engine (nullptr when the last rebuild failed).
  Engine* engine() { return engine_.get(); }

 private:
  SequenceEngine(std::shared_ptr<const Model> model, const SequenceEngineConfig& cfg);
  // A fresh engine whose store fits `policy` (its layout and sketch keys) and prefill chunks
  // of up to max_chunk tokens, stepping n_batch tokens.
  Status rebuild(const PolicyConfig& policy, int64_t max_chunk, int32_t n_batch);

  std::shared_ptr<const Model> model_;
  SequenceEngineConfig cfg_;
  // What the engine was built for.
  SketchSpec sketch_;
  std::vector<KvCapacity> layout_;
  int64_t max_chunk_ = 512;
  int32_t n_batch_ = 512;
  std::unique_ptr<Engine> engine_;
};

}  // namespace sieve
