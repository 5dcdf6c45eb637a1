// What the CUDA backend runs of a sparse policy, decided from the policy's knob values (never
// its preset name): dense attention, or a selection at decode (and per prefill chunk from the
// chunk's mean query) of sinks + picks + window: picks ranked by exact paged q.K or by sketch
// keys (JL projection or PCA basis), aggregated by the head soft vote or the raw sum over the
// layer or per KV head, optionally max-pooled, then top-k or top-p with a floor; or no picks
// at all (StreamingLLM). With TokenSelect's selection cache. A knob value the backend cannot run
// is one error naming the knob.
#pragma once

#include <cstdint>
#include <string>

#include "core/result.h"
#include "model/hparams.h"
#include "sparse/policy.h"

namespace sieve {

// How the GPU ranks the tokens a selection picks from.
enum class GpuScorer : uint8_t {
  exact,   // q.K over the paged cache (TokenSelect)
  none,    // nothing ranked: sinks + window only (StreamingLLM)
  sketch,  // sketch keys written at append (JL projection or the PCA basis; SequenceO1)
  quest,   // per-block upper bounds from the blocks' min / max keys, top blocks (Quest)
};

// The most picks a selection row holds on the GPU (top_k; quest: its blocks' tokens + 2 blocks).
inline constexpr int32_t k_gpu_max_top_k = 8192;

struct GpuPolicy {
  bool sparse = false;  // attends to selections (else dense)
  GpuScorer scorer = GpuScorer::exact;
  bool layer_vote =
      true;  // one selection per layer (soft votes of every head summed), else per KV head
  bool raw_sum = false;       // aggregation=raw_sum: logits summed over heads (else the soft vote)
  bool hard_vote = false;     // aggregation=hard_vote: each head's top-k votes, the soft vote a tie
  bool raw_logits = false;    // score softmax without the model's 1/sqrt(d) scale
  int32_t top_k = 2048;       // selected tokens besides sinks and window (the cap under top_p)
  float top_p = 0.f;          // > 0: the smallest set reaching this mass of the aggregated score
  int32_t min_keep = 0;       // top_p's floor
  int32_t pool = 0;           // pool_kernel: max-pool width over neighbouring scores (<= 1: off)
  int32_t block = 1;          // quest: tokens per block
  int32_t sinks = 128;        // first tokens, always read
  int32_t local = 512;        // most recent tokens before the query, always read
  int32_t threshold = 2688;   // a layer selects once more tokens than this precede the query
  bool chunk_prefill = true;  // prefill chunks attend to one selection from the chunk's mean query
  int32_t prefill_tail = 0;   // chunks reaching into the prompt's last N tokens attend densely
  int32_t chunk_from = 0;     // prompts shorter than this prefill densely (auto: 65536)
  // positions=auto: the CPU renumbers selected tokens (compact positions) once a sequence passes
  // the model's trained context; the GPU has no compact positions, so such a sequence is an
  // error there (positions=original runs on)
  bool compact_beyond_train = false;
  // TokenSelect's Selection Cache at decode: reuse a layer's selection while the query's
  // fingerprint keeps cosine >= theta with the one it was made for (scope=layer only)
  bool selection_cache = false;
  float theta = 0.9f;
  std::string name = "dense";
  bool operator==(const GpuPolicy&) const = default;
  // Whether a sequence whose tokens before the query number `before` attends to a selection
  // (the CPU's rule: more than the policy's threshold, min_context or sinks + top_k + local).
  bool selects(int64_t before) const { return sparse && before > threshold; }
};

// auto's chunk prefill starts here on the GPU (SmolLM2: 1.07x dense at 64K, 1.73x at 128K).
inline constexpr int32_t k_gpu_auto_chunk_from = 65536;

// The GPU form of a (resolved) policy, or an error naming the knob the CUDA backend cannot run.
// With the model's shape (hp) the sketch width is checked too.
Result<GpuPolicy> gpu_policy_from(const PolicyConfig& p, const ModelHParams* hp = nullptr);
// Whether a sequence of len tokens runs under pol on the GPU at all (TokenSelect's compact
// positions past the trained context do not).
Status gpu_check_length(const GpuPolicy& pol, const ModelHParams& hp, int64_t len);

}  // namespace sieve
